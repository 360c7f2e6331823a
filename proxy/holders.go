package proxy

import (
	"sort"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
)

// What the server shows of itself for the admin API, holdfastctl and the
// status page: who holds a backend connection now, who waits, per-tag
// totals.

// Recorder returns the per-tag accounting (the reservation engine's
// borrows record into it too).
func (s *Server) Recorder() *attribution.Recorder { return s.rec }

// HolderInfo is one backend connection held right now.
type HolderInfo struct {
	ClientID      uint32  `json:"client_id"` // 0 for holdfast's own work
	User          string  `json:"user"`
	Tag           string  `json:"tag"`
	HeldFor       float64 `json:"held_for_seconds"`
	InTransaction bool    `json:"in_transaction"`
	Statement     string  `json:"statement"` // digest of the current or last statement
	// Shape is that statement's shape (FormatShape), by which on-call
	// blocks or caps it; empty for holdfast's own work, a command without
	// a statement, and with attribution.disabled (no statement recorded).
	Shape string `json:"shape,omitempty"`
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
				Statement: string(x.stmtMode.AppendDigest(nil, x.stmtText, 200)), Shape: shapeShown(x.stmtShape, s.attr)})
		}
		x.mu.Unlock()
	}
	out = append(out, s.engineHolders(now)...)
	sort.Slice(out, func(i, j int) bool { return out[i].HeldFor > out[j].HeldFor })
	return out
}

// shapeShown is how a holder's shape is shown: none for a command with no
// statement (and with attribution.disabled, which records no statements).
func shapeShown(h uint64, recorded bool) string {
	if h == 0 || !recorded {
		return ""
	}
	return FormatShape(h)
}

// heldBy counts connections held now under tag as the on-call controls
// know it (a folded tag by the name its statements carry).
func (s *Server) heldBy(tag string) int { return s.heldByKey()[tag] }

// markHolders counts the client sessions holding a connection under key
// now, for the limit of key coming into force at epoch (setLimit), and
// marks those whose lease entered no limit of key, so that the hold's end
// gives back the slot it is counted in (exitPre); a lease that entered an
// earlier limit of key gives it back as it leaves that one (gates.exit).
// Called under the gates' lock: a hold that ends before it is not
// counted, one that ends after it gives its slot back once. The engine's
// holds are not counted (they are few and short, and a cap on a
// holdfast:* tag is rare).
func (s *Server) markHolders(key string, epoch uint64) (held, marked int) {
	s.mu.Lock()
	for _, x := range s.sessions {
		x.mu.Lock()
		if !x.holdSince.IsZero() && x.holdKey == key {
			held++
			if x.gatedKey != key {
				x.preGated, x.preEpoch = key, epoch
				marked++
			}
		}
		x.mu.Unlock()
	}
	s.mu.Unlock()
	return held, marked
}

// heldByKey counts connections held now by the names the on-call controls
// know their tags by.
func (s *Server) heldByKey() map[string]int {
	n := map[string]int{}
	s.mu.Lock()
	for _, x := range s.sessions {
		x.mu.Lock()
		if !x.holdSince.IsZero() {
			n[x.holdKey]++
		}
		x.mu.Unlock()
	}
	s.mu.Unlock()
	for _, h := range s.engineHolders(time.Now()) {
		n[h.Tag]++
	}
	return n
}

// Waiting counts the borrowers queued right now, by what they wait for. A
// borrower waits in one of these queues at a time.
type Waiting struct {
	Pool     int // for a backend connection (pool.max are lent)
	TagLimit int // for a slot under a tag's connection limit
	Pipeline int // autocommit SELECTs waiting for a place on a shared connection
	// Background is background borrowers waiting under their class's cap
	// (pool.max - overload.reserve).
	Background int
	// ShapeLimit is statements waiting for a slot under their shape's cap
	// (holding no connection unless they are in a transaction).
	ShapeLimit int
	ByTag      map[string]int // TagLimit by tag; nil when no one waits under a limit
}

// Total is every borrower waiting.
func (w Waiting) Total() int { return w.Pool + w.TagLimit + w.Pipeline + w.Background + w.ShapeLimit }

// Waiting returns the borrowers queued now. The three counts are read one
// after the other, not as one consistent cut.
func (s *Server) Waiting() Waiting {
	w := Waiting{Pool: s.pool.Stats().Waiting, Pipeline: s.pipes.waiters.Len(), ByTag: s.gates.waiting(),
		Background: s.classes.gate.waiting()[backgroundGateKey]}
	for _, n := range w.ByTag {
		w.TagLimit += n
	}
	for _, n := range s.shapeGates.waiting() {
		w.ShapeLimit += n
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
	Limit            int     `json:"limit"`   // with Limited: the cap (0 admits no one)
	Limited          bool    `json:"limited"` // a cap is in force
	Class            string  `json:"class"`   // overload class
	Shed             uint64  `json:"shed"`    // borrows shed under overload (error 9006)
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
			SlowTransactions: t.SlowTransactions, HeldNow: held[t.Tag], Drained: g.Drained, Limit: g.Limit, Limited: g.Limited,
			Class: s.classOf(t.Tag).String(), Shed: t.Rejected[attribution.RejectShed]})
	}
	var extra []TagInfo
	for tag, g := range gates {
		if !seen[tag] {
			extra = append(extra, TagInfo{Tag: tag, HeldNow: held[tag], Drained: g.Drained, Limit: g.Limit, Limited: g.Limited})
		}
	}
	sort.Slice(extra, func(i, j int) bool { return extra[i].Tag < extra[j].Tag })
	return append(out, extra...)
}

// TagsFolded counts tag lookups folded into "other" once
// attribution.max_tags were kept.
func (s *Server) TagsFolded() uint64 { return s.rec.Folded() }
