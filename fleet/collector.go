package fleet

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector turns a Fleet's Status into Prometheus metrics at scrape time.
// Register it on an injected (non-global) registry.
type Collector struct {
	f *Fleet

	known, stale, age, polls, failures, interval       *prometheus.Desc
	controls, instances, duty, grant, cap              *prometheus.Desc
	share, demand, ignored, truncated                  *prometheus.Desc
	poolSum, poolLimit, stmtSum, stmtLimit, overcommit *prometheus.Desc
}

// NewCollector returns a collector for f's metrics.
func NewCollector(f *Fleet) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("holdfast_fleet_"+name, help, labels, nil)
	}
	return &Collector{
		f:          f,
		known:      d("controls_known", "1 once this instance has read the fleet's controls (or found the fleet's tables missing); 0 while it starts with the database unreachable."),
		stale:      d("controls_stale", "1 when the last read of the fleet's controls failed: the controls in force are the last read."),
		age:        d("controls_age_seconds", "Seconds since this instance last read the fleet's controls."),
		polls:      d("polls_total", "Reads of the fleet's tables."),
		failures:   d("poll_errors_total", "Reads of the fleet's tables that failed (the last controls read stay in force)."),
		interval:   d("poll_interval_seconds", "How often this instance reads the fleet's tables: a control is in force on every instance within it."),
		controls:   d("controls", "Fleet controls in force, by kind.", "kind"),
		instances:  d("instances", "Live holdfast instances in the fleet (heartbeat within fleet.ttl), this one included."),
		duty:       d("duty_held", "1 while this instance holds the lease of a fleet duty, so runs it (exactly one instance should, fleet-wide).", "duty"),
		grant:      d("cap_grant_connections", "This instance's grant of a fleet-wide cap (a tag's connections, or shape/<hex> for a shape's statements running at once): what it may hold.", "tag"),
		cap:        d("cap_connections", "A fleet-wide cap (a tag's connections, or shape/<hex> for a shape's statements running at once).", "tag"),
		share:      d("cap_share_connections", "This instance's fair share of a fleet-wide cap now, by the live instances' demand: what its grant moves to.", "tag"),
		demand:     d("cap_demand", "This instance's demand on a fleet-wide cap at its last renewal: held plus queued under the cap, the most at once in the poll interval.", "tag"),
		ignored:    d("controls_ignored", "Rows of holdfast_controls in force that this instance ignores (invalid, or of a kind it does not know): not applied."),
		truncated:  d("controls_truncated", "1 when holdfast_controls holds more rows in force than an instance reads (10000): the rest are not applied."),
		poolSum:    d("pool_max_sum", "Σ pool.max over the live instances: the most backend connections the fleet may open."),
		poolLimit:  d("pool_max_limit", "The server's max_connections less fleet.connection_reserve: what Σ pool.max should stay within."),
		stmtSum:    d("stmt_budget_sum", "Σ of the live instances' prepared-statement budgets."),
		stmtLimit:  d("stmt_budget_limit", "sessions.prepared_statement_share of the server's max_prepared_stmt_count: what the budgets should stay within."),
		overcommit: d("overcommitted", "1 when the fleet's instances together may exceed a limit of the server, by resource (connections, prepared_statements).", "resource"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.known, c.stale, c.age, c.polls, c.failures, c.interval, c.controls, c.instances,
		c.duty, c.grant, c.cap, c.share, c.demand, c.ignored, c.truncated, c.poolSum, c.poolLimit, c.stmtSum, c.stmtLimit, c.overcommit} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.f.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	gauge(c.known, b(s.Known))
	gauge(c.stale, b(s.Stale))
	if !s.LastRead.IsZero() {
		gauge(c.age, time.Since(s.LastRead).Seconds())
	}
	counter(c.polls, s.Polls)
	counter(c.failures, s.Failures)
	gauge(c.interval, s.PollSeconds)
	kinds := map[Kind]int{KindDrain: 0, KindLimit: 0, KindMaxTxn: 0, KindClass: 0, KindRoute: 0}
	for _, k := range s.Controls {
		kinds[k.Kind]++
	}
	for k, n := range kinds {
		gauge(c.controls, float64(n), string(k))
	}
	gauge(c.instances, float64(max(1, len(s.Members))))
	for _, d := range c.f.o.Duties {
		gauge(c.duty, b(slices.Contains(s.Duties, d)), d)
	}
	gauge(c.ignored, float64(len(s.Ignored)))
	gauge(c.truncated, b(s.Truncated))
	for _, cs := range s.Caps {
		gauge(c.cap, float64(cs.Cap), cs.Tag)
		gauge(c.grant, float64(cs.Granted), cs.Tag)
		gauge(c.share, float64(cs.Share), cs.Tag)
		for _, g := range cs.Grants {
			if g.Instance == s.Instance {
				gauge(c.demand, float64(g.Wanted), cs.Tag)
			}
		}
	}
	if s.Limits.MaxConnections > 0 {
		gauge(c.poolSum, float64(s.Sizing.PoolMax))
		gauge(c.poolLimit, float64(s.Sizing.PoolMaxLimit))
		gauge(c.stmtSum, float64(s.Sizing.StmtBudget))
		gauge(c.stmtLimit, float64(s.Sizing.StmtBudgetLimit))
		gauge(c.overcommit, b(s.Sizing.ConnsOver), "connections")
		gauge(c.overcommit, b(s.Sizing.StmtsOver), "prepared_statements")
	}
}
