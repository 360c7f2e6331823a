package legacy_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// stock receives qty units of each item at locations 1 and 2 of each shop,
// through the router (so the counters get them too).
func stock(v *env, r *legacy.Router, shops, items []int64, qty int64) {
	v.t.Helper()
	for _, s := range shops {
		for _, i := range items {
			for _, g := range []int64{1, 2} {
				v.must(r, "receive", s, i, g, qty)
			}
		}
	}
}

// settle waits until every reservation made with ttl seconds has expired on
// both sides and both sweepers have run.
func settle(v *env, r *legacy.Router, ttl int64, started time.Time) {
	v.t.Helper()
	time.Sleep(time.Until(started.Add(time.Duration(ttl)*time.Second + 200*time.Millisecond)))
	dbtest.Eventually(v.t, "every reserved line expired and swept in MySQL", func() bool {
		return v.scalar("SELECT COUNT(*) FROM reserved_quantities") == 0
	})
	if _, err := r.SweepOnce(context.Background()); err != nil {
		v.t.Fatal(err)
	}
}

// TestShadowAgreesOnRealTraffic: with authority redis, 64 clients of
// reserve / claim / release / abandon get Redis's answers, the engine in
// shadow answers the same every time while stock lasts, the comparison
// metric shows it, and the two sides end equal. Then a counter edited
// behind holdfast's back makes a disagreement, counted and logged.
func TestShadowAgreesOnRealTraffic(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	shops, items := []int64{1, 2}, []int64{101, 102, 103}
	stock(v, v.r, shops, items, 100000)
	const ttl = 4
	start := time.Now()
	done := traffic(t, v, []*legacy.Router{v.r}, 64, 20, shops, items, ttl)

	var claimed, released, abandoned int
	for _, c := range done {
		if a, _ := legacy.TokenAuthority(c.token); a != reservation.AuthorityRedis {
			t.Fatalf("reserve of shop %d under authority redis got token %s, which does not say redis", c.shop, c.token)
		}
		switch c.fate {
		case "claimed":
			claimed++
			if len(c.replies) != 1 || c.replies[0] != "claimed" {
				t.Fatalf("claim of %s answered %v", c.token, c.replies)
			}
		case "released":
			released++
			if len(c.replies) != 1 || c.replies[0] != "released" {
				t.Fatalf("release of %s answered %v", c.token, c.replies)
			}
		default:
			abandoned++
		}
	}
	if d := disagreements(v.r); len(d) > 0 {
		t.Fatalf("the two sides disagreed: %v (all: %v)", d, comparisons(v.r))
	}
	cmp := comparisons(v.r)
	if got := cmp["reserve ok ok"]; got != uint64(len(done)) {
		t.Fatalf("reserve ok/ok comparisons = %d, want one per reserve (%d): %v", got, len(done), cmp)
	}
	if cmp["claim ok ok"] != uint64(claimed) || cmp["release released released"] != uint64(released) {
		t.Fatalf("claims %d, releases %d; comparisons %v", claimed, released, cmp)
	}
	t.Logf("%d checkouts: %d claimed, %d released, %d abandoned; comparisons %v", len(done), claimed, released, abandoned, cmp)

	// The metric says the same.
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(legacy.NewCollector(v.r))
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
	if got := value(t, reg, "holdfast_shadow_comparisons_total", "procedure", "reserve", "redis", "ok", "holdfast", "ok"); got != float64(len(done)) {
		t.Fatalf("holdfast_shadow_comparisons_total{reserve,ok,ok} = %v, want %d", got, len(done))
	}

	// Abandoned reservations expire on both sides; then the counters equal
	// the engine's availability, and MySQL conserved its stock.
	settle(v, v.r, ttl, start)
	if bad := v.drift(v.r); len(bad) > 0 {
		t.Fatalf("counters differ from the engine's availability: %+v", bad)
	}
	var claimedQty int64
	for _, c := range done {
		if c.fate == "claimed" {
			claimedQty += c.qty
		}
	}
	initial := int64(len(shops)*len(items)*2) * 100000
	if onHand := v.scalar("SELECT SUM(on_hand) FROM inventory_ledger"); onHand+claimedQty != initial {
		t.Fatalf("conservation: final on_hand %d + claimed %d != initial %d", onHand, claimedQty, initial)
	}

	// A counter edited behind holdfast's back: Redis says insufficient,
	// the engine (in shadow) ok. Counted and logged; the caller gets Redis's
	// answer, and the shadow gives its units back.
	k := reservation.PoolKey{ShopID: 1, ItemID: 101, GroupID: 1}
	if err := v.r.Store().Client().Set(context.Background(), v.r.Store().CounterKey(k), 0, 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := availability(t, v, k)
	_, _, err := v.call(v.r, "reserve", int64(1), "planted", restest.LinesJSON(101, 1, 1), int64(600))
	if restest.Code(err) != reservation.CodeInsufficientStock {
		t.Fatalf("reserve against a zeroed counter: %v, want 9101 (Redis decides)", err)
	}
	if n := comparisons(v.r)["reserve insufficient ok"]; n != 1 {
		t.Fatalf("planted disagreement counted %d times: %v", n, comparisons(v.r))
	}
	logs := v.logs.String()
	if !strings.Contains(logs, "redis and holdfast disagree") || !strings.Contains(logs, "redis=insufficient holdfast=ok") ||
		!strings.Contains(logs, "shop_id=1 inventory_item_id=101 inventory_group_id=1") {
		t.Fatalf("disagreement not logged with shop, item, location and both answers:\n%s", logs)
	}
	if after := availability(t, v, k); after != before {
		t.Fatalf("the shadow reservation of a reserve Redis refused still holds units: availability %d, was %d", after, before)
	}
	if bad := v.drift(v.r); len(bad) != 1 || bad[0].Key != k {
		t.Fatalf("drift check: %+v, want the edited pool alone", bad)
	}
}

func availability(t *testing.T, v *env, k reservation.PoolKey) int64 {
	t.Helper()
	_, rows, err := v.call(v.r, "availability", k.ShopID, k.ItemID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r[0].(int64) == k.GroupID {
			return r[4].(int64)
		}
	}
	t.Fatalf("no availability row for %v", k)
	return 0
}

// value is one series of a gathered metric (a counter or gauge), or -1.
func value(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if have[labels[i]] != labels[i+1] {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}
