package proxy

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// connTag is a new session's fallback tag: the conn_tag connection
// attribute, else the user's default tag, else untagged.
func (s *Server) connTag(u User, attrs map[string]string) *attribution.Tag {
	var buf [attribution.MaxTagLen]byte
	if v := attrs["conn_tag"]; v != "" {
		if b, ok := attribution.AppendSanitized(buf[:0], []byte(v)); ok {
			return s.rec.Tag(b)
		}
	}
	if u.DefaultTag != "" {
		if b, ok := attribution.AppendSanitized(buf[:0], []byte(u.DefaultTag)); ok {
			return s.rec.Tag(b)
		}
	}
	return s.rec.TagString(attribution.Untagged)
}

// Recorder returns the per-tag accounting (the reservation engine's
// borrows record into it too).
func (s *Server) Recorder() *attribution.Recorder { return s.rec }

func (s *Server) slowTxn() time.Duration { return s.config().Attribution.SlowTransaction }

// slowLog rate-limits the slow-transaction log line: one per tag per
// slowLogEvery.
type slowLog struct {
	mu   sync.Mutex // guards last
	last map[string]time.Time
}

const slowLogEvery = 10 * time.Second

func (s *Server) logSlowTransaction(tag string, client uint32, held, exec, idle time.Duration, stmt []byte) {
	now := time.Now()
	s.slow.mu.Lock()
	if s.slow.last == nil {
		s.slow.last = map[string]time.Time{}
	}
	if now.Sub(s.slow.last[tag]) < slowLogEvery {
		s.slow.mu.Unlock()
		return
	}
	if len(s.slow.last) > 10000 {
		clear(s.slow.last)
	}
	s.slow.last[tag] = now
	s.slow.mu.Unlock()
	s.log.Warn("transaction held its connection far longer than it executed",
		"tag", tag, "client", client, "held", held.Round(time.Millisecond), "executing", exec.Round(time.Millisecond),
		"idle_in_transaction", idle.Round(time.Millisecond),
		"idle_after", string(sqlscan.AppendDigest(nil, stmt, 200)))
}

// HolderInfo is one backend connection held right now.
type HolderInfo struct {
	ClientID      uint32  `json:"client_id"` // 0 for holdfast's own work
	User          string  `json:"user"`
	Tag           string  `json:"tag"`
	HeldFor       float64 `json:"held_for_seconds"`
	InTransaction bool    `json:"in_transaction"`
	Statement     string  `json:"statement"` // digest of the current or last statement
}

// Holders lists held backend connections, longest held first.
func (s *Server) Holders() []HolderInfo {
	s.mu.Lock()
	sess := make([]*session, 0, len(s.sessions))
	for _, x := range s.sessions {
		sess = append(sess, x)
	}
	s.mu.Unlock()
	now := time.Now()
	var out []HolderInfo
	for _, x := range sess {
		x.mu.Lock()
		if !x.holdSince.IsZero() {
			out = append(out, HolderInfo{ClientID: x.id, User: x.user.Name, Tag: x.holdTag,
				HeldFor: now.Sub(x.holdSince).Seconds(), InTransaction: x.inTxn,
				Statement: string(sqlscan.AppendDigest(nil, x.stmtText, 200))})
		}
		x.mu.Unlock()
	}
	out = append(out, s.engineHolders(now)...)
	sort.Slice(out, func(i, j int) bool { return out[i].HeldFor > out[j].HeldFor })
	return out
}

// heldBy counts connections tag holds now.
func (s *Server) heldBy(tag string) int {
	n := 0
	for _, h := range s.Holders() {
		if h.Tag == tag {
			n++
		}
	}
	return n
}

// live adapts the server to attribution.LiveState for the collector.
type live struct{ s *Server }

func (l live) Holders() []attribution.Holder {
	hs := l.s.Holders()
	out := make([]attribution.Holder, len(hs))
	for i, h := range hs {
		out[i] = attribution.Holder{Tag: h.Tag, InTransaction: h.InTransaction}
	}
	return out
}

func (l live) Gates() []attribution.Gate { return l.s.gates.attributionGates() }

// DrainTag refuses new borrows for tag. With grace > 0, sessions still holding
// a connection for the tag when it ends are killed (their transactions
// roll back).
func (s *Server) DrainTag(tag, reason string, grace time.Duration) {
	s.gates.drain(tag, reason, grace, func() { s.killHolders(tag) })
	s.log.Warn("tag drained", "tag", tag, "reason", reason, "grace", grace)
}

// UndrainTag lifts a drain.
func (s *Server) UndrainTag(tag string) {
	s.gates.undrain(tag)
	s.log.Warn("tag undrained", "tag", tag)
}

// LimitTag caps tag at n backend connections; n == 0 lifts the cap.
func (s *Server) LimitTag(tag string, n int) {
	s.gates.setLimit(tag, n, s.heldBy(tag))
	if n == 0 {
		s.log.Warn("tag connection limit lifted", "tag", tag)
	} else {
		s.log.Warn("tag connection limit set", "tag", tag, "max", n)
	}
}

// Gates lists the on-call controls in force.
func (s *Server) Gates() []GateState { return s.gates.snapshot() }

func (s *Server) killHolders(tag string) {
	s.mu.Lock()
	var victims []*session
	for _, x := range s.sessions {
		x.mu.Lock()
		if !x.holdSince.IsZero() && x.holdTag == tag {
			victims = append(victims, x)
		}
		x.mu.Unlock()
	}
	s.mu.Unlock()
	for _, x := range victims {
		s.log.Warn("drain grace over: closing a client still holding a connection for the tag", "tag", tag, "client", x.id)
		x.terminate()
	}
}

// applyConfigGates puts the controls named in the configuration in force
// (on start and on reload; controls set through the admin API stay).
func (s *Server) applyConfigGates(t config.Tags) {
	for _, tag := range t.Drained {
		s.gates.drain(tag, "configured", 0, nil)
	}
	for tag, n := range t.Limits {
		s.gates.setLimit(tag, n, s.heldBy(tag))
	}
	if len(t.Drained)+len(t.Limits) > 0 {
		s.log.Info("configured tag controls applied", "drained", len(t.Drained), "limits", len(t.Limits))
	}
}

func validTagName(t string) error {
	ok := t != "" && len(t) <= attribution.MaxTagLen
	for i := 0; ok && i < len(t); i++ {
		c := t[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%q is not a tag (letters, digits and _ . : - only, at most %d)", t, attribution.MaxTagLen)
	}
	return nil
}
