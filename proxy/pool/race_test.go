package pool

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A borrower gives up (its context ends) just as the connection it waits
// for is handed to it. The connection must come back to the pool: never
// lost with the borrower, never lent twice. Fails when the waiter's
// give-back is removed (waitq.Queue.Wait's GiveBack, Pool.giveBack).
func TestTimeoutRacesHandOff(t *testing.T) {
	e := newPool(t, oneConn())
	c := e.acquire(0)
	gaveUp := 0
	for i := range 300 {
		ctx, cancel := context.WithCancel(context.Background())
		ch := e.acquireAsync(ctx, 0, 1)
		cancel()
		e.p.Release(c, true) // usually lands before the waiter has left the queue
		r := recv(t, ch)
		if r.err == nil {
			c = r.c // the waiter took it first; it is ours to hand on now
			continue
		}
		gaveUp++
		got, ok, _ := e.p.TryAcquire(0, nil)
		if !ok || got != c {
			t.Fatalf("round %d: a borrower gave up as %v was handed to it, and the pool lost it (stats %+v)", i, c, e.p.Stats())
		}
		e.checkCounts()
	}
	if st := e.p.Stats(); st.Dials != 1 || st.Open != 1 {
		t.Fatalf("stats %+v", st)
	}
	t.Logf("the borrower gave up in %d of 300 rounds", gaveUp)
	e.p.Release(c, true)
}

// The same race for a slot: a broken connection's release frees a slot and
// hands it to the waiter to dial into, as the waiter gives up. The slot
// must be freed again, not leaked (which would leave the pool unable to
// dial ever after).
func TestTimeoutRacesSlotHandOff(t *testing.T) {
	e := newPool(t, oneConn())
	c := e.acquire(0)
	for i := range 300 {
		ctx, cancel := context.WithCancel(context.Background())
		ch := e.acquireAsync(ctx, 0, 1)
		cancel()
		e.p.Release(c, false)
		r := recv(t, ch)
		if r.err == nil {
			c = r.c
			continue
		}
		if st := e.p.Stats(); st.Open != 0 || st.Dialing != 0 || !e.p.CanDial(0) {
			t.Fatalf("round %d: a slot handed to a borrower that gave up is lost (stats %+v)", i, st)
		}
		e.checkCounts()
		c = e.acquire(0)
	}
	e.p.Release(c, true)
}

// Many borrowers against few connections, two keys with a per-key max,
// random timeouts, failing dials, dying connections, holds, broken
// releases, limit changes, lifetimes and maintenance on a moving clock. No
// connection is lent twice, lent closed, or lent with the wrong key; every
// close is counted, so that dials - dial errors - closes == open at every
// snapshot; at the end nothing is lent, held or queued.
func TestStressCounting(t *testing.T) {
	l := baseLimits()
	l.Min, l.Max, l.MaxIdle, l.MaxWaiters = 1, 4, 3, 6
	l.MaxLifetime, l.LifetimeJitter = time.Minute, 0.2
	l.IdleTimeout, l.PingAfterIdle = 10*time.Second, 5*time.Second
	l.AcquireTimeout = 50 * time.Millisecond
	l.Keys = map[key]KeyLimits{1: {Max: 2}}
	e := newPool(t, l, func(o *Options[key, *fakeConn]) { o.OnFree = func() {} })
	e.d.failRate.Store(50)

	var borrowed sync.Map // *fakeConn -> *atomic.Int32
	flag := func(c *fakeConn) *atomic.Int32 {
		v, _ := borrowed.LoadOrStore(c, new(atomic.Int32))
		return v.(*atomic.Int32)
	}
	var lends, fails atomic.Int64
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e.clock.Advance(time.Duration(rand.N(3000)) * time.Millisecond)
			e.p.maintainOnce()
			if i%5 == 0 {
				nl := l
				nl.Max = 2 + rand.N(4)
				nl.MaxIdle = 1 + rand.N(nl.Max)
				if err := e.p.SetLimits(nl); err != nil {
					t.Error(err)
					return
				}
			}
			st := e.p.Stats()
			if int64(st.Dials)-int64(st.DialErrors)-int64(st.ClosedTotal()) != int64(st.Open) {
				t.Errorf("dials %d - dial errors %d - closed %d != open %d", st.Dials, st.DialErrors, st.ClosedTotal(), st.Open)
				return
			}
			time.Sleep(50 * time.Microsecond)
		}
	})
	var workers sync.WaitGroup
	for range 8 {
		workers.Go(func() {
			for range 300 {
				k := key(rand.N(2))
				var c *fakeConn
				var err error
				if rand.N(4) == 0 {
					var ok bool
					if c, ok, _ = e.p.TryAcquire(k, func(*fakeConn) bool { return rand.N(2) == 0 }); !ok {
						continue
					}
				} else {
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.N(3000))*time.Microsecond)
					c, err = e.p.Acquire(ctx, k)
					cancel()
				}
				if err != nil {
					if !errors.Is(err, ErrTimeout) && !errors.Is(err, ErrBackendDown) && !errors.Is(err, ErrWaiterCap) {
						t.Errorf("Acquire: %v", err)
						return
					}
					fails.Add(1)
					continue
				}
				lends.Add(1)
				f := flag(c)
				if !f.CompareAndSwap(0, 1) {
					t.Errorf("%v lent twice", c)
					return
				}
				if c.key != k || c.closed.Load() != 0 {
					t.Errorf("lent %v (closed %d) for key %d", c, c.closed.Load(), k)
					return
				}
				held := rand.N(5) == 0 && e.p.Hold(c)
				if rand.N(3) == 0 {
					time.Sleep(time.Duration(rand.N(200)) * time.Microsecond)
				}
				if rand.N(20) == 0 {
					c.dead.Store(true)
				}
				if !held {
					f.Store(0)
				}
				e.p.Release(c, rand.N(10) != 0)
				if held {
					f.Store(0)
					e.p.Unhold(c, rand.N(4) != 0)
				}
			}
		})
	}
	workers.Wait()
	close(stop)
	chaos.Wait()
	e.checkCounts()
	st := e.p.Stats()
	if st.InUse != 0 || st.Held != 0 || st.Waiting != 0 || st.Dialing != 0 {
		t.Fatalf("at rest: %+v", st)
	}
	t.Logf("%d lent, %d failed; stats %+v", lends.Load(), fails.Load(), st)
}
