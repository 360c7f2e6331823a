package reservation_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestConcurrentReserversExactStock: 256 concurrent clients reserve 1 unit
// each, over and over, of one item/location with on_hand 5,000 and pool cap
// 1,000. Exactly 5,000 succeed, every attempt after a client's first
// "insufficient stock" is also insufficient (no false sell-outs before,
// none after), and pool + reserved <= on_hand holds at the end. Run with
// the combiner (on sessions, and borrowing per batch) and without it.
func TestConcurrentReserversExactStock(t *testing.T) {
	for _, mode := range []struct {
		name              string
		naive, noSessions bool
	}{{"coalesced", false, false}, {"coalesced_no_sessions", false, true}, {"naive", true, false}} {
		t.Run(mode.name, func(t *testing.T) {
			v := newEnv(t, envOpts{background: true, cfg: func(c *reservation.Config) {
				c.DisableCoalescing = mode.naive
				c.DisableSessions = mode.noSessions
				c.CallTimeout = 30 * time.Second
			}})
			const onHand, clients = 5000, 256
			v.receive(7, 1, onHand)
			var ok, insufficient atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			start := time.Now()
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					soldOut := false
					for i := 0; ; i++ {
						_, err := reserve(ctx, v.eng, fmt.Sprintf("c%d-%d", c, i), 600, 7, 1, 1)
						switch {
						case err == nil && soldOut:
							errs <- fmt.Errorf("client %d reserved after it was told insufficient stock", c)
							return
						case err == nil:
							ok.Add(1)
						case restest.Code(err) == reservation.CodeInsufficientStock:
							insufficient.Add(1)
							if soldOut {
								return // the attempt after the first sell-out was also refused
							}
							soldOut = true
						default:
							errs <- fmt.Errorf("client %d: %v", c, err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			if ok.Load() != onHand {
				t.Errorf("%d reservations succeeded, want exactly %d", ok.Load(), onHand)
			}
			if insufficient.Load() != 2*clients {
				t.Errorf("%d insufficient answers, want %d (two per client)", insufficient.Load(), 2*clients)
			}
			got, pooled, reserved := v.pool(7, 1)
			if got != onHand || reserved != onHand || pooled != 0 {
				t.Errorf("on_hand %d, pool %d, reserved %d; want %d, 0, %d", got, pooled, reserved, onHand, onHand)
			}
			v.checkInvariant(7, 1)
			v.checkCounter(7, 1, "the sell-out")
			s := v.eng.Stats()
			t.Logf("%s: %d reserves in %v; %d transactions, %d inline refills, %d backoffs, batch p50 %v",
				mode.name, onHand, time.Since(start).Round(time.Millisecond), s.Batches, s.InlineRefills, s.Backoffs, s.BatchSize.Quantile(0.5))
		})
	}
}

// TestMixedWorkloadConservation runs 256 concurrent reservers (a quarter of
// the reserves with 1-second TTLs, so they expire) on one item/location with
// on_hand 5,000 and pool cap 1,000, together with claims (each repeated),
// releases, the sweeper, the background refiller and a second engine
// instance, for 4 seconds (a minute with HOLDFAST_SOAK=1), then checks that
// nothing was lost or claimed twice: initial on_hand = final on_hand + the
// quantity of every successful claim, every claim of a token deducted at
// most once, and after all reservations end the pool refills to
// min(cap, on_hand).
func TestMixedWorkloadConservation(t *testing.T) {
	const initial, poolCap = 5000, 1000
	o := envOpts{background: true, cfg: func(c *reservation.Config) {
		c.SweepInterval = 50 * time.Millisecond
		c.CallTimeout = 20 * time.Second
	}}
	v := newEnv(t, o)
	eng2, _ := v.addEngine(o)
	engines := []*reservation.Engine{v.eng, eng2}
	v.receive(9, 1, initial)

	run := 4 * time.Second
	if restest.Soak() {
		run = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	type tok struct {
		token string
		qty   int64
	}
	tokens := make(chan tok, 10000)
	var (
		mu       sync.Mutex // guards claimed
		claimed  = map[string]int64{}
		wg       sync.WaitGroup
		failures atomic.Int64
	)
	fail := func(format string, a ...any) {
		if failures.Add(1) < 10 {
			t.Errorf(format, a...)
		}
	}
	for w := 0; w < 256; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w%2]
			for i := 0; ctx.Err() == nil; i++ {
				qty := int64(1 + i%3)
				ttl := int64(600)
				if i%4 == 0 {
					ttl = 1
				}
				tk, err := reserve(context.Background(), e, fmt.Sprintf("w%d-%d", w, i), ttl, 9, qty, 1)
				switch {
				case err == nil:
					select {
					case tokens <- tok{tk, qty}:
					default:
					}
				case restest.Code(err) == reservation.CodeInsufficientStock:
					time.Sleep(5 * time.Millisecond)
				default:
					fail("reserve: %v", err)
				}
			}
		}()
	}
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e := engines[w%2]
			for ctx.Err() == nil {
				var tk tok
				select {
				case tk = <-tokens:
				case <-ctx.Done():
					return
				}
				bg := context.Background()
				if w%4 == 3 { // a quarter of the workers release instead
					if _, _, err := e.Call(bg, "release", []any{tk.token}); err != nil {
						fail("release: %v", err)
					}
					continue
				}
				if rand.IntN(3) == 0 {
					time.Sleep(time.Duration(rand.IntN(1500)) * time.Millisecond) // some claims come late
				}
				for rep := 0; rep < 2; rep++ { // every claim is repeated
					_, rows, err := e.Call(bg, "claim", []any{tk.token})
					if c := restest.Code(err); c == reservation.CodeExpired || c == reservation.CodeGuardViolated {
						// Refused, nothing deducted: a forced claim after
						// expiry found the ledger short (9104), or a held
						// reservation met the guard after someone's forced
						// claim took its units (9106).
						break
					}
					if err != nil {
						fail("claim: %v", err)
						break
					}
					outcome := rows[0][1].(string)
					mu.Lock()
					_, dup := claimed[tk.token]
					if outcome == "duplicate" {
						if !dup {
							fail("claim of %s reported duplicate but was never claimed", tk.token)
						}
					} else {
						if dup {
							fail("token %s claimed twice (%s)", tk.token, outcome)
						}
						claimed[tk.token] = tk.qty
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()

	var sumClaimed int64
	for _, q := range claimed {
		sumClaimed += q
	}
	final, _, _ := v.pool(9, 1)
	if initial != final+sumClaimed {
		t.Errorf("initial on_hand %d != final on_hand %d + claimed %d", initial, final, sumClaimed)
	}
	if n := v.scalar("SELECT COUNT(*) FROM reservations WHERE state = 1"); n != int64(len(claimed)) {
		t.Errorf("%d reservations recorded claimed, %d claims succeeded", n, len(claimed))
	}
	// End every reservation, then one refill must pool min(cap, on_hand):
	// no unit was lost.
	v.expireAll()
	v.sweepAll()
	if _, err := v.ref.Refill(context.Background(), reservation.PoolKey{ShopID: shop, ItemID: 9, GroupID: 1}, refiller.Inline); err != nil {
		t.Fatal(err)
	}
	onHand, pooled, reserved := v.pool(9, 1)
	if reserved != 0 || pooled != min(poolCap, onHand) {
		t.Errorf("after all reservations ended: pool %d, reserved %d, on_hand %d; want pool = min(%d, on_hand)", pooled, reserved, onHand, poolCap)
	}
	v.checkCounter(9, 1, "the mixed workload")
	for i, e := range engines {
		if s := e.Stats(); s.Deadlocks != 0 || s.LockWaitTimeouts != 0 {
			t.Errorf("engine %d retried %d deadlocks and %d lock-wait timeouts", i, s.Deadlocks, s.LockWaitTimeouts)
		}
	}
	s := v.eng.Stats()
	t.Logf("claimed %d tokens (%d units); claims by outcome %v; reserves %v; swept %d",
		len(claimed), sumClaimed, s.Claims, s.Reserves, s.Swept)
}

// TestNoDeadlockAtRepeatableRead runs reserve (single- and multi-line,
// several locations), claim, release, extend, adjust and refills (inline,
// background, from two engine instances) together, with the server left at
// its default REPEATABLE READ. Innodb_deadlocks must not move, no
// transaction may be retried for a deadlock or lock-wait timeout, and no
// call may fail with one. 5 seconds by default; a minute with
// HOLDFAST_SOAK=1 (go test -run TestNoDeadlockAtRepeatableRead).
func TestNoDeadlockAtRepeatableRead(t *testing.T) {
	admin := restest.Admin(t)
	iso := isolation(t, admin.QueryRow, "GLOBAL")
	if iso != "REPEATABLE-READ" {
		t.Fatalf("server default isolation is %s; this test must run at REPEATABLE-READ", iso)
	}
	deadlocks := func() int64 {
		var name string
		var n int64
		if err := admin.QueryRow("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	o := envOpts{background: true, refCfg: func(c *refiller.Config) { c.PoolCap = 200 }, cfg: func(c *reservation.Config) {
		c.SweepInterval = 50 * time.Millisecond
		c.CallTimeout = 20 * time.Second
	}}
	v := newEnv(t, o)
	eng2, ref2 := v.addEngine(o)
	engines := []*reservation.Engine{v.eng, eng2}
	refs := []*refiller.Refiller{v.ref, ref2}
	for _, item := range []int64{1, 2, 3} {
		for _, g := range []int64{1, 2, 3} {
			v.receive(item, g, 100000)
		}
	}
	before := deadlocks()

	run := 5 * time.Second
	if restest.Soak() {
		run = time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), run)
	defer cancel()
	tokens := make(chan string, 4096)
	var wg sync.WaitGroup
	var calls, failures atomic.Int64
	check := func(what string, err error) {
		calls.Add(1)
		if err != nil && failures.Add(1) <= 10 {
			t.Errorf("%s: %v", what, err)
		}
	}
	worker := func(n int, f func(e *reservation.Engine, r *refiller.Refiller, i int)) {
		for w := 0; w < n; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ctx.Err() == nil; i++ {
					f(engines[(w+i)%2], refs[(w+i)%2], w*1_000_000+i)
				}
			}()
		}
	}
	bg := context.Background()
	worker(24, func(e *reservation.Engine, _ *refiller.Refiller, i int) { // single-line, hot
		tk, err := reserve(bg, e, fmt.Sprintf("s%d", i), 600, 1+int64(i%3), 1+int64(i%2), 1, 2, 3)
		check("reserve", err)
		if err == nil {
			select {
			case tokens <- tk:
			default:
			}
		}
	})
	worker(8, func(e *reservation.Engine, _ *refiller.Refiller, i int) { // multi-line, across locations
		lines := `[{"item":3,"qty":1,"locations":[3,1]},{"item":1,"qty":2,"locations":[2,3]},{"item":2,"qty":1,"locations":[1]}]`
		_, rows, err := e.Call(bg, "reserve", []any{int64(shop), fmt.Sprintf("m%d", i), lines, int64(600)})
		check("multi-line reserve", err)
		if err == nil {
			select {
			case tokens <- rows[0][0].(string):
			default:
			}
		}
	})
	worker(10, func(e *reservation.Engine, _ *refiller.Refiller, i int) {
		var tk string
		select {
		case tk = <-tokens:
		case <-ctx.Done():
			return
		}
		switch i % 5 {
		case 0:
			_, _, err := e.Call(bg, "release", []any{tk})
			check("release", err)
		case 1:
			_, _, err := e.Call(bg, "extend", []any{tk, int64(900)})
			check("extend", err)
			_, _, err = e.Call(bg, "claim", []any{tk})
			check("claim", err)
		default:
			_, _, err := e.Call(bg, "claim", []any{tk})
			check("claim", err)
		}
	})
	worker(2, func(e *reservation.Engine, r *refiller.Refiller, i int) { // refills and stock changes
		k := reservation.PoolKey{ShopID: shop, ItemID: 1 + int64(i%3), GroupID: 1 + int64(i/3%3)}
		_, err := r.Refill(bg, k, refiller.Inline)
		check("refill", err)
		delta := int64(1)
		if i%2 == 1 {
			delta = -1
		}
		_, _, err = e.Call(bg, "adjust", []any{int64(shop), k.ItemID, k.GroupID, delta})
		check("adjust", err)
		time.Sleep(10 * time.Millisecond)
	})
	wg.Wait()

	// The server is shared (other packages' tests may run at the same time),
	// so a moved counter fails the test when the latest deadlock involves
	// this test's database; the engines' own retry counters below are exact.
	if after := deadlocks(); after != before {
		var typ, name, status string
		admin.QueryRow("SHOW ENGINE INNODB STATUS").Scan(&typ, &name, &status)
		latest := status
		if i := strings.Index(status, "LATEST DETECTED DEADLOCK"); i >= 0 {
			latest = status[i:]
			if j := strings.Index(latest, "\nTRANSACTIONS\n"); j >= 0 {
				latest = latest[:j]
			}
		}
		if strings.Contains(latest, v.name) {
			t.Errorf("Innodb_deadlocks went from %d to %d, latest in this test's database:\n%s", before, after, latest)
		} else {
			t.Logf("Innodb_deadlocks went from %d to %d in other databases (shared server)", before, after)
		}
	}
	for i, e := range engines {
		s := e.Stats()
		if s.Deadlocks != 0 || s.LockWaitTimeouts != 0 {
			t.Errorf("engine %d retried %d deadlocks and %d lock-wait timeouts", i, s.Deadlocks, s.LockWaitTimeouts)
		}
		rs := refs[i].Stats()
		if rs.Deadlocks != 0 || rs.LockWaitTimeouts != 0 {
			t.Errorf("refiller %d retried %d deadlocks and %d lock-wait timeouts", i, rs.Deadlocks, rs.LockWaitTimeouts)
		}
	}
	if err := admin.QueryRow("SELECT @@GLOBAL.tx_isolation").Scan(&iso); err == nil && iso != "REPEATABLE-READ" {
		t.Errorf("server default isolation changed to %s", iso)
	}
	for _, item := range []int64{1, 2, 3} {
		for _, g := range []int64{1, 2, 3} {
			v.checkInvariant(item, g)
			v.checkCounter(item, g, "the run")
		}
	}
	s := v.eng.Stats()
	t.Logf("%d calls in %v; engine 1: reserves %v claims %v inline refills %d backoffs %d", calls.Load(), run, s.Reserves, s.Claims, s.InlineRefills, s.Backoffs)
}

// TestEmptyPoolRefillNoGapLockStall is the seeds' problem 4. First the
// mechanism: a reserve transaction is held open right after its SKIP LOCKED
// select found the pool empty, and a refill of that pool must still commit
// at once (READ COMMITTED takes no gap lock). The same select in a
// REPEATABLE READ transaction does block the refill's INSERT, which shows
// the check can fail. Then the behaviour: 32 reservers start on an empty
// pool with the background refiller stopped, and all get their unit from
// inline refills promptly.
func TestEmptyPoolRefillNoGapLockStall(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.stockEmpty(5, 1, 100)
	key := reservation.PoolKey{ShopID: shop, ItemID: 5, GroupID: 1}

	t.Run("held empty SKIP LOCKED select does not block refill", func(t *testing.T) {
		paused, resume := make(chan struct{}), make(chan struct{})
		var once sync.Once
		reservation.SetHookLocked(v.eng, func(context.Context, reservation.Conn) {
			once.Do(func() {
				close(paused)
				<-resume
			})
		})
		defer reservation.SetHookLocked(v.eng, nil)
		// A reserver that never refills inline: the refiller is bypassed by
		// calling the engine with an empty pool and waiting in the hook.
		done := make(chan error, 1)
		go func() {
			_, err := reserve(context.Background(), v.eng, "gap", 600, 5, 1, 1)
			done <- err
		}()
		<-paused
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		res, err := v.ref.Refill(ctx, key, refiller.Inline)
		if err != nil || res.Added != 100 {
			t.Fatalf("refill while a reserve held an empty-range SKIP LOCKED select: %+v, %v", res, err)
		}
		// The 3 s context above bounds it: a gap lock would hold the
		// INSERT until innodb_lock_wait_timeout (50 s).
		t.Logf("refill committed in %v while the reserve transaction was open", time.Since(start))
		close(resume)
		if err := <-done; err != nil {
			t.Fatalf("reserve: %v", err)
		}
	})

	t.Run("control: at REPEATABLE READ the same select blocks the insert", func(t *testing.T) {
		ctx := context.Background()
		hold, err := v.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
		ins, err := v.db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer ins.Close()
		for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ", "START TRANSACTION",
			"SELECT id FROM reservation_units WHERE shop_id = 1 AND inventory_item_id = 6 AND inventory_group_id = 1 LIMIT 1 FOR UPDATE SKIP LOCKED"} {
			if _, err := hold.ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		defer hold.ExecContext(ctx, "ROLLBACK")
		if _, err := ins.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
			t.Fatal(err)
		}
		_, err = ins.ExecContext(ctx, "INSERT INTO reservation_units VALUES (1, 6, 1, 1)")
		if err == nil || !strings.Contains(err.Error(), "1205") {
			t.Fatalf("insert under an RR empty-range SKIP LOCKED select: %v; want lock wait timeout 1205", err)
		}
	})

	t.Run("reservers on an empty pool are served by inline refill", func(t *testing.T) {
		v.stockEmpty(8, 1, 64)
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; i < 32; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := reserve(context.Background(), v.eng, fmt.Sprintf("e%d", i), 600, 8, 1, 1); err != nil {
					t.Errorf("reserve %d: %v", i, err)
				}
			}()
		}
		wg.Wait()
		if d := time.Since(start); d > 15*time.Second {
			t.Errorf("32 reserves on an empty pool took %v", d)
		}
		if n := v.eng.Stats().InlineRefills; n == 0 {
			t.Error("no inline refill counted")
		}
		v.checkInvariant(8, 1)
	})
}

// TestOneRowLockPerUnit: with the composite primary key, a reserve of 7
// units holds exactly 7 row locks (information_schema.INNODB_TRX
// trx_rows_locked, read from another connection while the reserve's
// transaction is paused; the view is cached ~100 ms, so the test waits).
// The same select on an auto-increment key with a secondary index, for
// contrast, holds 2 per unit.
func TestOneRowLockPerUnit(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(4, 1, 50)
	if _, err := v.ref.Refill(context.Background(), reservation.PoolKey{ShopID: shop, ItemID: 4, GroupID: 1}, refiller.Inline); err != nil {
		t.Fatal(err)
	}
	admin := restest.Admin(t)
	locked := func(connID int64) int64 {
		time.Sleep(300 * time.Millisecond)
		var n int64
		if err := admin.QueryRow("SELECT trx_rows_locked FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ?", connID).Scan(&n); err != nil {
			t.Fatalf("INNODB_TRX: %v", err)
		}
		return n
	}

	var got int64
	var once sync.Once
	reservation.SetHookLocked(v.eng, func(ctx context.Context, c reservation.Conn) {
		once.Do(func() {
			rows, err := c.Query(ctx, "SELECT CONNECTION_ID()")
			if err != nil {
				t.Error(err)
				return
			}
			var id int64
			fmt.Sscan(string(rows[0][0]), &id)
			got = locked(id)
		})
	})
	if _, err := reserve(context.Background(), v.eng, "locks", 600, 4, 7, 1); err != nil {
		t.Fatal(err)
	}
	reservation.SetHookLocked(v.eng, nil)
	if got != 7 {
		t.Errorf("a reserve of 7 units held %d row locks, want 7", got)
	}

	// Contrast: auto-increment key plus a secondary index on the filter.
	for _, q := range []string{
		"CREATE TABLE units_autoinc (id BIGINT AUTO_INCREMENT PRIMARY KEY, shop_id BIGINT, item BIGINT, grp BIGINT, KEY (shop_id, item, grp))",
		"INSERT INTO units_autoinc (shop_id, item, grp) SELECT 1, 4, 1 FROM reservation_units LIMIT 20",
	} {
		if _, err := v.db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	c, err := v.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var id int64
	c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "START TRANSACTION",
		"SELECT id FROM units_autoinc WHERE shop_id = 1 AND item = 4 AND grp = 1 LIMIT 7 FOR UPDATE SKIP LOCKED"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if n := locked(id); n != 14 {
		t.Logf("auto-increment key: %d row locks for 7 units (expected 14)", n)
	} else {
		t.Logf("auto-increment key with secondary index: %d row locks for 7 units; composite key: %d", n, got)
	}
	c.ExecContext(ctx, "ROLLBACK")
}
