package reservation_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

const shop = 1

// env is one private database with an engine and a refiller on it.
type env struct {
	t     *testing.T
	db    *sql.DB
	name  string
	conns reservation.Conns
	eng   *reservation.Engine
	ref   *refiller.Refiller
	logs  *dbtest.SyncBuffer
}

type envOpts struct {
	cfg        func(*reservation.Config)
	refCfg     func(*refiller.Config)
	maxConns   int
	background bool // start the refiller loop and the engine's sweeper/reconciler
	// wrap, when set, wraps the Conns the engine borrows from (the refiller
	// keeps the plain ones): the seam for fault injection.
	wrap func(reservation.Conns) reservation.Conns
	// hold is Options.Hold (zero: the engine's default).
	hold time.Duration
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	db, name := restest.NewDB(t, o.maxConns)
	v := &env{t: t, db: db, name: name, conns: reservation.SQLConns(db), logs: &dbtest.SyncBuffer{}}
	v.addEngine(o)
	return v
}

// addEngine builds (another) engine and refiller on the env's database, as a
// second holdfast instance would be; the first one becomes v.eng / v.ref.
func (v *env) addEngine(o envOpts) (*reservation.Engine, *refiller.Refiller) {
	t := v.t
	t.Helper()
	logger := restest.Logger(v.logs)
	rc := refiller.Config{Interval: 20 * time.Millisecond, ScanInterval: -1}
	if o.refCfg != nil {
		o.refCfg(&rc)
	}
	ref, err := refiller.New(v.conns, rc, logger)
	if err != nil {
		t.Fatal(err)
	}
	cfg := restest.Config()
	cfg.PoolCap = rc.PoolCap
	if cfg.PoolCap == 0 {
		cfg.PoolCap = 1000
	}
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	conns := v.conns
	if o.wrap != nil {
		conns = o.wrap(conns)
	}
	eng, err := reservation.New(cfg, reservation.Options{Conns: conns, Refiller: ref, Logger: logger, Hold: o.hold})
	if err != nil {
		t.Fatal(err)
	}
	if o.background {
		ctx, cancel := context.WithCancel(context.Background())
		if err := ref.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := eng.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cancel)
	}
	t.Cleanup(func() {
		eng.Close()
		ref.Close()
	})
	if v.eng == nil {
		v.eng, v.ref = eng, ref
	}
	return eng, ref
}

func (v *env) call(name string, args ...any) ([]string, [][]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return v.eng.Call(ctx, name, args)
}

func (v *env) mustCall(name string, args ...any) [][]any {
	v.t.Helper()
	_, rows, err := v.call(name, args...)
	if err != nil {
		v.t.Fatalf("CALL holdfast.%s%v: %v", name, args, err)
	}
	return rows
}

// receive puts qty units of item at group into the ledger.
func (v *env) receive(item, group, qty int64) {
	v.t.Helper()
	v.mustCall("receive", int64(shop), item, group, qty)
}

// stockEmpty creates the ledger row of item at group with qty on hand and
// an empty pool (receive would fill the pool), as a pool looks once
// reserves have drained it.
func (v *env) stockEmpty(item, group, qty int64) {
	v.t.Helper()
	if _, err := v.db.Exec("INSERT INTO inventory_ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, updated_at) VALUES (?, ?, ?, ?, UTC_TIMESTAMP(6))",
		shop, item, group, qty); err != nil {
		v.t.Fatal(err)
	}
}

// reserve reserves qty of item from the first location of locs that has it.
func reserve(ctx context.Context, e *reservation.Engine, key string, ttl int64, item, qty int64, locs ...int64) (string, error) {
	_, rows, err := e.Call(ctx, "reserve", []any{int64(shop), key, restest.LinesJSON(item, qty, locs...), ttl})
	if err != nil {
		return "", err
	}
	return rows[0][0].(string), nil
}

func (v *env) scalar(q string, args ...any) int64 {
	v.t.Helper()
	return restest.Scalar(v.t, v.db, q, args...)
}

// expireAll makes every reserved line expired.
func (v *env) expireAll() {
	v.t.Helper()
	if _, err := v.db.Exec("UPDATE reserved_quantities SET expires_at = UTC_TIMESTAMP(6) - INTERVAL 1 SECOND"); err != nil {
		v.t.Fatal(err)
	}
}

// sweepAll sweeps until a sweep finds nothing and returns what each sweep
// deleted (the last is 0).
func (v *env) sweepAll() []int {
	v.t.Helper()
	var got []int
	for {
		n, err := v.eng.SweepOnce(context.Background())
		if err != nil {
			v.t.Fatal(err)
		}
		got = append(got, n)
		if n == 0 {
			return got
		}
	}
}

// pool reports on_hand, pool rows, and reserved quantity of item at group
// (restest.Pool).
func (v *env) pool(item, group int64) (onHand, pooled, reserved int64) {
	v.t.Helper()
	return restest.Pool(v.t, v.db, reservation.PoolKey{ShopID: shop, ItemID: item, GroupID: group})
}

// checkInvariant fails the test if pool + reserved > on_hand for the pool.
func (v *env) checkInvariant(item, group int64) {
	v.t.Helper()
	onHand, pooled, reserved := v.pool(item, group)
	if pooled+reserved > onHand {
		v.t.Fatalf("invariant broken for item %d at %d: pool %d + reserved %d > on_hand %d", item, group, pooled, reserved, onHand)
	}
}

// isolation reads the GLOBAL or SESSION isolation level through row
// (a DB's QueryRow, or a Conn's bound to a context): tx_isolation on
// MariaDB before 11.1, transaction_isolation elsewhere.
func isolation(t testing.TB, row func(q string, args ...any) *sql.Row, scope string) string {
	t.Helper()
	var iso string
	if err := row("SELECT @@" + scope + ".tx_isolation").Scan(&iso); err != nil {
		if err := row("SELECT @@" + scope + ".transaction_isolation").Scan(&iso); err != nil {
			t.Fatal(err)
		}
	}
	return iso
}

// eachPoolConn takes n of the env's pool connections at once (so with a
// pool of n, every one of them) and runs check on each, reading through
// row.
func (v *env) eachPoolConn(n int, check func(row func(q string, args ...any) *sql.Row)) {
	v.t.Helper()
	ctx := context.Background()
	for range n {
		c, err := v.db.Conn(ctx)
		if err != nil {
			v.t.Fatal(err)
		}
		defer c.Close()
		check(func(q string, args ...any) *sql.Row { return c.QueryRowContext(ctx, q, args...) })
	}
}

// callAnswer is what a call started by goCall answered.
type callAnswer struct {
	rows [][]any
	err  error
}

// goCall starts CALL holdfast.<name>(args) on e and returns where its
// answer will arrive.
func goCall(e *reservation.Engine, name string, args ...any) <-chan callAnswer {
	done := make(chan callAnswer, 1)
	go func() {
		_, rows, err := e.Call(context.Background(), name, args)
		done <- callAnswer{rows, err}
	}()
	return done
}

// checkRecovered fails t unless the engine counted a recovery of proc
// since it counted before.
func (v *env) checkRecovered(t *testing.T, proc string, before uint64) {
	t.Helper()
	if got := v.eng.Stats().Recoveries[proc]; got <= before {
		t.Errorf("recoveries of %s: %d before, %d after; want more", proc, before, got)
	}
}
