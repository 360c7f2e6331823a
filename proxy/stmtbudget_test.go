package proxy

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// With the server's max_prepared_stmt_count lowered to 300, 10,000
// prepare / execute / close cycles of distinct statements from 50 clients
// never give a client 1461, and holdfast's backend statements stay within
// its computed budget (a share of the server's limit): statements no
// client holds are closed to make room.
func TestPreparedStatementsWithinBudget(t *testing.T) {
	root := dbtest.Root(t)
	var old int64
	if err := root.QueryRow("SELECT @@global.max_prepared_stmt_count").Scan(&old); err != nil {
		t.Fatal(err)
	}
	mustExec(t, root, "SET GLOBAL max_prepared_stmt_count = 300")
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("SET GLOBAL max_prepared_stmt_count = %d", old)) })
	p := startProxy(t)
	db := p.open(t)
	db.SetMaxOpenConns(60)
	if err := db.Ping(); err != nil {
		t.Fatal(err)
	}
	budget := p.srv.Stats().StatementBudget
	if budget <= 0 || budget > 150 {
		t.Fatalf("statement budget %d, want at most half of 300 (prepared_statement_share 0.5)", budget)
	}
	before := globalStatus(t, "Prepared_stmt_count")
	var maxSeen, maxGauge atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if n := globalStatus(t, "Prepared_stmt_count") - before; n > maxSeen.Load() {
				maxSeen.Store(n)
			}
			if g := p.srv.Stats().BackendStatements; g > maxGauge.Load() {
				maxGauge.Store(g)
			}
		}
	}()
	const clients, cycles = 50, 200
	concurrently(t, clients, func(c int) error {
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		for i := 0; i < cycles; i++ {
			st, err := conn.PrepareContext(ctx, fmt.Sprintf("SELECT ? + %d", c*cycles+i))
			if err != nil {
				return fmt.Errorf("prepare %d: %w", i, err)
			}
			var v int64
			err = st.QueryRowContext(ctx, 1).Scan(&v)
			st.Close()
			if err != nil || v != int64(c*cycles+i+1) {
				return fmt.Errorf("execute %d: %d, %w", i, v, err)
			}
		}
		return nil
	})
	close(stop)
	<-sampled
	st := p.srv.Stats()
	t.Logf("budget %d; backend statements: at most %d by holdfast's count, Prepared_stmt_count rose by at most %d; %d prepares retried after 1461",
		budget, maxGauge.Load(), maxSeen.Load(), st.StatementRetries)
	if g := maxGauge.Load(); g > int64(budget) {
		t.Errorf("holdfast kept %d backend statements, over its budget of %d", g, budget)
	}
	// Other tests share the server and prepare a few statements of their
	// own: allow them 20.
	if n := maxSeen.Load(); n > int64(budget)+20 {
		t.Errorf("Prepared_stmt_count rose by %d, over holdfast's budget of %d", n, budget)
	}
	if st.BackendStatements < 0 {
		t.Errorf("backend statement count went negative: %d", st.BackendStatements)
	}
}

// When the server runs out of prepared statements (other clients took
// them), holdfast gives back the statements no client holds and tries the
// prepare once more, rather than failing its client with 1461.
func TestPreparedStatementRetryAfter1461(t *testing.T) {
	srv := dbtest.StartPrivate(t, "--max-prepared-stmt-count=300")
	root := srv.Open("")
	defer root.Close()
	mustExec(t, root, "CREATE DATABASE hf")
	p := startProxy(t, func(c *config.Config) {
		c.Backend.Address, c.Backend.User, c.Backend.Password, c.Backend.Database = srv.Addr, "root", "", "hf"
		c.Pool.Max, c.Pool.MaxIdle = 1, 1
	})
	c := p.raw(t, rawmysql.Options{DB: "hf"})
	for i := 0; i < 50; i++ { // fewer than the cache may keep: no room to make
		st := c.mustPrepare(fmt.Sprintf("SELECT %d", i))
		if err := c.StmtClose(st.ID); err != nil {
			t.Fatal(err)
		}
	}
	cached := p.srv.Stats().BackendStatements
	if cached == 0 || cached > int64(p.srv.Stats().StatementBudget) {
		t.Fatalf("%d statements cached, budget %d", cached, p.srv.Stats().StatementBudget)
	}
	// Another client takes every statement the server has left.
	other, err := root.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	taken := 0
	for {
		if _, err := other.ExecContext(context.Background(), fmt.Sprintf("PREPARE s%d FROM 'SELECT 1'", taken)); err != nil {
			if mysqlErrNo(err) != 1461 {
				t.Fatal(err)
			}
			break
		}
		taken++
	}
	st, err := c.Prepare("SELECT 'after the server ran out'")
	if err != nil {
		t.Fatalf("prepare with the server out of statements (%d taken by another client, %d cached by holdfast): %v", taken, cached, err)
	}
	if v := c.mustExecute(st, nil, false).Cell(0, 0); v != "after the server ran out" {
		t.Fatal(v)
	}
	if n := p.srv.Stats().StatementRetries; n != 1 {
		t.Errorf("%d prepares retried after 1461, want 1", n)
	}
}

// A driver that prepares, executes and closes the same statement for
// every query (go-sql-driver does, for parameterised queries) costs one
// backend round trip per query: the execute. The backend prepares the
// statement once, and the client's close does not reach it.
func TestPreparedStatementCycleOneRoundTrip(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
	db := p.open(t)
	status := func(name string) int {
		var n string
		var v int
		if err := db.QueryRow("SHOW SESSION STATUS LIKE '"+name+"'").Scan(&n, &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	prepares, executes, closes := status("Com_stmt_prepare"), status("Com_stmt_execute"), status("Com_stmt_close")
	for i := 0; i < 50; i++ {
		var v int
		if err := db.QueryRow("SELECT ? + 1", i).Scan(&v); err != nil || v != i+1 {
			t.Fatalf("query %d: %d, %v", i, v, err)
		}
	}
	if d := status("Com_stmt_prepare") - prepares; d != 1 {
		t.Errorf("the backend prepared the statement %d times for 50 prepares, want 1", d)
	}
	if d := status("Com_stmt_execute") - executes; d != 50 {
		t.Errorf("%d executes on the backend, want 50", d)
	}
	if d := status("Com_stmt_close") - closes; d != 0 {
		t.Errorf("%d closes reached the backend, want 0", d)
	}
}

// With backend.instances 0 (the default) the statement budget is shared
// among the fleet's live instances; a set backend.instances overrides the
// fleet's count.
func TestStatementBudgetSharedByFleet(t *testing.T) {
	for _, set := range []int{0, 1} {
		t.Run(fmt.Sprintf("instances=%d", set), func(t *testing.T) {
			p := startProxy(t, func(c *config.Config) { c.Backend.Instances = set; c.Pool.Max = 4 })
			if err := p.open(t).Ping(); err != nil {
				t.Fatal(err)
			}
			alone := p.srv.StatementBudget()
			p.srv.SetFleetSize(40)
			shared := p.srv.StatementBudget()
			t.Logf("budget alone %d, with 40 live instances %d", alone, shared)
			var limit int
			if err := dbtest.Root(t).QueryRow("SELECT @@global.max_prepared_stmt_count").Scan(&limit); err != nil {
				t.Fatal(err)
			}
			switch {
			case alone <= 0:
				t.Fatalf("budget %d before the fleet's size is known", alone)
			case set == 0 && shared*40 > limit/2:
				t.Fatalf("40 instances with budget %d each exceed half of max_prepared_stmt_count %d", shared, limit)
			case set == 1 && shared != alone:
				t.Fatalf("backend.instances 1: the budget moved from %d to %d with the fleet's size", alone, shared)
			}
		})
	}
}
