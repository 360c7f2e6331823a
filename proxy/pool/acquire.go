package pool

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/holdfast-db/holdfast/internal/waitq"
)

// Acquire lends a connection of key: an idle one (the most recently
// returned), a new one when there is room, or, when there is none, the
// first one that fits after queueing (see Waiting in the package
// comment). It gives up when ctx ends or after Limits.AcquireTimeout.
// Every connection it returns is new or passed Alive (and Ping, after a
// long idle).
// The borrower must Release it exactly once.
func (p *Pool[K, C]) Acquire(ctx context.Context, key K) (C, error) {
	return p.AcquireHandicap(ctx, key, 0)
}

// AcquireHandicap is Acquire for a borrower of lower priority: when it
// must queue, it queues as if it had arrived handicap later than it did,
// behind every borrower that arrives before then (see waitq's Rank). So
// a borrower is served before any of a smaller handicap that arrives more
// than the difference after it: priority without starvation.
func (p *Pool[K, C]) AcquireHandicap(ctx context.Context, key K, handicap time.Duration) (C, error) {
	if c, ok, _ := p.TryAcquire(key, nil); ok {
		return c, nil
	}
	return p.acquireSlow(ctx, key, handicap)
}

// TryAcquire lends, without waiting or dialing, the most recently returned
// idle connection of key for which fit reports true (nil: any). When it
// lends none, unfit reports whether an idle connection of key exists that
// fit refused. fit runs under the pool's lock on idle connections: it must
// be quick and must not block, modify the connection or call the pool.
// A connection that fails its check is closed and the next one tried.
func (p *Pool[K, C]) TryAcquire(key K, fit func(C) bool) (c C, ok, unfit bool) {
	for {
		now := p.now()
		p.mu.Lock()
		ks := p.lastKS
		if ks == nil || p.lastKey != key {
			ks = p.keys[key]
		}
		if p.closed || ks == nil || len(ks.idle) == 0 {
			p.mu.Unlock()
			return c, false, unfit
		}
		var toClose []C
		g, ok := p.popIdleLocked(ks, now, fit, &unfit, &toClose)
		var free bool
		if len(toClose) > 0 { // expired ones freed slots
			toClose = p.serveLocked(now, toClose)
			free = p.open < p.lim.Max
		}
		p.mu.Unlock()
		p.finish(toClose, free)
		if !ok {
			return c, false, unfit
		}
		if p.healthy(g) {
			p.acquired.Add(1)
			return g.conn, true, false
		}
		p.discard(g.conn, CloseUnhealthy)
	}
}

// acquireSlow is Acquire past the fast path: dial, swap or queue.
func (p *Pool[K, C]) acquireSlow(ctx context.Context, key K, handicap time.Duration) (C, error) {
	var zero C
	p.mu.Lock()
	timeout := p.lim.AcquireTimeout
	p.mu.Unlock()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	start := p.now()
	var w *waitq.Waiter[K, grant[K, C]] // once queued, kept for every pass: it keeps its place
	defer func() {
		if w != nil {
			w.Reset()
			p.waiters.Put(w)
		}
	}()
	backoff := p.opts.DialBackoff
	for {
		if ctx.Err() != nil {
			return zero, p.timeoutErr(ctx, start)
		}
		now := p.now()
		var toClose []C
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return zero, ErrClosed
		}
		ks := p.keyLocked(key)
		if err := refusedLocked(ks, now); err != nil && len(ks.idle) == 0 {
			p.mu.Unlock()
			return zero, err
		}
		g, ok := p.takeLocked(ks, key, now, &toClose)
		if len(toClose) > 0 { // expired or swapped out: what they freed may serve others
			toClose = p.serveLocked(now, toClose)
		}
		if !ok {
			if w == nil && p.lim.MaxWaiters == 0 {
				p.mu.Unlock()
				return zero, p.rejectErr()
			}
			if w == nil {
				w, _ = p.waiters.Get().(*waitq.Waiter[K, grant[K, C]])
				if w == nil {
					w = new(waitq.Waiter[K, grant[K, C]])
				}
				w.Key = key
				w.Rank = int64(start.Sub(p.epoch) + handicap)
			}
			err := p.q.Enqueue(w)
			p.mu.Unlock()
			p.finish(toClose, false)
			if errors.Is(err, waitq.ErrClosed) {
				return zero, ErrClosed
			}
			if err != nil {
				return zero, p.rejectErr()
			}
			g, err = p.q.Wait(ctx, w)
			if errors.Is(err, waitq.ErrClosed) {
				return zero, ErrClosed
			}
			if err != nil {
				return zero, p.timeoutErr(ctx, start)
			}
		} else {
			p.mu.Unlock()
			p.finish(toClose, false)
		}
		if !g.dial {
			if p.healthy(g) {
				p.lent(start, w != nil)
				return g.conn, nil
			}
			// Dead: its slot is ours to dial into.
			p.mu.Lock()
			p.dropLocked(g.conn, CloseUnhealthy)
			p.reserveLocked(p.keyLocked(key))
			p.mu.Unlock()
			g.conn.Close()
		}
		if ctx.Err() != nil { // no dial for a borrower that has gone
			p.giveBack(grant[K, C]{key: key, dial: true})
			return zero, p.timeoutErr(ctx, start)
		}
		p.mu.Lock()
		err := refusedLocked(p.keyLocked(key), p.now())
		p.mu.Unlock()
		if err != nil { // refused while we waited: no dial to be refused again
			p.giveBack(grant[K, C]{key: key, dial: true})
			return zero, err
		}
		redial := *p.redial.Load() // before the dial: a Redial during it counts
		c, err := p.dialSlot(ctx, key)
		if err == nil {
			p.lent(start, w != nil)
			return c, nil
		}
		if errors.Is(err, ErrClosed) || errors.Is(err, ErrRefused) {
			return zero, err
		}
		t := time.NewTimer(backoff + rand.N(backoff))
		select {
		case <-t.C:
			backoff = min(2*backoff, p.opts.MaxDialBackoff)
		case <-redial:
			t.Stop()
			backoff = p.opts.DialBackoff
		case <-ctx.Done():
			t.Stop()
			return zero, p.timeoutErr(ctx, start)
		}
	}
}

// refusedLocked is the key's refused login while it is recent (see
// ErrRefused), else nil.
func refusedLocked[C any](ks *keyState[C], now time.Time) error {
	if ks.refused != nil && now.Sub(ks.refusedAt) < refusedRetry {
		return ks.refused
	}
	return nil
}

func (p *Pool[K, C]) lent(start time.Time, waited bool) {
	p.acquired.Add(1)
	if waited {
		p.waited.Add(1)
		p.waitNanos.Add(uint64(max(p.now().Sub(start), 0)))
	}
}

func (p *Pool[K, C]) rejectErr() error {
	p.rejected.Add(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	return fmt.Errorf("%w (%d waiting, pool max %d)", ErrWaiterCap, p.q.Len(), p.lim.Max)
}

func (p *Pool[K, C]) timeoutErr(ctx context.Context, start time.Time) error {
	now := p.now()
	waited := now.Sub(start).Round(time.Millisecond)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastErr != nil && now.Sub(p.lastErrAt) < recentDialErr {
		p.timeouts.Add(1)
		return fmt.Errorf("%w: no connection after %v: %w", ErrBackendDown, waited, p.lastErr)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
		return cause
	}
	p.timeouts.Add(1)
	inUse := p.open - p.dialing - p.idle
	return fmt.Errorf("%w after %v (pool max %d, %d in use, %d waiting)", ErrTimeout, waited, p.lim.Max, inUse, p.q.Len())
}

// healthy checks a connection taken for a lend: Alive, and Ping when it
// sat idle long. The ping is bounded by PingTimeout and Close, not by the
// borrower's ctx, so that a borrower running out of time does not fail a
// healthy connection.
func (p *Pool[K, C]) healthy(g grant[K, C]) bool {
	if !g.conn.Alive() {
		return false
	}
	if !g.ping {
		return true
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.opts.PingTimeout)
	defer cancel()
	return g.conn.Ping(ctx) == nil
}

// discard closes a connection the caller holds (lent or being checked)
// and offers its slot on.
func (p *Pool[K, C]) discard(c C, why CloseReason) {
	now := p.now()
	p.mu.Lock()
	p.dropLocked(c, why)
	toClose := p.serveLocked(now, []C{c})
	free := p.open < p.lim.Max
	p.mu.Unlock()
	p.finish(toClose, free)
}

// dialSlot dials into a slot already counted in open and dialing.
func (p *Pool[K, C]) dialSlot(ctx context.Context, key K) (C, error) {
	var zero C
	dctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(p.ctx, cancel)
	c, err := p.dial(dctx, key)
	// A dial that ctx or Close cut short says nothing about the backend:
	// it is neither counted nor remembered as the backend's last error.
	cut := err != nil && dctx.Err() != nil
	stop()
	cancel()
	if err == nil && c.Key() != key {
		c.Close()
		err = fmt.Errorf("pool: Dial for key %v returned a connection of key %v", key, c.Key())
	}
	if err == nil && p.isRetired(c) {
		// The address still leads to a retired server: nothing is learned
		// of it, and its slot goes back.
		now := p.now()
		p.mu.Lock()
		err = p.retiredDialLocked(p.keyLocked(key), now)
		toClose := p.serveLocked(now, []C{c})
		free := p.open < p.lim.Max
		closed := p.closed
		p.mu.Unlock()
		p.finish(toClose, free)
		if closed {
			return zero, ErrClosed
		}
		return zero, err
	}
	if err == nil && !p.firstDone.Load() {
		if err = p.runFirstDial(c); err != nil {
			c.Close()
		}
	}
	now := p.now()
	p.mu.Lock()
	ks := p.keyLocked(key)
	p.dialing--
	if !cut {
		p.dials++
	}
	if err != nil {
		if !cut {
			p.dialErrs++
			p.lastErr, p.lastErrAt = err, now
			if errors.Is(err, ErrRefused) {
				ks.refused, ks.refusedAt = err, now
			}
		}
		p.open--
		ks.open--
		toClose := p.serveLocked(now, nil)
		free := p.open < p.lim.Max
		closed := p.closed
		p.mu.Unlock()
		p.finish(toClose, free)
		if closed {
			return zero, ErrClosed
		}
		if p.opts.Log != nil && !cut {
			p.opts.Log.Warn("backend dial failed", "err", err)
		}
		return zero, err
	}
	s := c.PoolSlot()
	*s = Slot{id: p.nextID.Add(1), created: now, state: stateLent}
	if l := p.lim.MaxLifetime; l > 0 {
		s.expires = now.Add(l - time.Duration(rand.Float64()*p.lim.LifetimeJitter*float64(l)))
	}
	p.lastErr, ks.refused = nil, nil
	if p.closed {
		p.dropLocked(c, CloseShutdown)
		p.mu.Unlock()
		c.Close()
		return zero, ErrClosed
	}
	p.mu.Unlock()
	return c, nil
}

func (p *Pool[K, C]) runFirstDial(c C) error {
	p.firstMu.Lock()
	defer p.firstMu.Unlock()
	if p.firstDone.Load() {
		return nil
	}
	if p.onFirstDial != nil {
		if err := p.onFirstDial(c); err != nil {
			return err
		}
	}
	p.firstDone.Store(true)
	return nil
}
