package pool

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// onServer is the test of connections open to server n.
func onServer(n int32) func(*fakeConn) bool {
	return func(c *fakeConn) bool { return c.server == n }
}

// Retire closes the idle connections to the retired server at once, the
// lent one when it is released, and the pool then dials the server the
// address leads to now.
func TestRetireClosesIdleAtOnceAndLentOnRelease(t *testing.T) {
	e := newPool(t, baseLimits())
	a, b, c := e.acquire(0), e.acquire(1), e.acquire(0)
	e.p.Release(a, true)
	e.p.Release(b, true)
	e.d.server.Store(1) // the address moved
	e.p.Retire(onServer(0))
	if a.closed.Load() != 1 || b.closed.Load() != 1 {
		t.Fatalf("idle connections to the retired server not closed: %v %d, %v %d", a, a.closed.Load(), b, b.closed.Load())
	}
	if !e.p.Retired(c) || c.closed.Load() != 0 {
		t.Fatalf("lent %v: retired %v, closed %d; want retired and still open", c, e.p.Retired(c), c.closed.Load())
	}
	e.p.Release(c, true)
	if c.closed.Load() != 1 {
		t.Fatal("a retired connection went back to the pool on release")
	}
	st := e.p.Stats()
	if st.Closed[CloseRetired] != 3 || st.Open != 0 {
		t.Fatalf("stats %+v: want 3 closed as retired, none open", st)
	}
	d := e.acquire(0)
	if d.server != 1 || e.p.Retired(d) {
		t.Fatalf("after retirement got %v on server %d", d, d.server)
	}
	e.p.Release(d, true)
	if d.closed.Load() != 0 || e.p.Stats().Idle != 1 {
		t.Fatal("a connection to the new server was not kept")
	}
}

// While the address still leads to the retired server, a dial is closed at
// once and fails with ErrRetired; a borrower keeps trying until it moves.
func TestRetiredDialRefusedUntilAddressMoves(t *testing.T) {
	l := baseLimits()
	l.AcquireTimeout = 30 * time.Millisecond
	var learned atomic.Int32
	e := newPool(t, l, func(o *Options[key, *fakeConn]) {
		o.OnFirstDial = func(*fakeConn) error { learned.Add(1); return nil }
	})
	c := e.acquire(0)
	e.p.Release(c, true)
	e.p.Retire(onServer(0))
	e.p.Relearn()
	_, err := e.p.Acquire(context.Background(), 0)
	if !errors.Is(err, ErrRetired) || !errors.Is(err, ErrBackendDown) {
		t.Fatalf("Acquire while the address leads to the retired server: %v; want ErrRetired within ErrBackendDown", err)
	}
	st := e.p.Stats()
	if st.RetiredDials == 0 || st.Open != 0 || e.d.live.Load() != 0 {
		t.Fatalf("stats %+v, %d live: want refused dials, nothing open", st, e.d.live.Load())
	}
	if learned.Load() != 1 {
		t.Fatalf("OnFirstDial ran %d times: a dial to the retired server must not run it", learned.Load())
	}
	l.AcquireTimeout = 5 * time.Second
	if err := e.p.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	ch := e.acquireGo(context.Background(), 0)
	e.waitFor(func() bool { return e.p.Stats().RetiredDials > st.RetiredDials }, "a dial to be refused")
	e.d.server.Store(1)
	r := recv(t, ch)
	if r.err != nil || r.c.server != 1 {
		t.Fatalf("after the address moved: %v, %v", r.c, r.err)
	}
	if learned.Load() != 2 {
		t.Fatalf("OnFirstDial ran %d times, want 2: Relearn makes the new server's first dial run it", learned.Load())
	}
	e.p.Release(r.c, true)
}

// A retired connection released while a borrower waits is closed, not
// handed over: the waiter gets its slot and dials the new server.
func TestRetiredReleaseServesWaiterWithDial(t *testing.T) {
	e := newPool(t, oneConn())
	c := e.acquire(0)
	ch := e.acquireAsync(context.Background(), 0, 1)
	e.d.server.Store(1)
	e.p.Retire(onServer(0))
	e.p.Release(c, true)
	r := recv(t, ch)
	if r.err != nil || r.c == c || r.c.server != 1 {
		t.Fatalf("waiter got %v (server %d), %v; want a new connection to server 1", r.c, r.c.server, r.err)
	}
	e.p.Release(r.c, true)
}

// A held connection (a kill in flight) released meanwhile closes at its
// last Unhold when it was retired; TryAcquire's fit never sees retired
// ones; Retire(nil) retires nothing again.
func TestRetireHeldTryAcquireAndLift(t *testing.T) {
	e := newPool(t, baseLimits())
	a, b := e.acquire(0), e.acquire(0)
	if !e.p.Hold(a) {
		t.Fatal("Hold")
	}
	e.p.Release(a, true)
	e.p.Release(b, true)
	e.p.Retire(func(c *fakeConn) bool { return c == a })
	if a.closed.Load() != 0 || b.closed.Load() != 0 {
		t.Fatal("a parked or a live connection closed at Retire")
	}
	e.p.Unhold(a, true)
	if a.closed.Load() != 1 {
		t.Fatal("a retired connection parked by a hold was not closed at its Unhold")
	}
	saw := false
	got, ok, _ := e.p.TryAcquire(0, func(c *fakeConn) bool { saw = saw || c == a; return true })
	if !ok || got != b || saw {
		t.Fatalf("TryAcquire: %v %v (fit saw the retired one: %v)", got, ok, saw)
	}
	e.p.Retire(nil)
	if e.p.Retired(got) {
		t.Fatal("Retire(nil) left a test in force")
	}
	e.p.Release(got, true)
}

// Maintenance closes idle connections that a test installed meanwhile
// matches (the test may change what it matches as the topology changes).
func TestMaintenanceClosesRetired(t *testing.T) {
	e := newPool(t, baseLimits())
	c := e.acquire(0)
	e.p.Release(c, true)
	var gone atomic.Bool
	e.p.Retire(func(*fakeConn) bool { return gone.Load() })
	if c.closed.Load() != 0 {
		t.Fatal("closed before its server was retired")
	}
	gone.Store(true)
	e.p.maintainOnce()
	if c.closed.Load() != 1 || e.p.Stats().Closed[CloseRetired] != 1 {
		t.Fatalf("maintenance left a retired connection idle: %+v", e.p.Stats())
	}
}

// Borrowers running while the server moves back and forth are never lent a
// connection to the server retired at the time of the lend, and the counts
// add up.
func TestRetireUnderLoad(t *testing.T) {
	l := baseLimits()
	l.AcquireTimeout = 5 * time.Second
	e := newPool(t, l)
	var cur atomic.Int32 // the server in service
	e.p.Retire(func(c *fakeConn) bool { return c.server != cur.Load() })
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad, lends atomic.Int64
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				before := cur.Load()
				c, err := e.p.Acquire(context.Background(), key(i%2))
				if err != nil {
					t.Error(err)
					return
				}
				lends.Add(1)
				// Servers come in order: the one lent must have been in
				// service at some moment of the Acquire.
				if s := c.server; s < before || s > cur.Load() {
					bad.Add(1)
				}
				e.p.Release(c, true)
			}
		}()
	}
	for n := int32(1); n <= 20; n++ {
		e.d.server.Store(n)
		cur.Store(n)
		e.p.Retire(func(c *fakeConn) bool { return c.server != cur.Load() })
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d of %d lends went to a retired server", bad.Load(), lends.Load())
	}
	e.checkCounts()
	for _, c := range e.d.all() {
		if c.server != cur.Load() && c.closed.Load() != 1 {
			t.Fatalf("%v to server %d still open after the load stopped", c, c.server)
		}
	}
}

// A borrower backing off after a dial that reached the retired server
// dials again at once on Redial (the new server found behind the
// address), however long its back-off.
func TestRedialCutsBackoffShort(t *testing.T) {
	l := baseLimits()
	l.AcquireTimeout = time.Hour
	e := newPool(t, l, func(o *Options[key, *fakeConn]) { o.DialBackoff, o.MaxDialBackoff = time.Hour, time.Hour })
	c := e.acquire(0)
	e.p.Release(c, true)
	e.p.Retire(onServer(0))
	ch := e.acquireGo(context.Background(), 0)
	e.waitFor(func() bool { return e.p.Stats().RetiredDials == 1 }, "a dial to be refused")
	e.d.server.Store(1)
	e.p.Redial()
	r := recv(t, ch)
	if r.err != nil || r.c.server != 1 {
		t.Fatalf("after Redial: %v, %v; want a connection to server 1", r.c, r.err)
	}
	e.p.Release(r.c, true)
}
