package refiller

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/reservation"
)

// Refill results.
var resultNames = []string{"filled", "trimmed", "noop", "error"}

const (
	resFilled = iota
	resTrimmed
	resNoop
	resError
)

type metrics struct {
	refills   [3][4]atomic.Uint64 // by trigger, result
	added     atomic.Uint64
	removed   atomic.Uint64
	expired   atomic.Uint64
	deadlocks atomic.Uint64
	lockWaits atomic.Uint64
	dur       *attribution.Histogram
}

func (m *metrics) init() { m.dur = attribution.NewHistogram(reservation.DurationBuckets) }

func (m *metrics) countRetry(code uint16) {
	if code == 1213 {
		m.deadlocks.Add(1)
	} else {
		m.lockWaits.Add(1)
	}
}

func (m *metrics) observe(t Trigger, res Result, err error, d time.Duration) {
	r := resNoop
	switch {
	case err != nil:
		r = resError
	case res.Added > 0:
		r = resFilled
	case res.Removed > 0:
		r = resTrimmed
	}
	m.refills[t][r].Add(1)
	m.added.Add(uint64(res.Added))
	m.removed.Add(uint64(res.Removed))
	m.expired.Add(uint64(res.Expired))
	m.dur.Observe(d)
}

// Stats is a snapshot of the refiller's counters.
type Stats struct {
	// Refills counts refill transactions by trigger (inline, background,
	// scan) and result (filled, trimmed, noop, error). The inline rate is
	// the leading indicator of reserve p99.
	Refills map[string]map[string]uint64
	// UnitsAdded and UnitsRemoved count pool rows inserted and trimmed.
	UnitsAdded, UnitsRemoved uint64
	// ExpiredDeleted counts expired reserved lines refills deleted.
	ExpiredDeleted uint64
	// Deadlocks and LockWaitTimeouts count refill transactions retried.
	Deadlocks, LockWaitTimeouts uint64
	Duration                    attribution.HistogramSnapshot
	// Hottest is the last seen depth of the most reserved-from pools.
	Hottest []PoolDepth
}

// Stats returns a snapshot of the refiller's counters.
func (r *Refiller) Stats() Stats {
	s := Stats{
		Refills:          map[string]map[string]uint64{},
		UnitsAdded:       r.m.added.Load(),
		UnitsRemoved:     r.m.removed.Load(),
		ExpiredDeleted:   r.m.expired.Load(),
		Deadlocks:        r.m.deadlocks.Load(),
		LockWaitTimeouts: r.m.lockWaits.Load(),
		Duration:         r.m.dur.Snapshot(),
	}
	for t, tn := range triggerNames {
		s.Refills[tn] = map[string]uint64{}
		for res, rn := range resultNames {
			s.Refills[tn][rn] = r.m.refills[t][res].Load()
		}
	}
	r.mu.Lock()
	s.Hottest = r.hottestLocked()
	r.mu.Unlock()
	return s
}

// Collector turns Refiller.Stats into Prometheus metrics at scrape time.
type Collector struct {
	r                                       *Refiller
	refills, units, expired, retries, depth *prometheus.Desc
	dur                                     *prometheus.Desc
}

// NewCollector returns a collector for r's metrics, named
// holdfast_reservation_refill* and holdfast_reservation_pool_depth.
func NewCollector(r *Refiller) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("holdfast_reservation_"+name, help, labels, nil)
	}
	return &Collector{
		r:       r,
		refills: d("refills_total", "Refill transactions, by trigger (inline, background, scan) and result (filled, trimmed, noop, error).", "trigger", "result"),
		units:   d("refill_units_total", "Pool units added or trimmed by refills.", "direction"),
		expired: d("refill_expired_lines_total", "Expired reserved lines deleted by refills."),
		retries: d("refill_tx_retries_total", "Refill transactions retried after a deadlock (1213) or lock-wait timeout (1205).", "reason"),
		depth:   d("pool_depth", "Units in the pool, for the most reserved-from pools (bounded by hot_pools).", "shop_id", "inventory_item_id", "inventory_group_id"),
		dur:     d("refill_duration_seconds", "Duration of refill transactions."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.refills, c.units, c.expired, c.retries, c.depth, c.dur} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, tn := range triggerNames {
		for _, rn := range resultNames {
			counter(c.refills, s.Refills[tn][rn], tn, rn)
		}
	}
	counter(c.units, s.UnitsAdded, "added")
	counter(c.units, s.UnitsRemoved, "removed")
	counter(c.expired, s.ExpiredDeleted)
	counter(c.retries, s.Deadlocks, "deadlock")
	counter(c.retries, s.LockWaitTimeouts, "lock_wait_timeout")
	for _, p := range s.Hottest {
		ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(p.Depth),
			strconv.FormatInt(p.Key.ShopID, 10), strconv.FormatInt(p.Key.ItemID, 10), strconv.FormatInt(p.Key.GroupID, 10))
	}
	ch <- s.Duration.Metric(c.dur)
}
