package proxy

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

func shapeOf(sql string) string { return ShapeKey(sqlscan.Scan([]byte(sql)).Shape) }

// A blocked shape's statements are refused with 9007, whatever their
// literals, tag or protocol; other statements, and those that end a
// transaction, pass; unblocked, they run again.
func TestShapeBlock(t *testing.T) {
	p := startProxy(t)
	db := p.open(t)
	ctx := context.Background()
	mustExec(t, db, "DROP TABLE IF EXISTS shape_block")
	mustExec(t, db, "CREATE TABLE shape_block (id INT PRIMARY KEY, v INT)")
	mustExec(t, db, "INSERT INTO shape_block VALUES (1, 10), (2, 20)")
	key := shapeOf("SELECT v FROM shape_block WHERE id IN (1, 2)")
	p.srv.DrainTag(key, "runaway report", 0)

	for _, q := range []string{
		"SELECT v FROM shape_block WHERE id IN (1, 2)",
		"/* conn_tag:checkout */ select v from shape_block where id in (7)",
		"SELECT  v FROM shape_block -- spaced\n WHERE id IN (1,2,3,4)",
	} {
		_, err := db.ExecContext(ctx, q)
		if mysqlErrNo(err) != codeShapeBlocked || !strings.Contains(err.Error(), "runaway report") {
			t.Fatalf("%q: %v, want error 9007 naming the reason", q, err)
		}
	}
	// The binary protocol: a prepared statement of the shape.
	if _, err := db.QueryContext(ctx, "SELECT v FROM shape_block WHERE id IN (?)", 1); mysqlErrNo(err) != codeShapeBlocked {
		t.Fatalf("prepared statement of a blocked shape: %v, want 9007", err)
	}
	// Another shape runs; a transaction with a blocked statement in it
	// can still be ended.
	var v int
	if err := db.QueryRowContext(ctx, "SELECT v FROM shape_block WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("another shape: %d, %v", v, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE shape_block SET v = 11 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT v FROM shape_block WHERE id IN (1)"); mysqlErrNo(err) != codeShapeBlocked {
		t.Fatalf("blocked shape in a transaction: %v, want 9007", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback after a blocked statement: %v", err)
	}
	if err := db.QueryRowContext(ctx, "SELECT v FROM shape_block WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("after the rollback: %d, %v, want 10", v, err)
	}
	var rejected uint64
	for _, s := range p.srv.Recorder().Snapshot() {
		rejected += s.Rejected["shape_blocked"]
	}
	if rejected != 5 {
		t.Errorf("rejected{reason=shape_blocked} = %d, want 5", rejected)
	}
	p.srv.UndrainTag(key)
	mustExec(t, db, "SELECT v FROM shape_block WHERE id IN (1, 2)")
}

// A capped shape runs at most N statements at once; the others wait for a
// slot without holding a backend connection, and get 9008 when none comes
// free within pool.acquire_timeout.
func TestShapeCap(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.AcquireTimeout = 1500 * time.Millisecond })
	db := p.open(t)
	db.SetMaxOpenConns(20)
	key := shapeOf("SELECT SLEEP(0.3)")
	p.srv.LimitTag(key, 2)

	// Six at once; the backend's processlist never shows more than two.
	root := dbtest.Root(t)
	var most atomic.Int32
	stop := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			var n int32
			if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT SLEEP(0.3)'").Scan(&n); err == nil && n > most.Load() {
				most.Store(n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			_, err := db.Exec("SELECT SLEEP(0.3)")
			errs <- err
		})
	}
	wg.Wait()
	close(stop)
	watch.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("under the cap: %v", err)
		}
	}
	if most.Load() != 2 {
		t.Fatalf("at most %d statements of the capped shape ran at once, want 2", most.Load())
	}

	// Cap 1 and a long statement in the slot: the next one waits holding
	// no connection, then gets 9008.
	p.srv.LimitTag(key, 1)
	hold := make(chan error, 1)
	go func() { _, err := db.Exec("SELECT SLEEP(4)"); hold <- err }()
	waitFor(t, "the long statement to take the slot", func() bool {
		for _, g := range p.srv.Gates() {
			if g.Tag == key && g.InUse == 1 {
				return true
			}
		}
		return false
	})
	over := make(chan error, 1)
	go func() { _, err := db.Exec("SELECT SLEEP(0.1)"); over <- err }()
	waitFor(t, "the second statement to wait under the cap", func() bool { return p.srv.Waiting().ShapeLimit == 1 })
	if n := p.srv.Stats().Pool.InUse; n != 1 {
		t.Errorf("%d backend connections in use while one statement runs and one waits under its shape's cap, want 1", n)
	}
	if err := <-over; mysqlErrNo(err) != codeShapeLimit {
		t.Fatalf("over the cap: %v, want 9008", err)
	}
	if err := <-hold; err != nil {
		t.Fatal(err)
	}
	p.srv.LimitTag(key, 0)
	mustExec(t, db, "SELECT SLEEP(0)")
	if gs := p.srv.Gates(); len(gs) != 0 {
		t.Errorf("controls in force after the cap was lifted: %+v", gs)
	}
}
