package pool

import (
	"errors"
	"fmt"
	"time"
)

// Retirement. When the server behind a pool's address changes (a primary
// switchover: the old primary turned read-only, a new one was promoted,
// a DNS name or VIP moved), connections still open to the former server
// must not be lent again: each would answer every write with "read-only"
// for as long as it lives. Retire installs a test of "is this connection
// open to a server taken out of service"; from then on
//
//   - idle connections it matches close at once (CloseRetired);
//   - lent ones close when they are released (or at their last Unhold),
//     instead of going back to the idle list or to a waiter;
//   - a new dial it matches (the address still leads to the former server)
//     is closed at once and fails with ErrRetired, so that a borrower
//     backs off and dials again, until the address leads elsewhere or its
//     wait ends (Redial cuts the back-off short once it does);
//   - Retired reports it to whoever shares a lent connection (pipes).
//
// The test runs under the pool's lock (and on the Release path): it must
// be quick, must not block, and must only read what does not change while
// it runs (the connection's server, fixed at its dial, and a set replaced
// whole). Retire again replaces the test; Retire(nil) retires nothing.

// ErrRetired marks a dial that reached a server Retire took out of service.
var ErrRetired = errors.New("pool: the server reached is retired (no longer the one to use)")

// Retire installs retired, the test of connections not to be lent again
// (nil: none), and closes the idle ones it matches now. It may be called
// at any time, from any goroutine; it does not wait for lent connections.
func (p *Pool[K, C]) Retire(retired func(C) bool) {
	if retired == nil {
		p.retired.Store(nil)
		return
	}
	p.retired.Store(&retired)
	now := p.now()
	var toClose []C
	p.mu.Lock()
	for _, ks := range p.keys {
		keep := ks.idle[:0]
		for _, c := range ks.idle {
			if !retired(c) {
				keep = append(keep, c)
				continue
			}
			p.idle--
			p.dropLocked(c, CloseRetired)
			toClose = append(toClose, c)
		}
		clear(ks.idle[len(keep):])
		ks.idle = keep
	}
	var free bool
	if len(toClose) > 0 {
		toClose = p.serveLocked(now, toClose)
		free = p.open < p.lim.Max
	}
	p.mu.Unlock()
	p.finish(toClose, free)
}

// Retired reports whether c is open to a retired server (see Retire): it
// must not be given more work. Anyone may call it, for any connection of
// this pool; it takes no lock.
func (p *Pool[K, C]) Retired(c C) bool {
	r := p.retired.Load()
	return r != nil && (*r)(c)
}

// Relearn makes the next successful dial run Options.OnFirstDial again
// (and the dials that complete meanwhile wait for it), as the first one
// did: the server behind the address changed, and what was learned of the
// former one may not hold for the new one. Safe at any time.
func (p *Pool[K, C]) Relearn() { p.firstDone.Store(false) }

// Redial has every borrower backing off after a failed dial (the server
// down, or the address still leading to a retired one) dial again at
// once, its back-off starting over: the server behind the address has
// changed (a new primary was found there), and a back-off of up to
// 2 × Options.MaxDialBackoff would have the borrowers sleep through it.
// Safe at any time, from any goroutine.
func (p *Pool[K, C]) Redial() {
	ch := make(chan struct{})
	close(*p.redial.Swap(&ch))
}

// retiredDialLocked closes the state of a dial that reached a retired
// server (its slot freed, counted as a failed dial) and returns the
// error; p.mu is held, c is closed by the caller after unlocking.
func (p *Pool[K, C]) retiredDialLocked(ks *keyState[C], now time.Time) error {
	p.dialing--
	p.dials++
	p.dialErrs++
	p.retiredDials++
	p.open--
	ks.open--
	err := fmt.Errorf("%w: the backend address still leads to a server taken out of service", ErrRetired)
	p.lastErr, p.lastErrAt = err, now
	return err
}
