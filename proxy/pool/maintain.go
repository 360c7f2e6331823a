package pool

import (
	"slices"
	"time"
)

// Start runs the maintenance loop until Close: at once, then every
// Options.MaintainEvery, it closes expired connections and those idle past
// IdleTimeout (down to the mins), checks idle connections with Alive, and
// dials up to the mins. A second Start, or Start after Close, does nothing.
func (p *Pool[K, C]) Start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.started || p.closed {
		return
	}
	p.started = true
	p.wg.Add(1)
	go p.maintain()
}

func (p *Pool[K, C]) maintain() {
	defer p.wg.Done()
	t := time.NewTicker(p.opts.MaintainEvery)
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

// maintainOnce is one pass of maintenance.
func (p *Pool[K, C]) maintainOnce() {
	p.expire()
	p.checkIdle()
	p.fill()
}

// expire closes idle connections past their lifetime, and those idle past
// IdleTimeout while the pool (and their key) are above their mins, and
// forgets keys with nothing open and no limits of their own.
func (p *Pool[K, C]) expire() {
	now := p.now()
	var toClose []C
	p.mu.Lock()
	for k, ks := range p.keys {
		keep := ks.idle[:0]
		for _, c := range ks.idle { // oldest first
			s := c.PoolSlot()
			why := NumCloseReasons
			switch {
			case !s.expires.IsZero() && !now.Before(s.expires):
				why = CloseLifetime
			case p.isRetired(c):
				why = CloseRetired
			case p.lim.IdleTimeout > 0 && now.Sub(s.idleSince) > p.lim.IdleTimeout && p.open > p.lim.Min && ks.open > ks.lim.Min:
				why = CloseIdle
			}
			if why == NumCloseReasons {
				keep = append(keep, c)
				continue
			}
			p.idle--
			p.dropLocked(c, why)
			toClose = append(toClose, c)
		}
		clear(ks.idle[len(keep):])
		ks.idle = keep
		// A key is forgotten when nothing of it is open, unless it has
		// limits of its own or a recent refused login (ErrRefused).
		if _, limited := p.lim.Keys[k]; ks.open == 0 && !limited && refusedLocked(ks, now) == nil {
			delete(p.keys, k)
			if p.lastKS == ks {
				p.lastKS = nil
			}
		}
	}
	var free bool
	if len(toClose) > 0 {
		toClose = p.serveLocked(now, toClose)
		free = p.open < p.lim.Max
	}
	p.mu.Unlock()
	p.finish(toClose, free)
}

// checkIdle runs Alive on every idle connection, without the lock: they
// are taken out of the idle lists for it, and the live ones are put back
// under those returned meanwhile, keeping their idle times.
func (p *Pool[K, C]) checkIdle() {
	var check []C
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	for _, ks := range p.keys {
		for _, c := range ks.idle {
			c.PoolSlot().state = stateChecking
		}
		check = append(check, ks.idle...)
		p.idle -= len(ks.idle)
		clear(ks.idle)
		ks.idle = ks.idle[:0]
	}
	p.mu.Unlock()
	if len(check) == 0 {
		return
	}
	dead := make([]bool, len(check))
	for i, c := range check {
		dead[i] = !c.Alive()
	}
	now := p.now()
	var toClose []C
	p.mu.Lock()
	// check holds each key's connections together, oldest first.
	for i := 0; i < len(check); {
		key := check[i].Key()
		var back []C
		for ; i < len(check) && check[i].Key() == key; i++ {
			c := check[i]
			switch {
			case p.closed:
				p.dropLocked(c, CloseShutdown)
			case dead[i]:
				p.dropLocked(c, CloseUnhealthy)
			case p.isRetired(c):
				p.dropLocked(c, CloseRetired)
			default:
				c.PoolSlot().state = stateIdle
				back = append(back, c)
				continue
			}
			toClose = append(toClose, c)
		}
		if len(back) > 0 {
			ks := p.keyLocked(key)
			ks.idle = slices.Insert(ks.idle, 0, back...)
			p.idle += len(back)
		}
	}
	toClose = p.serveLocked(now, toClose)
	for p.idle > p.lim.MaxIdle {
		toClose = append(toClose, p.closeOldestIdleLocked(CloseIdle))
	}
	free := p.idle > 0 || p.open < p.lim.Max
	p.mu.Unlock()
	p.finish(toClose, free)
}

// fill dials up to each key's Min, then up to the pool's Min with MinKey,
// within the maxes; it stops at the first failed dial, and after Max dials
// in one pass.
func (p *Pool[K, C]) fill() {
	for range p.Limits().Max {
		p.mu.Lock()
		ks, key, ok := p.underMinLocked()
		if p.closed || !ok || refusedLocked(ks, p.now()) != nil {
			p.mu.Unlock()
			return
		}
		p.reserveLocked(ks)
		p.mu.Unlock()
		c, err := p.dialSlot(p.ctx, key)
		if err != nil {
			return
		}
		p.Release(c, true)
	}
}

// underMinLocked returns a key below its Min with room to open one, else
// MinKey while the pool is below Min.
func (p *Pool[K, C]) underMinLocked() (*keyState[C], K, bool) {
	for k, kl := range p.lim.Keys {
		if kl.Min == 0 {
			continue
		}
		if ks := p.keyLocked(k); ks.open < kl.Min && p.roomLocked(ks) {
			return ks, k, true
		}
	}
	if p.open < p.lim.Min {
		if ks := p.keyLocked(p.lim.MinKey); p.roomLocked(ks) {
			return ks, p.lim.MinKey, true
		}
	}
	var zero K
	return nil, zero, false
}
