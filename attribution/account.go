package attribution

import (
	"sync/atomic"
	"time"
)

// Pin reasons, the label values of holdfast_tag_pins_total{reason}. Pinned
// counts any other string as PinOther.
const (
	PinTemporaryTable = "temporary_table"
	PinUserVariable   = "user_variable"
	PinGetLock        = "get_lock"
	PinLockTables     = "lock_tables"
	PinSQLPrepare     = "sql_prepare"
	PinFoundRows      = "found_rows"
	PinHandler        = "handler"
	PinXA             = "xa"
	PinCursor         = "cursor"
	PinSessionState   = "session_state"
	PinSessionTrack   = "session_track"
	PinOther          = "other"
)

// Rejection reasons, the label values of holdfast_tag_rejected_total{reason}.
// Rejected counts any other string as RejectOther.
const (
	RejectDrained = "drained" // the tag is drained: new borrows fail fast
	RejectLimit   = "limit"   // the wait for a slot under the tag's connection cap timed out
	RejectShed    = "shed"    // a background borrow waited past overload.background_wait
	// RejectShapeBlocked and RejectShapeLimit count statements refused by a
	// control on their shape (not on their tag).
	RejectShapeBlocked = "shape_blocked"
	RejectShapeLimit   = "shape_limit"
	// RejectRefused counts statements refused by a statement-level
	// control on their tag (readonly).
	RejectRefused = "refused"
	RejectOther   = "other"
)

// Timeout reasons, the label values of holdfast_tag_timeouts_total{reason}:
// the bound that ended a client's session. TimedOut counts any other
// string as TimeoutOther.
const (
	TimeoutIdleInTransaction = "idle_in_transaction" // sessions.idle_in_transaction_timeout
	TimeoutTransaction       = "max_transaction_time"
	TimeoutClientWrite       = "client_write" // the client stopped reading its answer
	TimeoutWait              = "wait_timeout" // the client's own wait_timeout / interactive_timeout
	TimeoutOther             = "other"
)

// pinReasons, rejectReasons and timeoutReasons are the label values in
// index order; the last is the catch-all.
var (
	pinReasons = [...]string{PinTemporaryTable, PinUserVariable, PinGetLock, PinLockTables, PinSQLPrepare,
		PinFoundRows, PinHandler, PinXA, PinCursor, PinSessionState, PinSessionTrack, PinOther}
	rejectReasons  = [...]string{RejectDrained, RejectLimit, RejectShed, RejectShapeBlocked, RejectShapeLimit, RejectRefused, RejectOther}
	timeoutReasons = [...]string{TimeoutIdleInTransaction, TimeoutTransaction, TimeoutClientWrite, TimeoutWait, TimeoutOther}
)

// reasonIndex is reason's index in reasons, one of the arrays above; any
// reason not listed counts as the catch-all, the last.
func reasonIndex(reasons []string, reason string) int {
	for i, r := range reasons[:len(reasons)-1] {
		if r == reason {
			return i
		}
	}
	return len(reasons) - 1
}

// Tag accumulates the accounting of one tag. Get one from Recorder.Tag. A
// caller may hold on to it (for a session's or a transaction's tag, say):
// should the Recorder retire the tag meanwhile, the handle forwards to the
// name's current Tag. Every method is safe for concurrent use, takes no
// lock, does not allocate and costs a few atomic adds on counters of this
// tag only. A negative duration counts as zero.
//
// The proxy reports, per backend connection lent:
//
//	Borrowed(wait)                    when the connection is handed over
//	Statement(d, failed)              for each statement run on it
//	Transaction(), SlowTransaction()  when a transaction on it ends
//	Pinned(reason)                    when session state pins it to the client
//	Returned(hold, exec, idleInTxn)   when it goes back to the pool
//
// and Rejected(reason) for a borrow refused before any connection was lent.
type Tag struct {
	name string
	rec  *Recorder // nil for a Tag that is never retired

	// retired is set when the Recorder gave the tag's slot to another name
	// (see Options.RetireIdle); from then on the Tag forwards what it is
	// told to its name's current Tag, so a caller's old handle stays usable.
	retired atomic.Bool
	// Guarded by rec.mu: the activity count last seen and when it last
	// changed, for retiring idle tags.
	seenCount uint64
	seenAt    time.Time

	// Hot counters. statements_total is stmt's count and borrows_total is
	// wait's, so they cost no counter of their own.
	hold, wait, stmt     Histogram
	exec, idle           sumNs
	engine               sumNs // backend time the engine spent on the tag's CALLs
	errors, transactions atomic.Uint64
	slowTransactions     atomic.Uint64
	pins                 [len(pinReasons)]atomic.Uint64
	rejected             [len(rejectReasons)]atomic.Uint64
	timeouts             [len(timeoutReasons)]atomic.Uint64
}

// Name returns the tag's name: a sanitized tag, one of holdfast's own names,
// Untagged or Other. It is the label value of the tag's metrics.
func (t *Tag) Name() string { return t.name }

// current returns t, or, once t is retired, its name's Tag now: a new one
// when the name is admitted again, Other's when it folds.
func (t *Tag) current() *Tag {
	if t.retired.Load() {
		return t.rec.TagString(t.name)
	}
	return t
}

// activity returns a count that grows with everything recorded on t.
func (t *Tag) activity() uint64 {
	n := t.transactions.Load() + t.slowTransactions.Load() // errors move with stmt
	for _, h := range [...]*Histogram{&t.hold, &t.wait, &t.stmt} {
		for i := range h.counts {
			n += h.counts[i].Load()
		}
	}
	for i := range t.pins {
		n += t.pins[i].Load()
	}
	for i := range t.rejected {
		n += t.rejected[i].Load()
	}
	for i := range t.timeouts {
		n += t.timeouts[i].Load()
	}
	return n
}

// Borrowed counts one backend connection lent to the tag (borrows_total) and
// observes how long the borrower waited for it (wait_seconds), zero when one
// was free at once.
func (t *Tag) Borrowed(wait time.Duration) {
	t = t.current()
	t.wait.observe(nanos(wait))
}

// Returned observes a borrow's end: hold is the time from Borrowed to the
// connection's return (hold_seconds); exec is the part of hold spent
// executing statements (exec_seconds_total) and idleInTxn the part spent
// inside an open transaction waiting for the client's next statement
// (idle_in_transaction_seconds_total). exec + idleInTxn should not exceed
// hold; the rest is relay and round-trip time, and a pinned session's idle
// time outside a transaction. Nothing checks this.
func (t *Tag) Returned(hold, exec, idleInTxn time.Duration) {
	t = t.current()
	t.hold.observe(nanos(hold))
	t.exec.add(nanos(exec))
	t.idle.add(nanos(idleInTxn))
}

// Statement counts one statement (statements_total) that took d, from being
// sent to the backend to the end of its answer as holdfast relayed it
// (statement_seconds), and one error (errors_total) when it failed.
func (t *Tag) Statement(d time.Duration, failed bool) {
	t = t.current()
	t.stmt.observe(nanos(d))
	if failed {
		t.errors.Add(1)
	}
}

// Transaction counts one transaction (transactions_total): one begun
// explicitly or with autocommit off, counted once when it commits or rolls
// back. Autocommit statements are not transactions here.
func (t *Tag) Transaction() { t.current().transactions.Add(1) }

// Pinned counts one pin (pins_total{reason}): a client session tied to its
// backend connection past the end of a transaction because of session state.
// reason is one of the Pin* constants; any other string counts as PinOther.
func (t *Tag) Pinned(reason string) { t.current().pins[reasonIndex(pinReasons[:], reason)].Add(1) }

// Rejected counts one borrow refused (rejected_total{reason}): RejectDrained,
// RejectLimit or RejectShed; any other string counts as RejectOther.
func (t *Tag) Rejected(reason string) {
	t.current().rejected[reasonIndex(rejectReasons[:], reason)].Add(1)
}

// TimedOut counts one client session ended by a bound
// (timeouts_total{reason}): one of the Timeout* constants.
func (t *Tag) TimedOut(reason string) {
	t.current().timeouts[reasonIndex(timeoutReasons[:], reason)].Add(1)
}

// EngineTime adds d to the backend connection time holdfast's own work
// (the reservation engine) spent on behalf of the tag's CALL holdfast.*
// (engine_seconds_total): the same time is in the hold of the holdfast:*
// tag the engine borrowed under; this is the caller's share of it.
func (t *Tag) EngineTime(d time.Duration) { t.current().engine.add(nanos(d)) }

// SlowTransaction counts one transaction that held its connection far longer
// than it executed (slow_transactions_total). The caller decides what "far"
// is; call it as well as Transaction, not instead.
func (t *Tag) SlowTransaction() { t.current().slowTransactions.Add(1) }

// TagStats is a snapshot of one tag's accounting, for the admin API and
// tests. Counters and sums run from the Recorder's creation.
type TagStats struct {
	Tag string

	Borrows          uint64 // backend connections lent
	Statements       uint64
	Errors           uint64 // statements that failed
	Transactions     uint64
	SlowTransactions uint64

	// Sums in seconds. HoldSeconds, WaitSeconds and StatementSeconds are
	// Hold.Sum, Wait.Sum and Stmt.Sum.
	HoldSeconds, ExecSeconds, IdleInTxnSeconds, WaitSeconds, StatementSeconds float64
	// EngineSeconds is the engine's backend time on the tag's CALLs
	// (EngineTime).
	EngineSeconds float64

	Hold, Wait, Stmt HistogramSnapshot // see HistogramSnapshot: counts are per bucket, not cumulative

	// Pins, Rejected and Timeouts count by reason label; reasons never
	// seen are absent, and a map is nil when it would be empty.
	Pins, Rejected, Timeouts map[string]uint64
}

// statsLocked copies t; the caller holds Recorder.snapMu.
func (t *Tag) statsLocked() TagStats {
	s := TagStats{
		Tag:              t.name,
		Errors:           t.errors.Load(),
		Transactions:     t.transactions.Load(),
		SlowTransactions: t.slowTransactions.Load(),
		ExecSeconds:      t.exec.secondsLocked(),
		IdleInTxnSeconds: t.idle.secondsLocked(),
		EngineSeconds:    t.engine.secondsLocked(),
		Hold:             t.hold.snapshotLocked(),
		Wait:             t.wait.snapshotLocked(),
		Stmt:             t.stmt.snapshotLocked(),
	}
	s.Borrows, s.Statements = s.Wait.Count, s.Stmt.Count
	s.HoldSeconds, s.WaitSeconds, s.StatementSeconds = s.Hold.Sum, s.Wait.Sum, s.Stmt.Sum
	s.Pins = countsByReason(t.pins[:], pinReasons[:])
	s.Rejected = countsByReason(t.rejected[:], rejectReasons[:])
	s.Timeouts = countsByReason(t.timeouts[:], timeoutReasons[:])
	return s
}

func countsByReason(counts []atomic.Uint64, reasons []string) map[string]uint64 {
	var m map[string]uint64
	for i := range counts {
		if n := counts[i].Load(); n != 0 {
			if m == nil {
				m = make(map[string]uint64)
			}
			m[reasons[i]] = n
		}
	}
	return m
}

// active reports whether s shows anything recorded.
func (s *TagStats) active() bool {
	return s.Borrows != 0 || s.Statements != 0 || s.Errors != 0 || s.Transactions != 0 ||
		s.SlowTransactions != 0 || s.Hold.Count != 0 || s.ExecSeconds != 0 || s.IdleInTxnSeconds != 0 || s.EngineSeconds != 0 ||
		len(s.Pins) != 0 || len(s.Rejected) != 0 || len(s.Timeouts) != 0
}
