package reservation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"
)

// TxRunner runs READ COMMITTED transactions on connections borrowed from
// Conns, retrying deadlocks (1213) and lock-wait timeouts (1205) a bounded
// number of times with jitter. The isolation level is set per transaction
// (SET TRANSACTION ... then START TRANSACTION), so the session, and the
// server default (REPEATABLE READ), are left as they were. The refiller uses
// it too, so every engine transaction follows the same rules.
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
// If fn returns nil the transaction commits; otherwise it rolls back and
// fn's error is returned (retried first if it is a deadlock or lock-wait
// timeout). fn must do all its work on c and must not keep c.
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
		if err := sleepCtx(ctx, jitter(r.BackoffMin, maxB, attempt)); err != nil {
			return err
		}
	}
}

func (r TxRunner) once(ctx context.Context, tag string, fn func(ctx context.Context, c Conn) error) error {
	c, err := r.Conns.Borrow(ctx, tag)
	if err != nil {
		return err
	}
	broken := false
	defer func() { c.Release(broken) }()
	// A failure between SET TRANSACTION and START TRANSACTION would leave a
	// pending isolation level on the session: discard the connection then.
	if _, err := c.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED"); err != nil {
		broken = true
		return err
	}
	if _, err := c.Exec(ctx, "START TRANSACTION"); err != nil {
		broken = true
		return err
	}
	if err := fn(ctx, c); err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := c.Exec(rctx, "ROLLBACK"); rerr != nil {
			broken = true
		}
		return err
	}
	if _, err := c.Exec(ctx, "COMMIT"); err != nil {
		// The outcome of a failed COMMIT is known only for server errors
		// (the transaction was rolled back); anything else leaves the
		// session in an unknown state.
		broken = !isDB(err)
		return err
	}
	return nil
}

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

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Row decoding helpers for the text-protocol values Conn.Query returns.

func colInt(b []byte) (int64, error) {
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

func colUint(b []byte) (uint64, error) {
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("reservation: bad unsigned column %q", b)
	}
	return v, nil
}

const dbTimeLayout = "2006-01-02 15:04:05.999999"

func colTime(b []byte) (time.Time, error) {
	t, err := time.ParseInLocation(dbTimeLayout, string(b), time.UTC)
	if err != nil {
		return time.Time{}, fmt.Errorf("reservation: bad DATETIME column %q", b)
	}
	return t, nil
}

// rowInts decodes every column of row as an integer.
func rowInts(row [][]byte) ([]int64, error) {
	out := make([]int64, len(row))
	for i, b := range row {
		v, err := colInt(b)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}
