package pool

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestDialErrorsBackOff(t *testing.T) {
	e := newPool(t, baseLimits())
	e.d.fail = 3
	start := time.Now()
	c := e.acquire(0)
	// Back-off pauses of at least 1, 2 and 4 ms.
	if d := time.Since(start); d < 7*time.Millisecond {
		t.Fatalf("three failed dials retried within %v", d)
	}
	st := e.p.Stats()
	if st.Dials != 4 || st.DialErrors != 3 {
		t.Fatalf("stats %+v", st)
	}
	e.p.Release(c, true)
}

func TestBackendDown(t *testing.T) {
	l := baseLimits()
	l.AcquireTimeout = 30 * time.Millisecond
	e := newPool(t, l)
	e.d.fail = 1 << 30
	_, err := e.p.Acquire(context.Background(), 0)
	if !errors.Is(err, ErrBackendDown) || !errors.Is(err, errDial) {
		t.Fatalf("Acquire: %v", err)
	}
	st := e.p.Stats()
	if st.Timeouts != 1 || st.DialErrors < 2 || st.Open != 0 || st.Dialing != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Ten seconds on, the dial error no longer explains a timeout.
	e.d.mu.Lock()
	e.d.fail = 0
	e.d.mu.Unlock()
	l.Max = 1
	_ = e.p.SetLimits(l)
	c := e.acquire(0)
	e.clock.Advance(time.Minute)
	if _, err := e.p.Acquire(context.Background(), 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Acquire: %v", err)
	}
	e.p.Release(c, true)
}

// A failed dial frees its slot for the next borrower.
func TestDialErrorServesWaiter(t *testing.T) {
	e := newPool(t, oneConn())
	gate := make(chan struct{})
	e.d.setGate(gate)
	e.d.fail = 1
	a := e.acquireGo(context.Background(), 0)
	e.waitFor(func() bool { return e.p.Stats().Dialing == 1 }, "the first dial")
	b := e.acquireAsync(context.Background(), 0, 1)
	e.d.setGate(nil)
	close(gate) // a's dial fails; b gets the slot and dials
	rb := recv(t, b)
	if rb.err != nil {
		t.Fatal(rb.err)
	}
	e.p.Release(rb.c, true)
	ra := recv(t, a)
	if ra.err != nil {
		t.Fatal(ra.err)
	}
	e.p.Release(ra.c, true)
	if st := e.p.Stats(); st.Dials != 2 || st.DialErrors != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFirstDialHook(t *testing.T) {
	var runs atomic.Int32
	e := newPool(t, baseLimits(), func(o *Options[key, *fakeConn]) {
		o.OnFirstDial = func(*fakeConn) error {
			if runs.Add(1) == 1 {
				return errors.New("learn failed")
			}
			return nil
		}
	})
	c := e.acquire(0) // the first dial's hook fails, the retry's succeeds
	if runs.Load() != 2 {
		t.Fatalf("hook ran %d times", runs.Load())
	}
	d, x, y := e.acquire(0), e.acquire(0), e.acquire(0)
	if runs.Load() != 2 {
		t.Fatal("hook ran again after it succeeded")
	}
	st := e.p.Stats()
	if st.DialErrors != 1 || e.d.all()[0].closed.Load() != 1 {
		t.Fatalf("a failed hook is not a dial error that closes the connection: %+v", st)
	}
	for _, c := range []*fakeConn{c, d, x, y} {
		e.p.Release(c, true)
	}
}

// Close cuts a dial in progress short.
func TestCloseCutsDial(t *testing.T) {
	e := newPool(t, baseLimits())
	e.d.setGate(make(chan struct{})) // never opens: only ctx ends the dial
	ch := e.acquireGo(context.Background(), 0)
	e.waitFor(func() bool { return e.p.Stats().Dialing == 1 }, "the dial")
	e.p.Close()
	if r := recv(t, ch); r.err == nil {
		t.Fatal("Acquire succeeded after Close")
	}
	if st := e.p.Stats(); st.Dialing != 0 || st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// A dial that the borrower's own deadline cuts short is no backend error:
// not counted, and no reason to call the backend down.
func TestCutDialNotCounted(t *testing.T) {
	e := newPool(t, baseLimits())
	e.d.setGate(make(chan struct{}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := e.p.Acquire(ctx, 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Acquire: %v", err)
	}
	if st := e.p.Stats(); st.Dials != 0 || st.DialErrors != 0 || st.Dialing != 0 || st.Timeouts != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A refused login (a dial error marked Refused) is answered at once, not
// retried until AcquireTimeout, and for refusedRetry after it without a
// dial; then a dial is tried again, and a success clears it.
func TestRefusedLoginFailsFast(t *testing.T) {
	l := baseLimits()
	l.AcquireTimeout = time.Hour // a retry loop would hang the test
	e := newPool(t, l, func(o *Options[key, *fakeConn]) {
		dial := o.Dial
		o.Dial = func(ctx context.Context, k key) (*fakeConn, error) {
			c, err := dial(ctx, k)
			if err != nil && k == 1 {
				return nil, Refused(err)
			}
			return c, err
		}
	})
	e.d.mu.Lock()
	e.d.fail = 1 << 30
	e.d.mu.Unlock()
	// A hang guard, not a timing: a pool that retried the refusal would
	// otherwise wait out AcquireTimeout.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if _, err := e.p.Acquire(ctx, 1); !errors.Is(err, ErrRefused) || !errors.Is(err, errDial) {
			t.Fatalf("Acquire: %v, want the refusal", err)
		}
	}
	if st := e.p.Stats(); st.Dials != 1 || st.DialErrors != 1 || st.Timeouts != 0 || st.Open != 0 {
		t.Fatalf("stats %+v: want one dial, refused, and no timeout", st)
	}
	e.d.mu.Lock()
	e.d.fail = 0
	e.d.mu.Unlock()
	if _, err := e.p.Acquire(ctx, 1); !errors.Is(err, ErrRefused) {
		t.Fatalf("within refusedRetry: %v, want the refusal again", err)
	}
	c0 := e.acquire(0) // another key is not refused
	e.clock.Advance(refusedRetry)
	c1 := e.acquire(1)
	if st := e.p.Stats(); st.Dials != 3 || st.DialErrors != 1 {
		t.Fatalf("stats %+v: want a dial of key 1 after refusedRetry", st)
	}
	e.p.Release(c1, true)
	e.p.Release(c0, true)
}
