package admin

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/internal/version"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// The status page's data (GET /api/status): the server's live state, and
// rates over the last rateWindow or more, computed against samples taken
// every Options.SampleEvery (by Serve, or by a status request finding the
// newest sample due).

// rateWindow is the shortest span the page's rates are measured over, once
// the history reaches that far back.
const rateWindow = 10 * time.Second

// maxStatusTags and maxStatusHolders bound the page's rows.
const (
	maxStatusTags    = 100
	maxStatusHolders = 25
)

// sample is one reading of the counters the page's rates come from.
type sample struct {
	at     time.Time
	tags   map[string]tagSample
	pool   pool.Stats
	engine engineSample
}

type tagSample struct {
	// hold is the tag's finished hold seconds plus the age of its holds in
	// flight: its change over an interval is the hold time within it, so
	// a transaction that is still open counts as it goes.
	hold     float64
	finished float64 // finished hold seconds alone
	idle     float64 // idle in transaction, of finished holds
	wait     float64
	stmts    uint64
	errors   uint64
	slow     uint64
}

// reading is what one request or sampler tick reads from the server.
type reading struct {
	sample
	tags    []proxy.TagInfo
	holders []proxy.HolderInfo
	stats   proxy.ServerStats
}

func (a *Admin) read() reading {
	r := reading{tags: a.srv.Tags(), holders: a.srv.Holders(), stats: a.srv.Stats()}
	r.at = a.o.Now()
	r.pool = r.stats.Pool
	r.sample.tags = make(map[string]tagSample, len(r.tags))
	for _, t := range r.tags {
		r.sample.tags[t.Tag] = tagSample{hold: t.HoldSeconds, finished: t.HoldSeconds, idle: t.IdleInTxnSeconds,
			wait: t.WaitSeconds, stmts: t.Statements, errors: t.Errors, slow: t.SlowTransactions}
	}
	for _, h := range r.holders {
		ts := r.sample.tags[h.Tag]
		ts.hold += h.HeldFor
		r.sample.tags[h.Tag] = ts
	}
	r.engine = readEngine(a.o.Gatherer)
	return r
}

func (a *Admin) sample() sample { return a.read().sample }

// history is the samples kept, oldest first.
type history struct {
	max int

	mu      sync.Mutex // guards samples
	samples []sample
}

func (h *history) add(s sample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := len(h.samples); n > 0 && !s.at.After(h.samples[n-1].at) {
		return // a clock step back, or a tie
	}
	if len(h.samples) >= h.max {
		h.samples = slices.Delete(h.samples, 0, len(h.samples)-h.max+1)
	}
	h.samples = append(h.samples, s)
}

// snapshot returns a copy of the samples (add shifts them in place).
func (h *history) snapshot() []sample {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.samples)
}

type statusJSON struct {
	Time time.Time `json:"time"`
	// Version and Commit are this holdfast's build (holdfast version);
	// Readiness is what ReadyPath answers, with the conditions unmet.
	Version   string    `json:"version"`
	Commit    string    `json:"commit"`
	Readiness Readiness `json:"readiness"`
	// WindowSeconds is the span the rates are measured over; 0 until a
	// second sample exists (then every rate is 0).
	WindowSeconds rounded      `json:"window_seconds"`
	SampleSeconds rounded      `json:"sample_seconds"` // between history points
	Pool          poolStatus   `json:"pool"`
	Tags          []tagStatus  `json:"tags"`
	MoreTags      int          `json:"more_tags"` // active tags not listed
	Folded        uint64       `json:"folded"`
	Holders       []holderJSON `json:"holders"` // longest held first
	HoldersTotal  int          `json:"holders_total"`
	HoldersInTxn  int          `json:"holders_in_transaction"`
	Gates         []gateJSON   `json:"gates"`
	// Here is every control in force on this instance, from every
	// source.
	Here   []hereJSON  `json:"controls_here"`
	Engine *engineJSON `json:"engine"` // null when no engine reports
	Fleet  *fleetJSON  `json:"fleet"`  // null with fleet.disabled
	// Classes are the overload classes' counts since start, highest
	// class first.
	Classes []proxy.ClassStat `json:"classes"`
	// Replicas are backend.replicas and their state (empty: none).
	Replicas []proxy.ReplicaState `json:"replicas"`
	// Topology is which server is the primary, the statements held, and
	// the pauses in force: GET /api/topology's answer (null: the server
	// checks no topology).
	Topology *topologyJSON `json:"topology"`
}

// fleetJSON is what this instance knows of the fleet: whether its
// controls are current, the controls in force fleet-wide, the duties it
// runs, and whether the fleet over-commits the server.
type fleetJSON struct {
	Instance  string `json:"instance_id"`
	Instances int    `json:"instances"`
	Known     bool   `json:"known"`
	Stale     bool   `json:"stale"`
	NoSchema  bool   `json:"no_schema"`
	Error     string `json:"error,omitempty"`
	// ReadAgeSeconds is the time since the last good read of the
	// controls (-1: none yet).
	ReadAgeSeconds rounded            `json:"read_age_seconds"`
	PollSeconds    rounded            `json:"poll_seconds"`
	Duties         []string           `json:"duties"`
	Sizing         fleet.Sizing       `json:"sizing"`
	Limits         fleet.ServerLimits `json:"server_limits"`
	Controls       []controlJSON      `json:"controls"`
}

func (a *Admin) fleetStatus(now time.Time) *fleetJSON {
	if a.o.Fleet == nil {
		return nil
	}
	st := a.o.Fleet.Status()
	f := &fleetJSON{Instance: st.Instance, Instances: max(1, len(st.Members)), Known: st.Known, Stale: st.Stale,
		NoSchema: st.NoSchema, Error: st.Error, ReadAgeSeconds: -1, PollSeconds: rounded(st.PollSeconds),
		Duties: st.Duties, Sizing: st.Sizing, Limits: st.Limits, Controls: controlsJSON(st.Controls)}
	if !st.LastRead.IsZero() {
		f.ReadAgeSeconds = rounded(now.Sub(st.LastRead).Seconds())
	}
	if f.Duties == nil {
		f.Duties = []string{}
	}

	return f
}

type poolStatus struct {
	poolJSON
	// Saturation is in_use / max.
	Saturation rounded `json:"saturation"`
	// WaitRate is the pool's wait seconds per second over the window: the
	// average number of borrowers queued for a connection.
	WaitRate         rounded `json:"wait_rate"`
	TimeoutsInWindow uint64  `json:"timeouts_in_window"`
	RejectedInWindow uint64  `json:"rejected_in_window"`
}

type tagStatus struct {
	Tag     string `json:"tag"`
	HeldNow int    `json:"held_now"`
	// HoldRate is hold seconds per second over the window, holds in flight
	// included: the average number of connections the tag held.
	HoldRate rounded `json:"hold_rate"`
	// PoolShare is HoldRate over pool.max.
	PoolShare rounded `json:"pool_share"`
	// WaitRate is wait seconds per second: its borrowers waiting on average.
	WaitRate rounded `json:"wait_rate"`
	// IdleInTxnShare is the part of the window's finished hold time spent
	// idle inside a transaction.
	IdleInTxnShare        rounded `json:"idle_in_transaction_share"`
	StatementsPerSecond   rounded `json:"statements_per_second"`
	Errors                uint64  `json:"errors"` // in the window
	SlowTransactions      uint64  `json:"slow_transactions"`
	SlowTransactionsTotal uint64  `json:"slow_transactions_total"`
	OldestHoldSeconds     rounded `json:"oldest_hold_seconds"` // its longest hold now
	Drained               bool    `json:"drained"`
	Limit                 int     `json:"limit"`
	Limited               bool    `json:"limited"` // a cap is in force (limit 0 admits no one)
	Class                 string  `json:"class"`   // overload class
	Shed                  uint64  `json:"shed"`    // borrows shed since start (error 9006)
	Waiting               int     `json:"waiting"` // queued under its limit now
	// History is the tag's pool share between consecutive samples, oldest
	// first, ending with the interval up to now.
	History []rounded `json:"history"`
}

func (a *Admin) apiStatus(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, a.status())
}

func (a *Admin) status() statusJSON {
	cur := a.read()
	hist := a.hist.snapshot()
	if n := len(hist); n == 0 || cur.at.Sub(hist[n-1].at) >= a.o.SampleEvery {
		a.hist.add(cur.sample)
		hist = a.hist.snapshot()
	}
	// base: the newest sample at least rateWindow old, else the oldest.
	var base *sample
	for i := len(hist) - 1; i >= 0; i-- {
		if !hist[i].at.Before(cur.at) {
			continue
		}
		base = &hist[i]
		if cur.at.Sub(hist[i].at) >= rateWindow {
			break
		}
	}
	waiting := a.srv.Waiting()
	st := statusJSON{Time: cur.at, SampleSeconds: rounded(a.o.SampleEvery.Seconds()), Folded: a.srv.TagsFolded()}
	build := version.Get()
	st.Version, st.Commit, st.Readiness = build.Version, build.Commit, a.readiness()
	maxConns := max(cur.pool.Max, 1)
	var sec float64
	if base != nil {
		sec = cur.at.Sub(base.at).Seconds()
		st.WindowSeconds = rounded(sec)
	}
	st.Pool = poolStatus{poolJSON: poolAnswer(cur.stats, waiting),
		Saturation: rounded(float64(cur.pool.InUse) / float64(maxConns))}
	if base != nil {
		st.Pool.WaitRate = rounded((cur.pool.WaitTime - base.pool.WaitTime).Seconds() / sec)
		st.Pool.TimeoutsInWindow = delta(cur.pool.Timeouts, base.pool.Timeouts)
		st.Pool.RejectedInWindow = delta(cur.pool.Rejected, base.pool.Rejected)
	}

	oldest := map[string]float64{}
	for _, h := range cur.holders {
		oldest[h.Tag] = max(oldest[h.Tag], h.HeldFor)
	}
	points := append(slices.Clone(hist), cur.sample)
	if n := len(points); n > 1 && !points[n-1].at.After(points[n-2].at) {
		points = points[:n-1] // cur was just added to the history
	}
	for _, t := range cur.tags {
		c := cur.sample.tags[t.Tag]
		ts := tagStatus{Tag: t.Tag, HeldNow: t.HeldNow, Drained: t.Drained, Limit: t.Limit, Limited: t.Limited, Class: t.Class, Shed: t.Shed,
			SlowTransactionsTotal: t.SlowTransactions, OldestHoldSeconds: rounded(oldest[t.Tag]),
			Waiting: waiting.ByTag[t.Tag]}
		if base != nil {
			b := base.tags[t.Tag]
			ts.HoldRate = rounded(delta(c.hold, b.hold) / sec)
			ts.WaitRate = rounded(delta(c.wait, b.wait) / sec)
			ts.StatementsPerSecond = rounded(float64(delta(c.stmts, b.stmts)) / sec)
			ts.Errors = delta(c.errors, b.errors)
			ts.SlowTransactions = delta(c.slow, b.slow)
			if f := delta(c.finished, b.finished); f > 0 {
				ts.IdleInTxnShare = rounded(min(delta(c.idle, b.idle)/f, 1))
			}
		}
		ts.PoolShare = rounded(float64(ts.HoldRate) / float64(maxConns))
		active := ts.HoldRate != 0 || ts.HeldNow > 0 || ts.WaitRate != 0 || ts.StatementsPerSecond != 0 ||
			ts.Errors > 0 || ts.Drained || ts.Limited || ts.Waiting > 0
		for i := 1; i < len(points); i++ {
			p, q := points[i-1], points[i]
			v := delta(q.tags[t.Tag].hold, p.tags[t.Tag].hold) / q.at.Sub(p.at).Seconds() / float64(max(q.pool.Max, 1))
			ts.History = append(ts.History, rounded(v))
			active = active || rounded(v) != 0
		}
		if ts.History == nil {
			ts.History = []rounded{}
		}
		if active {
			st.Tags = append(st.Tags, ts)
		}
	}
	slices.SortFunc(st.Tags, func(x, y tagStatus) int {
		return cmp.Or(cmp.Compare(y.HoldRate, x.HoldRate), cmp.Compare(y.HeldNow, x.HeldNow),
			cmp.Compare(y.WaitRate, x.WaitRate), strings.Compare(x.Tag, y.Tag))
	})
	if len(st.Tags) > maxStatusTags {
		st.MoreTags = len(st.Tags) - maxStatusTags
		st.Tags = st.Tags[:maxStatusTags]
	}
	if st.Tags == nil {
		st.Tags = []tagStatus{}
	}

	st.HoldersTotal = len(cur.holders)
	for _, h := range cur.holders {
		if h.InTransaction {
			st.HoldersInTxn++
		}
	}
	st.Holders = holdersJSON(cur.holders[:min(len(cur.holders), maxStatusHolders)])
	st.Gates = a.gatesJSON(a.srv.Gates(), waiting)
	st.Here = a.hereJSON()
	st.Engine = engineStatus(cur.engine, base, sec)
	st.Fleet = a.fleetStatus(time.Now())
	st.Classes = a.srv.ClassStats()
	if st.Replicas = a.srv.Replicas(); st.Replicas == nil {
		st.Replicas = []proxy.ReplicaState{}
	}
	if t, ok := a.topologyOf(); ok {
		st.Topology = &t
	}
	return st
}

// delta is how much a counter grew from prev to cur.
func delta[N uint64 | float64](cur, prev N) N {
	if cur < prev { // restarted or retired: counts from zero
		return cur
	}
	return cur - prev
}
