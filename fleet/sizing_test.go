package fleet

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

type nopApplier struct{ size int }

func (nopApplier) ApplyFleetControls([]Applied)   {}
func (nopApplier) Demand(string, bool) (int, int) { return 0, 0 }
func (a *nopApplier) SetFleetSize(n int)          { a.size = n }

// Each instance sums the live instances' pool.max and statement budgets
// against the server's limits, and says when the fleet is over-committed:
// in Status (the metric and status page) and in one log line.
func TestSizingWarnsOnOvercommit(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	var maxConns, maxStmts int
	if err := dbtest.Root(t).QueryRow("SELECT @@global.max_connections, @@global.max_prepared_stmt_count").Scan(&maxConns, &maxStmts); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	// Two instances whose pools fit: 2 × (max_connections-10)/4.
	fit := (maxConns - 10) / 4
	apps := []*nopApplier{{}, {}}
	fs := make([]*Fleet, 2)
	for i := range fs {
		budget := maxStmts / 4 // two of them: half the server's, the share
		fs[i] = New(Options{Store: st, Applier: apps[i], Self: Member{ID: string(rune('a' + i)), PoolMax: fit},
			ConnReserve: 10, StmtShare: 0.5, StmtBudget: func() int { return budget }, Log: log})
	}
	for range 2 {
		for _, f := range fs {
			if err := f.Poll(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	z := fs[0].Status().Sizing
	if z.PoolMax != 2*fit || z.ConnsOver || z.StmtsOver || apps[0].size != 2 {
		t.Fatalf("two fitting instances: sizing %+v, fleet size told %d", z, apps[0].size)
	}
	// A third, with a pool as large as the server's max_connections and a
	// statement budget of half the server's on its own.
	third := New(Options{Store: st, Applier: &nopApplier{}, Self: Member{ID: "c", PoolMax: maxConns},
		ConnReserve: 10, StmtShare: 0.5, StmtBudget: func() int { return maxStmts / 2 }, Log: slog.New(slog.DiscardHandler)})
	if err := third.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := fs[0].Poll(ctx); err != nil {
		t.Fatal(err)
	}
	z = fs[0].Status().Sizing
	t.Logf("sizing with three: %+v", z)
	if !z.ConnsOver || !z.StmtsOver || z.PoolMax != 2*fit+maxConns || z.PoolMaxLimit != maxConns-10 {
		t.Fatalf("over-committed fleet: sizing %+v", z)
	}
	if err := fs[0].Poll(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"more connections than the server allows", "more prepared statements"} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("log says %q %d times, want once:\n%s", want, n, logs.String())
		}
	}
	// The third leaves: the fleet fits again.
	if err := third.Close(); err != nil {
		t.Fatal(err)
	}
	if err := fs[0].Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if z := fs[0].Status().Sizing; z.ConnsOver || z.StmtsOver {
		t.Fatalf("after the third left: %+v", z)
	}
}
