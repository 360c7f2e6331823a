package reservation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// TxRunner runs READ COMMITTED transactions on connections borrowed from
// Conns, retrying deadlocks (1213) and lock-wait timeouts (1205) a bounded
// number of times with jitter. The isolation level is set per transaction
// (SET TRANSACTION ... then START TRANSACTION), so the session, and the
// server default (REPEATABLE READ), are left as they were. Both statements
// travel with fn's first statement, in one round trip; fn may end the
// transaction with CommitWith to send its last statements and COMMIT in one
// round trip too. The refiller uses it too, so every engine transaction
// follows the same rules. A failed Borrow and a lost connection (connLost)
// come back marked as such; a connection lost on the round trip that
// carried COMMIT leaves the transaction's outcome unknown (commitUnknown),
// and the connection is released broken.
type TxRunner struct {
	Conns Conns
	// MaxRetries is the number of retries after a 1213 or 1205; zero means none.
	MaxRetries int
	// BackoffMin and BackoffMax bound the jittered sleep before a retry.
	// Zero BackoffMax means 20ms.
	BackoffMin, BackoffMax time.Duration
	// OnRetry, when non-nil, is called before each retry with the error
	// number (1213 or 1205). It must not block.
	OnRetry func(code uint16)
}

// Run runs fn inside one transaction on a connection borrowed under tag.
// If fn returns nil the transaction commits (unless fn already did, with
// CommitWith); otherwise it rolls back and fn's error is returned (retried
// first if it is a deadlock or lock-wait timeout). fn must do all its work
// on c and must not keep c.
func (r TxRunner) Run(ctx context.Context, tag string, fn func(ctx context.Context, c Conn) error) error {
	for attempt := 0; ; attempt++ {
		err := r.once(ctx, tag, fn)
		n, ok := dbErrorNumber(err)
		if !ok || (n != errNumDeadlock && n != errNumLockWait) || attempt >= r.MaxRetries {
			return err
		}
		if r.OnRetry != nil {
			r.OnRetry(n)
		}
		maxB := r.BackoffMax
		if maxB <= 0 {
			maxB = 20 * time.Millisecond
		}
		if err := lifecycle.Sleep(ctx, jitter(r.BackoffMin, maxB, attempt)); err != nil {
			return err
		}
	}
}

// beginSQL starts a READ COMMITTED transaction without touching the
// session's own isolation level. It is sent in front of a transaction's
// first statement.
const beginSQL = "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; "

func (r TxRunner) once(ctx context.Context, tag string, fn func(ctx context.Context, c Conn) error) error {
	c, err := r.Conns.Borrow(ctx, tag)
	if err != nil {
		if !isBorrowError(err) {
			err = &borrowError{err}
		}
		return err
	}
	broken := false
	defer func() { c.Release(broken) }()
	tc := &txConn{Conn: c, begin: beginSQL}
	if err := fn(ctx, tc); err != nil {
		if tc.begin != "" {
			return err // nothing was sent
		}
		// ROLLBACK ends the transaction whichever statement failed, and
		// also clears a SET TRANSACTION whose START TRANSACTION did not
		// run. Only an unknown outcome (I/O) leaves the session suspect.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, rerr := c.Exec(rctx, "ROLLBACK"+tc.cleanup)
		// A read-only server's connection is not lent again: the next
		// borrow may reach the new primary (hold.go).
		broken = rerr != nil || tc.unsure || readOnlyRefusal(err)
		return err
	}
	if tc.begin != "" || tc.ended {
		return nil // no statement sent, or CommitWith committed
	}
	_, err = c.Exec(ctx, "COMMIT")
	// The outcome of a failed COMMIT is known only for server errors (the
	// transaction was rolled back); a lost connection leaves it unknown.
	err = tc.note(err, true)
	broken = tc.unsure || readOnlyRefusal(err)
	return err
}

// commitUnknownError wraps a lost connection (see connLost) on a round trip
// that carried COMMIT: the transaction may or may not have committed. Only
// a later look at the database can tell.
type commitUnknownError struct{ err error }

func (e *commitUnknownError) Error() string {
	return "reservation: connection lost during COMMIT: " + e.err.Error()
}

func (e *commitUnknownError) Unwrap() error { return e.err }

// commitUnknown reports whether err leaves a transaction's outcome unknown.
func commitUnknown(err error) bool {
	var c *commitUnknownError
	return errors.As(err, &c)
}

// txConn is the Conn a transaction's fn sees. Its first statement carries
// begin (empty once sent, or for a session whose autocommit is off). unsure
// records a lost connection, after which the session state is unknown.
// cleanup, when set (see onRollback), travels with the ROLLBACK.
type txConn struct {
	Conn
	begin   string
	ended   bool // CommitWith committed
	unsure  bool
	cleanup string
}

// onRollback makes the ROLLBACK that ends c's transaction on failure also
// run stmts (prefixed "; "), in the same round trip: a transaction that set
// user variables clears them there, so the connection goes back to the pool
// without them whichever statement failed. It reports false when c is not a
// transaction's Conn; the caller must then not rely on it.
func onRollback(c Conn, stmts string) bool {
	tc, ok := c.(*txConn)
	if ok {
		tc.cleanup = "; " + stmts
	}
	return ok
}

func (t *txConn) Exec(ctx context.Context, q string, args ...any) (Result, error) {
	q = t.take() + q
	r, err := t.Conn.Exec(ctx, q, args...)
	return r, t.note(err, false)
}

func (t *txConn) Query(ctx context.Context, q string, args ...any) ([][][]byte, error) {
	q = t.take() + q
	rows, err := t.Conn.Query(ctx, q, args...)
	return rows, t.note(err, false)
}

func (t *txConn) take() string {
	b := t.begin
	t.begin = ""
	return b
}

// note classifies the error of a round trip (commit: it carried COMMIT):
// anything but the database's answer is a lost connection, marked so
// whatever Conns the runner was given.
func (t *txConn) note(err error, commit bool) error {
	err = markLost(err)
	if connLost(err) {
		t.unsure = true
		if commit {
			return &commitUnknownError{err}
		}
	}
	return err
}

// CommitWith runs q (one or more statements) and COMMIT in one round trip,
// ending the transaction of a TxRunner (or reserve session) fn, which must
// return as soon as it has called CommitWith: with nil if CommitWith did, so
// the runner sends no COMMIT of its own, or with CommitWith's error, so it
// rolls back (the server stops at the first failing statement, so COMMIT
// ran only if everything before it succeeded; a failed COMMIT itself rolls
// back). The Result is COMMIT's: check row counts with GuardRowCount inside
// q instead. On a Conn that is not a transaction's, q runs and is followed
// by a COMMIT in its own round trip. When the connection is lost on the
// round trip that carried COMMIT, the error says so (the transaction may
// or may not have committed: the engine finds out, see recovery.go).
func CommitWith(ctx context.Context, c Conn, q string, args ...any) error {
	_, err := commit(ctx, c, false, q, args...)
	return err
}

// commitQuery is CommitWith for statements whose rows the caller needs: it
// returns the rows of every result set of q.
func commitQuery(ctx context.Context, c Conn, q string, args ...any) ([][][]byte, error) {
	return commit(ctx, c, true, q, args...)
}

func commit(ctx context.Context, c Conn, query bool, q string, args ...any) ([][][]byte, error) {
	run := func(c Conn, q string) ([][][]byte, error) {
		if query {
			return c.Query(ctx, q, args...)
		}
		_, err := c.Exec(ctx, q, args...)
		return nil, err
	}
	tc, ok := c.(*txConn)
	if !ok {
		rows, err := run(c, q)
		if err != nil {
			return nil, err
		}
		if _, err := c.Exec(ctx, "COMMIT"); err != nil {
			if err = markLost(err); connLost(err) {
				return nil, &commitUnknownError{err}
			}
			return nil, err
		}
		return rows, nil
	}
	rows, err := run(tc.Conn, tc.take()+q+"; COMMIT")
	if err != nil {
		return nil, tc.note(err, true)
	}
	tc.ended = true
	return rows, nil
}

// GuardRowCount returns a statement that fails (error 1242, "Subquery
// returns more than 1 row") unless the statement before it changed exactly
// n rows, so that a multi-statement round trip stops there and its COMMIT
// never runs. It reads ROW_COUNT() and nothing else; valid on MySQL 8 and
// MariaDB.
func GuardRowCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	return "SELECT (SELECT 1 FROM DUAL WHERE ROW_COUNT() <> " + s + " UNION ALL SELECT 1 FROM DUAL WHERE ROW_COUNT() <> " + s + ")"
}

// errNumGuard is what GuardRowCount raises.
const errNumGuard = 1242

// jitter returns a random duration in [min, cap) where cap doubles with each
// attempt up to max ("full jitter").
func jitter(minD, maxD time.Duration, attempt int) time.Duration {
	if minD <= 0 {
		minD = time.Millisecond
	}
	hi := minD << min(attempt+1, 16)
	if hi > maxD || hi <= 0 {
		hi = maxD
	}
	if hi <= minD {
		return minD
	}
	return minD + rand.N(hi-minD)
}

// Row decoding helpers for the text-protocol values Conn.Query returns,
// for the engine and the packages that read its tables beside it.

// ColInt decodes an integer column (NULL is 0; a DECIMAL such as a SUM may
// read "12.0").
func ColInt(b []byte) (int64, error) {
	if b == nil {
		return 0, nil
	}
	// SUM() of an INT column is DECIMAL and may come back as "12" or "12.0".
	s := string(b)
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("reservation: bad integer column %q", s)
	}
	return int64(f), nil
}

// ColUint decodes an unsigned integer column, such as a reservation id.
func ColUint(b []byte) (uint64, error) {
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reservation: bad unsigned column %q", b)
	}
	return v, nil
}

const dbTimeLayout = "2006-01-02 15:04:05.999999"

// ColTime decodes a DATETIME(6) column, in UTC.
func ColTime(b []byte) (time.Time, error) {
	t, err := time.ParseInLocation(dbTimeLayout, string(b), time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("reservation: bad DATETIME column %q", b)
	}
	return t, nil
}

// RowInts decodes every column of row as an integer.
func RowInts(row [][]byte) ([]int64, error) {
	out := make([]int64, len(row))
	for i, b := range row {
		v, err := ColInt(b)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
