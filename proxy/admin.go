package proxy

import (
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// AdminHandler serves the admin API and /metrics (from reg). When the
// configured admin token is set, every request must carry it as
// "Authorization: Bearer <token>"; configuration validation requires a
// token whenever the admin listener is not on loopback.
//
//	GET    /metrics                     Prometheus metrics
//	GET    /debug/pprof/...             Go profiles (net/http/pprof)
//	GET    /api/tags                    per-tag totals, by hold time
//	GET    /api/holders                 backend connections held now
//	GET    /api/pool                    pool and client counts
//	GET    /api/gates                   on-call controls in force
//	POST   /api/tags/{tag}/drain        ?grace=30s&reason=text
//	DELETE /api/tags/{tag}/drain
//	PUT    /api/tags/{tag}/limit        ?max=N
//	DELETE /api/tags/{tag}/limit
func (s *Server) AdminHandler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("GET /api/tags", s.apiTags)
	mux.HandleFunc("GET /api/holders", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"holders": nonNil(s.Holders())})
	})
	mux.HandleFunc("GET /api/pool", s.apiPool)
	mux.HandleFunc("GET /api/gates", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"gates": nonNil(s.Gates())})
	})
	mux.HandleFunc("POST /api/tags/{tag}/drain", s.apiDrain)
	mux.HandleFunc("DELETE /api/tags/{tag}/drain", func(w http.ResponseWriter, r *http.Request) {
		tag, ok := tagParam(w, r)
		if ok {
			s.UndrainTag(tag)
			writeJSON(w, http.StatusOK, map[string]any{"tag": tag, "drained": false})
		}
	})
	mux.HandleFunc("PUT /api/tags/{tag}/limit", s.apiLimit)
	mux.HandleFunc("DELETE /api/tags/{tag}/limit", func(w http.ResponseWriter, r *http.Request) {
		tag, ok := tagParam(w, r)
		if ok {
			s.LimitTag(tag, 0)
			writeJSON(w, http.StatusOK, map[string]any{"tag": tag, "limit": 0})
		}
	})
	return s.requireToken(mux)
}

func (s *Server) requireToken(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := s.config().Admin.Token; tok != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
				writeJSON(w, http.StatusUnauthorized, map[string]string{"error": "holdfast admin: missing or wrong bearer token"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func tagParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	tag := r.PathValue("tag")
	if err := validTagName(tag); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return "", false
	}
	return tag, true
}

// TagInfo is one row of GET /api/tags.
type TagInfo struct {
	Tag              string  `json:"tag"`
	HoldSeconds      float64 `json:"hold_seconds"`
	ExecSeconds      float64 `json:"exec_seconds"`
	IdleInTxnSeconds float64 `json:"idle_in_transaction_seconds"`
	WaitSeconds      float64 `json:"wait_seconds"`
	Borrows          uint64  `json:"borrows"`
	Statements       uint64  `json:"statements"`
	Errors           uint64  `json:"errors"`
	Transactions     uint64  `json:"transactions"`
	SlowTransactions uint64  `json:"slow_transactions"`
	HeldNow          int     `json:"held_now"`
	Drained          bool    `json:"drained"`
	Limit            int     `json:"limit"`
}

// Tags returns per-tag totals sorted by hold time, with live state.
func (s *Server) Tags() []TagInfo {
	held := map[string]int{}
	for _, h := range s.Holders() {
		held[h.Tag]++
	}
	gates := map[string]GateState{}
	for _, g := range s.Gates() {
		gates[g.Tag] = g
	}
	snap := s.rec.Snapshot()
	out := make([]TagInfo, 0, len(snap)+len(gates))
	seen := map[string]bool{}
	for _, t := range snap {
		g := gates[t.Tag]
		seen[t.Tag] = true
		out = append(out, TagInfo{Tag: t.Tag, HoldSeconds: t.HoldSeconds, ExecSeconds: t.ExecSeconds,
			IdleInTxnSeconds: t.IdleInTxnSeconds, WaitSeconds: t.WaitSeconds, Borrows: t.Borrows,
			Statements: t.Statements, Errors: t.Errors, Transactions: t.Transactions,
			SlowTransactions: t.SlowTransactions, HeldNow: held[t.Tag], Drained: g.Drained, Limit: g.Limit})
	}
	for tag, g := range gates {
		if !seen[tag] {
			out = append(out, TagInfo{Tag: tag, HeldNow: held[tag], Drained: g.Drained, Limit: g.Limit})
		}
	}
	return out
}

func (s *Server) apiTags(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"tags": s.Tags(), "folded": s.rec.Folded()})
}

func (s *Server) apiPool(w http.ResponseWriter, _ *http.Request) {
	st := s.Stats()
	p := st.Pool
	writeJSON(w, http.StatusOK, map[string]any{
		"open": p.Open, "in_use": p.InUse, "idle": p.Idle, "waiting": p.Waiting, "max": p.Max,
		"acquired": p.Acquired, "waited": p.Waited, "wait_seconds": p.WaitTime.Seconds(),
		"timeouts": p.Timeouts, "rejected": p.Rejected, "dials": p.Dials, "dial_errors": p.DialErrors,
		"clients": st.ClientsActive, "pinned_sessions": st.PinnedSessions, "pins": st.Pins,
		"pipelined": st.Pipelined,
	})
}

func (s *Server) apiDrain(w http.ResponseWriter, r *http.Request) {
	tag, ok := tagParam(w, r)
	if !ok {
		return
	}
	var grace time.Duration
	if v := r.URL.Query().Get("grace"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("grace: want a duration such as 30s, got %q", v)})
			return
		}
		grace = d
	}
	s.DrainTag(tag, r.URL.Query().Get("reason"), grace)
	writeJSON(w, http.StatusOK, map[string]any{"tag": tag, "drained": true, "grace_seconds": grace.Seconds()})
}

func (s *Server) apiLimit(w http.ResponseWriter, r *http.Request) {
	tag, ok := tagParam(w, r)
	if !ok {
		return
	}
	n, err := strconv.Atoi(r.URL.Query().Get("max"))
	if err != nil || n < 0 {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fmt.Sprintf("max: want a connection count (0 lifts the limit), got %q", r.URL.Query().Get("max"))})
		return
	}
	s.LimitTag(tag, n)
	writeJSON(w, http.StatusOK, map[string]any{"tag": tag, "limit": n})
}
