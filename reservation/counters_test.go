package reservation_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestGuardRowCount: in one multi-statement round trip, a DELETE that
// deletes fewer rows than the guard expects stops the round trip at the
// guard (error 1242), so the COMMIT after it never runs and the runner's
// ROLLBACK undoes the DELETE; the right count lets everything commit.
func TestGuardRowCount(t *testing.T) {
	db, _ := restest.NewDB(t, 4)
	if _, err := db.Exec("INSERT INTO reservation_units VALUES (1, 1, 1, 1), (1, 1, 1, 2)"); err != nil {
		t.Fatal(err)
	}
	tx := reservation.TxRunner{Conns: reservation.SQLConns(db)}
	del := reservation.DeleteByKeysSQL(reservation.TableUnits, []string{"shop_id", "inventory_item_id", "inventory_group_id", "id"},
		[][]int64{{1, 1, 1, 1}, {1, 1, 1, 3}}, "") // unit 3 does not exist
	err := tx.Run(context.Background(), "test", func(ctx context.Context, c reservation.Conn) error {
		return reservation.CommitWith(ctx, c, del+"; "+reservation.GuardRowCount(2)+"; INSERT INTO reservation_units VALUES (1, 1, 1, 9)")
	})
	if !reservation.IsDBError(err, 1242) {
		t.Fatalf("guard of 2 after deleting 1: %v, want error 1242", err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM reservation_units").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d units after the failed round trip (%v), want the 2 untouched", n, err)
	}
	err = tx.Run(context.Background(), "test", func(ctx context.Context, c reservation.Conn) error {
		return reservation.CommitWith(ctx, c, del+"; "+reservation.GuardRowCount(1)+"; INSERT INTO reservation_units VALUES (1, 1, 1, 9)")
	})
	if err != nil {
		t.Fatal(err)
	}
	var ids string
	if err := db.QueryRow("SELECT GROUP_CONCAT(id ORDER BY id) FROM reservation_units").Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if ids != "2,9" {
		t.Fatalf("units %s after the committed round trip, want 2,9", ids)
	}
}

// issued reads the pool's counter, and what it should count: pool rows +
// reserved lines + pending returns (-1 when the row is missing).
func (v *env) issued(item, group int64) (counter, truth int64) {
	v.t.Helper()
	w := fmt.Sprintf("shop_id = %d AND inventory_item_id = %d AND inventory_group_id = %d", shop, item, group)
	err := v.db.QueryRow("SELECT COALESCE((SELECT issued FROM pool_counters WHERE "+w+"), -1), (SELECT COUNT(*) FROM reservation_units WHERE "+w+
		") + (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities WHERE "+w+") + (SELECT COALESCE(SUM(quantity), 0) FROM reservation_returns WHERE "+w+")").
		Scan(&counter, &truth)
	if err != nil {
		v.t.Fatal(err)
	}
	return
}

func (v *env) checkCounter(item, group int64, step string) {
	v.t.Helper()
	if c, want := v.issued(item, group); c != want {
		v.t.Fatalf("after %s: pool_counters.issued %d, pool + reserved + returns %d", step, c, want)
	}
}

// TestPoolCounters follows one pool's counter through every operation that
// touches its rows: it always equals pool rows + reserved + pending
// returns, a refill takes the returns and expired lines off it, and a
// refill trusts it (a wrong counter is the reconciler's finding, and
// deleting the row makes the next refill recount).
func TestPoolCounters(t *testing.T) {
	v := newEnv(t, envOpts{refCfg: func(c *refiller.Config) { c.PoolCap = 50 }})
	ctx := context.Background()
	key := reservation.PoolKey{ShopID: shop, ItemID: 81, GroupID: 1}
	v.receive(81, 1, 200)
	v.checkCounter(81, 1, "receive")
	if _, pooled, _ := v.pool(81, 1); pooled != 50 {
		t.Fatalf("receive pooled %d, want the cap 50", pooled)
	}
	var toks []string
	for i := range 6 {
		tk, err := reserve(ctx, v.eng, fmt.Sprintf("c%d", i), 600, 81, 3, 1)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tk)
	}
	v.checkCounter(81, 1, "reserves")
	if c, _ := v.issued(81, 1); c != 50 {
		t.Errorf("issued %d after reserves, want 50 (a reserve moves units from the pool to a line)", c)
	}
	v.mustCall("release", toks[0])
	v.checkCounter(81, 1, "release")
	if n := v.scalar("SELECT COUNT(*) FROM reservation_returns"); n != 1 {
		t.Errorf("%d returns after a release, want 1", n)
	}
	v.mustCall("claim", toks[1])
	v.checkCounter(81, 1, "claim")
	if c, _ := v.issued(81, 1); c != 47 {
		t.Errorf("issued %d after claiming 3, want 47", c)
	}
	if _, err := v.db.Exec("UPDATE reserved_quantities SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE reservation_id IN (SELECT reservation_id FROM reservations WHERE idempotency_key IN ('c2', 'c3'))"); err != nil {
		t.Fatal(err)
	}
	if n, err := v.eng.SweepOnce(ctx); err != nil || n != 2 {
		t.Fatalf("sweep deleted %d lines (%v), want 2", n, err)
	}
	v.checkCounter(81, 1, "sweep")
	if _, err := v.db.Exec("UPDATE reserved_quantities SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND WHERE reservation_id IN (SELECT reservation_id FROM reservations WHERE idempotency_key = 'c4')"); err != nil {
		t.Fatal(err)
	}
	res, err := v.ref.Refill(ctx, key, refiller.Inline)
	if err != nil {
		t.Fatal(err)
	}
	// Pool 32 (50 - 18); returns 3 + 6 (release, sweep); 3 lines expired.
	if res.Returned != 9 || res.Expired != 1 || res.Added != 18 || res.Pooled != 50 {
		t.Errorf("refill %+v, want 9 returned units, 1 expired line, 18 added to the cap of 50", res)
	}
	v.checkCounter(81, 1, "refill")
	if c, _ := v.issued(81, 1); c != 53 {
		t.Errorf("issued %d after the refill, want 53 (pool 50 + the one live line of 3)", c)
	}
	v.mustCall("set_on_hand", int64(shop), int64(81), int64(1), int64(20))
	v.checkCounter(81, 1, "set_on_hand")
	if o, p, r := v.pool(81, 1); o != 20 || p+r != 20 {
		t.Errorf("set_on_hand 20: on_hand %d, pool %d, reserved %d; want the pool cut to 17", o, p, r)
	}
	if viol, err := v.eng.ReconcileOnce(ctx); err != nil || len(viol) != 0 {
		t.Fatalf("reconciler: %+v, %v", viol, err)
	}

	// A refill trusts the counter: inflate it, and nothing is added
	// although the ledger has room; the reconciler reports the drift.
	v.mustCall("set_on_hand", int64(shop), int64(81), int64(1), int64(100))
	v.exec("DELETE FROM reservation_units WHERE inventory_item_id = 81 AND id > 0 ORDER BY id DESC LIMIT 10")
	v.exec("UPDATE pool_counters SET issued = 100 WHERE inventory_item_id = 81")
	if res, err := v.ref.Refill(ctx, key, refiller.Inline); err != nil || res.Added != 0 {
		t.Errorf("refill with issued = on_hand: %+v, %v; want nothing added", res, err)
	}
	viol, err := v.eng.ReconcileOnce(ctx)
	if err != nil || len(viol) != 1 || viol[0].Drift <= 0 {
		t.Errorf("reconciler after the counter was inflated: %+v, %v; want one pool with positive drift", viol, err)
	}
	// Deleting the row makes the next refill recount it.
	v.exec("DELETE FROM pool_counters WHERE inventory_item_id = 81")
	if res, err := v.ref.Refill(ctx, key, refiller.Inline); err != nil || res.Pooled != 50 {
		t.Errorf("refill after the counter was deleted: %+v, %v; want the pool back at 50", res, err)
	}
	v.checkCounter(81, 1, "recount")

	// A pool deleted by hand with its counter left behind: stocking it
	// again recounts the leftover instead of trusting it.
	for _, table := range []string{"inventory_ledger", "reservation_units", "reserved_quantities", "reservation_returns"} {
		v.exec("DELETE FROM " + table + " WHERE inventory_item_id = 81")
	}
	rows := v.mustCall("receive", int64(shop), int64(81), int64(1), int64(10))
	if rows[0][3] != int64(0) || rows[0][4] != int64(10) {
		t.Errorf("receive after the pool was deleted by hand: %v, want reserved 0, pooled 10", rows)
	}
	v.checkCounter(81, 1, "restock")
}

func (v *env) exec(q string, args ...any) {
	v.t.Helper()
	if _, err := v.db.Exec(q, args...); err != nil {
		v.t.Fatalf("%s: %v", q, err)
	}
}

// TestShrinkWhileReservingNoDeadlock: set_on_hand shrinking the pool locks
// every unit (blocking) while reserves take units with SKIP LOCKED; both go
// in ascending id order, so they never deadlock (InnoDB resolved such a
// cycle when the stock procedures locked the pool newest first), and the
// pool never over-promises.
func TestShrinkWhileReservingNoDeadlock(t *testing.T) {
	v := newEnv(t, envOpts{background: true, cfg: func(c *reservation.Config) { c.CallTimeout = 20 * time.Second }})
	v.receive(82, 1, 1_000_000)
	v.receive(83, 1, 1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				lines := fmt.Sprintf(`[{"item":82,"qty":%d,"locations":[1]}]`, 1+i%3)
				if i%5 == 0 { // some multi-line reserves, outside the combiner
					lines = `[{"item":82,"qty":1,"locations":[1]},{"item":83,"qty":1,"locations":[1]}]`
				}
				_, _, err := v.eng.Call(context.Background(), "reserve", []any{int64(shop), fmt.Sprintf("d%d-%d", w, i), lines, int64(600)})
				if err != nil && restest.Code(err) != reservation.CodeInsufficientStock {
					t.Error(err)
					return
				}
			}
		}()
	}
	shrinks, refused := 0, 0
loop:
	for ctx.Err() == nil {
		// Cut on_hand to half the pool above what is reserved, so each
		// call shrinks the pool (while reserves keep taking from it).
		o, p, r := v.pool(82, 1)
		_, _, err := v.call("set_on_hand", int64(shop), int64(82), int64(1), r+max(p/2, 1))
		switch {
		case err == nil:
			shrinks++
		case restest.Code(err) == reservation.CodeGuardViolated:
			refused++ // reserves took more in between: below what is held now
		default:
			t.Error(err)
			break loop
		}
		if o, p, r = v.pool(82, 1); p+r > o {
			t.Errorf("pool %d + reserved %d > on_hand %d", p, r, o)
			break
		}
		if _, _, err := v.call("receive", int64(shop), int64(82), int64(1), int64(500)); err != nil {
			t.Error(err)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	wg.Wait()
	if s := v.eng.Stats(); s.Deadlocks != 0 || s.LockWaitTimeouts != 0 {
		t.Errorf("%d deadlocks and %d lock-wait timeouts retried", s.Deadlocks, s.LockWaitTimeouts)
	}
	v.checkInvariant(82, 1)
	v.checkCounter(82, 1, "the run")
	t.Logf("%d shrinks (%d refused); reserves %v, inline refills %d", shrinks, refused, v.eng.Stats().Reserves, v.eng.Stats().InlineRefills)
	if shrinks == 0 {
		t.Fatal("no set_on_hand shrank the pool: the test shows nothing")
	}
}

// TestKeysLockedInPrimaryKeyOrder: multi-row locking statements list their
// keys in ascending primary-key order (the order of any scan, so that two
// such statements cannot deadlock each other), without reordering the
// caller's keys.
func TestKeysLockedInPrimaryKeyOrder(t *testing.T) {
	keys := [][]int64{{7, 2}, {-3, 1}, {7, 1}}
	sql := reservation.DeleteByKeysSQL(reservation.TableReserved, []string{"reservation_id", "line_no"}, keys, "")
	want := "(SELECT -3 AS k0, 1 AS k1 UNION ALL SELECT 7, 1 UNION ALL SELECT 7, 2) k"
	if !strings.Contains(sql, want) {
		t.Fatalf("keys not in primary-key order:\n%s\nwant it to contain\n%s", sql, want)
	}
	if keys[0][0] != 7 || keys[0][1] != 2 || keys[1][0] != -3 {
		t.Fatalf("the caller's keys were reordered: %v", keys)
	}
}
