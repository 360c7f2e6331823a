package admin

import (
	"cmp"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The reservation engine's health, read from the registry's metrics
// (holdfast_reservation_*, registered by cmd/holdfast when the engine
// runs), so that this package needs nothing from the engine itself.

// maxHotPools bounds the pools listed (the refiller reports its hottest,
// bounded by reservation.refiller.hot_pools).
const maxHotPools = 10

type engineSample struct {
	present                                           bool
	inlineRefills, reserves, reconCycles, reconErrors float64
	violating, alerting                               float64
	pools                                             []hotPool
}

type hotPool struct {
	ShopID  string  `json:"shop_id"`
	ItemID  string  `json:"inventory_item_id"`
	GroupID string  `json:"inventory_group_id"`
	Depth   float64 `json:"depth"` // units in the pool at the last look
}

type engineJSON struct {
	HotPools []hotPool `json:"hot_pools"` // the most reserved-from pools, shallowest first
	// InlineRefillsPerSecond counts reserves that waited for an inline
	// refill (their pool was really short): the leading indicator of
	// reserve p99. InlineRefillShare is that per reserve.
	InlineRefillsPerSecond rounded        `json:"inline_refills_per_second"`
	ReservesPerSecond      rounded        `json:"reserves_per_second"`
	InlineRefillShare      rounded        `json:"inline_refill_share"`
	Reconciler             reconcilerJSON `json:"reconciler"`
}

type reconcilerJSON struct {
	// State is ok, not_run (no cycle finished yet), failing (a cycle
	// failed to read in the window), violation (pools break pool +
	// reserved <= on_hand, not yet for reconcile_alert_after cycles) or
	// alerting.
	State          string `json:"state"`
	Cycles         uint64 `json:"cycles"`
	Errors         uint64 `json:"errors"` // in the window
	ViolatingPools int    `json:"violating_pools"`
	AlertingPools  int    `json:"alerting_pools"`
}

func readEngine(g prometheus.Gatherer) engineSample {
	var s engineSample
	if g == nil {
		return s
	}
	mfs, _ := g.Gather() // what was gathered is usable even with an error
	for _, mf := range mfs {
		v := func() float64 {
			t := 0.0
			for _, m := range mf.GetMetric() {
				t += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
			return t
		}
		switch mf.GetName() {
		case "holdfast_reservation_inline_refills_total":
			s.present, s.inlineRefills = true, v()
		case "holdfast_reservation_reserves_total":
			s.reserves = v()
		case "holdfast_reservation_reconcile_cycles_total":
			s.reconCycles = v()
		case "holdfast_reservation_reconcile_errors_total":
			s.reconErrors = v()
		case "holdfast_reservation_reconcile_violating_pools":
			s.violating = v()
		case "holdfast_reservation_reconcile_alerting_pools":
			s.alerting = v()
		case "holdfast_reservation_pool_depth":
			for _, m := range mf.GetMetric() {
				s.pools = append(s.pools, hotPool{ShopID: label(m, "shop_id"), ItemID: label(m, "inventory_item_id"),
					GroupID: label(m, "inventory_group_id"), Depth: m.GetGauge().GetValue()})
			}
		}
	}
	return s
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// engineStatus is cur's health with rates against base, sec seconds
// earlier (nil: no rates).
func engineStatus(cur engineSample, base *sample, sec float64) *engineJSON {
	if !cur.present {
		return nil
	}
	e := &engineJSON{HotPools: slices.Clone(cur.pools)}
	slices.SortFunc(e.HotPools, func(a, b hotPool) int {
		return cmp.Or(cmp.Compare(a.Depth, b.Depth), cmp.Compare(a.ShopID, b.ShopID),
			cmp.Compare(a.ItemID, b.ItemID), cmp.Compare(a.GroupID, b.GroupID))
	})
	if len(e.HotPools) > maxHotPools {
		e.HotPools = e.HotPools[:maxHotPools]
	}
	if e.HotPools == nil {
		e.HotPools = []hotPool{}
	}
	r := &e.Reconciler
	r.Cycles, r.ViolatingPools, r.AlertingPools = uint64(cur.reconCycles), int(cur.violating), int(cur.alerting)
	if base != nil && base.engine.present {
		b := base.engine
		inline, reserves := delta(cur.inlineRefills, b.inlineRefills), delta(cur.reserves, b.reserves)
		e.InlineRefillsPerSecond, e.ReservesPerSecond = rounded(inline/sec), rounded(reserves/sec)
		if reserves > 0 {
			e.InlineRefillShare = rounded(min(inline/reserves, 1))
		}
		r.Errors = uint64(delta(cur.reconErrors, b.reconErrors))
	}
	switch {
	case r.AlertingPools > 0:
		r.State = "alerting"
	case r.ViolatingPools > 0:
		r.State = "violation"
	case r.Errors > 0:
		r.State = "failing"
	case r.Cycles == 0:
		r.State = "not_run"
	default:
		r.State = "ok"
	}
	return e
}
