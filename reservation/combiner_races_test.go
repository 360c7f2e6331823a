package reservation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Tests of the combiner's races with a fake batch runner: they need no
// database. The SQL a batch runs is tested against MariaDB in
// combiner_test.go and concurrency_test.go.

// TestCombinerLeaderBlocks: while a leader's batch is stuck, reserves queue
// behind it; those that give up are out before any batch took them
// (cancelled: nothing reserved), and the rest go in the next batch, in
// their order, led by the oldest.
func TestCombinerLeaderBlocks(t *testing.T) {
	f := newFakeRunner(t)
	g := newGate()
	f.batch = g.batch
	cs := newFakeCombiners(f, Config{BatchesPerPool: 1}, 0)

	a := startCall(cs, fakePool, "a", false)
	if keys := g.waitStarted(t); !slices.Equal(keys, []string{"a"}) {
		t.Fatalf("first batch %v, want [a]", keys)
	}
	calls := map[string]*call{}
	for i, k := range []string{"b", "c", "d", "e", "f"} {
		calls[k] = startCall(cs, fakePool, k, false)
		eventually(t, k+" to queue", func() bool { return cs.queued(fakePool) == i+1 })
	}
	calls["c"].cancel()
	calls["e"].cancel()
	for _, k := range []string{"c", "e"} {
		if out := calls[k].answer(t); !isCancelled(out) {
			t.Errorf("%s gave up while queued: %+v, want cancelled (nothing reserved)", k, out)
		}
	}
	if n := cs.queued(fakePool); n != 3 {
		t.Fatalf("%d queued after two gave up, want 3", n)
	}
	if idle(cs) {
		t.Fatal("the combiner was removed while its batch ran")
	}
	g.release <- struct{}{} // a's batch ends
	if out := a.answer(t); out.res == nil {
		t.Fatalf("a: %+v", out)
	}
	if keys := g.waitStarted(t); !slices.Equal(keys, []string{"b", "d", "f"}) {
		t.Fatalf("second batch %v, want [b d f]", keys)
	}
	g.release <- struct{}{}
	for _, k := range []string{"b", "d", "f"} {
		if out := calls[k].answer(t); out.res == nil {
			t.Errorf("%s: %+v", k, out)
		}
	}
	settle(t, cs, f)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, k := range []string{"c", "e"} {
		if f.in[calls[k].req] != 0 {
			t.Errorf("%s was answered cancelled but ran in a batch", k)
		}
	}
}

// TestCombinerBatchFails: every reserve of a failed batch gets its error,
// and so does every reserve of a batch whose session could not be opened;
// the reserves behind them are still served.
func TestCombinerBatchFails(t *testing.T) {
	f := newFakeRunner(t)
	g := newGate()
	errBatch := errors.New("batch failed")
	errOpen := errors.New("no connection")
	var failOpen atomic.Bool
	f.batch = func(b []*pending, s *session) {
		g.batch(b, s)
		if b[0].req.key == "b" {
			for _, p := range b {
				p.out = outcome{err: errBatch}
			}
		}
	}
	f.openErr = func() error {
		if failOpen.Load() {
			return errOpen
		}
		return nil
	}
	cs := newFakeCombiners(f, Config{BatchesPerPool: 1, MaxBatch: 3}, 0)

	a := startCall(cs, fakePool, "a", false)
	g.waitStarted(t)
	var calls []*call
	for i, k := range []string{"b", "c", "d", "e", "f", "g", "h"} {
		calls = append(calls, startCall(cs, fakePool, k, false))
		eventually(t, k+" to queue", func() bool { return cs.queued(fakePool) == i+1 })
	}
	g.release <- struct{}{}
	a.answer(t)
	// b leads [b c d] (e f g h stay queued, so it opens a session) and fails.
	if keys := g.waitStarted(t); !slices.Equal(keys, []string{"b", "c", "d"}) {
		t.Fatalf("batch %v, want [b c d]", keys)
	}
	failOpen.Store(true) // b's session is open; e's leader will need one
	g.release <- struct{}{}
	for _, c := range calls[:3] {
		if out := c.answer(t); !errors.Is(out.err, errBatch) {
			t.Errorf("%s in the failed batch: %+v, want its error", c.req.key, out)
		}
	}
	// None got units, so b closed its session before handing on: e's
	// batch [e f g], with h queued, cannot open one.
	for _, c := range calls[3:6] {
		if out := c.answer(t); !errors.Is(out.err, errOpen) {
			t.Errorf("%s in the batch without a session: %+v, want the open error", c.req.key, out)
		}
	}
	// h's batch is alone: it needs no session.
	if keys := g.waitStarted(t); !slices.Equal(keys, []string{"h"}) {
		t.Fatalf("batch %v, want [h]", keys)
	}
	g.release <- struct{}{}
	if out := calls[6].answer(t); out.res == nil {
		t.Errorf("h after the failures: %+v", out)
	}
	settle(t, cs, f)
	if got := f.batchKeys(); len(got) != 3 {
		t.Errorf("batches %v, want [a] [b c d] [h]", got)
	}
}

// TestCombinerCancelledLeaderHandsOn: a reserve whose caller gives up just
// as leadership (and the session of the leader before it) is handed to it
// either leads anyway or passes both on; the reserve behind it is answered
// either way, and the session is neither lost nor used twice.
func TestCombinerCancelledLeaderHandsOn(t *testing.T) {
	passedOn := 0
	for round := range 200 {
		f := newFakeRunner(t)
		g := newGate()
		f.batch = g.batch
		cs := newFakeCombiners(f, Config{BatchesPerPool: 2}, 0)

		// A pretend batch runs, so a's batch is one of two and opens a
		// session; the pool is quiet, so a leads beside it.
		end := cs.hold(fakePool, 0)
		a := startCall(cs, fakePool, "a", false)
		g.waitStarted(t)
		// b queues with its context already ended, and is parked between
		// its enqueue and its wait while leadership is handed to it.
		bctx, bcancel := context.WithCancel(context.Background())
		bcancel()
		cb, b, lead, err := cs.enqueue(bctx, fakePool, fakeReq("b", 1), false)
		if err != nil || lead {
			t.Fatalf("b: lead %v, %v; want it queued", lead, err)
		}
		c := startCall(cs, fakePool, "c", false)
		eventually(t, "c to queue", func() bool { return cs.queued(fakePool) == 2 })
		g.release <- struct{}{} // a's batch ends; a hands on to b
		a.answer(t)
		cb.mu.Lock()
		handed := b.state == stLead
		cb.mu.Unlock()
		if !handed {
			t.Fatal("a did not hand leadership to b")
		}

		bout := make(chan outcome, 1)
		go func() { bout <- cs.await(bctx, cb, b, false) }()
		keys := g.waitStarted(t)
		g.release <- struct{}{}
		out := <-bout
		switch {
		case isCancelled(out): // b passed it on: c leads
			passedOn++
			if !slices.Equal(keys, []string{"c"}) {
				t.Fatalf("round %d: after b passed leadership on, batch %v; want [c]", round, keys)
			}
		case out.res != nil: // b took it: its batch carries c
			if !slices.Equal(keys, []string{"b", "c"}) {
				t.Fatalf("round %d: b led batch %v; want [b c]", round, keys)
			}
		default:
			t.Fatalf("round %d: b: %+v", round, out)
		}
		if out := c.answer(t); out.res == nil {
			t.Fatalf("round %d: c: %+v", round, out)
		}
		f.mu.Lock()
		sa, sc := f.on[0], f.on[1]
		f.mu.Unlock()
		if sa == nil || sc != sa {
			t.Fatalf("round %d: a ran on session %p, the next batch on %p; want a's session handed on", round, sa, sc)
		}
		end()
		eventually(t, "the idle combiner to be removed", func() bool { return idle(cs) })
		eventually(t, "every session to be closed", func() bool { o, c := f.sessions(); return o == 1 && c == 1 })
	}
	if passedOn == 0 {
		t.Fatal("b never gave leadership back: the race was not exercised")
	}
	t.Logf("b passed leadership on in %d of 200 rounds", passedOn)
}

// TestCombinerFrontOfQueue: a retry (front) goes to the head of the queue,
// the later retry first; a handed-on leader's batch takes the queue in
// that order.
func TestCombinerFrontOfQueue(t *testing.T) {
	for _, tc := range []struct {
		maxBatch int
		want     [][]string
	}{
		{1, [][]string{{"a"}, {"e"}, {"d"}, {"b"}, {"c"}, {"f"}}},
		{10, [][]string{{"a"}, {"e", "d", "b", "c", "f"}}},
	} {
		t.Run(fmt.Sprint("max_batch=", tc.maxBatch), func(t *testing.T) {
			f := newFakeRunner(t)
			started, hold := make(chan struct{}), make(chan struct{})
			f.batch = func(b []*pending, _ *session) {
				if b[0].req.key == "a" {
					close(started)
					<-hold
				}
				for _, p := range b {
					p.out = outcome{res: &reservation{}}
				}
			}
			cs := newFakeCombiners(f, Config{BatchesPerPool: 1, MaxBatch: tc.maxBatch}, 0)
			a := startCall(cs, fakePool, "a", false)
			<-started
			var calls []*call
			for i, k := range []string{"b", "c", "d!", "e!", "f"} {
				calls = append(calls, startCall(cs, fakePool, strings.TrimSuffix(k, "!"), strings.HasSuffix(k, "!")))
				eventually(t, k+" to queue", func() bool { return cs.queued(fakePool) == i+1 })
			}
			close(hold)
			a.answer(t)
			for _, c := range calls {
				if out := c.answer(t); out.res == nil {
					t.Errorf("%s: %+v", c.req.key, out)
				}
			}
			if got := f.batchKeys(); !slices.EqualFunc(got, tc.want, slices.Equal) {
				t.Errorf("batches %v, want %v", got, tc.want)
			}
			settle(t, cs, f)
		})
	}
}

// TestCombinerLeaderServesThoseAhead: a reserve that leads a second batch
// beside a running one (enough wait) while more than max_batch are queued
// ahead of it runs their batch first, then its own.
func TestCombinerLeaderServesThoseAhead(t *testing.T) {
	f := newFakeRunner(t)
	cs := newFakeCombiners(f, Config{BatchesPerPool: 2, SecondBatchMin: 3, MaxBatch: 2}, 0)
	end := cs.hold(fakePool, 10) // a busy pool's batch runs
	var calls []*call
	for i, k := range []string{"b", "c"} {
		calls = append(calls, startCall(cs, fakePool, k, false))
		eventually(t, k+" to queue", func() bool { return cs.queued(fakePool) == i+1 })
	}
	d := startCall(cs, fakePool, "d", false) // the third: leads a batch beside
	for _, c := range append(calls, d) {
		if out := c.answer(t); out.res == nil {
			t.Errorf("%s: %+v", c.req.key, out)
		}
	}
	if got, want := f.batchKeys(), [][]string{{"b", "c"}, {"d"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("batches %v, want %v", got, want)
	}
	if idle(cs) {
		t.Fatal("the combiner was removed while the pretend batch ran")
	}
	end()
	if !idle(cs) {
		t.Fatal("the combiner outlived its last batch")
	}
	settle(t, cs, f)
}

// TestCombinerIdleRemoval: a combiner stays while a reserve is queued or a
// batch runs, and is removed once the last leaves, whichever way it leaves;
// the next reserve of its pool makes a new one.
func TestCombinerIdleRemoval(t *testing.T) {
	f := newFakeRunner(t)
	cs := newFakeCombiners(f, Config{BatchesPerPool: 1}, 0)
	if out := cs.submit(context.Background(), fakePool, fakeReq("a", 1), false); out.res == nil {
		t.Fatalf("a: %+v", out)
	}
	if !idle(cs) {
		t.Fatal("a lone reserve left its combiner behind")
	}

	// The only reserve queued behind a running batch gives up: the
	// combiner stays for the batch, and goes with it.
	end := cs.hold(fakePool, 0)
	b := startCall(cs, fakePool, "b", false)
	eventually(t, "b to queue", func() bool { return cs.queued(fakePool) == 1 })
	cs.mu.Lock()
	first := cs.byPool[fakePool]
	cs.mu.Unlock()
	b.cancel()
	if out := b.answer(t); !isCancelled(out) {
		t.Fatalf("b: %+v", out)
	}
	if idle(cs) {
		t.Fatal("the combiner was removed while its batch ran")
	}
	end()
	if !idle(cs) {
		t.Fatal("the combiner outlived its last batch")
	}
	if out := cs.submit(context.Background(), fakePool, fakeReq("c", 1), false); out.res == nil {
		t.Fatalf("c: %+v", out)
	}
	if !first.dead {
		t.Fatal("the removed combiner is not marked dead")
	}

	// The batch ends first, then the reserve behind it gives up as it is
	// handed leadership: passOn removes the combiner.
	end = cs.hold(fakePool, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	cb, d, _, _ := cs.enqueue(ctx, fakePool, fakeReq("d", 1), false)
	end()
	if idle(cs) {
		t.Fatal("the combiner was removed while a reserve was handed leadership")
	}
	for {
		if out := cs.await(ctx, cb, d, false); isCancelled(out) {
			break
		} else if out.res == nil {
			t.Fatalf("d: %+v", out)
		}
		// d led after all (its wait took the hand-off over its context);
		// try again until the give-back path runs.
		end = cs.hold(fakePool, 0)
		cb, d, _, _ = cs.enqueue(ctx, fakePool, fakeReq("d", 1), false)
		end()
	}
	if !idle(cs) {
		t.Fatal("the combiner outlived a reserve that passed leadership on to nobody")
	}
}

// TestCombinerStress: reserves on a few pools from many goroutines, with
// random cancellation, retries at the head, stalls, failed batches, short
// reserves, broken and unopenable sessions. Each reserve's answer must agree
// with what the fake did: units only to those answered with a reservation
// (or told the outcome is unknown), none to those answered cancelled or
// busy, no reserve in two batches, every reserve answered, every session
// closed, every combiner removed at the end.
func TestCombinerStress(t *testing.T) {
	f := newFakeRunner(t)
	errBatch := errors.New("batch failed")
	errOpen := errors.New("no connection")
	f.batch = func(b []*pending, s *session) {
		if rand.N(4) == 0 {
			time.Sleep(time.Duration(rand.N(300)) * time.Microsecond)
		}
		fail := rand.N(20) == 0
		for _, p := range b {
			switch {
			case fail:
				p.out = outcome{err: errBatch}
			case rand.N(10) == 0:
				p.out = outcome{short: []int{0}}
			default:
				p.out = outcome{res: &reservation{}}
			}
		}
		if s != nil && rand.N(20) == 0 {
			s.broken = true
		}
	}
	f.openErr = func() error {
		if rand.N(30) == 0 {
			return errOpen
		}
		return nil
	}
	cs := newFakeCombiners(f, Config{BatchesPerPool: 2, SecondBatchMin: 3, MaxBatch: 4, MaxWaitersPerPool: 8}, 200*time.Microsecond)
	pools := []PoolKey{{1, 1, 1}, {1, 1, 2}, {1, 2, 1}}

	const workers, rounds = 24, 150
	type answer struct {
		req *reserveReq
		out outcome
	}
	answers := make(chan answer, workers*rounds)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				req := fakeReq(fmt.Sprintf("w%d-%d", w, i), int64(1+rand.N(3)))
				pool := pools[rand.N(len(pools))]
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if rand.N(3) == 0 {
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rand.N(400))*time.Microsecond)
				}
				answers <- answer{req, cs.submit(ctx, pool, req, rand.N(5) == 0)}
				cancel()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("reserves were never answered: a leadership or a batch's answer was lost")
	}
	close(answers)

	settle(t, cs, f)
	f.mu.Lock()
	defer f.mu.Unlock()
	var kinds [6]int
	var granted, unknownUnits int64
	for a := range answers {
		in, units := f.in[a.req], f.units[a.req]
		delete(f.in, a.req)
		delete(f.units, a.req)
		var busy *Error
		switch out := a.out; {
		case out.res != nil:
			kinds[0]++
			granted += units
			if in != 1 || units != a.req.lines[0].qty {
				t.Errorf("%s answered reserved: in %d batches, %d units handed", a.req.key, in, units)
			}
		case isUnknown(out):
			kinds[1]++
			unknownUnits += units // kept under its key, for the retry to find
			if in > 1 {
				t.Errorf("%s answered unknown: in %d batches", a.req.key, in)
			}
		case errors.As(out.err, &busy) && busy.Code == CodeBusy:
			kinds[2]++
			if in != 0 {
				t.Errorf("%s answered busy but ran in a batch", a.req.key)
			}
		case errors.Is(out.err, context.DeadlineExceeded):
			kinds[3]++
			if in != 0 {
				t.Errorf("%s answered cancelled but ran in a batch: a batch took it as it gave up", a.req.key)
			}
		case errors.Is(out.err, errBatch) || errors.Is(out.err, errOpen):
			kinds[4]++
			if in > 1 || units != 0 {
				t.Errorf("%s answered failed: in %d batches, %d units", a.req.key, in, units)
			}
		case len(out.short) > 0:
			kinds[5]++
			if in != 1 || units != 0 {
				t.Errorf("%s answered short: in %d batches, %d units", a.req.key, in, units)
			}
		default:
			t.Errorf("%s: unexpected outcome %+v", a.req.key, out)
		}
	}
	if len(f.in) != 0 {
		t.Errorf("%d reserves ran in a batch but were never answered", len(f.in))
	}
	if granted+unknownUnits != f.handed {
		t.Errorf("units: %d granted + %d under unknown outcomes, %d handed out", granted, unknownUnits, f.handed)
	}
	t.Logf("%d batches; reserved %d, unknown %d, busy %d, cancelled %d, failed %d, short %d; %d stall escapes; %d sessions",
		len(f.batches), kinds[0], kinds[1], kinds[2], kinds[3], kinds[4], kinds[5], cs.m.stallEscapes.Load(), f.opened)
}

// TestCombinerTakenThenCancelled: a reserve that gives up after a batch
// took it does not know whether that batch committed its units, and says
// so (commit unknown), never "cancelled"; one that gives up while still
// queued is plainly cancelled.
func TestCombinerTakenThenCancelled(t *testing.T) {
	f := newFakeRunner(t)
	g := newGate()
	f.batch = g.batch
	cs := newFakeCombiners(f, Config{BatchesPerPool: 1}, 0)

	a := startCall(cs, fakePool, "a", false)
	g.waitStarted(t)
	b := startCall(cs, fakePool, "b", false)
	eventually(t, "b to queue", func() bool { return cs.queued(fakePool) == 1 })
	c := startCall(cs, fakePool, "c", false)
	eventually(t, "c to queue", func() bool { return cs.queued(fakePool) == 2 })
	g.release <- struct{}{} // a's batch ends; b leads the next, with c in it
	a.answer(t)
	if keys := g.waitStarted(t); !slices.Equal(keys, []string{"b", "c"}) {
		t.Fatalf("second batch %v, want [b c]", keys)
	}
	d := startCall(cs, fakePool, "d", false)
	eventually(t, "d to queue", func() bool { return cs.queued(fakePool) == 1 })
	c.cancel() // taken: its batch is running
	d.cancel() // still queued
	if out := c.answer(t); !isUnknown(out) {
		t.Errorf("c gave up inside a running batch: %+v, want commit unknown", out)
	}
	if out := d.answer(t); !isCancelled(out) {
		t.Errorf("d gave up while queued: %+v, want cancelled", out)
	}
	g.release <- struct{}{}
	if out := b.answer(t); out.res == nil {
		t.Errorf("b: %+v", out)
	}
	eventually(t, "the combiner to go", func() bool { return idle(cs) })
}
