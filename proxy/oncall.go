package proxy

import (
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

// SetMaxTransactionTime bounds how long a transaction of tag may hold its
// backend connection (0 lifts the tag's own bound; sessions.
// max_transaction_time, when set, applies to every tag without one).
// Transactions past it have their statement interrupted and are rolled
// back, and their clients get error 9005 and are disconnected.
func (s *Server) SetMaxTransactionTime(tag string, d time.Duration) {
	s.gates.setMaxTxn(tag, d)
	if d == 0 {
		s.log.Warn("tag max_transaction_time lifted", "tag", tag)
	} else {
		s.log.Warn("tag max_transaction_time set", "tag", tag, "max", d)
	}
}

// Gates lists the on-call controls in force, by tag. InUse is the number of
// backend connections the tag holds now (as in Holders), whether or not it
// is capped.
func (s *Server) Gates() []GateState {
	gs := s.gates.snapshot()
	if len(gs) == 0 {
		return gs
	}
	held := map[string]int{}
	for _, h := range s.Holders() {
		held[h.Tag]++
	}
	for i := range gs {
		gs[i].InUse = held[gs[i].Tag]
	}
	return gs
}

// Waiting counts the borrowers queued right now, by what they wait for. A
// borrower waits in one of these queues at a time.
type Waiting struct {
	Pool     int            // for a backend connection (pool.max are lent)
	TagLimit int            // for a slot under a tag's connection limit
	Pipeline int            // autocommit SELECTs waiting for a place on a shared connection
	ByTag    map[string]int // TagLimit by tag; nil when no one waits under a limit
}

// Total is every borrower waiting.
func (w Waiting) Total() int { return w.Pool + w.TagLimit + w.Pipeline }

// Waiting returns the borrowers queued now. The three counts are read one
// after the other, not as one consistent cut.
func (s *Server) Waiting() Waiting {
	w := Waiting{Pool: s.pool.Stats().Waiting, Pipeline: s.pipes.waiters.Len(), ByTag: s.gates.waiting()}
	for _, n := range w.ByTag {
		w.TagLimit += n
	}
	return w
}

// TagInfo is one tag's totals since start (as in Recorder().Snapshot())
// with its live state.
type TagInfo struct {
	Tag              string  `json:"tag"`
	HoldSeconds      float64 `json:"hold_seconds"` // of finished holds
	ExecSeconds      float64 `json:"exec_seconds"`
	IdleInTxnSeconds float64 `json:"idle_in_transaction_seconds"`
	WaitSeconds      float64 `json:"wait_seconds"`
	Borrows          uint64  `json:"borrows"`
	Statements       uint64  `json:"statements"`
	Errors           uint64  `json:"errors"`
	Transactions     uint64  `json:"transactions"`
	SlowTransactions uint64  `json:"slow_transactions"`
	HeldNow          int     `json:"held_now"` // backend connections held now
	Drained          bool    `json:"drained"`
	Limit            int     `json:"limit"` // 0: no cap
}

// Tags returns per-tag totals sorted by hold time, with live state; a tag
// with a control in force but nothing recorded comes last.
func (s *Server) Tags() []TagInfo {
	held := map[string]int{}
	for _, h := range s.Holders() {
		held[h.Tag]++
	}
	gates := map[string]GateState{}
	for _, g := range s.gates.snapshot() {
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
	var extra []TagInfo
	for tag, g := range gates {
		if !seen[tag] {
			extra = append(extra, TagInfo{Tag: tag, HeldNow: held[tag], Drained: g.Drained, Limit: g.Limit})
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i].Tag < extra[j].Tag })
	return append(out, extra...)
}

// TagsFolded counts tag lookups folded into "other" once
// attribution.max_tags were kept.
func (s *Server) TagsFolded() uint64 { return s.rec.Folded() }

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
