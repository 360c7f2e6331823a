package pool

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/testkit"
)

// key is the tests' session variant: 0 and 1 stand for today's
// CLIENT_FOUND_ROWS off and on.
type key uint8

// fakeConn is a connection the tests steer: dead makes Alive fail, pingErr
// makes Ping fail, pingGate (when set before the connection is lent) makes
// Ping wait for it.
type fakeConn struct {
	key    key
	n      int   // dial order, from 1
	server int32 // the server it reached (fakeDialer.server at its dial)
	d      *fakeDialer
	slot   Slot

	dead     atomic.Bool
	pingErr  atomic.Bool
	pingGate chan struct{}
	pinging  chan struct{} // receives when Ping starts, if set
	pings    atomic.Int32
	closed   atomic.Int32
}

func (c *fakeConn) Key() key        { return c.key }
func (c *fakeConn) Alive() bool     { return !c.dead.Load() && c.closed.Load() == 0 }
func (c *fakeConn) PoolSlot() *Slot { return &c.slot }
func (c *fakeConn) String() string  { return fmt.Sprintf("conn#%d(key %d)", c.n, c.key) }

func (c *fakeConn) Ping(ctx context.Context) error {
	c.pings.Add(1)
	if c.pinging != nil {
		c.pinging <- struct{}{}
	}
	if c.pingGate != nil {
		select {
		case <-c.pingGate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if c.pingErr.Load() {
		return errors.New("fake: ping failed")
	}
	return nil
}

func (c *fakeConn) Close() {
	if c.closed.Add(1) != 1 {
		panic(fmt.Sprintf("%v closed twice", c))
	}
	c.d.live.Add(-1)
}

// fakeDialer makes fakeConns. fail makes the next n dials fail; failRate
// (per mille) fails dials at random; gate, when set, makes dials wait for
// it (or for ctx).
type fakeDialer struct {
	live     atomic.Int64 // dialed and not closed
	calls    atomic.Int64
	failRate atomic.Int32
	server   atomic.Int32 // the server the address leads to now (0 at first)

	mu      sync.Mutex // guards following
	conns   []*fakeConn
	fail    int
	gate    chan struct{}
	dialing chan key // receives the key of each dial as it starts, if set
}

var errDial = errors.New("fake: connection refused")

func (d *fakeDialer) dial(ctx context.Context, k key) (*fakeConn, error) {
	n := d.calls.Add(1)
	d.mu.Lock()
	gate, dialing := d.gate, d.dialing
	d.mu.Unlock()
	if dialing != nil {
		dialing <- k
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail > 0 {
		d.fail--
		return nil, errDial
	}
	if r := d.failRate.Load(); r > 0 && int32(n*7919%1000) < r {
		return nil, errDial
	}
	c := &fakeConn{key: k, n: len(d.conns) + 1, d: d, server: d.server.Load()}
	d.conns = append(d.conns, c)
	d.live.Add(1)
	return c, nil
}

func (d *fakeDialer) setGate(g chan struct{}) {
	d.mu.Lock()
	d.gate = g
	d.mu.Unlock()
}

func (d *fakeDialer) all() []*fakeConn {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*fakeConn(nil), d.conns...)
}

type testPool = Pool[key, *fakeConn]

// baseLimits: four connections, all may idle, no expiry; waits are bounded
// so that a test that goes wrong fails instead of hanging.
func baseLimits() Limits[key] {
	return Limits[key]{Max: 4, MaxIdle: 4, MaxWaiters: 100, AcquireTimeout: 5 * time.Second}
}

// oneConn is baseLimits with room for one connection, so that a second
// borrower waits.
func oneConn() Limits[key] {
	l := baseLimits()
	l.Max = 1
	return l
}

type env struct {
	t     *testing.T
	p     *testPool
	d     *fakeDialer
	clock *testkit.Clock
}

// newPool builds a pool over a fake dialer and clock. On cleanup it checks
// that nothing is lent, the counts add up, and after Close every
// connection was closed exactly once.
func newPool(t *testing.T, l Limits[key], opt ...func(*Options[key, *fakeConn])) *env {
	t.Helper()
	e := &env{t: t, d: &fakeDialer{}, clock: testkit.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	o := Options[key, *fakeConn]{Dial: e.d.dial, Now: e.clock.Now, DialBackoff: time.Millisecond, MaxDialBackoff: 4 * time.Millisecond}
	for _, f := range opt {
		f(&o)
	}
	p, err := New(o, l)
	if err != nil {
		t.Fatal(err)
	}
	e.p = p
	t.Cleanup(func() {
		if t.Failed() {
			p.Close()
			return
		}
		e.checkCounts()
		p.Close()
		st := p.Stats()
		if st.Open != 0 && st.InUse == 0 {
			t.Errorf("after Close: %d open", st.Open)
		}
		if st.InUse == 0 {
			for _, c := range e.d.all() {
				if c.closed.Load() != 1 {
					t.Errorf("after Close: %v closed %d times", c, c.closed.Load())
				}
			}
		}
		e.checkCounts()
	})
	return e
}

// checkCounts checks that every connection dialed is open or counted
// closed, once: dials - dial errors - closes == open.
func (e *env) checkCounts() {
	e.t.Helper()
	st := e.p.Stats()
	if int64(st.Dials)-int64(st.DialErrors)-int64(st.ClosedTotal()) != int64(st.Open) {
		e.t.Fatalf("dials %d - dial errors %d - closed %d (%v) != open %d", st.Dials, st.DialErrors, st.ClosedTotal(), st.Closed, st.Open)
	}
	if st.Open != st.Idle+st.InUse {
		e.t.Fatalf("open %d != idle %d + in use %d", st.Open, st.Idle, st.InUse)
	}
	if live := e.d.live.Load(); live != int64(st.Open) && st.Dialing == 0 {
		e.t.Fatalf("%d fake connections live, pool says %d open", live, st.Open)
	}
}

func (e *env) acquire(k key) *fakeConn {
	e.t.Helper()
	c, err := e.p.Acquire(context.Background(), k)
	if err != nil {
		e.t.Fatalf("Acquire(%d): %v", k, err)
	}
	return c
}

type result struct {
	c   *fakeConn
	err error
}

// acquireGo starts an Acquire on a goroutine of its own; its result comes
// on the channel returned.
func (e *env) acquireGo(ctx context.Context, k key) chan result {
	ch := make(chan result, 1)
	go func() {
		c, err := e.p.Acquire(ctx, k)
		ch <- result{c, err}
	}()
	return ch
}

// acquireAsync starts an Acquire and waits until it is queued (Waiting
// reaches want) so that the caller knows the order of waiters.
func (e *env) acquireAsync(ctx context.Context, k key, want int) chan result {
	e.t.Helper()
	ch := e.acquireGo(ctx, k)
	e.waitFor(func() bool { return e.p.Waiting() >= want }, "waiter to queue")
	return ch
}

func (e *env) waitFor(cond func() bool, what string) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
		time.Sleep(20 * time.Microsecond)
	}
}

func recv(t *testing.T, ch chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return")
		return result{}
	}
}
