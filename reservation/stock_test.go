package reservation_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestStockGuard: set_on_hand and adjust may not take on_hand below what
// live reservations hold (9106), and when on_hand drops they trim the pool
// so pool + reserved <= on_hand holds at once, even with reserves running.
func TestStockGuard(t *testing.T) {
	v := newEnv(t, envOpts{})
	// receive fills the pool in its own transaction: stock is reservable
	// the moment receive returns.
	rows := v.mustCall("receive", int64(shop), int64(41), int64(1), int64(100))
	if !reflect.DeepEqual(rows, [][]any{{int64(41), int64(1), int64(100), int64(0), int64(100)}}) {
		t.Errorf("receive returned %v, want on_hand 100, reserved 0, pooled 100", rows)
	}
	if _, err := reserve(context.Background(), v.eng, "g1", 600, 41, 10, 1); err != nil {
		t.Fatal(err)
	}
	_, pooled, _ := v.pool(41, 1)
	if pooled != 90 {
		t.Fatalf("pool %d after receive and reserve, want 90", pooled)
	}
	if n := v.eng.Stats().InlineRefills; n != 0 {
		t.Errorf("%d inline refills after receive filled the pool", n)
	}
	rows = v.mustCall("set_on_hand", int64(shop), int64(41), int64(1), int64(50))
	if !reflect.DeepEqual(rows, [][]any{{int64(41), int64(1), int64(50), int64(10), int64(40)}}) {
		t.Errorf("set_on_hand returned %v, want on_hand 50, reserved 10, pooled 40", rows)
	}
	v.checkInvariant(41, 1)
	if _, _, err := v.call("adjust", int64(shop), int64(41), int64(1), int64(-41)); restest.Code(err) != reservation.CodeGuardViolated {
		t.Errorf("adjust below reserved: %v", err)
	}
	rows = v.mustCall("adjust", int64(shop), int64(41), int64(1), int64(-40))
	if rows[0][2] != int64(10) || rows[0][4] != int64(0) {
		t.Errorf("adjust -40 returned %v, want on_hand 10 and an empty pool", rows)
	}
	v.checkInvariant(41, 1)
	// Expired reservations do not count against the guard.
	v.expireAll()
	rows = v.mustCall("set_on_hand", int64(shop), int64(41), int64(1), int64(0))
	if rows[0][2] != int64(0) || rows[0][3] != int64(0) {
		t.Errorf("set_on_hand 0 with only expired reservations returned %v", rows)
	}
	if _, _, reserved := v.pool(41, 1); reserved != 0 {
		t.Errorf("expired lines not deleted: %d", reserved)
	}
	// set_on_hand creates a missing ledger row.
	rows = v.mustCall("set_on_hand", int64(shop), int64(42), int64(3), int64(7))
	if rows[0][2] != int64(7) {
		t.Errorf("set_on_hand of new pool returned %v", rows)
	}

	// Lowering on_hand while reserves run never leaves the pool over-promised.
	v.receive(43, 1, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				_, err := reserve(context.Background(), v.eng, fmt.Sprintf("s%d-%d", w, i), 600, 43, 1, 1)
				if err != nil && restest.Code(err) != reservation.CodeInsufficientStock {
					t.Error(err)
					return
				}
			}
		}()
	}
	for onHand := int64(990); ctx.Err() == nil; onHand -= 10 {
		_, _, err := v.call("set_on_hand", int64(shop), int64(43), int64(1), onHand)
		if err != nil && restest.Code(err) != reservation.CodeGuardViolated {
			t.Error(err)
			break
		}
		if o, p, r := v.pool(43, 1); p+r > o {
			t.Errorf("invariant broken while reserving: pool %d + reserved %d > on_hand %d", p, r, o)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	v.checkInvariant(43, 1)
}

// TestSweeperBatches: 1,200 expired lines are deleted 500 at a time.
func TestSweeperBatches(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(51, 1, 1000)
	v.receive(51, 2, 1000)
	var wg sync.WaitGroup
	for w := 0; w < 12; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				if _, err := reserve(context.Background(), v.eng, fmt.Sprintf("x%d-%d", w, i), 600, 51, 1, 1, 2); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v.expireAll()
	if got := v.sweepAll(); !reflect.DeepEqual(got, []int{500, 500, 200, 0}) {
		t.Errorf("sweep batches %v, want [500 500 200 0]", got)
	}
	if v.eng.Stats().Swept != 1200 {
		t.Errorf("swept metric %d", v.eng.Stats().Swept)
	}
	// Each swept line left a return; the counters still hold, and a refill
	// takes the returns and puts the units back in the pool.
	if n := v.scalar("SELECT COUNT(*) FROM reservation_returns"); n != 1200 {
		t.Errorf("%d returns after sweeping 1,200 lines", n)
	}
	for _, g := range []int64{1, 2} {
		v.checkCounter(51, g, "the sweep")
		res, err := v.ref.Refill(context.Background(), reservation.PoolKey{ShopID: shop, ItemID: 51, GroupID: g}, refiller.Inline)
		if err != nil {
			t.Fatal(err)
		}
		v.checkCounter(51, g, "the refill")
		if _, pooled, _ := v.pool(51, g); pooled != 1000 {
			t.Errorf("location %d: pool %d after the refill (%+v), want 1000", g, pooled, res)
		}
	}
	if n := v.scalar("SELECT COUNT(*) FROM reservation_returns"); n != 0 {
		t.Errorf("%d returns left after the refills", n)
	}
}

// TestReconcilerAlertsAfterNCycles: a broken invariant is reported every
// cycle but alerted only on the ReconcileAlertAfter-th consecutive one,
// and the alert clears when the pool is repaired.
func TestReconcilerAlertsAfterNCycles(t *testing.T) {
	v := newEnv(t, envOpts{cfg: func(c *reservation.Config) { c.ReconcileAlertAfter = 3 }})
	v.receive(61, 1, 5)
	v.receive(62, 1, 5)
	// receive filled the pool with its 5 units; a sixth, written behind
	// the engine's back, over-promises the ledger (and the counter drifts).
	if _, err := v.db.Exec("INSERT INTO reservation_units VALUES (1, 61, 1, 1000)"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for cycle := 1; cycle <= 4; cycle++ {
		viol, err := v.eng.ReconcileOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(viol) != 1 || viol[0].Pooled != 6 || viol[0].OnHand != 5 || viol[0].Drift != -1 || viol[0].Cycles != cycle {
			t.Fatalf("cycle %d: violations %+v", cycle, viol)
		}
		s := v.eng.Stats()
		wantAlerting := int64(0)
		if cycle >= 3 {
			wantAlerting = 1
		}
		if s.ReconcileAlerting != wantAlerting || s.ReconcileAlerts != uint64(wantAlerting) {
			t.Errorf("cycle %d: alerting %d, alerts %d", cycle, s.ReconcileAlerting, s.ReconcileAlerts)
		}
	}
	if !strings.Contains(v.logs.String(), "invariant broken") {
		t.Error("no alert logged")
	}
	if _, err := v.db.Exec("DELETE FROM reservation_units WHERE id = 1000"); err != nil {
		t.Fatal(err)
	}
	if viol, _ := v.eng.ReconcileOnce(ctx); len(viol) != 0 || v.eng.Stats().ReconcileAlerting != 0 {
		t.Errorf("after repair: %v", viol)
	}
}

// TestReconcilerSeesUnitsWithNoLedger: units of a pool that has no ledger
// row oversell (on_hand is taken as 0), though the ledger-led read of the
// pools cannot see them.
func TestReconcilerSeesUnitsWithNoLedger(t *testing.T) {
	v := newEnv(t, envOpts{cfg: func(c *reservation.Config) { c.ReconcileAlertAfter = 1 }})
	v.receive(63, 1, 5)
	if _, err := v.db.Exec("INSERT INTO reservation_units VALUES (1, 64, 1, 1001), (1, 64, 1, 1002)"); err != nil {
		t.Fatal(err)
	}
	viol, err := v.eng.ReconcileOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := reservation.PoolKey{ShopID: 1, ItemID: 64, GroupID: 1}
	if len(viol) != 1 || viol[0].Key != want || viol[0].Pooled != 2 || viol[0].OnHand != 0 || !viol[0].NoLedger {
		t.Fatalf("violations %+v, want pool %v with 2 pooled units and no ledger row", viol, want)
	}
	if !strings.Contains(v.logs.String(), "no inventory_ledger row") {
		t.Errorf("the alert does not say the ledger row is missing: %s", v.logs.String())
	}
}

// TestCollectorsLint: the engine's and refiller's metrics pass promlint,
// register on a private registry, and are named holdfast_reservation_*.
func TestCollectorsLint(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(71, 1, 10)
	if _, err := reserve(context.Background(), v.eng, "m", 600, 71, 1, 1); err != nil {
		t.Fatal(err)
	}
	v.ref.Notify(reservation.PoolKey{ShopID: shop, ItemID: 71, GroupID: 1}, 1)
	v.ref.CheckDirty(context.Background())
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(reservation.NewCollector(v.eng), refiller.NewCollector(v.ref))
	for _, c := range []prometheus.Collector{reservation.NewCollector(v.eng), refiller.NewCollector(v.ref)} {
		problems, err := testutil.CollectAndLint(c)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "holdfast_reservation_") {
			t.Errorf("metric %s outside holdfast_reservation_", mf.GetName())
		}
		names[mf.GetName()] = true
	}
	for _, want := range []string{"holdfast_reservation_reserves_total", "holdfast_reservation_inline_refills_total",
		"holdfast_reservation_pool_depth", "holdfast_reservation_refills_total", "holdfast_reservation_late_claims_total",
		"holdfast_reservation_tx_retries_total", "holdfast_reservation_reconcile_alerting_pools", "holdfast_reservation_reserve_duration_seconds"} {
		if !names[want] {
			t.Errorf("metric %s missing", want)
		}
	}
	if n := v.eng.Stats().Reserves["reserved"]; n != 1 {
		t.Errorf("reserves reserved = %v", n)
	}
}
