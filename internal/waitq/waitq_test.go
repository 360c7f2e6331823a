package waitq

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/testkit"
)

type q = Queue[string, int]
type w = Waiter[string, int]

func newWaiters(t *testing.T, qu *q, keys ...string) []*w {
	t.Helper()
	ws := make([]*w, len(keys))
	for i, k := range keys {
		ws[i] = &w{Key: k}
		if err := qu.Enqueue(ws[i]); err != nil {
			t.Fatalf("Enqueue(%s): %v", k, err)
		}
	}
	return ws
}

// order hands one value to each queued waiter and returns their keys in the
// order they were served.
func order(t *testing.T, qu *q, ws []*w) []string {
	t.Helper()
	var got []string
	for qu.Len() > 0 {
		if !qu.HandOff(1) {
			t.Fatal("HandOff found nobody while Len > 0")
		}
		for _, x := range ws {
			if x.state == stateHanded {
				if _, err := qu.Wait(context.Background(), x); err != nil {
					t.Fatal(err)
				}
				got = append(got, x.Key)
			}
		}
	}
	return got
}

func TestOrder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		requeue []string // woken (served) one by one, then queued again, in this order
		later   []string // newcomers after the re-queues
		want    []string
	}{
		{"fifo", []string{"a", "b", "c"}, nil, nil, []string{"a", "b", "c"}},
		{"head re-queues to the head", []string{"a", "b", "c"}, []string{"a"}, []string{"d"}, []string{"a", "b", "c", "d"}},
		{"two re-queue in their order", []string{"a", "b", "c"}, []string{"a", "b"}, []string{"d"}, []string{"a", "b", "c", "d"}},
		{"the only waiter re-queues", []string{"a"}, []string{"a"}, []string{"b"}, []string{"a", "b"}},
		{"newcomers while out go behind", []string{"a", "b"}, []string{"a"}, []string{"c", "d"}, []string{"a", "b", "c", "d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var qu q
			ws := newWaiters(t, &qu, tc.keys...)
			byKey := map[string]*w{}
			for _, x := range ws {
				byKey[x.Key] = x
			}
			// Wake the re-queuers (they are at the head), let them find nothing.
			for range tc.requeue {
				if !qu.HandOff(0) {
					t.Fatal("HandOff found nobody")
				}
			}
			for _, k := range tc.requeue {
				x := byKey[k]
				if _, err := qu.Wait(context.Background(), x); err != nil {
					t.Fatal(err)
				}
			}
			// Newcomers arrive while they are out, then the re-queuers return.
			for _, k := range tc.later {
				x := &w{Key: k}
				if err := qu.Enqueue(x); err != nil {
					t.Fatal(err)
				}
				ws = append(ws, x)
			}
			for _, k := range slices.Backward(tc.requeue) {
				if err := qu.Enqueue(byKey[k]); err != nil {
					t.Fatal(err)
				}
			}
			if got := order(t, &qu, ws); !slices.Equal(got, tc.want) {
				t.Fatalf("served %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCap(t *testing.T) {
	for _, tc := range []struct {
		cap, enqueue, wantQueued int
	}{
		{0, 5, 5},  // no cap
		{-1, 5, 5}, // no cap
		{2, 5, 2},
		{1, 1, 1},
	} {
		var qu q
		qu.SetCap(tc.cap)
		n := 0
		for i := range tc.enqueue {
			err := qu.Enqueue(&w{})
			switch {
			case err == nil:
				n++
			case errors.Is(err, ErrFull) && i >= tc.wantQueued:
			default:
				t.Fatalf("cap %d: Enqueue #%d: %v", tc.cap, i, err)
			}
		}
		if n != tc.wantQueued || qu.Len() != tc.wantQueued {
			t.Fatalf("cap %d: queued %d (Len %d), want %d", tc.cap, n, qu.Len(), tc.wantQueued)
		}
	}
}

// A waiter that was woken and re-queues takes its place back even when
// newcomers filled the queue to its cap meanwhile.
func TestCapSparesRequeue(t *testing.T) {
	var qu q
	qu.SetCap(2)
	ws := newWaiters(t, &qu, "a", "b")
	qu.HandOff(0)
	if _, err := qu.Wait(context.Background(), ws[0]); err != nil {
		t.Fatal(err)
	}
	c := &w{Key: "c"}
	if err := qu.Enqueue(c); err != nil {
		t.Fatal(err)
	}
	if err := qu.Enqueue(&w{Key: "d"}); !errors.Is(err, ErrFull) {
		t.Fatalf("newcomer at the cap: %v, want ErrFull", err)
	}
	if err := qu.Enqueue(ws[0]); err != nil {
		t.Fatalf("re-queue at the cap: %v", err)
	}
	if got := order(t, &qu, append(ws, c)); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("served %v", got)
	}
}

func TestHandOffFuncSkips(t *testing.T) {
	var qu q
	ws := newWaiters(t, &qu, "a", "b", "a", "c")
	pickB := func(k string, _ int) (int, bool) { return 7, k == "b" }
	if !qu.HandOffFunc(pickB) {
		t.Fatal("b not picked")
	}
	if v, err := qu.Wait(context.Background(), ws[1]); v != 7 || err != nil {
		t.Fatalf("b got %d, %v", v, err)
	}
	if ws[0].skipped != 1 || ws[2].skipped != 0 || ws[3].skipped != 0 {
		t.Fatalf("skips %d %d %d, want 1 0 0 (only those ahead of the one served)", ws[0].skipped, ws[2].skipped, ws[3].skipped)
	}
	if qu.HandOffFunc(pickB) {
		t.Fatal("picked a b that is not there")
	}
	if ws[0].skipped != 1 {
		t.Fatal("a pass that served nobody counted a skip")
	}
	var seen []int
	qu.HandOffFunc(func(k string, skipped int) (int, bool) {
		seen = append(seen, skipped)
		return 0, k == "c"
	})
	if !slices.Equal(seen, []int{1, 0, 0}) {
		t.Fatalf("pick saw skips %v", seen)
	}
	if ws[0].skipped != 2 || ws[2].skipped != 1 {
		t.Fatalf("skips %d %d, want 2 1", ws[0].skipped, ws[2].skipped)
	}
	if _, handed := qu.Leave(ws[3]); !handed {
		t.Fatal("c was picked but has no value")
	}
	_, _ = qu.Leave(ws[0])
	ws[0].Reset()
	if ws[0].skipped != 0 || ws[0].seq != 0 {
		t.Fatal("Reset kept the old wait's place")
	}
}

func TestLeave(t *testing.T) {
	var qu q
	ws := newWaiters(t, &qu, "a", "b")
	if _, handed := qu.Leave(ws[0]); handed {
		t.Fatal("queued waiter left with a value")
	}
	if qu.Len() != 1 {
		t.Fatalf("Len %d after Leave", qu.Len())
	}
	qu.HandOff(5)
	if v, handed := qu.Leave(ws[1]); !handed || v != 5 {
		t.Fatalf("Leave after a hand-off: %d, %v", v, handed)
	}
	if _, handed := qu.Leave(ws[1]); handed {
		t.Fatal("a waiter out of the queue left with a value")
	}
	if qu.HandOff(1) {
		t.Fatal("hand-off to an empty queue")
	}
}

func TestWaitTimeout(t *testing.T) {
	var qu q
	ws := newWaiters(t, &qu, "a")
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := qu.Wait(ctx, ws[0]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v", err)
	}
	if qu.Len() != 0 || qu.HandOff(1) {
		t.Fatal("a waiter that timed out is still queued")
	}
	// Its own cause comes back.
	cause := errors.New("gone")
	cctx, ccancel := context.WithCancelCause(context.Background())
	ccancel(cause)
	_ = qu.Enqueue(ws[0])
	if _, err := qu.Wait(cctx, ws[0]); err != cause {
		t.Fatalf("Wait: %v, want the context's cause", err)
	}
}

// The hand-off lands while the waiter's context has already ended: the
// waiter must not keep the value nor drop it, but give it back.
func TestWaitCancelRacesHandOff(t *testing.T) {
	var back []int
	qu := New[string, int](func(v int) { back = append(back, v) })
	gaveBack := 0
	for i := 1; i <= 400; i++ {
		x := &w{}
		if err := qu.Enqueue(x); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		back = back[:0]
		if !qu.HandOff(i) {
			t.Fatal("HandOff found nobody")
		}
		// Both the value and ctx.Done are ready: Wait may take either.
		v, err := qu.Wait(ctx, x)
		switch {
		case err == nil && v == i && len(back) == 0:
		case errors.Is(err, context.Canceled) && slices.Equal(back, []int{i}):
			gaveBack++
		default:
			t.Fatalf("round %d: Wait = %d, %v; given back %v: the value was lost or doubled", i, v, err, back)
		}
		if qu.Len() != 0 {
			t.Fatal("waiter still queued")
		}
	}
	if gaveBack == 0 {
		t.Fatal("the give-back path never ran")
	}
	t.Logf("given back in %d of 400 rounds", gaveBack)
}

// Same race with the waiter parked in Wait when its context ends and the
// hand-off follows at once.
func TestParkedCancelRacesHandOff(t *testing.T) {
	var qu *Queue[struct{}, int]
	back := make(chan int, 1)
	qu = New[struct{}, int](func(v int) { back <- v })
	for i := 1; i <= 200; i++ {
		x := &Waiter[struct{}, int]{}
		_ = qu.Enqueue(x)
		ctx, cancel := context.WithCancel(context.Background())
		type res struct {
			v   int
			err error
		}
		done := make(chan res)
		go func() {
			v, err := qu.Wait(ctx, x)
			done <- res{v, err}
		}()
		time.Sleep(10 * time.Microsecond) // usually parked by now; either way must hold
		cancel()
		handed := qu.HandOff(i)
		r := <-done
		switch {
		case r.err == nil:
			if !handed || r.v != i {
				t.Fatalf("round %d: got %d without a hand-off", i, r.v)
			}
		case !handed: // removed itself first: the value stayed with us
		default:
			select {
			case v := <-back:
				if v != i {
					t.Fatalf("round %d: given back %d", i, v)
				}
			default:
				t.Fatalf("round %d: handed over as the waiter gave up, and lost", i)
			}
		}
		if len(back) != 0 {
			t.Fatalf("round %d: value given back and kept", i)
		}
	}
}

// A waiter that leaves after a wake-up it will not use passes it on, so
// the next waiter is woken instead of stranded.
func TestWakeUpPassedOn(t *testing.T) {
	var qu *Queue[string, struct{}]
	qu = New[string, struct{}](func(struct{}) { qu.HandOff(struct{}{}) })
	a, b := &Waiter[string, struct{}]{Key: "a"}, &Waiter[string, struct{}]{Key: "b"}
	_ = qu.Enqueue(a)
	_ = qu.Enqueue(b)
	qu.HandOff(struct{}{}) // to a
	if _, handed := qu.Leave(a); !handed {
		t.Fatal("a was not handed the wake-up")
	}
	qu.GiveBack(struct{}{}) // a goes elsewhere
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := qu.Wait(ctx, b); err != nil {
		t.Fatalf("b was not woken: %v", err)
	}

	// And when a gives up (its context ends) as the wake-up reaches it.
	_ = qu.Enqueue(a)
	_ = qu.Enqueue(b)
	actx, acancel := context.WithCancel(context.Background())
	acancel()
	qu.HandOff(struct{}{}) // to a, whose ctx has ended
	if _, err := qu.Wait(actx, a); err == nil {
		// a took it after all; it passes it on by hand.
		qu.GiveBack(struct{}{})
	}
	if _, err := qu.Wait(ctx, b); err != nil {
		t.Fatalf("b was not woken after a gave up: %v", err)
	}
}

func TestClose(t *testing.T) {
	var qu Queue[struct{}, int]
	const n = 20
	errs := make(chan error, n)
	ws := make([]*Waiter[struct{}, int], n)
	for i := range ws {
		ws[i] = &Waiter[struct{}, int]{}
		_ = qu.Enqueue(ws[i])
	}
	qu.HandOff(42) // ws[0] holds a value: Close leaves it there
	for i := 1; i < n; i++ {
		go func() {
			_, err := qu.Wait(context.Background(), ws[i])
			errs <- err
		}()
	}
	qu.Close()
	qu.Close() // idempotent
	for range n - 1 {
		select {
		case err := <-errs:
			if !errors.Is(err, ErrClosed) {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a waiter was not woken by Close")
		}
	}
	if v, err := qu.Wait(context.Background(), ws[0]); v != 42 || err != nil {
		t.Fatalf("the value handed before Close: %d, %v", v, err)
	}
	if qu.Len() != 0 {
		t.Fatalf("Len %d after Close", qu.Len())
	}
	if err := qu.Enqueue(&Waiter[struct{}, int]{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Enqueue after Close: %v", err)
	}
	// A waiter queued when Close came, whose Leave runs after it.
	var q2 Queue[struct{}, int]
	x := &Waiter[struct{}, int]{}
	_ = q2.Enqueue(x)
	q2.Close()
	if _, handed := q2.Leave(x); handed {
		t.Fatal("Leave after Close reported a value")
	}
	// Wait with an ended context after Close still says closed.
	y := &Waiter[struct{}, int]{}
	var q3 Queue[struct{}, int]
	_ = q3.Enqueue(y)
	q3.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := q3.Wait(ctx, y); !errors.Is(err, ErrClosed) {
		t.Fatalf("Wait after Close: %v", err)
	}
}

func TestHandOffAll(t *testing.T) {
	var qu q
	ws := newWaiters(t, &qu, "a", "b", "c")
	if n := qu.HandOffAll(3); n != 3 {
		t.Fatalf("HandOffAll = %d", n)
	}
	for _, x := range ws {
		if v, err := qu.Wait(context.Background(), x); v != 3 || err != nil {
			t.Fatalf("%s: %d, %v", x.Key, v, err)
		}
	}
	if qu.HandOffAll(3) != 0 {
		t.Fatal("HandOffAll on an empty queue")
	}
}

func TestMisuse(t *testing.T) {
	var qu q
	x := &w{}
	_ = qu.Enqueue(x)
	testkit.MustPanic(t, "double Enqueue", func() { _ = qu.Enqueue(x) })
	qu.HandOff(1)
	testkit.MustPanic(t, "Enqueue with a value pending", func() { _ = qu.Enqueue(x) })
	testkit.MustPanic(t, "Reset with a value pending", func() { x.Reset() })
}

// Rank orders waiters before arrival does; among equal ranks a re-queued
// waiter keeps its place.
func TestRankOrder(t *testing.T) {
	qu := New[string, int](nil)
	enqueue := func(key string, rank int64) *w {
		x := &w{Key: key, Rank: rank}
		if err := qu.Enqueue(x); err != nil {
			t.Fatal(err)
		}
		return x
	}
	ws := []*w{
		enqueue("bg1", 100), enqueue("n1", 50), enqueue("bg2", 100),
		enqueue("c1", 0), enqueue("n2", 50), enqueue("c2", 0),
	}
	// bg1 is woken, finds nothing and queues again: still ahead of bg2.
	if !qu.HandOffFunc(func(k string, _ int) (int, bool) { return 1, k == "bg1" }) {
		t.Fatal("bg1 not found")
	}
	if _, err := qu.Wait(context.Background(), ws[0]); err != nil {
		t.Fatal(err)
	}
	if err := qu.Enqueue(ws[0]); err != nil {
		t.Fatal(err)
	}
	ws = append(ws, enqueue("c3", 0))
	got := order(t, qu, ws)
	want := []string{"c1", "c2", "c3", "n1", "n2", "bg1", "bg2"}
	if !slices.Equal(got, want) {
		t.Fatalf("served %v, want %v", got, want)
	}
}

// HandOffEach hands a value to each waiter pick accepts, in queue order,
// leaves the others queued in their order, and counts a skip for those
// passed over ahead of one that was handed.
func TestHandOffEach(t *testing.T) {
	var qu q
	ws := newWaiters(t, &qu, "a1", "b", "a2", "c", "a3")
	var offered []string
	next := 10
	n := qu.HandOffEach(func(k string, _ int) (int, bool) {
		offered = append(offered, k)
		if k[0] != 'a' || next == 12 { // at most two
			return 0, false
		}
		next++
		return next - 1, true
	})
	if n != 2 {
		t.Fatalf("HandOffEach = %d, want 2", n)
	}
	if !slices.Equal(offered, []string{"a1", "b", "a2", "c", "a3"}) {
		t.Fatalf("pick offered %v, want every waiter in order", offered)
	}
	for i, want := range map[int]int{0: 10, 2: 11} {
		if v, err := qu.Wait(context.Background(), ws[i]); v != want || err != nil {
			t.Fatalf("%s got %d, %v; want %d", ws[i].Key, v, err, want)
		}
	}
	if ws[1].skipped != 1 || ws[3].skipped != 0 || ws[4].skipped != 0 {
		t.Fatalf("skips b %d c %d a3 %d, want 1 0 0 (only those ahead of one handed)", ws[1].skipped, ws[3].skipped, ws[4].skipped)
	}
	if qu.Len() != 3 {
		t.Fatalf("Len %d, want 3", qu.Len())
	}
	if got := order(t, &qu, ws); !slices.Equal(got, []string{"b", "c", "a3"}) {
		t.Fatalf("left queued %v, want b c a3 in their order", got)
	}
	if qu.HandOffEach(func(string, int) (int, bool) { return 0, true }) != 0 {
		t.Fatal("HandOffEach on an empty queue")
	}
}
