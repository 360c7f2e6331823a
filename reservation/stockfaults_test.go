package reservation_test

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/netrelay"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// stockCall is one non-idempotent stock procedure with its arguments for
// an item at location 1, and on_hand after it ran once on a pool that had
// from.
type stockCall struct {
	proc  string
	arg   int64
	after func(from int64) int64
}

var stockCalls = []stockCall{
	{"receive", 10, func(from int64) int64 { return from + 10 }},
	{"adjust", -3, func(from int64) int64 { return from - 3 }},
	{"set_on_hand", 50, func(int64) int64 { return 50 }},
}

// stmtStockCommit is in the round trip that carries a stock procedure's
// changes and its COMMIT (on a pool whose ledger row exists), and in no
// other statement of it.
const stmtStockCommit = "UPDATE inventory_ledger SET on_hand = "

// stmtStockLock is in a stock procedure's first round trip, which locks
// the pool (LockPool).
const stmtStockLock = "SELECT 'L', on_hand"

// TestStockChangesNotRunTwice: receive, set_on_hand and adjust carry no
// key, so a run of one cannot be told from another. One whose COMMIT ran
// but whose answer was lost answers 9108 at once (saying it is not
// idempotent) and is not run again: a change another call made after it
// stays, and its own is made once. One whose connection was lost before
// its COMMIT was sent (after its locking read ran) is run again, counted
// as a recovery, and made once. One whose round trip carrying COMMIT
// failed unsent answers 9108 too: the engine cannot tell it from a lost
// answer.
func TestStockChangesNotRunTwice(t *testing.T) {
	v, f := faultEnv(t, envOpts{})
	ctx := context.Background()
	for i, c := range stockCalls {
		item := int64(60 + i)
		v.receive(item, 1, 100)
		args := []any{int64(shop), item, int64(1), c.arg}

		t.Run(c.proc+" COMMIT ran, answer lost", func(t *testing.T) {
			from, _, _ := v.pool(item, 1)
			before := v.eng.Stats()
			var between error
			r := f.Add(&restest.FaultRule{Match: stmtStockCommit, After: true, Then: func() {
				// Another call changes the pool before this one could
				// be run again.
				_, _, between = v.eng.Call(ctx, "receive", []any{int64(shop), item, int64(1), int64(1)})
			}})
			_, rows, err := v.eng.Call(ctx, c.proc, args)
			checkFired(t, f, r)
			f.Clear()
			if between != nil {
				t.Fatalf("the receive in between: %v", between)
			}
			code, state, msg := mysqlError(err)
			if code != reservation.CodeOutcomeUnknown || state != "08S01" || !strings.Contains(msg, "not idempotent") {
				t.Fatalf("%s whose COMMIT's answer was lost answered %v, %v; want 9108 08S01 saying it is not idempotent", c.proc, rows, err)
			}
			if got, want := v.scalar("SELECT on_hand FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = 1", shop, item), c.after(from)+1; got != want {
				t.Fatalf("on_hand %d -> %d; want %d (%s made once, then the receive of 1 in between)", from, got, want, c.proc)
			}
			after := v.eng.Stats()
			if after.Recoveries[c.proc] != before.Recoveries[c.proc] {
				t.Errorf("%s counted a recovery: it was run again", c.proc)
			}
			if n := after.Ops[c.proc]["outcome_unknown"] - before.Ops[c.proc]["outcome_unknown"]; n != 1 {
				t.Errorf("%d outcome_unknown answers of %s counted; want 1", n, c.proc)
			}
			v.checkInvariant(item, 1)
		})

		t.Run(c.proc+" COMMIT's round trip lost unsent", func(t *testing.T) {
			// Nothing reached the database, but the engine cannot know
			// that: the change may have been made, so it is in doubt.
			from, _, _ := v.pool(item, 1)
			r := f.Inject(stmtStockCommit, false)
			_, rows, err := v.eng.Call(ctx, c.proc, args)
			checkFired(t, f, r)
			f.Clear()
			if code := restest.Code(err); code != reservation.CodeOutcomeUnknown {
				t.Fatalf("%s answered %v, %v; want 9108", c.proc, rows, err)
			}
			if got, _, _ := v.pool(item, 1); got != from {
				t.Fatalf("on_hand %d -> %d; want it unchanged (nothing was sent)", from, got)
			}
		})

		t.Run(c.proc+" lost before COMMIT", func(t *testing.T) {
			from, _, _ := v.pool(item, 1)
			before := v.eng.Stats().Recoveries[c.proc]
			// Its locking read ran; its answer was lost.
			r := f.Inject(stmtStockLock, true)
			_, rows, err := v.eng.Call(ctx, c.proc, args)
			checkFired(t, f, r)
			f.Clear()
			want := c.after(from)
			if err != nil || len(rows) != 1 || rows[0][2] != want {
				t.Fatalf("%s lost before COMMIT answered %v, %v; want on_hand %d", c.proc, rows, err, want)
			}
			if got, _, _ := v.pool(item, 1); got != want {
				t.Fatalf("on_hand %d -> %d; want %d (%s made once)", from, got, want, c.proc)
			}
			v.checkRecovered(t, c.proc, before)
			v.checkInvariant(item, 1)
		})
	}
}

// TestStockCommitAnswerCutOnTheWire: the same as TestStockChangesNotRunTwice's
// lost answer, over a real connection: a relay between the engine and
// the database holds back the answer of a stock procedure's round trip
// carrying COMMIT until the database shows the change committed, then
// drops every connection (the network failing, or the primary's host
// going away, after the COMMIT ran). The driver's error on the cut
// connection is taken for a lost COMMIT answer: the call answers 9108,
// and the change was made exactly once, though the database is reachable
// again at once and the call had time to run again.
func TestStockCommitAnswerCutOnTheWire(t *testing.T) {
	var armed, sent atomic.Bool
	relay := &netrelay.Relay{Target: restest.Target(t), CutWhen: func(b []byte) bool {
		if armed.Load() && bytes.Contains(b, []byte("; COMMIT")) {
			sent.Store(true)
		}
		return false
	}}
	if err := relay.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Close() })
	db, name := restest.NewDB(t, 0)
	v := &env{t: t, db: db, name: name, conns: reservation.SQLConns(db), logs: &dbtest.SyncBuffer{}}
	v.addEngine(envOpts{
		cfg: func(c *reservation.Config) { c.CallTimeout = 30 * time.Second },
		wrap: func(reservation.Conns) reservation.Conns {
			return reservation.SQLConns(restest.OpenVia(t, name, relay.Addr().String(), 4))
		},
	})
	ctx := context.Background()
	// Each adds units to the pool: its INSERT of the first one waits for
	// the test's own uncommitted row with that id, so the round trip is
	// known to have reached the database before its answer is held back.
	calls := []stockCall{
		{"receive", 10, func(from int64) int64 { return from + 10 }},
		{"adjust", 5, func(from int64) int64 { return from + 5 }},
		{"set_on_hand", 150, func(int64) int64 { return 150 }},
	}
	for i, c := range calls {
		t.Run(c.proc, func(t *testing.T) {
			item := int64(70 + i)
			v.receive(item, 1, 100)
			from, _, _ := v.pool(item, 1)
			key := reservation.PoolKey{ShopID: shop, ItemID: item, GroupID: 1}
			next := v.scalar("SELECT next_unit_id FROM pool_counters WHERE " + key.WhereSQL())
			blocker, err := v.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer blocker.Rollback()
			if _, err := blocker.Exec("INSERT INTO reservation_units (shop_id, inventory_item_id, inventory_group_id, id) VALUES (?, ?, 1, ?)", shop, item, next); err != nil {
				t.Fatal(err)
			}
			sent.Store(false)
			armed.Store(true)
			answer := goCall(v.eng, c.proc, int64(shop), item, int64(1), c.arg)
			// The INSERT cannot end before the test's row does, so while
			// it runs the round trip has reached the database and its
			// answer is still to come. (Not INNODB_TRX: a cache that
			// frequent reads keep from being refreshed.)
			dbtest.Eventually(t, "the round trip carrying COMMIT to wait for the test's row lock", func() bool {
				return sent.Load() && v.scalar(`SELECT COUNT(*) FROM information_schema.PROCESSLIST
 WHERE DB = ? AND COMMAND = 'Query' AND INFO LIKE 'INSERT INTO reservation_units %'`, name) == 1
			})
			armed.Store(false)
			relay.Stall()
			if err := blocker.Rollback(); err != nil {
				t.Fatal(err)
			}
			want := c.after(from)
			dbtest.Eventually(t, "the change to commit", func() bool {
				got, _, _ := v.pool(item, 1)
				return got == want
			})
			relay.Cut() // the answer, held in the relay, is lost
			relay.Resume()
			relay.Up()
			a := <-answer
			code, state, msg := mysqlError(a.err)
			if code != reservation.CodeOutcomeUnknown || state != "08S01" || !strings.Contains(msg, "not idempotent") {
				t.Fatalf("%s whose COMMIT's answer was cut answered %v, %v; want 9108 08S01 saying it is not idempotent", c.proc, a.rows, a.err)
			}
			if got, _, _ := v.pool(item, 1); got != want {
				t.Fatalf("on_hand %d -> %d; want %d (%s made once)", from, got, want, c.proc)
			}
			// The database is reachable through the relay again.
			if _, rows, err := v.eng.Call(ctx, "availability", []any{int64(shop), item}); err != nil || rows[0][1] != want {
				t.Fatalf("availability after the cut answered %v, %v; want on_hand %d", rows, err, want)
			}
			v.checkInvariant(item, 1)
		})
	}
}
