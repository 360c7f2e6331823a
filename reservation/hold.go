package reservation

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Calls across a switchover of the primary.
//
// While an HA tool switches the primary over (the old one read-only, a
// replica promoted, a name or VIP moved) or fails it over (the primary
// killed, a replica promoted), the engine's statements meet a read-only
// refusal (1290), a lost connection, or no connection at all. None of
// these is the call's answer: the call is held, and run again on the new
// primary, until Options.Hold after it began (call_timeout, its deadline,
// moves out to the hold as soon as the call meets one of them). Running
// it again is what recovery.go does for a lost connection: every
// procedure that changes something records the call's id with its change,
// so the call finds what an earlier attempt of its own did and answers
// that (a reserve answers its reservation, once; a claim "claimed"). A
// read-only refusal is certain: the statement did nothing, the
// transaction was rolled back, so even receive, set_on_hand and adjust
// run again. A call whose COMMIT's answer was lost and not found since
// answers 9108 when the hold ends; one that did nothing, 2003.

// DefaultHold is how long a call waits through a switchover when
// Options.Hold is zero: about what an HA tool's planned switchover takes.
const DefaultHold = 15 * time.Second

// MySQL errors of a server that refuses writes: it is read-only (the
// primary being switched over, or a replica that was not promoted yet).
const (
	errNumReadOnly     = 1290 // ER_OPTION_PREVENTS_STATEMENT (--read-only)
	errNumReadOnlyMode = 1836 // ER_READ_ONLY_MODE (MySQL's super_read_only)
)

// readOnlyRefusal reports whether err is a server's refusal to write
// because it is read-only. The engine sends nothing that other options
// behind 1290 (secure_file_priv, ...) refuse.
func readOnlyRefusal(err error) bool {
	n, ok := dbErrorNumber(err)
	return ok && (n == errNumReadOnly || n == errNumReadOnlyMode)
}

// holdBorrow reports whether a failed Borrow (err) is held: with
// Options.Switching, any failure while it says the primary is being
// switched (a refusal of the Conns' own, such as a drained tag, is
// answered at once otherwise); without, one that is not the database's
// answer (a dial that failed: the primary down, or the address not moved
// yet).
func (e *Engine) holdBorrow(err error) bool {
	if !isBorrowError(err) || errors.Is(err, context.Canceled) {
		return false
	}
	if e.switching != nil {
		return e.switching()
	}
	_, db := dbErrorNumber(err)
	var coded interface {
		MySQLError() (uint16, string, string)
	}
	return !db && !errors.As(err, &coded)
}

// callCtx is a call's context: it ends at its deadline (call_timeout from
// the call's start), which hold moves out to the hold's end once the call
// meets a switchover, or when its parent ends. Values are the parent's.
type callCtx struct {
	parent    context.Context
	done      chan struct{}
	holdUntil time.Time   // the latest deadline hold moves to
	switching func() bool // nil: never told

	mu       sync.Mutex // guards the fields below
	deadline time.Time
	err      error
	timer    *time.Timer
	stop     func() bool // stops the parent's AfterFunc
}

// newCallCtx returns the context of a call starting now, with deadline
// timeout (or parent's, if earlier) and hold the longest it may be held
// through a switchover (not less than timeout). When the deadline comes
// while switching reports a switch under way, it moves to the hold's end
// too. The cancel function must be called when the call ends.
func newCallCtx(parent context.Context, timeout, hold time.Duration, switching func() bool) (*callCtx, context.CancelFunc) {
	now := time.Now()
	c := &callCtx{parent: parent, done: make(chan struct{}), switching: switching,
		deadline: now.Add(timeout), holdUntil: now.Add(max(timeout, hold))}
	if pd, ok := parent.Deadline(); ok {
		c.deadline = minTime(c.deadline, pd)
		c.holdUntil = minTime(c.holdUntil, pd)
	}
	c.mu.Lock()
	c.timer = time.AfterFunc(time.Until(c.deadline), c.expire)
	c.stop = context.AfterFunc(parent, func() { c.end(parent.Err()) })
	c.mu.Unlock()
	return c, func() { c.end(context.Canceled) }
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// hold moves the deadline out to the hold's end: the call met a
// switchover. It reports whether the call is still running.
func (c *callCtx) hold() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return false
	}
	if c.holdUntil.After(c.deadline) {
		c.deadline = c.holdUntil
		c.timer.Reset(time.Until(c.deadline))
	}
	return true
}

// expire runs on the timer: the deadline has come, unless hold moved it
// meanwhile, or a switch is under way (then it moves now).
func (c *callCtx) expire() {
	c.mu.Lock()
	if c.err != nil || time.Now().Before(c.deadline) {
		c.mu.Unlock()
		return
	}
	if c.switching != nil && c.holdUntil.After(c.deadline) && c.switching() {
		c.deadline = c.holdUntil
		c.timer.Reset(time.Until(c.deadline))
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.end(context.DeadlineExceeded)
}

// end ends the context with err (once).
func (c *callCtx) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = err
	c.timer.Stop()
	if c.stop != nil {
		c.stop()
	}
	close(c.done)
}

func (c *callCtx) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

func (c *callCtx) Done() <-chan struct{} { return c.done }

func (c *callCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *callCtx) Value(key any) any {
	if key == (callCtxKey{}) {
		return c
	}
	return c.parent.Value(key)
}

type callCtxKey struct{}

// holdCall moves the deadline of the call running under ctx out to its
// hold's end; false when the call has ended (or ctx is not a call's).
func holdCall(ctx context.Context) bool {
	c, ok := ctx.Value(callCtxKey{}).(*callCtx)
	return ok && c.hold()
}

// ReadOnlyRefusal reports whether err (of a Conn, or of a TxRunner) is a
// server's refusal to write because it is read-only: the primary is being
// switched over. Nothing was done. For the refiller's background loop.
func ReadOnlyRefusal(err error) bool { return readOnlyRefusal(err) }
