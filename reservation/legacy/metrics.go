package legacy

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/reservation"
)

// counters is a small set of named counters (bounded names only).
type counters struct {
	mu sync.Mutex // guards m
	m  map[string]uint64
}

func (c *counters) inc(name string) {
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]uint64{}
	}
	c.m[name]++
	c.mu.Unlock()
}

func (c *counters) snapshot() map[string]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]uint64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

var (
	sideNames = []string{"redis", "holdfast"}
	procNames = []string{"reserve", "claim", "release", "extend"}
)

type metrics struct {
	decided     counters // reserves by the authority that decided them
	redisErrors counters // failed Redis commands by operation
	durations   map[[2]string]*attribution.Histogram
	swept       atomic.Uint64
	driftChecks atomic.Uint64
	driftErrors atomic.Uint64
}

func (m *metrics) init() {
	m.durations = map[[2]string]*attribution.Histogram{}
	for _, p := range procNames {
		for _, s := range sideNames {
			m.durations[[2]string{p, s}] = attribution.NewHistogram(reservation.DurationBuckets)
		}
	}
}

func (m *metrics) observe(proc, side string, d time.Duration) {
	if h := m.durations[[2]string{proc, side}]; h != nil {
		h.Observe(d)
	}
}

// Stats is a snapshot of the router's counters.
type Stats struct {
	// Comparisons counts pairs of answers (compare.go).
	Comparisons []Comparison
	// Decided counts reserves by the authority that decided them.
	Decided map[string]uint64
	// RedisErrors counts failed Redis commands by operation.
	RedisErrors map[string]uint64
	// Durations are each side's answer times, by procedure and side.
	Durations map[[2]string]attribution.HistogramSnapshot
	// Swept counts reservations the Redis sweeper expired.
	Swept uint64
	// Switch is the state in force here; SwitchPolls and SwitchPollErrors
	// count reads of the table.
	Switch                        State
	SwitchPolls, SwitchPollErrors uint64
	Redis                         RedisState
	// Drift is the last drift check's pools, largest drift first, and
	// DriftPools how many of them drifted.
	Drift                    []Drift
	DriftPools               int
	DriftChecks, DriftErrors uint64
}

// Stats returns a snapshot of the router's counters.
func (r *Router) Stats() Stats {
	s := Stats{
		Comparisons: r.cmp.snapshot(),
		Decided:     r.m.decided.snapshot(),
		RedisErrors: r.m.redisErrors.snapshot(),
		Durations:   map[[2]string]attribution.HistogramSnapshot{},
		Swept:       r.m.swept.Load(),
		Switch:      r.sw.Current(),
		SwitchPolls: r.sw.polls.Load(), SwitchPollErrors: r.sw.pollErrors.Load(),
		Redis:       r.sw.Redis(),
		DriftChecks: r.m.driftChecks.Load(), DriftErrors: r.m.driftErrors.Load(),
	}
	for k, h := range r.m.durations {
		s.Durations[k] = h.Snapshot()
	}
	s.Drift, s.DriftPools = r.drift.published()
	return s
}

// hotPools remembers the pools most recently reserved from in this
// process, at most max: the drift check's subjects.
type hotPools struct {
	max int

	mu   sync.Mutex // guards seen
	seen map[reservation.PoolKey]time.Time
}

func (h *hotPools) add(shop int64, lines []reservation.Line) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen == nil {
		h.seen = map[reservation.PoolKey]time.Time{}
	}
	for _, l := range lines {
		h.seen[reservation.PoolKey{ShopID: shop, ItemID: l.Item, GroupID: l.Group}] = now
	}
	if len(h.seen) > 2*h.max {
		h.trimLocked()
	}
}

func (h *hotPools) trimLocked() {
	type kv struct {
		k reservation.PoolKey
		t time.Time
	}
	all := make([]kv, 0, len(h.seen))
	for k, t := range h.seen {
		all = append(all, kv{k, t})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].t.After(all[j].t) })
	for _, x := range all[h.max:] {
		delete(h.seen, x.k)
	}
}

func (h *hotPools) keys() []reservation.PoolKey {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.seen) > h.max {
		h.trimLocked()
	}
	out := make([]reservation.PoolKey, 0, len(h.seen))
	for k := range h.seen {
		out = append(out, k)
	}
	return out
}
