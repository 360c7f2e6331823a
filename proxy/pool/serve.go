package pool

import (
	"slices"
	"time"
)

// serveLocked hands what is free to queued borrowers that can use it and
// returns toClose with any connection swapped out. Oldest first, a waiter
// is served from an idle connection of its key or a free slot; a waiter
// passed over maxSkips times may also be served by a swap; when nobody
// can be served so, the oldest waiter for whom a swap is possible gets one.
// Afterwards no queued borrower can be served by anything free, which is
// why a newcomer may take what it finds free without queueing.
func (p *Pool[K, C]) serveLocked(now time.Time, toClose []C) []C {
	for p.q.Len() > 0 && (p.idle > 0 || p.open < p.lim.Max) {
		served := p.q.HandOffFunc(func(key K, skipped int) (grant[K, C], bool) {
			ks := p.keyLocked(key)
			if g, ok := p.popIdleLocked(ks, now, nil, nil, &toClose); ok {
				return g, true
			}
			if p.roomLocked(ks) {
				p.reserveLocked(ks)
				return grant[K, C]{key: key, dial: true}, true
			}
			if skipped >= maxSkips && p.swapLocked(ks, key, &toClose) {
				return grant[K, C]{key: key, dial: true}, true
			}
			return grant[K, C]{}, false
		})
		if !served && p.idle > 0 {
			served = p.q.HandOffFunc(func(key K, _ int) (grant[K, C], bool) {
				if p.swapLocked(p.keyLocked(key), key, &toClose) {
					return grant[K, C]{key: key, dial: true}, true
				}
				return grant[K, C]{}, false
			})
		}
		if !served {
			break
		}
	}
	return toClose
}

// takeLocked finds key a connection without waiting: an idle one, a slot
// to dial into, or a slot made by closing an idle connection of another
// key. Closed connections are appended to toClose.
func (p *Pool[K, C]) takeLocked(ks *keyState[C], key K, now time.Time, toClose *[]C) (grant[K, C], bool) {
	if g, ok := p.popIdleLocked(ks, now, nil, nil, toClose); ok {
		return g, true
	}
	if p.roomLocked(ks) {
		p.reserveLocked(ks)
		return grant[K, C]{key: key, dial: true}, true
	}
	if p.swapLocked(ks, key, toClose) {
		return grant[K, C]{key: key, dial: true}, true
	}
	return grant[K, C]{}, false
}

// popIdleLocked lends the newest idle connection of ks that fit accepts
// (nil: any), closing expired and retired ones on the way. unfit, when not nil, is set
// if fit refused one.
func (p *Pool[K, C]) popIdleLocked(ks *keyState[C], now time.Time, fit func(C) bool, unfit *bool, toClose *[]C) (grant[K, C], bool) {
	for i := len(ks.idle) - 1; i >= 0; i-- {
		c := ks.idle[i]
		s := c.PoolSlot()
		if why := p.staleLocked(c, now); why != NumCloseReasons {
			ks.idle = slices.Delete(ks.idle, i, i+1)
			p.idle--
			p.dropLocked(c, why)
			*toClose = append(*toClose, c)
			continue
		}
		if fit != nil && !fit(c) {
			*unfit = true
			continue
		}
		ks.idle = slices.Delete(ks.idle, i, i+1)
		p.idle--
		s.state = stateLent
		ping := p.lim.PingAfterIdle > 0 && now.Sub(s.idleSince) > p.lim.PingAfterIdle
		return grant[K, C]{conn: c, key: c.Key(), ping: ping}, true
	}
	return grant[K, C]{}, false
}

// swapLocked makes room for a connection of ks's key by closing the
// connection of another key idle longest, when the key's own max allows
// one more; it reserves the slot.
func (p *Pool[K, C]) swapLocked(ks *keyState[C], key K, toClose *[]C) bool {
	if ks.lim.Max > 0 && ks.open >= ks.lim.Max {
		return false
	}
	var victim *keyState[C]
	for k, o := range p.keys {
		if k != key && len(o.idle) > 0 && (victim == nil || o.idle[0].PoolSlot().idleSince.Before(victim.idle[0].PoolSlot().idleSince)) {
			victim = o
		}
	}
	if victim == nil {
		return false
	}
	c := victim.idle[0]
	victim.idle = slices.Delete(victim.idle, 0, 1)
	p.idle--
	p.dropLocked(c, CloseSwap)
	*toClose = append(*toClose, c)
	p.reserveLocked(ks)
	return true
}

// closeOldestIdleLocked closes the connection idle longest, of any key.
func (p *Pool[K, C]) closeOldestIdleLocked(why CloseReason) C {
	var victim *keyState[C]
	for _, o := range p.keys {
		if len(o.idle) > 0 && (victim == nil || o.idle[0].PoolSlot().idleSince.Before(victim.idle[0].PoolSlot().idleSince)) {
			victim = o
		}
	}
	c := victim.idle[0]
	victim.idle = slices.Delete(victim.idle, 0, 1)
	p.idle--
	p.dropLocked(c, why)
	return c
}

// keyLocked returns key's share, creating it.
func (p *Pool[K, C]) keyLocked(key K) *keyState[C] {
	if p.lastKS != nil && p.lastKey == key {
		return p.lastKS
	}
	ks := p.keys[key]
	if ks == nil {
		ks = &keyState[C]{lim: p.lim.Keys[key]}
		p.keys[key] = ks
	}
	p.lastKey, p.lastKS = key, ks
	return ks
}

// roomLocked reports whether a connection of ks's key may be opened.
func (p *Pool[K, C]) roomLocked(ks *keyState[C]) bool {
	return p.open < p.lim.Max && (ks.lim.Max == 0 || ks.open < ks.lim.Max)
}

func (p *Pool[K, C]) reserveLocked(ks *keyState[C]) {
	p.open++
	p.dialing++
	ks.open++
}

// dropLocked counts c closed for why and takes it out of the counts (it
// must be out of any idle list). The caller closes it after unlocking.
func (p *Pool[K, C]) dropLocked(c C, why CloseReason) {
	c.PoolSlot().state = stateClosed
	p.open--
	p.keyLocked(c.Key()).open--
	p.closes[why]++
}

// staleLocked says why an idle connection must close rather than be lent
// (past its lifetime, or retired), or NumCloseReasons when it need not.
func (p *Pool[K, C]) staleLocked(c C, now time.Time) CloseReason {
	s := c.PoolSlot()
	switch {
	case !s.expires.IsZero() && !now.Before(s.expires):
		return CloseLifetime
	case p.isRetired(c):
		return CloseRetired
	}
	return NumCloseReasons
}
