package legacy

import (
	"context"
	"sort"
	"sync"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/reservation"
)

// The router's background loops: the Redis sweeper (the legacy system's
// expiry: reservations whose expiry passed give their units back to the
// counters, whichever authority made them) and the drift check.

// sweepBatch bounds the reservations one sweep script expires.
const sweepBatch = 500

func (r *Router) runSweeper(ctx context.Context) {
	for {
		if !r.duty.Runs(lifecycle.DutyRedisSweeper) {
			if lifecycle.Sleep(ctx, r.cfg.SweepInterval) != nil {
				return
			}
			continue
		}
		n, err := r.SweepOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := r.cfg.SweepInterval
		if err != nil {
			r.redisFailed("sweep", err, false)
		} else if n == sweepBatch {
			wait = 0 // more are due
		}
		if wait > 0 && lifecycle.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// SweepOnce runs one sweep of the Redis side and returns how many entries
// it looked at.
func (r *Router) SweepOnce(ctx context.Context) (int, error) {
	n, looked, err := r.st.Sweep(ctx, sweepBatch)
	r.m.swept.Add(uint64(n))
	return looked, err
}

// Drift is one pool's Redis counter against the engine's availability
// (on_hand less live reservations).
type Drift struct {
	Key       reservation.PoolKey
	Counter   int64 // the Redis counter; 0 when missing
	Missing   bool  // no counter in Redis
	Available int64 // the engine's
	Drift     int64 // Counter - Available
	Checks    int   // consecutive checks with this pool drifting
}

// driftState is the drift loop's memory and what it publishes.
type driftState struct {
	streak map[reservation.PoolKey]int // owned by the loop

	mu     sync.Mutex // guards following
	last   []Drift
	pools  int
	hasRun bool
}

func (d *driftState) publish(all []Drift, drifting int) {
	d.mu.Lock()
	d.last, d.pools, d.hasRun = all, drifting, true
	d.mu.Unlock()
}

func (d *driftState) published() ([]Drift, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Drift(nil), d.last...), d.pools
}

func (r *Router) runDrift(ctx context.Context) {
	for lifecycle.Sleep(ctx, r.cfg.DriftInterval) == nil {
		if !r.duty.Runs(lifecycle.DutyRedisDrift) {
			continue
		}
		if _, err := r.DriftOnce(ctx, nil); err != nil && ctx.Err() == nil {
			r.log.Warn("legacy: drift check failed", "err", err)
		}
	}
}

// maxDriftReported bounds the pools the drift gauge carries (by largest
// drift).
const maxDriftReported = 20

// DriftOnce compares each pool's Redis counter with the engine's
// availability: keys, or, when nil, the pools most recently reserved from in
// this process. Both are read without locks, one after the other, so a
// reserve between the two reads shows as drift for one check: a pool is
// logged only after Config.DriftAlertAfter consecutive checks. It
// returns the pools compared, largest drift first. Not safe to call
// concurrently with itself or with the loop Start runs.
func (r *Router) DriftOnce(ctx context.Context, keys []reservation.PoolKey) ([]Drift, error) {
	r.m.driftChecks.Add(1)
	if keys == nil {
		keys = r.hot.keys()
	}
	if r.drift.streak == nil {
		r.drift.streak = map[reservation.PoolKey]int{}
	}
	if _, err := r.SweepOnce(ctx); err != nil {
		r.m.driftErrors.Add(1)
		return nil, err
	}
	counters, err := r.st.Counters(ctx, keys)
	if err != nil {
		r.m.driftErrors.Add(1)
		return nil, err
	}
	avail, err := r.eng.Available(ctx, keys)
	if err != nil {
		r.m.driftErrors.Add(1)
		return nil, err
	}
	var out []Drift
	drifting := 0
	for _, k := range keys {
		a, ok := avail[k]
		if !ok {
			continue // no ledger row
		}
		c, have := counters[k]
		d := Drift{Key: k, Counter: c, Missing: !have, Available: a, Drift: c - a}
		if d.Drift != 0 {
			drifting++
			r.drift.streak[k]++
			d.Checks = r.drift.streak[k]
			if d.Checks == r.cfg.DriftAlertAfter {
				r.log.Error("legacy: the Redis counter drifts from the engine's availability (run `holdfast resync-redis` before Redis decides again)",
					"pool", k.String(), "counter", c, "counter_missing", !have, "available", a, "drift", d.Drift, "checks", d.Checks)
			}
		} else {
			delete(r.drift.streak, k)
		}
		out = append(out, d)
	}
	for k := range r.drift.streak {
		if _, ok := avail[k]; !ok {
			delete(r.drift.streak, k)
		}
	}
	sort.Slice(out, func(i, j int) bool { return abs(out[i].Drift) > abs(out[j].Drift) })
	pub := out
	if len(pub) > maxDriftReported {
		pub = pub[:maxDriftReported]
	}
	r.drift.publish(pub, drifting)
	return out, nil
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}
