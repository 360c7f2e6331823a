// Package lifecycle owns the one Start/Close protocol of holdfast's
// background loops (the engine's sweeper and reconciler, the refiller, the
// legacy router's loops, the admin sampler): Start runs them once under a
// context that Close cancels; Close is idempotent and waits for them. It
// also holds the two waits such loops are made of, Every and Sleep. It
// knows nothing of what the loops do and imports nothing of holdfast.
package lifecycle

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Start's refusals. Callers usually answer with an error of their own.
var (
	ErrStarted = errors.New("lifecycle: already started")
	ErrClosed  = errors.New("lifecycle: closed")
)

// Loops is the goroutines a component runs between Start and Close. The
// zero value is ready to use; a Loops must not be copied after first use.
// Every method may be called from any goroutine.
type Loops struct {
	closed atomic.Bool                        // set once, by Close
	cancel atomic.Pointer[context.CancelFunc] // the loops' context's, once started

	mu sync.Mutex // held by Start (its first included), and by Close after it cancels
	wg sync.WaitGroup
}

// Start runs each of loops on its own goroutine with a context derived
// from ctx, which Close cancels. It may succeed once: it fails with
// ErrClosed after Close, else with ErrStarted after an earlier Start.
func (l *Loops) Start(ctx context.Context, loops ...func(context.Context)) error {
	return l.StartAfter(ctx, nil, loops...)
}

// StartAfter is Start that first calls first (when not nil) with the
// loops' context, before any loop starts. first runs under the lock Close
// takes: a Close meanwhile cancels that context, waits for first, and sees
// what it stored.
func (l *Loops) StartAfter(ctx context.Context, first func(context.Context), loops ...func(context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed.Load() {
		return ErrClosed
	}
	if l.cancel.Load() != nil {
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	l.cancel.Store(&cancel)
	if l.closed.Load() {
		cancel() // a Close that came after the check found no cancel yet
	}
	if first != nil {
		first(ctx)
	}
	for _, f := range loops {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			f(ctx)
		}()
	}
	return nil
}

// Close cancels the loops' context and waits for them to return (and for
// a Start in progress, whose context it cancels first). It reports whether
// this call closed l; a later call returns false at once. Close before
// Start is allowed: Start then fails.
func (l *Loops) Close() bool {
	if !l.closed.CompareAndSwap(false, true) {
		return false
	}
	if c := l.cancel.Load(); c != nil {
		(*c)()
	}
	l.mu.Lock() // a Start in progress has seen closed, or its cancel was loaded above
	l.mu.Unlock()
	l.wg.Wait()
	return true
}

// Closed reports whether Close has been called. It takes no lock, for
// checks on a hot path.
func (l *Loops) Closed() bool { return l.closed.Load() }

// Every calls f now and then every d until ctx ends. A call of f in
// progress is not interrupted; f gets ctx to stop early.
func Every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sleep waits for d, or until ctx ends: then it returns ctx.Err().
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Duties says whether this process should run a named fleet duty now (a
// background loop that one instance of the fleet runs at a time: see
// package fleet). A loop asks before each cycle and skips the cycle when
// told no. The nil Duties runs every duty, as a process alone does.
type Duties func(duty string) bool

// Runs reports whether duty should run now.
func (d Duties) Runs(duty string) bool { return d == nil || d(duty) }

// The fleet duties.
const (
	DutySweeper      = "sweeper"       // the engine's sweep and prune of expired reservations
	DutyReconciler   = "reconciler"    // the engine's invariant check
	DutyPoolScan     = "pool-scan"     // the refiller's walk over every ledger row
	DutyRedisSweeper = "redis-sweeper" // the legacy Redis counter's expiry
	DutyRedisDrift   = "redis-drift"   // the Redis counter against the engine
)
