package pool

import "time"

// Release returns a lent connection. reusable false (an I/O error, state
// unknown) closes it; so do a closed pool, a retired server (Retire), an
// expired lifetime and a lower Max. Otherwise it goes to the oldest queued borrower that can use it, or
// back to the idle list. A held connection (Hold) stays out of circulation
// until its last Unhold. Only the borrower calls Release, once per lend.
func (p *Pool[K, C]) Release(c C, reusable bool) {
	now := p.now()
	p.mu.Lock()
	s := c.PoolSlot()
	if s.state != stateLent {
		p.mu.Unlock()
		panic("pool: Release of a connection that is not lent")
	}
	if s.holds > 0 {
		s.state, s.reusable = stateParked, reusable
		p.held++
		p.mu.Unlock()
		return
	}
	toClose, free := p.returnLocked(c, reusable, now, time.Time{})
	p.mu.Unlock()
	p.finish(toClose, free)
}

// Hold keeps c out of circulation until a matching Unhold, even if its
// borrower releases it meanwhile: nobody else is lent it while a kill sent
// for its current statement may still land. It reports false, and holds
// nothing, when c is not lent. The caller must know that c is lent to the
// borrower it means at that moment (take the hold under the lock that the
// borrower's Release also runs under); holds nest.
func (p *Pool[K, C]) Hold(c C) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := c.PoolSlot()
	if s.state != stateLent && s.state != stateParked {
		return false
	}
	s.holds++
	return true
}

// Unhold ends a Hold. reusable false means the connection must not be lent
// again (a kill left it in an unknown state): it is closed when its
// borrower releases it, or now if that already happened. The last Unhold
// of a connection released meanwhile completes that Release.
func (p *Pool[K, C]) Unhold(c C, reusable bool) {
	now := p.now()
	p.mu.Lock()
	s := c.PoolSlot()
	if s.holds == 0 {
		p.mu.Unlock()
		panic("pool: Unhold without Hold")
	}
	s.holds--
	if !reusable {
		s.spoiled = true
	}
	if s.holds > 0 || s.state != stateParked {
		p.mu.Unlock()
		return
	}
	p.held--
	s.state = stateLent
	toClose, free := p.returnLocked(c, s.reusable, now, time.Time{})
	p.mu.Unlock()
	p.finish(toClose, free)
}

// giveBack takes back what was handed to a waiter that gave up (waitq calls
// it without locks): a connection goes back as if released, keeping its
// idle time; a slot is freed. Either is offered to the next waiter.
func (p *Pool[K, C]) giveBack(g grant[K, C]) {
	now := p.now()
	p.mu.Lock()
	var toClose []C
	var free bool
	if g.dial {
		p.open--
		p.dialing--
		p.keyLocked(g.key).open--
		toClose = p.serveLocked(now, nil)
		free = p.open < p.lim.Max
	} else {
		toClose, free = p.returnLocked(g.conn, true, now, g.conn.PoolSlot().idleSince)
	}
	p.mu.Unlock()
	p.finish(toClose, free)
}

// returnLocked puts a lent connection back (or closes it), serves waiters,
// and returns what to close and whether something stayed free for OnFree.
// idleSince zero means now.
func (p *Pool[K, C]) returnLocked(c C, reusable bool, now, idleSince time.Time) ([]C, bool) {
	s := c.PoolSlot()
	ks := p.keyLocked(c.Key())
	var toClose []C
	why := NumCloseReasons
	switch {
	case p.closed:
		why = CloseShutdown
	case !reusable || s.spoiled:
		why = CloseBroken
	case p.isRetired(c):
		why = CloseRetired
	case !s.expires.IsZero() && !now.Before(s.expires):
		why = CloseLifetime
	case p.open > p.lim.Max || (ks.lim.Max > 0 && ks.open > ks.lim.Max):
		why = CloseShrink
	}
	if why != NumCloseReasons {
		p.dropLocked(c, why)
		toClose = append(toClose, c)
	} else {
		if idleSince.IsZero() {
			idleSince = now
		}
		s.state, s.idleSince = stateIdle, idleSince
		ks.idle = append(ks.idle, c)
		p.idle++
	}
	toClose = p.serveLocked(now, toClose)
	for p.idle > p.lim.MaxIdle {
		toClose = append(toClose, p.closeOldestIdleLocked(CloseIdle))
	}
	free := s.state == stateIdle || p.open < p.lim.Max
	return toClose, free
}

// isRetired is Retired for the pool's own paths.
func (p *Pool[K, C]) isRetired(c C) bool {
	r := p.retired.Load()
	return r != nil && (*r)(c)
}
