package waitq

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// tokenPool is the smallest owner of the hand-off protocol: n tokens, a
// free list guarded by mu, and a queue for borrowers when none is free (the
// shape of the pool's and the tag gates' use).
type tokenPool struct {
	q        *Queue[struct{}, int]
	holder   []atomic.Int32 // 1 while a borrower holds token i
	gaveBack atomic.Int64

	mu   sync.Mutex // guards following
	free []int
}

func newTokenPool(n, cap int) *tokenPool {
	p := &tokenPool{holder: make([]atomic.Int32, n)}
	p.q = New[struct{}, int](func(tok int) {
		p.gaveBack.Add(1)
		p.put(tok)
	})
	p.q.SetCap(cap)
	for i := range n {
		p.free = append(p.free, i)
	}
	return p
}

func (p *tokenPool) get(ctx context.Context, w *Waiter[struct{}, int]) (int, error) {
	p.mu.Lock()
	if n := len(p.free); n > 0 {
		tok := p.free[n-1]
		p.free = p.free[:n-1]
		p.mu.Unlock()
		return tok, nil
	}
	err := p.q.Enqueue(w)
	p.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return p.q.Wait(ctx, w)
}

func (p *tokenPool) put(tok int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.q.HandOff(tok) {
		p.free = append(p.free, tok)
	}
}

// Every race of timeout against hand-off, under load: a token is never
// lost (all are free at the end) and never held twice.
func TestStressTokens(t *testing.T) {
	const tokens, workers, rounds = 3, 24, 400
	p := newTokenPool(tokens, workers-tokens-4)
	var wg sync.WaitGroup
	var got, timeouts, full atomic.Int64
	for range workers {
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.N(60))*time.Microsecond)
				tok, err := p.get(ctx, &Waiter[struct{}, int]{})
				cancel()
				switch err {
				case nil:
				case ErrFull:
					full.Add(1)
					continue
				default:
					timeouts.Add(1)
					continue
				}
				if !p.holder[tok].CompareAndSwap(0, 1) {
					t.Errorf("token %d held twice", tok)
					return
				}
				got.Add(1)
				if rand.N(4) == 0 {
					time.Sleep(time.Duration(rand.N(20)) * time.Microsecond)
				}
				p.holder[tok].Store(0)
				p.put(tok)
			}
		})
	}
	wg.Wait()
	if len(p.free) != tokens || p.q.Len() != 0 {
		t.Fatalf("%d of %d tokens free, %d queued: a hand-off was lost", len(p.free), tokens, p.q.Len())
	}
	t.Logf("%d borrows, %d timeouts, %d refused at the cap, %d given back after a raced timeout", got.Load(), timeouts.Load(), full.Load(), p.gaveBack.Load())
}

// places is the pipelines' shape: a wake-up carries nothing, a woken waiter
// tries to take a place and re-queues (keeping its turn) when beaten to it,
// or goes elsewhere, passing the wake-up on. With every wake-up passed on,
// no waiter is left asleep while a place is free: each one finishes long
// before its (generous) deadline.
type places struct {
	q *Queue[struct{}, struct{}]

	mu   sync.Mutex // guards following
	free int
}

func (pl *places) take() bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.free > 0 {
		pl.free--
		return true
	}
	return false
}

func (pl *places) leave() {
	pl.mu.Lock()
	pl.free++
	pl.mu.Unlock()
	pl.q.HandOff(struct{}{})
}

func TestStressWakeUps(t *testing.T) {
	pl := &places{free: 2}
	pl.q = New[struct{}, struct{}](func(struct{}) { pl.q.HandOff(struct{}{}) })
	const workers, rounds = 16, 150
	var wg sync.WaitGroup
	var elsewhere, requeued atomic.Int64
	for range workers {
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				w := &Waiter[struct{}, struct{}]{}
				ok := pl.take()
				for !ok {
					if err := pl.q.Enqueue(w); err != nil {
						t.Error(err)
						cancel()
						return
					}
					// A place may have freed between the try and the enqueue.
					if ok = pl.take(); ok {
						if _, handed := pl.q.Leave(w); handed {
							pl.q.GiveBack(struct{}{}) // ours came another way
						}
						break
					}
					if _, err := pl.q.Wait(ctx, w); err != nil {
						t.Errorf("a waiter slept through every free place: %v", err)
						cancel()
						return
					}
					if ok = pl.take(); !ok && rand.N(8) == 0 {
						// Woken, but off to do something else: pass it on.
						elsewhere.Add(1)
						pl.q.GiveBack(struct{}{})
						break
					}
					if !ok {
						requeued.Add(1)
					}
				}
				cancel()
				if ok {
					time.Sleep(time.Duration(rand.N(5)) * time.Microsecond)
					pl.leave()
				}
			}
		})
	}
	wg.Wait()
	if pl.free != 2 {
		t.Fatalf("%d places free at the end, want 2", pl.free)
	}
	t.Logf("%d re-queued after a wake-up that found nothing, %d wake-ups passed on", requeued.Load(), elsewhere.Load())
}

// Close wakes every waiter, however many are parked and whatever they do.
func TestStressClose(t *testing.T) {
	for range 20 {
		p := newTokenPool(1, 0)
		tok, _ := p.get(context.Background(), &Waiter[struct{}, int]{})
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				_, err := p.get(context.Background(), &Waiter[struct{}, int]{})
				if err == nil {
					t.Error("got a token nobody returned")
				}
			})
		}
		for p.q.Len() < 8 {
			time.Sleep(10 * time.Microsecond)
		}
		p.q.Close()
		wg.Wait()
		p.put(tok)
		if len(p.free) != 1 {
			t.Fatal("the token returned after Close is lost")
		}
	}
}

// A batch hand-off races the waiters' timeouts: every value handed to a
// waiter is either received by it or given back, once; none is lost, none
// is both. It runs again until at least one hand-off did race a timeout,
// so the give-back path is exercised, not merely allowed.
func TestStressHandOffEach(t *testing.T) {
	var back atomic.Int64
	for run := 1; back.Load() == 0; run++ {
		if run > 20 {
			t.Fatal("no hand-off raced a timeout in 20 runs: the give-back path went untested")
		}
		stressHandOffEach(t, &back)
	}
}

func stressHandOffEach(t *testing.T, back *atomic.Int64) {
	back.Store(0)
	qu := New[int, int](func(int) { back.Add(1) })
	const workers, rounds = 16, 300
	var received atomic.Int64
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			for range rounds {
				w := &Waiter[int, int]{Key: i}
				if err := qu.Enqueue(w); err != nil {
					t.Error(err)
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rand.N(80))*time.Microsecond)
				if v, err := qu.Wait(ctx, w); err == nil {
					if v != i {
						t.Errorf("waiter %d got %d", i, v)
					}
					received.Add(1)
				}
				cancel()
			}
		})
	}
	var handed int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		k := rand.N(4) + 1
		handed += int64(qu.HandOffEach(func(key, _ int) (int, bool) {
			if k == 0 || rand.N(3) == 0 {
				return 0, false
			}
			k--
			return key, true
		}))
		runtime.Gosched()
	}
	if got := received.Load() + back.Load(); got != handed || qu.Len() != 0 {
		t.Fatalf("handed %d, received %d + given back %d; %d still queued", handed, received.Load(), back.Load(), qu.Len())
	}
	t.Logf("handed %d: %d given back after a raced timeout", handed, back.Load())
}
