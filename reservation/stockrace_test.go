package reservation_test

import (
	"context"
	"testing"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestFirstStockChangesOfAPool: two stock changes of a pool that has no
// ledger row yet both find none (READ COMMITTED locks no gap), and both
// create it. The one that comes second is refused by the database
// (duplicate key) before its COMMIT, so nothing of it was made: it is run
// again on the row the first made, and both are made once, whichever
// procedure comes second.
func TestFirstStockChangesOfAPool(t *testing.T) {
	v, f := faultEnv(t, envOpts{})
	ctx := context.Background()
	calls := []stockCall{
		{"receive", 10, func(from int64) int64 { return from + 10 }},
		{"adjust", 5, func(from int64) int64 { return from + 5 }},
		{"set_on_hand", 50, func(int64) int64 { return 50 }},
	}
	for i, c := range calls {
		t.Run(c.proc, func(t *testing.T) {
			defer f.Clear()
			item := int64(80 + i)
			args := []any{int64(shop), item, int64(1), c.arg}
			// This call finds no ledger row and is held just before the
			// round trip that creates it...
			hold := make(chan struct{})
			r := f.Add(&restest.FaultRule{Match: "INSERT INTO inventory_ledger", Hold: hold})
			second := goCall(v.eng, c.proc, args...)
			waitFired(t, f, r)
			// ...while a receive finds none too, creates it and commits.
			if _, rows, err := v.eng.Call(ctx, "receive", []any{int64(shop), item, int64(1), int64(100)}); err != nil || rows[0][2] != int64(100) {
				t.Fatalf("the first receive answered %v, %v; want on_hand 100", rows, err)
			}
			close(hold)
			a := <-second
			want := c.after(100)
			if a.err != nil || len(a.rows) != 1 || a.rows[0][2] != want {
				t.Fatalf("%s second to create the ledger row answered %v, %v; want on_hand %d", c.proc, a.rows, a.err, want)
			}
			if got, _, _ := v.pool(item, 1); got != want {
				t.Fatalf("on_hand %d; want %d (the receive, then %s, each made once)", got, want, c.proc)
			}
			v.checkInvariant(item, 1)
		})
	}
}

// waitFired waits until r has fired.
func waitFired(t *testing.T, f *restest.FaultConns, r *restest.FaultRule) {
	t.Helper()
	dbtest.Eventually(t, "the fault on "+r.Match+" to fire", func() bool { return f.Fired(r) == 1 })
}
