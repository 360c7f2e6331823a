package proxy

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// PoolLimits are the pool settings that a reload may change.
type PoolLimits struct {
	Min            int
	Max            int
	MaxIdle        int
	IdleTimeout    time.Duration
	MaxLifetime    time.Duration
	LifetimeJitter float64
	AcquireTimeout time.Duration
	MaxWaiters     int
	PingAfterIdle  time.Duration
}

// Pool errors. Sessions turn them into MySQL errors at the edge.
var (
	ErrPoolClosed    = errors.New("proxy: pool closed")
	ErrPoolWaiterCap = errors.New("proxy: too many borrowers waiting for a backend connection")
	ErrPoolTimeout   = errors.New("proxy: timed out waiting for a backend connection")
)

// Pool is holdfast's one pool of backend connections. Every borrower (client
// sessions, the reservation engine, its refiller) acquires from it.
type Pool struct {
	settings BackendSettings
	log      *slog.Logger
	dial     func(ctx context.Context, v variant) (*backendConn, error)
	nextID   atomic.Uint64
	nwait    atomic.Int32 // waiters.Len(), readable without the lock

	// onFirstDial runs once, after the first successful dial, before the
	// connection is used (the server learns the backend's collations).
	onFirstDial func(*backendConn) error
	firstOnce   sync.Mutex
	firstDone   atomic.Bool
	// onFree, when set, runs (outside the lock) after a connection goes
	// back to the idle list, or a slot frees up with nobody queued for it:
	// pipelined statements waiting for a place try again.
	onFree func()

	wg   sync.WaitGroup
	stop chan struct{}

	mu        sync.Mutex // guards the fields below
	limits    PoolLimits
	idle      []*backendConn // most recently returned last
	open      int            // open connections, including those being dialed
	inUse     int
	waiters   list.List // of *waiter, oldest first
	closed    bool
	lastErr   error // last dial error, for error messages
	lastErrAt time.Time
	st        PoolStats
}

type waiter struct {
	variant variant
	ch      chan *backendConn // buffered(1): a connection handed over
}

// PoolStats is a snapshot of the pool's state and counters.
type PoolStats struct {
	Open, InUse, Idle, Waiting int
	Max                        int
	// Counters since start.
	Acquired        uint64
	Waited          uint64 // acquisitions that had to queue
	WaitTime        time.Duration
	Timeouts        uint64
	Rejected        uint64 // waiter cap reached
	Dials           uint64
	DialErrors      uint64
	ClosedLifetime  uint64
	ClosedIdle      uint64
	ClosedBroken    uint64
	ClosedUnhealthy uint64
}

// NewPool returns a pool; it opens nothing until Start.
func NewPool(s BackendSettings, l PoolLimits, log *slog.Logger) *Pool {
	p := &Pool{settings: s, limits: l, log: log, stop: make(chan struct{})}
	p.dial = func(ctx context.Context, v variant) (*backendConn, error) {
		return dialBackend(ctx, s, v)
	}
	return p
}

// Start opens the minimum number of connections (best effort: a backend
// that is down now is retried in the background) and starts maintenance.
func (p *Pool) Start() {
	p.wg.Add(1)
	go p.maintain()
}

// SetLimits applies new limits (on reload). Connections over a lower max are
// closed as they return.
func (p *Pool) SetLimits(l PoolLimits) {
	p.mu.Lock()
	p.limits = l
	p.mu.Unlock()
	p.kick()
}

// Limits returns the current limits.
func (p *Pool) Limits() PoolLimits {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.limits
}

// Stats returns a snapshot.
func (p *Pool) Stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.st
	s.Open, s.InUse, s.Idle, s.Waiting, s.Max = p.open, p.inUse, len(p.idle), p.waiters.Len(), p.limits.Max
	return s
}

// acquire lends a connection with the given CLIENT_FOUND_ROWS variant,
// waiting at most the acquire timeout (or ctx, whichever ends first).
func (p *Pool) acquire(ctx context.Context, v variant) (*backendConn, error) {
	// Fast path: an idle connection, without the timer a wait needs.
	if bc := p.takeIdle(v); bc != nil {
		if bc = p.check(bc); bc != nil {
			p.lent(time.Time{}, false)
			return bc, nil
		}
	}
	p.mu.Lock()
	timeout := p.limits.AcquireTimeout
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	waited := false
	backoff := 50 * time.Millisecond
	for {
		bc, w, dialNow, err := p.take(v)
		if err != nil {
			return nil, err
		}
		if bc != nil {
			if bc = p.check(bc); bc != nil {
				p.lent(start, waited)
				return bc, nil
			}
			continue
		}
		if dialNow {
			bc, err := p.dialOne(ctx, v)
			if err == nil {
				p.lent(start, waited)
				return bc, nil
			}
			if ctx.Err() != nil {
				return nil, p.timeoutErr(ctx, start)
			}
			select {
			case <-time.After(backoff + rand.N(backoff)):
				backoff = min(2*backoff, time.Second)
				continue
			case <-ctx.Done():
				return nil, p.timeoutErr(ctx, start)
			}
		}
		waited = true
		select {
		case bc := <-w.ch:
			if bc == nil { // woken to retry (capacity freed)
				continue
			}
			if bc = p.check(bc); bc != nil {
				p.lent(start, waited)
				return bc, nil
			}
		case <-ctx.Done():
			p.mu.Lock()
			removed := p.removeWaiterLocked(w)
			p.mu.Unlock()
			if !removed {
				// A connection (or a wake-up) was handed over as we gave up.
				if bc := <-w.ch; bc != nil {
					p.release(bc, true)
				}
			}
			return nil, p.timeoutErr(ctx, start)
		}
	}
}

func (p *Pool) timeoutErr(ctx context.Context, start time.Time) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.st.Timeouts++
	waited := time.Since(start).Round(time.Millisecond)
	if p.lastErr != nil && time.Since(p.lastErrAt) < 10*time.Second {
		return fmt.Errorf("%w: %s, no connection after %v: %v", ErrBackendDown, p.settings.Address, waited, p.lastErr)
	}
	if errors.Is(context.Cause(ctx), context.Canceled) {
		return context.Canceled
	}
	return fmt.Errorf("%w after %v (pool max %d, %d in use, %d waiting)", ErrPoolTimeout, waited, p.limits.Max, p.inUse, p.waiters.Len())
}

func (p *Pool) lent(start time.Time, waited bool) {
	p.mu.Lock()
	p.st.Acquired++
	if waited {
		p.st.Waited++
		p.st.WaitTime += time.Since(start)
	}
	p.mu.Unlock()
}

// takeIdle takes the most recently returned idle connection of the variant,
// or returns nil.
func (p *Pool) takeIdle(v variant) *backendConn {
	bc, _ := p.takeIdleFit(v, nil)
	return bc
}

// takeIdleFit takes the most recently returned idle connection of the
// variant for which fit (nil: any) reports true. When it takes none, other
// reports whether an idle connection of the variant exists that did not
// fit. fit runs under the pool's lock, on connections nobody holds.
func (p *Pool) takeIdleFit(v variant, fit func(*backendConn) bool) (bc *backendConn, other bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, false
	}
	for i := len(p.idle) - 1; i >= 0; i-- {
		if bc := p.idle[i]; bc.variant == v {
			if fit != nil && !fit(bc) {
				other = true
				continue
			}
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			p.inUse++
			return bc, false
		}
	}
	return nil, other
}

// canDial reports whether an acquisition now would open a new connection
// rather than wait: the pool is under its max and nobody is queued.
func (p *Pool) canDial() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && p.open < p.limits.Max && p.waiters.Len() == 0
}

// take decides, under the lock, how an acquisition proceeds: with an idle
// connection, by dialing a new one, or by queueing as a waiter.
func (p *Pool) take(v variant) (*backendConn, *waiter, bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, nil, false, ErrPoolClosed
	}
	for i := len(p.idle) - 1; i >= 0; i-- {
		if bc := p.idle[i]; bc.variant == v {
			p.idle = append(p.idle[:i], p.idle[i+1:]...)
			p.inUse++
			return bc, nil, false, nil
		}
	}
	if p.open < p.limits.Max {
		p.open++
		p.inUse++
		return nil, nil, true, nil
	}
	if len(p.idle) > 0 {
		// Only the other variant is idle: replace one.
		bc := p.idle[0]
		p.idle = p.idle[1:]
		p.inUse++
		go bc.close()
		return nil, nil, true, nil
	}
	if p.waiters.Len() >= p.limits.MaxWaiters {
		p.st.Rejected++
		return nil, nil, false, fmt.Errorf("%w (%d waiting, pool max %d)", ErrPoolWaiterCap, p.waiters.Len(), p.limits.Max)
	}
	w := &waiter{variant: v, ch: make(chan *backendConn, 1)}
	p.waiters.PushBack(w)
	p.nwait.Store(int32(p.waiters.Len()))
	return nil, w, false, nil
}

// dropWaiterLocked takes e off the waiter queue, keeping nwait in step, and
// returns its waiter.
func (p *Pool) dropWaiterLocked(e *list.Element) *waiter {
	p.waiters.Remove(e)
	p.nwait.Store(int32(p.waiters.Len()))
	return e.Value.(*waiter)
}

func (p *Pool) removeWaiterLocked(w *waiter) bool {
	for e := p.waiters.Front(); e != nil; e = e.Next() {
		if e.Value.(*waiter) == w {
			p.dropWaiterLocked(e)
			return true
		}
	}
	return false
}

// check vets a connection taken from the idle list; a dead one is closed
// and nil returned (its slot is freed).
func (p *Pool) check(bc *backendConn) *backendConn {
	p.mu.Lock()
	pingAfter := p.limits.PingAfterIdle
	p.mu.Unlock()
	// Every lend checks the socket (one non-blocking read), so a backend
	// connection the server closed while it sat idle is never handed out.
	ok := bc.alive()
	if ok && pingAfter > 0 && !bc.idleFrom.IsZero() && time.Since(bc.idleFrom) > pingAfter {
		ok = bc.ping(time.Second) == nil
	}
	if ok {
		return bc
	}
	bc.close()
	p.mu.Lock()
	p.st.ClosedUnhealthy++
	p.open--
	p.inUse--
	p.mu.Unlock()
	p.kick()
	return nil
}

// dialOne dials a connection for a slot already counted in open/inUse.
func (p *Pool) dialOne(ctx context.Context, v variant) (*backendConn, error) {
	bc, err := p.dial(ctx, v)
	if err == nil && !p.firstDone.Load() {
		err = p.runFirstDial(bc)
		if err != nil {
			bc.close()
		}
	}
	p.mu.Lock()
	p.st.Dials++
	if err != nil {
		p.st.DialErrors++
		p.lastErr, p.lastErrAt = err, time.Now()
		p.open--
		p.inUse--
		p.mu.Unlock()
		p.log.Warn("backend dial failed", "addr", p.settings.Address, "err", err)
		p.kick()
		return nil, err
	}
	p.lastErr = nil
	lifetime := p.limits.MaxLifetime
	jitter := p.limits.LifetimeJitter
	p.mu.Unlock()
	bc.id = p.nextID.Add(1)
	bc.expires = bc.created.Add(lifetime - time.Duration(rand.Float64()*jitter*float64(lifetime)))
	return bc, nil
}

func (p *Pool) runFirstDial(bc *backendConn) error {
	p.firstOnce.Lock()
	defer p.firstOnce.Unlock()
	if p.firstDone.Load() {
		return nil
	}
	if p.onFirstDial != nil {
		if err := p.onFirstDial(bc); err != nil {
			return err
		}
	}
	p.firstDone.Store(true)
	return nil
}

// release returns a connection. reusable=false (an I/O error, unknown
// state) closes it. A returned connection goes to the oldest waiter first.
func (p *Pool) release(bc *backendConn, reusable bool) {
	now := time.Now()
	p.mu.Lock()
	if !reusable || p.closed || now.After(bc.expires) || p.open > p.limits.Max {
		switch {
		case !reusable:
			p.st.ClosedBroken++
		case now.After(bc.expires):
			p.st.ClosedLifetime++
		}
		p.open--
		p.inUse--
		p.mu.Unlock()
		bc.close()
		p.kick()
		return
	}
	bc.idleFrom = now
	if e := p.waiters.Front(); e != nil {
		w := p.dropWaiterLocked(e)
		if w.variant != bc.variant {
			// Free the slot and let the waiter dial its own variant.
			p.open--
			p.inUse--
			p.mu.Unlock()
			bc.close()
			w.ch <- nil
			return
		}
		p.mu.Unlock()
		w.ch <- bc
		return
	}
	p.inUse--
	if len(p.idle) >= p.limits.MaxIdle {
		p.open--
		p.st.ClosedIdle++
		p.mu.Unlock()
		bc.close()
		return
	}
	p.idle = append(p.idle, bc)
	onFree := p.onFree
	p.mu.Unlock()
	if onFree != nil {
		onFree()
	}
}

// kick wakes the oldest waiter when there is room to dial (with nobody
// queued, a statement waiting for a pipe place, which may now dial).
func (p *Pool) kick() {
	p.mu.Lock()
	if p.open >= p.limits.Max {
		p.mu.Unlock()
		return
	}
	if p.waiters.Len() == 0 {
		onFree := p.onFree
		p.mu.Unlock()
		if onFree != nil {
			onFree()
		}
		return
	}
	w := p.dropWaiterLocked(p.waiters.Front())
	p.mu.Unlock()
	w.ch <- nil
}

// maintain keeps Min connections open, closes idle and expired ones, and
// drops idle connections the server has closed.
func (p *Pool) maintain() {
	defer p.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		p.maintainOnce()
		select {
		case <-p.stop:
			return
		case <-t.C:
		}
	}
}

func (p *Pool) maintainOnce() {
	now := time.Now()
	var drop []*backendConn
	p.mu.Lock()
	keep := p.idle[:0]
	for _, bc := range p.idle {
		switch {
		case now.After(bc.expires):
			p.st.ClosedLifetime++
		case p.open-len(drop) > p.limits.Min && now.Sub(bc.idleFrom) > p.limits.IdleTimeout:
			p.st.ClosedIdle++
		default:
			keep = append(keep, bc)
			continue
		}
		drop = append(drop, bc)
	}
	p.idle = keep
	p.open -= len(drop)
	p.mu.Unlock()
	for _, bc := range drop {
		bc.close()
	}
	drop = drop[:0]
	// Health: drop idle connections whose server side went away (after a
	// backend restart, say). alive() is a non-blocking read, so it may run
	// under the lock.
	p.mu.Lock()
	keep = p.idle[:0]
	for _, bc := range p.idle {
		if bc.alive() {
			keep = append(keep, bc)
			continue
		}
		p.st.ClosedUnhealthy++
		p.open--
		drop = append(drop, bc)
	}
	p.idle = keep
	p.mu.Unlock()
	for _, bc := range drop {
		bc.close()
	}
	p.kick()
	for {
		p.mu.Lock()
		if p.closed || p.open >= p.limits.Min {
			p.mu.Unlock()
			return
		}
		p.open++
		p.inUse++
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), p.settings.DialTimeout)
		bc, err := p.dialOne(ctx, 0)
		cancel()
		if err != nil {
			return
		}
		p.release(bc, true)
	}
}

// Close closes idle connections and stops maintenance. Connections in use
// are closed as they return. Idempotent.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	var ws []*waiter
	for e := p.waiters.Front(); e != nil; e = e.Next() {
		ws = append(ws, e.Value.(*waiter))
	}
	p.waiters.Init()
	p.nwait.Store(0)
	p.mu.Unlock()
	close(p.stop)
	for _, bc := range idle {
		bc.close()
	}
	for _, w := range ws {
		w.ch <- nil
	}
	p.wg.Wait()
}
