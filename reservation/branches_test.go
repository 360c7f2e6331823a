package reservation_test

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// A reserve short of units because other transactions hold the pool's
// rows (not because the pool is empty) backs off and tries again, rather
// than refilling or answering "insufficient stock", and takes the units
// once they are let go.
func TestShortfallBacksOffWhileRowsAreLocked(t *testing.T) {
	v := newEnv(t, envOpts{cfg: func(c *reservation.Config) {
		c.DisableCoalescing = true // straight to the back-off, no requeue at the head
		c.BackoffMin, c.BackoffMax = 10*time.Millisecond, 30*time.Millisecond
		c.CallTimeout = 30 * time.Second
	}})
	v.receive(1, 1, 5)
	if _, pooled, _ := v.pool(1, 1); pooled != 5 {
		t.Fatalf("pool holds %d units after receiving 5", pooled)
	}
	tx, err := v.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() }) // a failure lets the reserve finish
	var locked int
	rows, err := tx.Query("SELECT id FROM reservation_units WHERE shop_id = ? AND inventory_item_id = 1 AND inventory_group_id = 1 FOR UPDATE", shop)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		locked++
	}
	rows.Close()
	if locked != 5 {
		t.Fatalf("locked %d pool rows, want 5", locked)
	}
	before := v.eng.Stats().Backoffs
	done := goCall(v.eng, "reserve", int64(shop), "k-backoff", restest.LinesJSON(1, 2, 1), int64(60))
	deadline := time.Now().Add(20 * time.Second)
	for v.eng.Stats().Backoffs < before+2 {
		select {
		case a := <-done:
			t.Fatalf("the reserve answered while every unit was locked by another transaction: %v %v", a.rows, a.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the reserve did not back off while the pool's rows were locked")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	a := <-done
	if a.err != nil {
		t.Fatalf("the reserve after the rows were let go: %v", a.err)
	}
	if s := v.eng.Stats(); s.InlineRefills != 0 {
		t.Errorf("%d inline refills: locked rows are not an empty pool", s.InlineRefills)
	}
	if onHand, pooled, reserved := v.pool(1, 1); onHand != 5 || pooled != 3 || reserved != 2 {
		t.Fatalf("on_hand %d, pooled %d, reserved %d; want 5, 3, 2", onHand, pooled, reserved)
	}
	v.checkInvariant(1, 1)
}

// The sweeper deletes expired lines at most sweep_rate transactions a
// second while it has a backlog: sampled as it works, the lines it has
// deleted never exceed what the rate allows since it started (an upper
// bound, which a slow machine only stays further below), and it deletes
// them all.
func TestSweeperRateLimit(t *testing.T) {
	const rate, lines = 5.0, 8
	v := newEnv(t, envOpts{background: true, cfg: func(c *reservation.Config) {
		c.SweepRate, c.SweepBatch = rate, 1
		c.SweepInterval = time.Hour // before the backlog: sweep only when told
	}})
	// One line in each of its own pools: a refill of a pool takes that
	// pool's expired lines back too (counters.go), so with one line a pool
	// what goes is the sweeper's, one line a sweep.
	for i := range int64(lines) {
		v.receive(1+i, 1, 1)
		if _, err := reserve(context.Background(), v.eng, "k-sweep-"+string(rune('a'+i)), 60, 1+i, 1, 1); err != nil {
			t.Fatal(err)
		}
	}
	// The sweeper's first cycle ran at start, found nothing, and rests for
	// sweep_interval; expire the lines and start a second engine whose
	// sweeper finds the backlog at once.
	v.expireAll()
	expired := v.scalar("SELECT COUNT(*) FROM reserved_quantities WHERE expires_at <= UTC_TIMESTAMP(6)")
	if expired != lines {
		t.Fatalf("%d lines expired, want %d", expired, lines)
	}
	start := time.Now()
	e2, _ := v.addEngine(envOpts{background: true, cfg: func(c *reservation.Config) {
		c.SweepRate, c.SweepBatch = rate, 1
		c.SweepInterval = time.Hour
	}})
	pace := time.Duration(float64(time.Second) / rate)
	for {
		left := v.scalar("SELECT COUNT(*) FROM reserved_quantities")
		deleted := lines - left
		// One transaction at once, then one per pace (a second engine's
		// sweeper may also be awake: two at once at most).
		allowed := 2 * (1 + int64(time.Since(start)/pace))
		if deleted > allowed {
			t.Logf("engine 1 sweep cycles %d swept %d, engine 2 %d swept %d; reservations %d", v.eng.Stats().SweepCycles, v.eng.Stats().Swept, e2.Stats().SweepCycles, e2.Stats().Swept, v.scalar("SELECT COUNT(*) FROM reservations"))
			t.Fatalf("%d lines swept %v after the backlog appeared; at %v a sweep, at most %d", deleted, time.Since(start).Round(time.Millisecond), pace, allowed)
		}
		if left == 0 {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("%d of %d expired lines still there after 30 s", left, lines)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range int64(lines) {
		v.checkInvariant(1+i, 1)
	}
}
