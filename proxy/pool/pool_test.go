package pool

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/testkit"
)

func TestAcquireReusesNewestIdle(t *testing.T) {
	e := newPool(t, baseLimits())
	a, b := e.acquire(0), e.acquire(0)
	e.p.Release(a, true)
	e.p.Release(b, true)
	if c := e.acquire(0); c != b {
		t.Fatalf("got %v, want the newest idle %v", c, b)
	}
	if c := e.acquire(0); c != a {
		t.Fatalf("got %v, want %v", c, a)
	}
	st := e.p.Stats()
	if st.Dials != 2 || st.Acquired != 4 || st.InUse != 2 || st.Idle != 0 || st.Waited != 0 {
		t.Fatalf("stats %+v", st)
	}
	if a.slot.ID() != 1 || b.slot.ID() != 2 || a.slot.Created().IsZero() {
		t.Fatalf("ids %d %d", a.slot.ID(), b.slot.ID())
	}
	e.p.Release(a, true)
	e.p.Release(b, true)
}

func TestWaitForRelease(t *testing.T) {
	e := newPool(t, oneConn())
	c := e.acquire(0)
	ch := e.acquireAsync(context.Background(), 0, 1)
	e.p.Release(c, true)
	r := recv(t, ch)
	if r.err != nil || r.c != c {
		t.Fatalf("waiter got %v, %v; want %v", r.c, r.err, c)
	}
	if st := e.p.Stats(); st.Waited != 1 || st.Dials != 1 || st.Waiting != 0 {
		t.Fatalf("stats %+v", st)
	}
	e.p.Release(c, true)
}

func TestAcquireTimeoutAndCancel(t *testing.T) {
	l := baseLimits()
	l.Max, l.AcquireTimeout = 1, 20*time.Millisecond
	e := newPool(t, l)
	c := e.acquire(0)
	_, err := e.p.Acquire(context.Background(), 0)
	if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "pool max 1, 1 in use") {
		t.Fatalf("Acquire: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ch := e.acquireAsync(ctx, 0, 1)
	cancel()
	if r := recv(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled Acquire: %v", r.err)
	}
	if st := e.p.Stats(); st.Timeouts != 1 || st.Waiting != 0 {
		t.Fatalf("stats %+v: a cancel is not a timeout", st)
	}
	e.p.Release(c, true)
}

func TestWaiterCap(t *testing.T) {
	l := baseLimits()
	l.Max, l.MaxWaiters = 1, 1
	e := newPool(t, l)
	c := e.acquire(0)
	ch := e.acquireAsync(context.Background(), 0, 1)
	if _, err := e.p.Acquire(context.Background(), 0); !errors.Is(err, ErrWaiterCap) {
		t.Fatalf("second waiter: %v", err)
	}
	l.MaxWaiters = 0
	if err := e.p.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	if _, err := e.p.Acquire(context.Background(), 0); !errors.Is(err, ErrWaiterCap) {
		t.Fatalf("MaxWaiters 0: %v", err)
	}
	if st := e.p.Stats(); st.Rejected != 2 {
		t.Fatalf("rejected %d", st.Rejected)
	}
	e.p.Release(c, true)
	e.p.Release(recv(t, ch).c, true)
}

func TestPerKeyMaxUnderGlobalMax(t *testing.T) {
	l := baseLimits()
	l.Max, l.AcquireTimeout = 3, 20*time.Millisecond
	l.Keys = map[key]KeyLimits{0: {Max: 2}}
	e := newPool(t, l)
	a, b := e.acquire(0), e.acquire(0)
	if _, err := e.p.Acquire(context.Background(), 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("third of key 0 (max 2): %v", err)
	}
	if e.p.CanDial(0) || !e.p.CanDial(1) {
		t.Fatal("CanDial ignores the key's max")
	}
	x := e.acquire(1) // the global max still has room
	// Key 1 is now at the global max: a second one waits, and gets a
	// slot when a key-0 connection is released (swapped out).
	l.AcquireTimeout = 5 * time.Second
	_ = e.p.SetLimits(l)
	ch := e.acquireAsync(context.Background(), 1, 1)
	e.p.Release(a, true)
	r := recv(t, ch)
	if r.err != nil || r.c.key != 1 || r.c == x {
		t.Fatalf("key-1 waiter got %v, %v", r.c, r.err)
	}
	if st := e.p.Stats(); st.Closed[CloseSwap] != 1 || st.Open != 3 {
		t.Fatalf("stats %+v", st)
	}
	for _, c := range []*fakeConn{b, x, r.c} {
		e.p.Release(c, true)
	}
}

// The connection handed to the oldest waiter is dead: that waiter dials
// into its slot, ahead of the waiters behind it.
func TestDeadHandOffDialsInItsSlot(t *testing.T) {
	e := newPool(t, oneConn())
	c := e.acquire(0)
	w1 := e.acquireAsync(context.Background(), 0, 1)
	w2 := e.acquireAsync(context.Background(), 0, 2)
	c.dead.Store(true)
	e.p.Release(c, true)
	r1 := recv(t, w1)
	if r1.err != nil || r1.c == c {
		t.Fatalf("first waiter got %v, %v", r1.c, r1.err)
	}
	if e.p.Waiting() != 1 {
		t.Fatal("the second waiter was served before the first")
	}
	e.p.Release(r1.c, true)
	r2 := recv(t, w2)
	if r2.c != r1.c {
		t.Fatalf("second waiter got %v, %v", r2.c, r2.err)
	}
	if st := e.p.Stats(); st.Closed[CloseUnhealthy] != 1 || st.Dials != 2 {
		t.Fatalf("stats %+v", st)
	}
	e.p.Release(r2.c, true)
}

// A key-0 waiter queued behind a key-1 one: the returned key-0 connection
// goes to the waiter that can use it.
func TestWaiterKeyMatchedFirst(t *testing.T) {
	l := baseLimits()
	l.Max = 2
	l.Keys = map[key]KeyLimits{1: {Max: 1}}
	e := newPool(t, l)
	a, y := e.acquire(0), e.acquire(1)
	w1 := e.acquireAsync(context.Background(), 1, 1) // key 1 is at its max
	w0 := e.acquireAsync(context.Background(), 0, 2) // the pool is at its max
	e.p.Release(a, true)
	if r := recv(t, w0); r.c != a {
		t.Fatalf("key-0 waiter got %v, %v", r.c, r.err)
	}
	e.p.Release(y, true)
	if r := recv(t, w1); r.c != y {
		t.Fatalf("key-1 waiter got %v, %v", r.c, r.err)
	}
	e.p.Release(a, true)
	e.p.Release(y, true)
}

// Only the other key is idle: the pool closes it and dials the key asked
// for, and counts the close.
func TestVariantSwap(t *testing.T) {
	e := newPool(t, oneConn())
	a := e.acquire(0)
	e.p.Release(a, true)
	b := e.acquire(1)
	if b.key != 1 || a.closed.Load() != 1 {
		t.Fatalf("got %v; %v closed %d", b, a, a.closed.Load())
	}
	// And for a waiter: the key-1 connection returns, a key-0 waiter gets
	// a slot for a dial of its own.
	ch := e.acquireAsync(context.Background(), 0, 1)
	e.p.Release(b, true)
	r := recv(t, ch)
	if r.err != nil || r.c.key != 0 || b.closed.Load() != 1 {
		t.Fatalf("waiter got %v, %v", r.c, r.err)
	}
	if st := e.p.Stats(); st.Closed[CloseSwap] != 2 || st.Dials != 3 {
		t.Fatalf("stats %+v", st)
	}
	e.p.Release(r.c, true)
}

// A waiter whose key never matches what is returned is passed over at
// most maxSkips times, then served by a swap: no starvation.
func TestSkippedWaiterIsServed(t *testing.T) {
	e := newPool(t, oneConn())
	held := e.acquire(0)
	w1 := e.acquireAsync(context.Background(), 1, 1)
	rounds := 0
	for {
		rounds++
		if rounds > 2*maxSkips {
			t.Fatal("the key-1 waiter starves")
		}
		w0 := e.acquireAsync(context.Background(), 0, 2)
		e.p.Release(held, true)
		select {
		case r := <-w1:
			if r.err != nil || r.c.key != 1 {
				t.Fatalf("key-1 waiter: %v, %v", r.c, r.err)
			}
			if rounds != maxSkips+1 {
				t.Fatalf("key-1 waiter served in round %d, want %d", rounds, maxSkips+1)
			}
			e.p.Release(r.c, true)
			r0 := recv(t, w0)
			e.p.Release(r0.c, true)
			return
		case r := <-w0:
			held = r.c
		case <-time.After(5 * time.Second):
			t.Fatal("nobody served")
		}
	}
}

func TestCloseWithWaiters(t *testing.T) {
	e := newPool(t, oneConn())
	c := e.acquire(0)
	var chs []chan result
	for i := range 3 {
		chs = append(chs, e.acquireAsync(context.Background(), key(i%2), i+1))
	}
	e.p.Close()
	for _, ch := range chs {
		if r := recv(t, ch); !errors.Is(r.err, ErrClosed) {
			t.Fatalf("waiter after Close: %v, %v", r.c, r.err)
		}
	}
	e.p.Close()
	if _, err := e.p.Acquire(context.Background(), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if _, ok, _ := e.p.TryAcquire(0, nil); ok {
		t.Fatal("TryAcquire after Close")
	}
	e.p.Release(c, true)
	if c.closed.Load() != 1 {
		t.Fatal("connection returned after Close not closed")
	}
	if st := e.p.Stats(); st.Closed[CloseShutdown] != 1 || st.Open != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// Hold keeps a connection out of circulation across its Release until the
// kill that needed it is done.
func TestHold(t *testing.T) {
	l := baseLimits()
	l.Max, l.AcquireTimeout = 1, 20*time.Millisecond
	e := newPool(t, l)
	c := e.acquire(0)
	if !e.p.Hold(c) || !e.p.Hold(c) {
		t.Fatal("Hold of a lent connection refused")
	}
	e.p.Release(c, true)
	if st := e.p.Stats(); st.Held != 1 || st.InUse != 1 || st.Idle != 0 {
		t.Fatalf("stats %+v", st)
	}
	if _, err := e.p.Acquire(context.Background(), 0); !errors.Is(err, ErrTimeout) {
		t.Fatalf("held connection lent: %v", err)
	}
	l.AcquireTimeout = 5 * time.Second
	_ = e.p.SetLimits(l)
	ch := e.acquireAsync(context.Background(), 0, 1)
	e.p.Unhold(c, true) // one hold left
	select {
	case r := <-ch:
		t.Fatalf("lent with a hold left: %v", r.c)
	case <-time.After(5 * time.Millisecond):
	}
	e.p.Unhold(c, true)
	if r := recv(t, ch); r.c != c {
		t.Fatalf("waiter got %v, %v", r.c, r.err)
	}
	// A kill that leaves the connection unusable: closed at Release.
	if !e.p.Hold(c) {
		t.Fatal("Hold refused")
	}
	e.p.Unhold(c, false)
	e.p.Release(c, true)
	if c.closed.Load() != 1 {
		t.Fatal("spoiled connection kept")
	}
	// Not lent: nothing to hold.
	d := e.acquire(0)
	e.p.Release(d, true)
	if e.p.Hold(d) {
		t.Fatal("Hold of an idle connection")
	}
	if st := e.p.Stats(); st.Closed[CloseBroken] != 1 || st.Held != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestTryAcquireFit(t *testing.T) {
	e := newPool(t, baseLimits())
	a, b := e.acquire(0), e.acquire(0)
	e.p.Release(a, true)
	e.p.Release(b, true)
	before := e.p.Stats().Acquired
	c, ok, unfit := e.p.TryAcquire(0, func(c *fakeConn) bool { return c == a })
	if !ok || c != a || unfit {
		t.Fatalf("TryAcquire = %v, %v, %v", c, ok, unfit)
	}
	if _, ok, unfit := e.p.TryAcquire(0, func(*fakeConn) bool { return false }); ok || !unfit {
		t.Fatalf("none fits: ok %v unfit %v", ok, unfit)
	}
	if _, ok, unfit := e.p.TryAcquire(1, nil); ok || unfit {
		t.Fatalf("no idle of the key: ok %v unfit %v", ok, unfit)
	}
	if got := e.p.Stats().Acquired - before; got != 1 {
		t.Fatalf("%d acquisitions counted, want 1", got)
	}
	e.p.Release(a, true)
}

func TestOnFree(t *testing.T) {
	var frees atomic.Int32
	l := baseLimits()
	l.Max = 1
	e := newPool(t, l, func(o *Options[key, *fakeConn]) { o.OnFree = func() { frees.Add(1) } })
	c := e.acquire(0)
	e.p.Release(c, true) // idle, nobody queued
	if frees.Load() != 1 {
		t.Fatalf("%d OnFree calls after a release into idle", frees.Load())
	}
	c = e.acquire(0)
	ch := e.acquireAsync(context.Background(), 0, 1)
	e.p.Release(c, true) // handed to the waiter: nothing stays free
	c = recv(t, ch).c
	if frees.Load() != 1 {
		t.Fatalf("OnFree ran for a connection a waiter took")
	}
	e.p.Release(c, false) // slot freed, nobody queued
	if frees.Load() != 2 {
		t.Fatalf("%d OnFree calls after a slot freed", frees.Load())
	}
}

func TestSetLimits(t *testing.T) {
	e := newPool(t, baseLimits())
	cs := []*fakeConn{e.acquire(0), e.acquire(0), e.acquire(0)}
	e.p.Release(cs[0], true)
	l := baseLimits()
	l.Max = 1
	if err := e.p.SetLimits(l); err != nil {
		t.Fatal(err)
	}
	if cs[0].closed.Load() != 1 {
		t.Fatal("idle connection over the lower max kept")
	}
	e.p.Release(cs[1], true) // still over: closed
	e.p.Release(cs[2], true) // at the max: kept
	st := e.p.Stats()
	if st.Closed[CloseShrink] != 2 || st.Open != 1 || st.Idle != 1 {
		t.Fatalf("stats %+v", st)
	}
	// Raising the max serves a waiter at once.
	c := e.acquire(0)
	ch := e.acquireAsync(context.Background(), 0, 1)
	l.Max = 2
	_ = e.p.SetLimits(l)
	r := recv(t, ch)
	if r.err != nil || r.c == c {
		t.Fatalf("waiter after a raise: %v, %v", r.c, r.err)
	}
	// A lower key max closes that key's idle ones.
	e.p.Release(c, true)
	e.p.Release(r.c, true)
	l.Keys = map[key]KeyLimits{0: {Max: 1}}
	_ = e.p.SetLimits(l)
	if st := e.p.Stats(); st.Open != 1 || st.Closed[CloseShrink] != 3 {
		t.Fatalf("stats %+v", st)
	}
	for _, bad := range []Limits[key]{{Max: 0}, {Max: 2, Min: 3, MaxIdle: 3}, {Max: 2, Min: 1}, {Max: 1, LifetimeJitter: 1}, {Max: 1, Keys: map[key]KeyLimits{0: {Min: 2, Max: 1}}}} {
		if err := e.p.SetLimits(bad); err == nil {
			t.Errorf("SetLimits(%+v) accepted", bad)
		}
	}
	if _, err := New(Options[key, *fakeConn]{}, baseLimits()); err == nil {
		t.Error("New without Dial accepted")
	}
}

func TestMisuse(t *testing.T) {
	e := newPool(t, baseLimits())
	c := e.acquire(0)
	e.p.Release(c, true)
	testkit.MustPanic(t, "double Release", func() { e.p.Release(c, true) })
	testkit.MustPanic(t, "Unhold without Hold", func() { e.p.Unhold(c, true) })
}

// A borrower with a handicap queues behind those that arrive within it,
// and ahead of those that arrive after it.
func TestHandicapOrdersWaiters(t *testing.T) {
	e := newPool(t, oneConn())
	c := e.acquire(0)
	handicapped := func(d time.Duration, want int) chan result {
		ch := make(chan result, 1)
		go func() {
			c, err := e.p.AcquireHandicap(context.Background(), 0, d)
			ch <- result{c, err}
		}()
		e.waitFor(func() bool { return e.p.Waiting() >= want }, "waiter to queue")
		return ch
	}
	bg := handicapped(time.Second, 1) // arrives at 0, ranks as 1s
	e.clock.Advance(100 * time.Millisecond)
	crit := handicapped(0, 2) // arrives at 100ms: ahead of bg
	e.clock.Advance(1500 * time.Millisecond)
	late := handicapped(0, 3) // arrives at 1.6s: behind bg, which ranks 1s
	for i, ch := range []chan result{crit, bg, late} {
		e.p.Release(c, true)
		r := recv(t, ch)
		if r.err != nil || r.c != c {
			t.Fatalf("waiter %d served %v, %v; want the connection (crit, bg, late order)", i, r.c, r.err)
		}
		for _, other := range []chan result{crit, bg, late}[i+1:] {
			select {
			case r := <-other:
				t.Fatalf("a later waiter was served out of order: %+v", r)
			default:
			}
		}
	}
	e.p.Release(c, true)
}
