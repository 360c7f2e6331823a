package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
)

// createReservationSchema creates holdfast's reservation tables from its
// own migrations, as `holdfast migrate` would.
func createReservationSchema(t *testing.T, db string) {
	t.Helper()
	conn := dbtest.Open(t, db)
	for _, m := range reservation.Migrations {
		for _, q := range m.Statements {
			if _, err := conn.Exec(q); err != nil {
				t.Fatalf("migration %d: %v", m.Version, err)
			}
		}
	}
}

func TestCheckPoolAgainstMariaDB(t *testing.T) {
	name := dbtest.NewDatabase(t)
	createReservationSchema(t, name)
	db := dbtest.Open(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	k := PoolKey{Shop: 3, Item: 1001, Location: 1}
	other := PoolKey{Shop: 3, Item: 1002, Location: 1} // same shop, another pool
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec("INSERT INTO inventory_ledger VALUES (3, 1001, 1, 10, UTC_TIMESTAMP(6)), (3, 1002, 1, 10, UTC_TIMESTAMP(6)), (4, 1001, 1, 10, UTC_TIMESTAMP(6))")
	for id := 1; id <= 6; id++ { // pool of 6: 6 + 4 reserved = on_hand 10
		exec("INSERT INTO reservation_units VALUES (3, 1001, 1, ?), (4, 1001, 1, ?)", id, id)
	}
	exec("INSERT INTO reservation_units VALUES (3, 1002, 1, 1)")
	ids := []uint64{11, 12, 13, 14}
	for _, id := range ids {
		exec("INSERT INTO reserved_quantities VALUES (?, 1, 3, 1001, 1, 1, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)", id)
		exec("INSERT INTO reservations (reservation_id, shop_id, idempotency_key, request_hash, state, line_count, line_items, created_at, expires_at) "+
			"VALUES (?, 3, ?, REPEAT('x', 32), 0, 1, '', UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)", id, fmt.Sprint("key", id))
	}

	c, err := CheckPool(ctx, db, k, ids)
	if err != nil {
		t.Fatal(err)
	}
	want := PoolCheck{PoolStock: reservation.PoolStock{Key: k.key(), OnHand: 10, Pooled: 6, Lines: 4, Reserved: 4}, Found: true, Reservations: 4}
	if c != want {
		t.Fatalf("CheckPool = %+v, want %+v", c, want)
	}
	if p := c.Problems(10, 4); len(p) != 0 {
		t.Fatalf("consistent pool: %v", p)
	}
	// A client told of a reservation that is not there, one nobody was
	// told of, and one unit too many in the pool.
	exec("INSERT INTO reserved_quantities VALUES (15, 1, 3, 1001, 1, 1, UTC_TIMESTAMP(6) + INTERVAL 1 HOUR)")
	c, err = CheckPool(ctx, db, k, []uint64{10, 11, 12, 13, 14})
	if err != nil {
		t.Fatal(err)
	}
	if c.Missing != 1 || c.Extra != 1 || c.Reserved != 5 {
		t.Fatalf("CheckPool = %+v", c)
	}
	p := strings.Join(c.Problems(10, 5), "; ")
	if !strings.Contains(p, "OVERSOLD: pool 6 + reserved 5 > on_hand 10") || !strings.Contains(p, "1 given to clients but not reserved, 1 reserved") {
		t.Fatalf("problems: %s", p)
	}

	if err := DropShop(ctx, db, k); err != nil {
		t.Fatal(err)
	}
	c, err = CheckPool(ctx, db, k, nil)
	if err != nil || c != (PoolCheck{}) {
		t.Fatalf("after DropShop: %+v, %v", c, err)
	}
	// Other pools, of this shop and of others, keep their rows.
	var n int
	if err := db.QueryRow("SELECT (SELECT COUNT(*) FROM reservation_units) + (SELECT COUNT(*) FROM inventory_ledger)").Scan(&n); err != nil || n != 7+2 {
		t.Fatalf("rows left: %d, %v", n, err)
	}
	if c, err := CheckPool(ctx, db, other, nil); err != nil || c.OnHand != 10 || c.Pooled != 1 {
		t.Fatalf("other pool of the shop: %+v, %v", c, err)
	}
}

// TestCounterWorkloads runs workloads (a) and (b) straight against MariaDB
// (no holdfast), past a sell-out, and checks the counter's books.
func TestCounterWorkloads(t *testing.T) {
	addr, name, user := dbtest.NewAccount(t)
	db := dbtest.Open(t, name)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, q := range reserveSchema {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	ep := Endpoint{Addr: addr, User: user, Password: user}
	for _, c := range []struct {
		name    string
		op      Op
		records bool
		start   int64
	}{
		{"txn", TxnOp("t", 1001, 60), true, 1_000_000},
		{"txn sold out", TxnOp("s", 1001, 60), true, 2},
		{"update", UpdateOp(), false, 1_000_000},
		{"update sold out", UpdateOp(), false, 2},
	} {
		if err := ResetCounter(ctx, db, c.start); err != nil {
			t.Fatal(err)
		}
		started, finished := false, false
		res, err := RunLoad(ctx, LoadSpec{Endpoint: ep, Database: name, Clients: 4, Duration: 500 * time.Millisecond, Op: c.op,
			Started: func() { started = true }, Finished: func() { finished = started }})
		if err != nil || res.Broken > 0 || res.Failed > 0 || !finished {
			t.Fatalf("%s: %+v, %v (hooks ran: %v)", c.name, res, err, finished)
		}
		if res.Reserved == 0 || res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 || res.Rate() <= 0 {
			t.Fatalf("%s: %+v", c.name, res)
		}
		if c.start == 2 && (res.Reserved != 2 || res.SoldOut == 0) {
			t.Fatalf("%s: reserved %d, sold out %d; want 2 and some", c.name, res.Reserved, res.SoldOut)
		}
		chk, err := CheckCounter(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		if p := chk.Problems(c.start, res.Reserved, c.records); len(p) != 0 {
			t.Fatalf("%s: %v", c.name, p)
		}
		// A reservation the clients did not count shows.
		if _, err := db.ExecContext(ctx, "UPDATE counter SET available = available - 1"); err != nil {
			t.Fatal(err)
		}
		chk, _ = CheckCounter(ctx, db)
		if p := chk.Problems(c.start, res.Reserved, c.records); len(p) == 0 {
			t.Fatalf("%s: an uncounted decrement went unnoticed", c.name)
		}
	}
}

// TestRunReserveEndToEnd builds holdfast and runs the whole bench briefly:
// two clients, one round, every workload. Not under -short: it builds
// holdfast.
func TestRunReserveEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds holdfast")
	}
	name := dbtest.NewDatabase(t)
	user := dbtest.NewUser(t, name)
	cfg := dbtest.Config(t)
	o := DefaultReserveOptions()
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	o.Repo, o.MariaDB, o.AdminUser, o.AdminPassword = repo, cfg.Addr, cfg.User, cfg.Passwd
	o.Database, o.PoolUser = name, user
	o.Clients, o.Rounds, o.Time, o.Pause = []int{2}, 1, time.Second, 0
	if gocmd := os.Getenv("GO"); gocmd != "" {
		o.Go = gocmd
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := RunReserve(ctx, o, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"migrate: ", "relay calibration", "(c) holdfast.reserve", "check OK: ", "reserved_quantities rows", "reserves{outcome=\"reserved\"}",
		"consistency: 4 of 4 runs verified", "PASS  zero oversell in every run", "n/a   (c)/(a)",
		"(d) reserve, redis shadow", "holdfast with Redis (workload d)", "shadow: reserves compared", "differing 0", "shadow cost at 2 clients: (d) ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
}
