package refiller_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

var key = reservation.PoolKey{ShopID: 1, ItemID: 100, GroupID: 1}

func setup(t *testing.T, cfg refiller.Config) (*sql.DB, *refiller.Refiller) {
	t.Helper()
	db, _ := restest.NewDB(t, 32)
	r, err := refiller.New(reservation.SQLConns(db), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return db, r
}

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func ledger(t *testing.T, db *sql.DB, k reservation.PoolKey, onHand int64) {
	t.Helper()
	exec(t, db, "INSERT INTO inventory_ledger VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE on_hand = ?", k.ShopID, k.ItemID, k.GroupID, onHand, onHand)
}

func hold(t *testing.T, db *sql.DB, k reservation.PoolKey, id, qty int64, expiresIn string) {
	t.Helper()
	exec(t, db, "INSERT INTO reserved_quantities VALUES (?, 1, ?, ?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL "+expiresIn+")", id, k.ShopID, k.ItemID, k.GroupID, qty)
}

// TestRefillFormula: a refill inserts min(cap - pool, on_hand - pool -
// live reserved) units, deletes the pool's expired lines (counting their
// units as free again), and does nothing when the pool is full or the
// ledger row is missing.
func TestRefillFormula(t *testing.T) {
	db, r := setup(t, refiller.Config{PoolCap: 30})
	ctx := context.Background()
	ledger(t, db, key, 100)
	hold(t, db, key, 1, 80, "1 HOUR")
	hold(t, db, key, 2, 7, "-1 SECOND") // expired
	res, err := r.Refill(ctx, key, refiller.Inline)
	if err != nil {
		t.Fatal(err)
	}
	if res.Added != 20 || res.Expired != 1 || res.Pooled != 20 {
		t.Errorf("refill %+v, want 20 added (100 - 80 live), 1 expired line deleted", res)
	}
	// Deleting lines behind the engine's back: delete the pool's counter
	// too, which makes the next refill recount it (the documented repair).
	exec(t, db, "DELETE FROM reserved_quantities")
	exec(t, db, "DELETE FROM pool_counters")
	res, _ = r.Refill(ctx, key, refiller.Inline)
	if res.Added != 10 || res.Pooled != 30 {
		t.Errorf("refill %+v, want 10 added up to the cap of 30", res)
	}
	res, _ = r.Refill(ctx, key, refiller.Inline)
	if res.Added != 0 || res.Removed != 0 {
		t.Errorf("refill of a full pool did %+v", res)
	}
	res, err = r.Refill(ctx, reservation.PoolKey{ShopID: 1, ItemID: 999, GroupID: 1}, refiller.Inline)
	if err != nil || !res.NoLedger {
		t.Errorf("refill without ledger row: %+v %v", res, err)
	}
	s := r.Stats()
	if s.Refills["inline"]["filled"] != 2 || s.Refills["inline"]["noop"] != 2 || s.UnitsAdded != 30 || s.ExpiredDeleted != 1 {
		t.Errorf("stats %+v", s)
	}
}

// TestRefillTrims: when on_hand drops under pool + reserved (a forced claim,
// a manual change), the refill deletes pool units, but only ones no
// reserve holds right now.
func TestRefillTrims(t *testing.T) {
	db, r := setup(t, refiller.Config{PoolCap: 30})
	ctx := context.Background()
	ledger(t, db, key, 30)
	if _, err := r.Refill(ctx, key, refiller.Inline); err != nil {
		t.Fatal(err)
	}
	ledger(t, db, key, 10)
	// A reserve transaction holds 25 units while the refill runs.
	c, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "START TRANSACTION",
		"SELECT id FROM reservation_units WHERE " + key.WhereSQL() + " ORDER BY id LIMIT 25 FOR UPDATE SKIP LOCKED"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	res, err := r.Refill(ctx, key, refiller.Background)
	if err != nil || res.Removed != 5 {
		t.Errorf("trim with 25 units held: %+v %v; want the 5 free units removed", res, err)
	}
	c.ExecContext(ctx, "ROLLBACK")
	res, err = r.Refill(ctx, key, refiller.Background)
	if err != nil || res.Removed != 15 || res.Pooled != 10 {
		t.Errorf("trim after release: %+v %v; want 15 more removed, pool 10", res, err)
	}
}

// TestConcurrentRefillers: four refiller instances (as four holdfast
// processes would have) refill one pool from 32 goroutines while units are
// taken out: the ledger row lock serialises them, so the pool never passes
// the cap, pool + reserved never passes on_hand, and no insert collides.
func TestConcurrentRefillers(t *testing.T) {
	db, _ := restest.NewDB(t, 48)
	var refs []*refiller.Refiller
	for i := 0; i < 4; i++ {
		r, err := refiller.New(reservation.SQLConns(db), refiller.Config{PoolCap: 200}, nil)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	ledger(t, db, key, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, err := refs[g%4].Refill(context.Background(), key, refiller.Inline); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	// Take units out the way a reserve does, moving them to reserved.
	wg.Add(1)
	go func() {
		defer wg.Done()
		conns := reservation.SQLConns(db)
		tx := reservation.TxRunner{Conns: conns}
		for id := int64(1); ctx.Err() == nil; id++ {
			err := tx.Run(context.Background(), "test", func(ctx context.Context, c reservation.Conn) error {
				rows, err := c.Query(ctx, "SELECT id FROM reservation_units WHERE "+key.WhereSQL()+" LIMIT 3 FOR UPDATE SKIP LOCKED")
				if err != nil || len(rows) == 0 {
					return err
				}
				var ids []string
				for _, r := range rows {
					ids = append(ids, string(r[0]))
				}
				if _, err := c.Exec(ctx, "DELETE FROM reservation_units WHERE "+key.WhereSQL()+" AND id IN ("+strings.Join(ids, ",")+")"); err != nil {
					return err
				}
				_, err = c.Exec(ctx, "INSERT INTO reserved_quantities VALUES (?, 1, 1, 100, 1, ?, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)", id, len(rows))
				return err
			})
			if err != nil {
				t.Error(err)
				return
			}
			if o, p, r := restest.Pool(t, db, key); p > 200 || p+r > o {
				t.Errorf("pool %d reserved %d on_hand %d", p, r, o)
				return
			}
		}
	}()
	wg.Wait()
	o, p, rsv := restest.Pool(t, db, key)
	if p > 200 || p+rsv > o {
		t.Errorf("final pool %d reserved %d on_hand %d", p, rsv, o)
	}
	for i, r := range refs {
		if s := r.Stats(); s.Deadlocks != 0 || s.LockWaitTimeouts != 0 {
			t.Errorf("refiller %d: %d deadlocks, %d lock-wait timeouts", i, s.Deadlocks, s.LockWaitTimeouts)
		}
	}
}

// TestRefillNowShared: concurrent inline refills of one pool in one process
// share a transaction.
func TestRefillNowShared(t *testing.T) {
	db, r := setup(t, refiller.Config{})
	ledger(t, db, key, 5000)
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.RefillNow(context.Background(), key); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	s := r.Stats()
	n := s.Refills["inline"]["filled"] + s.Refills["inline"]["noop"]
	if n == 0 || n > 8 {
		t.Errorf("64 concurrent RefillNow ran %d transactions", n)
	}
	if _, p, _ := restest.Pool(t, db, key); p != 1000 {
		t.Errorf("pool %d, want 1000", p)
	}
}

// TestBackgroundWatermark: the loop refills a notified pool once it is under
// 30% of the cap, leaves one above the watermark alone, and the scan finds
// pools nobody notified.
func TestBackgroundWatermark(t *testing.T) {
	db, r := setup(t, refiller.Config{PoolCap: 100, Interval: 10 * time.Millisecond, ScanInterval: 50 * time.Millisecond})
	ledger(t, db, key, 1000)
	other := reservation.PoolKey{ShopID: 1, ItemID: 200, GroupID: 2}
	ledger(t, db, other, 40) // nobody notifies this one: the scan must find it
	exec(t, db, "INSERT INTO reservation_units SELECT 1, 100, 1, seq FROM seq_1_to_40")
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.Notify(key, 0)
	time.Sleep(100 * time.Millisecond)
	if _, p, _ := restest.Pool(t, db, key); p != 40 {
		t.Errorf("pool at 40%% of cap was refilled to %d", p)
	}
	exec(t, db, "DELETE FROM reservation_units WHERE "+key.WhereSQL()+" AND id > 25") // no counter row yet: recounted
	r.Notify(key, 0)
	// The refill records the depth it left just after its COMMIT, so the
	// metric may trail the table by a moment: wait for both.
	deadline := time.Now().Add(3 * time.Second)
	for {
		_, p, _ := restest.Pool(t, db, key)
		_, po, _ := restest.Pool(t, db, other)
		hot := r.Stats().Hottest
		if p == 100 && po == 40 && len(hot) == 1 && hot[0].Key == key && hot[0].Depth == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools at %d and %d, hottest %+v; want 100 (refilled under the watermark), 40 (found by the scan) and the first at depth 100", p, po, hot)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStaleLookKeepsRefilledDepth: a depth check whose query read the pool
// before a refill committed, but records what it read after the refill
// recorded its own depth, leaves the refill's depth in the metric.
func TestStaleLookKeepsRefilledDepth(t *testing.T) {
	db, _ := restest.NewDB(t, 32)
	f := restest.NewFaultConns(reservation.SQLConns(db))
	r, err := refiller.New(f, refiller.Config{PoolCap: 100, ScanInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	ledger(t, db, key, 1000)
	exec(t, db, "INSERT INTO reservation_units SELECT 1, 100, 1, seq FROM seq_1_to_25")
	// The check's query (the only statement starting so) runs, reads depth
	// 25, and its answer is held until the refill below is done.
	read, release := make(chan struct{}), make(chan struct{})
	rule := f.Add(&restest.FaultRule{Match: "SELECT 0, ", After: true, Hold: release, Then: func() { close(read) }})
	r.Notify(key, 0)
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		r.CheckDirty(context.Background())
	}()
	select {
	case <-read:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("the depth check never ran its query")
	}
	if err := r.RefillNow(context.Background(), key); err != nil {
		close(release)
		t.Fatal(err)
	}
	// The check's own refill must not run either: it would record 100 again
	// and hide a stale overwrite.
	f.SetDown(true)
	close(release)
	select {
	case <-checked:
	case <-time.After(10 * time.Second):
		t.Fatal("the depth check did not return once its answer was released")
	}
	if n := f.Fired(rule); n != 1 {
		t.Fatalf("the hold fired %d times, want 1", n)
	}
	if hot := r.Stats().Hottest; len(hot) != 1 || hot[0].Depth != 100 {
		t.Fatalf("hottest pools %+v after a refill to 100; a check that read 25 before it overwrote its depth", hot)
	}
}

// TestDemandAwareWatermark: a pool above the static watermark is refilled
// when reserves take from it fast enough that it would run dry within Lead;
// with Lead disabled the same pool is left alone.
func TestDemandAwareWatermark(t *testing.T) {
	for _, c := range []struct {
		lead time.Duration
		want int64
	}{{time.Second, 100}, {-1, 60}} {
		t.Run(fmt.Sprint("lead=", c.lead), func(t *testing.T) {
			db, r := setup(t, refiller.Config{PoolCap: 100, Lead: c.lead, Interval: 10 * time.Millisecond, ScanInterval: -1})
			ledger(t, db, key, 1000)
			exec(t, db, "INSERT INTO reservation_units SELECT 1, 100, 1, seq FROM seq_1_to_60")
			if err := r.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			// 60 units taken within ~110ms: about 270 units/s, so the pool
			// of 60 would run dry well within a second.
			r.Notify(key, 30)
			time.Sleep(110 * time.Millisecond)
			r.Notify(key, 30)
			time.Sleep(300 * time.Millisecond)
			if _, p, _ := restest.Pool(t, db, key); p != c.want {
				t.Errorf("pool %d, want %d", p, c.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []struct {
		cfg  refiller.Config
		want string
	}{
		{refiller.Config{}, ""},
		{refiller.Config{Watermark: 1.5}, "config watermark"},
		{refiller.Config{PoolCap: -1}, "config pool_cap"},
		{refiller.Config{HotPools: 5000}, "config hot_pools"},
		{refiller.Config{Interval: -time.Second}, "config interval"},
	} {
		err := c.cfg.Validate()
		if got := fmt.Sprint(err); (c.want == "" && err != nil) || (c.want != "" && !strings.Contains(got, c.want)) {
			t.Errorf("Validate(%+v) = %v, want %q", c.cfg, err, c.want)
		}
	}
}
