package pool

import (
	"context"
	"testing"
	"time"
)

func TestLifetime(t *testing.T) {
	l := baseLimits()
	l.MaxLifetime = time.Hour
	e := newPool(t, l)
	a, b := e.acquire(0), e.acquire(0)
	e.p.Release(b, true)
	e.clock.Advance(2 * time.Hour)
	e.p.Release(a, true) // expired on return
	if a.closed.Load() != 1 {
		t.Fatal("expired connection returned to the pool")
	}
	if _, ok, _ := e.p.TryAcquire(0, nil); ok || b.closed.Load() != 1 {
		t.Fatal("expired idle connection lent")
	}
	c := e.acquire(0)
	e.clock.Advance(2 * time.Hour)
	e.p.Release(c, false) // broken wins over expired
	d := e.acquire(0)
	e.p.Release(d, true)
	e.clock.Advance(2 * time.Hour)
	e.p.maintainOnce()
	if d.closed.Load() != 1 {
		t.Fatal("maintenance kept an expired idle connection")
	}
	st := e.p.Stats()
	if st.Closed[CloseLifetime] != 3 || st.Closed[CloseBroken] != 1 || st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLifetimeJitter(t *testing.T) {
	l := baseLimits()
	l.Max, l.MaxIdle, l.MaxLifetime, l.LifetimeJitter = 40, 40, 100*time.Second, 0.5
	e := newPool(t, l)
	var conns []*fakeConn
	seen := map[time.Duration]bool{}
	for range 40 {
		c := e.acquire(0)
		conns = append(conns, c)
		life := c.slot.expires.Sub(c.slot.created)
		if life < 50*time.Second || life > 100*time.Second {
			t.Fatalf("lifetime %v outside [50s, 100s]", life)
		}
		seen[life] = true
	}
	if len(seen) < 30 {
		t.Fatalf("only %d distinct lifetimes of 40: no jitter", len(seen))
	}
	for _, c := range conns {
		e.p.Release(c, true)
	}
}

func TestIdleTimeoutDownToMin(t *testing.T) {
	l := baseLimits()
	l.Min, l.IdleTimeout = 1, time.Minute
	e := newPool(t, l)
	cs := []*fakeConn{e.acquire(0), e.acquire(0), e.acquire(0)}
	for _, c := range cs {
		e.p.Release(c, true)
		e.clock.Advance(time.Second)
	}
	e.p.maintainOnce()
	if st := e.p.Stats(); st.Open != 3 {
		t.Fatalf("closed before the idle timeout: %+v", st)
	}
	e.clock.Advance(2 * time.Minute)
	e.p.maintainOnce()
	st := e.p.Stats()
	if st.Open != 1 || st.Closed[CloseIdle] != 2 || cs[2].closed.Load() != 0 {
		t.Fatalf("stats %+v; want the newest kept", st)
	}
}

func TestMaxIdle(t *testing.T) {
	l := baseLimits()
	l.MaxIdle = 1
	e := newPool(t, l)
	a, b := e.acquire(0), e.acquire(0)
	e.p.Release(a, true)
	e.clock.Advance(time.Second)
	e.p.Release(b, true)
	st := e.p.Stats()
	if st.Idle != 1 || st.Closed[CloseIdle] != 1 || a.closed.Load() != 1 {
		t.Fatalf("stats %+v; want the one idle longest closed", st)
	}
}

func TestHealthCheckOnLend(t *testing.T) {
	l := baseLimits()
	l.PingAfterIdle = 30 * time.Second
	e := newPool(t, l)
	a, b := e.acquire(0), e.acquire(0)
	e.p.Release(a, true)
	e.p.Release(b, true)
	b.dead.Store(true)
	if c := e.acquire(0); c != a {
		t.Fatalf("got %v, want %v past the dead one", c, a)
	}
	if b.closed.Load() != 1 || a.pings.Load() != 0 {
		t.Fatal("dead connection not closed, or a fresh one pinged")
	}
	e.p.Release(a, true)
	e.clock.Advance(time.Minute)
	if c := e.acquire(0); c != a || a.pings.Load() != 1 {
		t.Fatalf("idle past PingAfterIdle: got %v, %d pings", c, a.pings.Load())
	}
	e.p.Release(a, true)
	e.clock.Advance(time.Minute)
	a.pingErr.Store(true)
	c := e.acquire(0)
	if c == a || a.closed.Load() != 1 {
		t.Fatal("connection that failed its ping was lent")
	}
	if st := e.p.Stats(); st.Closed[CloseUnhealthy] != 2 {
		t.Fatalf("stats %+v", st)
	}
	e.p.Release(c, true)
}

// A connection that fails its health check on lend frees its slot, and a
// borrower queued meanwhile gets it.
func TestUnhealthyOnLendWakesWaiter(t *testing.T) {
	l := baseLimits()
	l.Max, l.PingAfterIdle = 1, time.Second
	e := newPool(t, l)
	c := e.acquire(0)
	c.pingGate, c.pinging = make(chan struct{}), make(chan struct{}, 1)
	c.pingErr.Store(true)
	e.p.Release(c, true)
	e.clock.Advance(time.Minute)
	a := e.acquireGo(context.Background(), 0)
	<-c.pinging // a has taken c and pings it
	b := e.acquireAsync(context.Background(), 0, 1)
	close(c.pingGate)
	rb := recv(t, b)
	if rb.err != nil || rb.c == c {
		t.Fatalf("waiter got %v, %v", rb.c, rb.err)
	}
	e.waitFor(func() bool { return e.p.Waiting() == 1 }, "the first borrower to queue")
	e.p.Release(rb.c, true)
	if ra := recv(t, a); ra.c != rb.c {
		t.Fatalf("first borrower got %v, %v", ra.c, ra.err)
	} else {
		e.p.Release(ra.c, true)
	}
	if st := e.p.Stats(); st.Closed[CloseUnhealthy] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMaintainFillsMins(t *testing.T) {
	l := baseLimits()
	l.Min, l.MinKey = 2, 1
	l.Keys = map[key]KeyLimits{0: {Min: 1}}
	e := newPool(t, l)
	e.p.maintainOnce()
	var n [2]int
	for _, c := range e.d.all() {
		n[c.key]++
	}
	if n != [2]int{1, 1} {
		t.Fatalf("opened %v per key, want one each", n)
	}
	e.p.maintainOnce()
	if st := e.p.Stats(); st.Dials != 2 || st.Idle != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMaintainDropsDeadIdle(t *testing.T) {
	e := newPool(t, baseLimits())
	cs := []*fakeConn{e.acquire(0), e.acquire(0), e.acquire(1)}
	for _, c := range cs {
		e.p.Release(c, true)
	}
	cs[0].dead.Store(true)
	e.p.maintainOnce()
	if st := e.p.Stats(); st.Idle != 2 || st.Closed[CloseUnhealthy] != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The live ones are back, the newest still lent first.
	if c := e.acquire(0); c != cs[1] {
		t.Fatalf("got %v", c)
	} else {
		e.p.Release(c, true)
	}
}

func TestStartAndClose(t *testing.T) {
	l := baseLimits()
	l.Min = 2
	e := newPool(t, l, func(o *Options[key, *fakeConn]) { o.MaintainEvery = time.Millisecond })
	e.p.Start()
	e.p.Start()
	e.waitFor(func() bool { return e.p.Stats().Idle == 2 }, "Min connections")
	e.p.Close()
	e.p.Start() // after Close: nothing
	if st := e.p.Stats(); st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}
