package fleet

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"
)

// This instance's part of the fleet-wide caps (share.go says how a cap is
// split). Every poll renews the grant of every cap in force (Store.Grant)
// with this instance's demand, and puts min(grant, fair share) in force:
// an instance above its fair share stops admitting at once, so what it
// holds falls as its statements end. Between polls, settle renews a grant
// early where that moves it: down as soon as what is held has fallen
// (giving the slots back), up while it is below its share (taking slots as
// soon as another gives them back), and writes demand that has appeared
// since the last renewal. So a change of demand, a join or a turn is in
// force within
//
//	one poll (the instance whose demand changed writes it; a quarter of
//	one when it had next to none)
//	+ one poll (the others read it and lower their ceilings)
//	+ the longest hold under the cap (what is held above the ceilings ends)
//	+ settleEvery + growEvery (the grants move),
//
// under three poll intervals plus the longest hold. A dead instance's grant
// goes back to the others once its row is older than the ttl, at their next
// renewal.

// settleEvery is how often, as a part of the poll interval, settle looks
// at this instance's demand on the caps (in memory); growEvery how often at
// most it tries to grow a grant below its share (a transaction each).
const (
	settleEvery = 10 // poll / 10
	growEvery   = 4  // poll / 4
)

// grantStore is the part of Store the caps use: a seam for tests of the
// sharing with no database.
type grantStore interface {
	Grant(ctx context.Context, tag, instance string, want, used int, ttl, period, poll time.Duration) (Share, error)
	ReleaseGrants(ctx context.Context, instance string, keep []string) error
}

// capState is this instance's part of one fleet-wide cap.
type capState struct {
	share Share // the last renewal's
	// ceiling is what this instance admits: min(grant, fair share), and 0
	// once the grant has not been renewed for ttl − poll.
	ceiling int
	want    int       // the demand written at the last renewal
	renewed time.Time // local time of the last renewal (zero: none yet)
	tried   time.Time // local time of the last attempt
	// turn is when the round turns (local time), when this instance's
	// share changes then (zero: it does not).
	turn time.Time
	// switching: the grant is kept past its renewal's deadline because
	// the database refuses writes (keepThrough).
	switching bool
}

// keepThrough reports whether a grant whose renewal failed with err, and
// whose deadline (ttl − poll after its last renewal) has passed, stays in
// force: while the database refuses the renewal as read-only (the
// primary is being switched over: it refuses every instance's writes),
// for at most Options.SwitchHold past the deadline. Nobody can take the
// grant over meanwhile, and the first renewal after the switch gives
// every grant a fresh ttl (Store.Grant), so the grants still add up to no
// more than the cap. Only where ttl is at least 4 × poll, as Store.Grant
// needs. An unreachable database is not such a refusal (it may be this
// instance alone that cannot reach it): the grant lapses as before, ttl
// − poll after its last renewal (4 s by default, longer than a failover
// that promotes a replica within 2 s).
func (f *Fleet) keepThrough(err error, c capState, now time.Time) bool {
	if c.renewed.IsZero() || f.o.TTL < 4*f.o.Poll || !ReadOnly(err) {
		return false
	}
	hold := f.o.SwitchHold
	if hold <= 0 {
		hold = DefaultSwitchHold
	}
	return now.Sub(c.renewed) < f.o.TTL-f.o.Poll+hold
}

// DefaultSwitchHold is how long past its deadline a cap's grant is kept
// through a switchover of the primary when Options.SwitchHold is zero.
const DefaultSwitchHold = 15 * time.Second

// CapShares is one fleet-wide cap's split among the instances, as this
// instance read it at its last renewal.
type CapShares struct {
	Tag string `json:"tag"`
	Cap int    `json:"cap"`
	// Granted is this instance's grant; Share its fair share this round;
	// Admits what it admits now (the smaller, or 0 while its grant could
	// not be renewed).
	Granted int `json:"granted"`
	Share   int `json:"share"`
	Admits  int `json:"admits"`
	// Grants are the live instances' rows, this one's included.
	Grants  []Grant   `json:"grants"`
	Renewed time.Time `json:"renewed,omitzero"`
}

// renew renews this instance's grant of tag's cap from c and returns the
// new state; false when the cap has been lifted. restart begins a new
// window of the demand (a poll's renewal).
func (f *Fleet) renew(ctx context.Context, tag string, c capState, now time.Time, restart bool) (capState, bool) {
	held, want := f.o.Applier.Demand(tag, restart)
	c.tried = now
	// It may admit up to its ceiling while the renewal runs.
	sh, err := f.grants.Grant(ctx, tag, f.o.Self.ID, want, max(held, c.ceiling), f.o.TTL, TurnRounds*f.o.Poll, f.o.Poll)
	switch {
	case errors.Is(err, ErrNoCap):
		return c, false
	case err == nil:
		if c.switching {
			f.o.Log.Info("fleet: this instance's grant of a fleet-wide cap is renewed again after a switchover of the primary", "tag", tag)
		}
		c.share, c.renewed, c.turn, c.want, c.switching = sh, now, time.Time{}, want, false
		c.ceiling = min(sh.Granted, sh.Fair)
		if sh.Next != sh.Fair {
			c.turn = now.Add(sh.RoundLeft)
		}
	case now.Sub(c.renewed) >= f.o.TTL-f.o.Poll && f.keepThrough(err, c, now):
		// A switchover of the primary: nobody can take the grant over
		// (Store.Grant), so it stays in force, and the tag is not
		// starved while the primary moves.
		if !c.switching {
			f.o.Log.Warn("fleet: cannot renew this instance's grant of a fleet-wide cap while the primary is switched over; keeping it", "tag", tag,
				"granted", c.share.Granted, "admits", c.ceiling, "err", err)
		}
		c.switching = true
	case now.Sub(c.renewed) >= f.o.TTL-f.o.Poll:
		// Not renewed: the others may take this grant over once it
		// lapses, so stop using it first.
		if c.ceiling > 0 || c.share.Granted > 0 {
			f.o.Log.Warn("fleet: cannot renew this instance's grant of a fleet-wide cap; admitting none under it until it can", "tag", tag, "err", err)
		}
		c.ceiling, c.share.Granted = 0, 0
	}
	return c, true
}

// settle renews early the grants that would move (see the top of this
// file), and puts the new ceilings in force.
func (f *Fleet) settle(ctx context.Context) {
	f.pollMu.Lock()
	defer f.pollMu.Unlock()
	f.mu.Lock()
	caps := maps.Clone(f.caps)
	applied := slices.Clone(f.applied)
	f.mu.Unlock()
	if len(caps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, f.o.Poll)
	defer cancel()
	now := f.now()
	changed := false
	for tag, c := range caps {
		if c.renewed.IsZero() || c.renewed.Before(c.tried) {
			continue // the last renewal failed: the next poll tries again
		}
		g, fair := c.share.Granted, c.share.Fair
		held, want := f.o.Applier.Demand(tag, false)
		again := now.Sub(c.tried) >= f.o.Poll/growEvery
		turned := !c.turn.IsZero() && !now.Before(c.turn)
		// Demand that was not there at the last renewal (more than twice
		// it, and more than this instance admits) is written at once.
		grown := want > 2*c.want && want > c.ceiling && again
		if !(turned || grown || g > fair && (held <= fair || held < g && again) || g < fair && again) {
			continue
		}
		nc, ok := f.renew(ctx, tag, c, now, false)
		if !ok {
			continue // lifted: the next poll applies it
		}
		caps[tag] = nc
		if nc.ceiling == c.ceiling {
			continue
		}
		for i := range applied {
			if applied[i].Tag == tag && applied[i].Limited {
				applied[i].Limit = nc.ceiling
				changed = true
			}
		}
	}
	if changed {
		f.o.Applier.ApplyFleetControls(applied)
	}
	f.mu.Lock()
	f.caps, f.applied = caps, applied
	f.mu.Unlock()
}

// capSharesLocked lists the caps' splits for Status.
func (f *Fleet) capSharesLocked() []CapShares {
	out := make([]CapShares, 0, len(f.caps))
	for tag, c := range f.caps {
		out = append(out, CapShares{Tag: tag, Cap: c.share.Cap, Granted: c.share.Granted, Share: c.share.Fair,
			Admits: c.ceiling, Grants: slices.Clone(c.share.Grants), Renewed: c.renewed})
	}
	slices.SortFunc(out, func(a, b CapShares) int {
		switch {
		case a.Tag < b.Tag:
			return -1
		case a.Tag > b.Tag:
			return 1
		}
		return 0
	})
	return out
}
