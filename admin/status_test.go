package admin

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/internal/testkit"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// statusAnswer is the part of GET /api/status the tests read.
type statusAnswer struct {
	WindowSeconds float64 `json:"window_seconds"`
	Pool          struct {
		Saturation       float64 `json:"saturation"`
		Waiting          int     `json:"waiting"`
		WaitRate         float64 `json:"wait_rate"`
		TimeoutsInWindow uint64  `json:"timeouts_in_window"`
	} `json:"pool"`
	Tags []struct {
		Tag            string    `json:"tag"`
		HeldNow        int       `json:"held_now"`
		HoldRate       float64   `json:"hold_rate"`
		PoolShare      float64   `json:"pool_share"`
		WaitRate       float64   `json:"wait_rate"`
		IdleShare      float64   `json:"idle_in_transaction_share"`
		StmtsPerSecond float64   `json:"statements_per_second"`
		Slow           uint64    `json:"slow_transactions"`
		SlowTotal      uint64    `json:"slow_transactions_total"`
		Oldest         float64   `json:"oldest_hold_seconds"`
		Drained        bool      `json:"drained"`
		Limit          int       `json:"limit"`
		Waiting        int       `json:"waiting"`
		History        []float64 `json:"history"`
	} `json:"tags"`
	Holders []struct {
		Tag     string  `json:"tag"`
		HeldFor float64 `json:"held_for_seconds"`
	} `json:"holders"`
	HoldersTotal int `json:"holders_total"`
	Gates        []struct {
		Tag     string `json:"tag"`
		Reason  string `json:"reason"`
		InUse   int    `json:"in_use"`
		Waiting int    `json:"waiting"`
	} `json:"gates"`
	Engine *struct {
		HotPools []struct {
			ItemID string  `json:"inventory_item_id"`
			Depth  float64 `json:"depth"`
		} `json:"hot_pools"`
		InlinePerSecond   float64 `json:"inline_refills_per_second"`
		ReservesPerSecond float64 `json:"reserves_per_second"`
		InlineShare       float64 `json:"inline_refill_share"`
		Reconciler        struct {
			State  string `json:"state"`
			Cycles uint64 `json:"cycles"`
		} `json:"reconciler"`
	} `json:"engine"`
}

func getStatus(t *testing.T, a *Admin) (statusAnswer, string) {
	t.Helper()
	r := do(t, a.Handler(), "GET", "/api/status", "")
	if r.status != 200 {
		t.Fatalf("/api/status: %d %s", r.status, r.body)
	}
	var s statusAnswer
	decode(t, r, &s)
	return s, r.body
}

func (s statusAnswer) tag(t *testing.T, name string) int {
	t.Helper()
	for i, x := range s.Tags {
		if x.Tag == name {
			return i
		}
	}
	t.Fatalf("tag %s not on the status page: %+v", name, s.Tags)
	return -1
}

// TestStatusRates: the page's rates are the change of the counters between
// samples, with holds still in flight counted as they age; the sparkline
// has a point per sample interval.
func TestStatusRates(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 5, 12, 14, 0, 0, 0, time.UTC))
	f := &fakeServer{
		stats: proxy.ServerStats{Pool: pool.Stats{Open: 10, InUse: 9, Max: 10, WaitTime: time.Second}},
		tags: []proxy.TagInfo{
			{Tag: "checkout", HoldSeconds: 100, IdleInTxnSeconds: 10, WaitSeconds: 1, Statements: 1000, SlowTransactions: 2, HeldNow: 1},
			{Tag: "search", HoldSeconds: 50, Statements: 10},
			{Tag: "quiet", HoldSeconds: 1},
		},
		holders: []proxy.HolderInfo{{ClientID: 7, Tag: "checkout", HeldFor: 5, InTransaction: true}},
	}
	a := New(f, Options{Now: clock.Now, SampleEvery: 5 * time.Second, History: 3})
	s, _ := getStatus(t, a)
	if s.WindowSeconds != 0 || s.Tags[s.tag(t, "checkout")].HoldRate != 0 {
		t.Fatalf("first answer has rates: %+v", s)
	}

	clock.Advance(5 * time.Second)
	f.set(func(f *fakeServer) {
		f.stats.Pool.WaitTime = 2 * time.Second
		f.tags[0] = proxy.TagInfo{Tag: "checkout", HoldSeconds: 104, IdleInTxnSeconds: 12, WaitSeconds: 1.5, Statements: 1100,
			SlowTransactions: 3, HeldNow: 1}
		f.holders[0].HeldFor = 10 // the same transaction, 5 s older
	})
	s, body := getStatus(t, a)
	c := s.Tags[s.tag(t, "checkout")]
	// (104 + 10) - (100 + 5) = 9 hold seconds in 5 s.
	if s.WindowSeconds != 5 || c.HoldRate != 1.8 || c.PoolShare != 0.18 || c.WaitRate != 0.1 || c.IdleShare != 0.5 ||
		c.StmtsPerSecond != 20 || c.Slow != 1 || c.SlowTotal != 3 || c.Oldest != 10 {
		t.Errorf("checkout over 5 s: %+v", c)
	}
	if len(c.History) != 1 || c.History[0] != 0.18 {
		t.Errorf("checkout history %v, want [0.18]", c.History)
	}
	if !strings.Contains(body, `"hold_rate": 1.800`) {
		t.Errorf("rates are not rounded to three decimals:\n%s", body)
	}
	if s.Pool.WaitRate != 0.2 || s.Pool.Saturation != 0.9 {
		t.Errorf("pool %+v", s.Pool)
	}
	for _, x := range s.Tags {
		if x.Tag == "quiet" {
			t.Errorf("a tag that did nothing is listed: %+v", x)
		}
	}
	if s.Tags[0].Tag != "checkout" {
		t.Errorf("tags not by hold rate: %+v", s.Tags)
	}

	// Two more intervals: the window reaches back 10 s; History keeps 3
	// samples, so 2 intervals of sparkline plus the one up to now.
	for i := 0; i < 2; i++ {
		clock.Advance(5 * time.Second)
		f.set(func(f *fakeServer) { f.holders[0].HeldFor += 5 })
		s, _ = getStatus(t, a)
	}
	c = s.Tags[s.tag(t, "checkout")]
	if s.WindowSeconds != 10 || c.HoldRate != 1 || len(c.History) != 2 || c.History[1] != 0.1 {
		t.Errorf("after 15 s: window %v, checkout %+v", s.WindowSeconds, c)
	}
}

// TestStatusOpenTransaction: a tag whose only activity is one transaction
// left open shows one connection held on average, not 0 (its hold is
// recorded only when it ends).
func TestStatusOpenTransaction(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 5, 12, 14, 0, 0, 0, time.UTC))
	f := &fakeServer{
		stats:   proxy.ServerStats{Pool: pool.Stats{InUse: 1, Max: 4}},
		tags:    []proxy.TagInfo{{Tag: "report", Borrows: 1, Statements: 1, HeldNow: 1}},
		holders: []proxy.HolderInfo{{ClientID: 3, Tag: "report", HeldFor: 30, InTransaction: true}},
	}
	a := New(f, Options{Now: clock.Now, SampleEvery: 5 * time.Second})
	getStatus(t, a)
	clock.Advance(30 * time.Second)
	f.set(func(f *fakeServer) { f.holders[0].HeldFor = 60 })
	s, _ := getStatus(t, a)
	r := s.Tags[s.tag(t, "report")]
	if r.HoldRate != 1 || r.PoolShare != 0.25 || r.Oldest != 60 || len(s.Holders) != 1 || s.Holders[0].HeldFor != 60 {
		t.Errorf("open transaction: %+v, holders %+v", r, s.Holders)
	}
}

// TestStatusControls: drains and limits show with their reason, holders
// and queue; a controlled tag is listed even when idle.
func TestStatusControls(t *testing.T) {
	f := newFake()
	f.tags = append(f.tags, proxy.TagInfo{Tag: "reports", Drained: true, HeldNow: 1})
	s, _ := getStatus(t, New(f, Options{}))
	if len(s.Gates) != 2 || s.Gates[0].Tag != "capped" || s.Gates[0].Waiting != 3 || s.Gates[1].Reason != "INC-1" || s.Gates[1].InUse != 1 {
		t.Errorf("gates %+v", s.Gates)
	}
	if r := s.Tags[s.tag(t, "reports")]; !r.Drained || r.HeldNow != 1 {
		t.Errorf("reports %+v", r)
	}
	if r := s.Tags[s.tag(t, "capped")]; r.Limit != 1 || r.Waiting != 3 {
		t.Errorf("capped %+v", r)
	}
	if s.Pool.Waiting != 6 || s.HoldersTotal != 3 {
		t.Errorf("pool %+v, %d holders", s.Pool, s.HoldersTotal)
	}
	if s.Engine != nil {
		t.Errorf("an engine without a gatherer: %+v", s.Engine)
	}
}

// TestStatusEngine: the engine's health comes from its metrics in the
// registry: hot pools shallowest first, the inline-refill rate and share,
// the reconciler's state.
func TestStatusEngine(t *testing.T) {
	reg := prometheus.NewRegistry()
	inline := prometheus.NewCounter(prometheus.CounterOpts{Name: "holdfast_reservation_inline_refills_total"})
	reserves := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "holdfast_reservation_reserves_total"}, []string{"outcome"})
	cycles := prometheus.NewCounter(prometheus.CounterOpts{Name: "holdfast_reservation_reconcile_cycles_total"})
	alerting := prometheus.NewGauge(prometheus.GaugeOpts{Name: "holdfast_reservation_reconcile_alerting_pools"})
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "holdfast_reservation_pool_depth"},
		[]string{"shop_id", "inventory_item_id", "inventory_group_id"})
	reg.MustRegister(inline, reserves, cycles, alerting, depth)
	depth.WithLabelValues("1", "1001", "1").Set(250)
	depth.WithLabelValues("1", "1002", "1").Set(3)
	reserves.WithLabelValues("reserved").Add(100)

	clock := testkit.NewClock(time.Date(2026, 5, 12, 14, 0, 0, 0, time.UTC))
	a := New(newFake(), Options{Now: clock.Now, Gatherer: reg})
	s, _ := getStatus(t, a)
	if s.Engine == nil || s.Engine.Reconciler.State != "not_run" {
		t.Fatalf("engine %+v", s.Engine)
	}
	clock.Advance(5 * time.Second)
	inline.Add(2)
	reserves.WithLabelValues("reserved").Add(8)
	reserves.WithLabelValues("insufficient").Add(2)
	cycles.Add(3)
	s, _ = getStatus(t, a)
	e := s.Engine
	if e.InlinePerSecond != 0.4 || e.ReservesPerSecond != 2 || e.InlineShare != 0.2 || e.Reconciler.State != "ok" || e.Reconciler.Cycles != 3 {
		t.Errorf("engine %+v", e)
	}
	if len(e.HotPools) != 2 || e.HotPools[0].ItemID != "1002" || e.HotPools[0].Depth != 3 {
		t.Errorf("hot pools %+v", e.HotPools)
	}
	alerting.Set(1)
	if s, _ = getStatus(t, a); s.Engine.Reconciler.State != "alerting" {
		t.Errorf("reconciler %+v", s.Engine.Reconciler)
	}
}

// TestStatusWhileSampling: status requests race the sampler over a short
// history (run with -race).
func TestStatusWhileSampling(t *testing.T) {
	f := newFake()
	a := New(f, Options{SampleEvery: time.Millisecond, History: 3})
	ln := newListener(t)
	done := make(chan error, 1)
	go func() { done <- a.Serve(ln) }()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if r := do(t, a.Handler(), "GET", "/api/status", ""); r.status != 200 {
					t.Errorf("/api/status: %d", r.status)
					return
				}
				f.set(func(f *fakeServer) { f.tags[0].HoldSeconds++ })
			}
		}()
	}
	wg.Wait()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(a.hist.snapshot()); n > 3 {
		t.Errorf("history holds %d samples, want at most 3", n)
	}
}
