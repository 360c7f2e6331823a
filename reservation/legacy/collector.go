package legacy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector turns Router.Stats into Prometheus metrics at scrape time.
// Register it on an injected (non-global) registry.
type Collector struct {
	r *Router

	comparisons, durations, decided, redisErrors, swept        *prometheus.Desc
	version, percent, shops, info, polls, pollErrors, stale    *prometheus.Desc
	drift, driftPools, driftChecks, driftErrors, pollIntervalS *prometheus.Desc
}

// NewCollector returns a collector for r's metrics.
func NewCollector(r *Router) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("holdfast_"+name, help, labels, nil)
	}
	return &Collector{
		r: r,
		comparisons: d("shadow_comparisons_total", "Calls answered by both the legacy Redis counter and the engine, by procedure and each side's answer class "+
			"(a disagreement is two different business answers; busy, unavailable, outcome_unknown and error are failures of one side).",
			"procedure", "redis", "holdfast"),
		durations:   d("shadow_duration_seconds", "Time each side took to answer a call, by procedure and side (redis, holdfast).", "procedure", "side"),
		decided:     d("authority_reserves_total", "Reserves by the authority that decided them (redis: the legacy counter, the engine in shadow; holdfast: the engine, Redis written after it).", "authority"),
		redisErrors: d("redis_errors_total", "Redis commands that failed, by operation.", "operation"),
		swept:       d("redis_expired_total", "Reservations the Redis sweeper expired, giving their units back to the counters."),
		version:     d("authority_switch_version", "Version of the authority switch this instance runs (0: not read yet, the configured seed)."),
		percent:     d("authority_switch_percent", "Percent of shops (by CRC32(shop_id) % 100) on holdfast under authority redis."),
		shops:       d("authority_switch_shops", "Shops listed on holdfast under authority redis."),
		info:        d("authority_switch_info", "1 for the switch's base authority.", "authority"),
		polls:       d("authority_switch_polls_total", "Reads of the authority switch table."),
		pollErrors:  d("authority_switch_poll_errors_total", "Reads of the authority switch table that failed (the state in force is kept)."),
		pollIntervalS: d("authority_switch_poll_interval_seconds",
			"How often this instance reads the switch: a change is in force on every instance within it."),
		stale:       d("redis_stale", "1 when the Redis counters are known to have missed a write (fleet-wide, since the last resync-redis)."),
		drift:       d("redis_drift_units", "Redis counter minus the engine's availability (on_hand - live reservations) at the last drift check, for the pools with the largest drift.", "shop_id", "inventory_item_id", "inventory_group_id"),
		driftPools:  d("redis_drift_pools", "Pools whose Redis counter differed from the engine's availability at the last drift check."),
		driftChecks: d("redis_drift_checks_total", "Drift checks run."),
		driftErrors: d("redis_drift_errors_total", "Drift checks that failed to read one side."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.comparisons, c.durations, c.decided, c.redisErrors, c.swept, c.version, c.percent,
		c.shops, c.info, c.polls, c.pollErrors, c.pollIntervalS, c.stale, c.drift, c.driftPools, c.driftChecks, c.driftErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, k := range s.Comparisons {
		counter(c.comparisons, k.Count, k.Procedure, k.Redis, k.Holdfast)
	}
	for _, p := range procNames {
		for _, side := range sideNames {
			ch <- s.Durations[[2]string{p, side}].Metric(c.durations, p, side)
		}
	}
	for _, a := range []string{"redis", "holdfast"} {
		counter(c.decided, s.Decided[a], a)
	}
	for op, n := range s.RedisErrors {
		counter(c.redisErrors, n, op)
	}
	counter(c.swept, s.Swept)
	gauge(c.version, float64(s.Switch.Version))
	gauge(c.percent, float64(s.Switch.Percent))
	gauge(c.shops, float64(len(s.Switch.Shops)))
	for _, a := range []string{"redis", "holdfast"} {
		v := 0.0
		if s.Switch.Authority == a {
			v = 1
		}
		gauge(c.info, v, a)
	}
	counter(c.polls, s.SwitchPolls)
	counter(c.pollErrors, s.SwitchPollErrors)
	gauge(c.pollIntervalS, c.r.sw.Interval().Seconds())
	stale := 0.0
	if s.Redis.Stale {
		stale = 1
	}
	gauge(c.stale, stale)
	for _, d := range s.Drift {
		gauge(c.drift, float64(d.Drift), strconv.FormatInt(d.Key.ShopID, 10), strconv.FormatInt(d.Key.ItemID, 10), strconv.FormatInt(d.Key.GroupID, 10))
	}
	gauge(c.driftPools, float64(s.DriftPools))
	counter(c.driftChecks, s.DriftChecks)
	counter(c.driftErrors, s.DriftErrors)
}
