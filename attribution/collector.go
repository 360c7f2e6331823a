package attribution

import (
	"strings"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// Holder is one backend connection held by a client right now.
type Holder struct {
	Tag           string // the Name of the Tag it was borrowed under
	InTransaction bool
}

// Gate is an on-call control in force on a tag.
type Gate struct {
	Tag     string
	Drained bool // new borrows for the tag fail fast
	Limit   int  // most backend connections the tag may hold at once; 0 (or less) means no cap...
	Limited bool // ... unless Limited: a cap is in force, and Limit 0 admits no one
}

// capped reports whether g has a cap in force.
func (g Gate) capped() bool { return g.Limited || g.Limit > 0 }

// LiveState is the proxy's live state, read by the collector at scrape time
// only. Both methods may be called concurrently with the proxy's work and
// must return slices the collector may keep.
type LiveState interface {
	Holders() []Holder
	Gates() []Gate
}

// collector turns a Recorder's Snapshot and a LiveState into metrics at
// scrape time.
type collector struct {
	r    *Recorder
	live LiveState // may be nil

	hold, wait, stmt               *prometheus.Desc
	exec, idle, engine             *prometheus.Desc
	borrows, statements, errors    *prometheus.Desc
	transactions, slowTransactions *prometheus.Desc
	pins, rejected, timeouts       *prometheus.Desc
	held, drained, limit           *prometheus.Desc
	folded, retired                *prometheus.Desc
}

// NewCollector returns a Collector of r's accounting and live's state,
// named holdfast_tag_* (and holdfast_tags_folded_total). live may be nil:
// then the held_connections, drained and connection_limit gauges are not
// reported. Register it on an injected registry, not the global one.
//
// To keep the endpoint small, a tag with nothing recorded has no series; an
// active tag has every counter without a reason label, zero or not, while a
// histogram appears with its first observation and a pins_total or
// rejected_total reason with its first count. The held_connections gauge is
// reported for tags holding at least one connection and for every tag in
// Gates (0 when it holds none), drained for every tag in Gates, and
// connection_limit for tags with a cap. A tag is at most 86 series (three
// histograms of 21, eight counters, 15 reasons), typically 71 and 4 KiB of
// text exposition, so the endpoint is bounded by MaxTags (about 2 MiB at the
// default 500), whatever the number of distinct names clients send.
func NewCollector(r *Recorder, live LiveState) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("holdfast_tag_"+name, help, labels, nil)
	}
	return &collector{
		r:    r,
		live: live,
		hold: d("hold_seconds",
			"Time a backend connection was held per borrow, from being lent to the tag to its return to the pool.", "tag"),
		wait: d("wait_seconds",
			"Time a borrower of the tag waited for a backend connection before it was lent one.", "tag"),
		stmt: d("statement_seconds",
			"Statement execution time as seen by holdfast, from sending the statement to the backend to the end of its answer.", "tag"),
		exec: d("exec_seconds_total",
			"Part of the tag's connection hold time spent executing statements.", "tag"),
		idle: d("idle_in_transaction_seconds_total",
			"Part of the tag's connection hold time spent idle inside an open transaction, waiting for the client's next statement.", "tag"),
		engine: d("engine_seconds_total",
			"Backend connection time the reservation engine spent on the tag's CALL holdfast.* (a batch's time split among its callers). The same time is in the hold of the holdfast:* tag the engine borrowed under.", "tag"),
		borrows: d("borrows_total",
			"Backend connections lent to the tag.", "tag"),
		statements: d("statements_total",
			"Statements the tag ran.", "tag"),
		errors: d("errors_total",
			"Statements of the tag that failed.", "tag"),
		transactions: d("transactions_total",
			"Transactions of the tag (begun explicitly or with autocommit off), counted when they commit or roll back.", "tag"),
		slowTransactions: d("slow_transactions_total",
			"Transactions of the tag that held their backend connection far longer than they executed.", "tag"),
		pins: d("pins_total",
			"Times a client session of the tag was pinned to its backend connection by session state, by reason.", "tag", "reason"),
		rejected: d("rejected_total",
			"Borrows of the tag refused, by reason: drained (the tag is drained), limit (the wait under its connection cap timed out), other.", "tag", "reason"),
		timeouts: d("timeouts_total",
			"Client sessions of the tag ended by a bound, by reason: idle_in_transaction, max_transaction_time, client_write (the client stopped reading), wait_timeout (its own), other.", "tag", "reason"),
		held: d("held_connections",
			"Backend connections the tag's clients hold now; reported for tags holding one or more and for tags with a drain or cap.", "tag"),
		drained: d("drained",
			"1 when the tag is drained (its new borrows fail fast), else 0; reported for tags with a drain or cap.", "tag"),
		limit: d("connection_limit",
			"Most backend connections the tag may hold at once; reported only for tags with a cap in force.", "tag"),
		folded: prometheus.NewDesc("holdfast_tags_folded_total",
			"Tag lookups counted under tag=\"other\" because the name was new past the max_tags bound, or not a valid tag.", nil, nil),
		retired: prometheus.NewDesc("holdfast_tags_retired_total",
			"Tags retired after retire_idle without activity to make room for new tags; their series leave the metrics.", nil, nil),
	}
}

func (c *collector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.hold, c.wait, c.stmt, c.exec, c.idle, c.engine, c.borrows, c.statements, c.errors,
		c.transactions, c.slowTransactions, c.pins, c.rejected, c.timeouts, c.held, c.drained, c.limit, c.folded, c.retired}
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, tag string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, tag)
	}
	// Recorder names are sanitized ASCII: valid label values, one per tag.
	for _, s := range c.r.Snapshot() {
		for _, h := range []struct {
			d *prometheus.Desc
			s *HistogramSnapshot
		}{{c.hold, &s.Hold}, {c.wait, &s.Wait}, {c.stmt, &s.Stmt}} {
			if h.s.Count != 0 {
				ch <- h.s.Metric(h.d, s.Tag)
			}
		}
		counter(c.exec, s.ExecSeconds, s.Tag)
		counter(c.idle, s.IdleInTxnSeconds, s.Tag)
		counter(c.engine, s.EngineSeconds, s.Tag)
		counter(c.borrows, float64(s.Borrows), s.Tag)
		counter(c.statements, float64(s.Statements), s.Tag)
		counter(c.errors, float64(s.Errors), s.Tag)
		counter(c.transactions, float64(s.Transactions), s.Tag)
		counter(c.slowTransactions, float64(s.SlowTransactions), s.Tag)
		for reason, n := range s.Pins {
			counter(c.pins, float64(n), s.Tag, reason)
		}
		for reason, n := range s.Rejected {
			counter(c.rejected, float64(n), s.Tag, reason)
		}
		for reason, n := range s.Timeouts {
			counter(c.timeouts, float64(n), s.Tag, reason)
		}
	}
	counter(c.folded, float64(c.r.Folded()))
	counter(c.retired, float64(c.r.Retired()))
	if c.live == nil {
		return
	}

	// The live state comes from outside: its names are made valid label
	// values, and duplicates merged (drained if any entry says so, the
	// smallest cap), so that a bad entry cannot fail the scrape.
	held := make(map[string]int)
	for _, h := range c.live.Holders() {
		held[labelValue(h.Tag)]++
	}
	gates := make(map[string]Gate)
	for _, g := range c.live.Gates() {
		tag := labelValue(g.Tag)
		if prev, ok := gates[tag]; ok {
			g.Drained = g.Drained || prev.Drained
			if prev.capped() && (!g.capped() || prev.Limit < g.Limit) {
				g.Limit, g.Limited = prev.Limit, true
			}
		}
		gates[tag] = g
		if _, ok := held[tag]; !ok {
			held[tag] = 0
		}
	}
	for tag, n := range held {
		gauge(c.held, float64(n), tag)
	}
	for tag, g := range gates {
		drained := 0.0
		if g.Drained {
			drained = 1
		}
		gauge(c.drained, drained, tag)
		if g.capped() {
			gauge(c.limit, float64(max(g.Limit, 0)), tag)
		}
	}
}

// labelValue returns s as a valid label value: invalid UTF-8 becomes '_'.
func labelValue(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "_")
}
