package reservation_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// The stock procedures carry no key: a run of one cannot be told from
// another in the database. So each call of the load below changes an item
// of its own, and the item's on_hand afterwards says how often the call
// was made: never, once, or (a defect) twice.
const (
	stockFirstItem = 1000  // the load's first item
	stockPrepared  = 10000 // items from the first with a ledger row of stockBase
	stockBase      = 100
)

// stockLoadOp is one call of the load, as it was answered.
type stockLoadOp struct {
	proc       string
	item       int64
	base, once int64 // on_hand before it, and after it was made once
	answered   int64 // the on_hand it answered; valid when err is nil
	err        error
}

// prepareStock gives items stockFirstItem.. stockFirstItem+stockPrepared-1
// a ledger row of stockBase (no pool yet), and waits until the replica has
// applied them.
func (v *switchEnv) prepareStock(t *testing.T) {
	t.Helper()
	db := v.pair.Primary.Open(v.pair.DB)
	defer db.Close()
	const digits = "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)"
	q := fmt.Sprintf("INSERT INTO inventory_ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, updated_at)"+
		" SELECT %d, %d + a.d + 10 * b.d + 100 * c.d + 1000 * e.d, 1, %d, UTC_TIMESTAMP(6) FROM %s a, %s b, %s c, %s e",
		shop, stockFirstItem, stockBase, digits, digits, digits, digits)
	if _, err := db.ExecContext(t.Context(), q); err != nil {
		t.Fatal(err)
	}
	rdb := v.pair.Replica.Open(v.pair.DB)
	defer rdb.Close()
	if err := dbtest.CaughtUp(t.Context(), db, rdb, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// stockLoad runs workers each making receive (+7), adjust (+5) and
// set_on_hand (42) calls in turn, every one on a new item, until stop is
// closed.
func (v *switchEnv) stockLoad(workers int, stop <-chan struct{}) []*stockLoadOp {
	var next atomic.Int64
	next.Store(stockFirstItem)
	var mu sync.Mutex
	var ops []*stockLoadOp
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				item := next.Add(1) - 1
				op := &stockLoadOp{item: item}
				if item < stockFirstItem+stockPrepared {
					op.base = stockBase
				}
				var arg int64
				switch item % 3 {
				case 0:
					op.proc, arg, op.once = "receive", 7, op.base+7
				case 1:
					op.proc, arg, op.once = "adjust", 5, op.base+5
				default:
					op.proc, arg, op.once = "set_on_hand", 42, 42
				}
				_, rows, err := v.eng.Call(context.Background(), op.proc, []any{int64(shop), item, int64(1), arg})
				op.err = err
				if err == nil {
					op.answered, _ = rows[0][2].(int64)
				}
				mu.Lock()
				ops = append(ops, op)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ops
}

// checkStock verifies every answer against the new primary: a call that
// succeeded was made exactly once, as it answered; one answered with an
// allowed code (the in-doubt 9108) was made once or not at all; none was
// made twice; the invariant holds; and some stock call was held.
func (v *switchEnv) checkStock(t *testing.T, ops []*stockLoadOp, allowed ...uint16) {
	t.Helper()
	db := v.pair.Primary.Open(v.pair.DB)
	defer db.Close()
	ctx := t.Context()
	rows, err := db.QueryContext(ctx, "SELECT inventory_item_id, on_hand FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id >= ?", shop, stockFirstItem)
	if err != nil {
		t.Fatal(err)
	}
	onHand := map[int64]int64{}
	for rows.Next() {
		var item, n int64
		if err := rows.Scan(&item, &n); err != nil {
			t.Fatal(err)
		}
		onHand[item] = n
	}
	if err := rows.Close(); err != nil {
		t.Fatal(err)
	}
	codes := map[uint16]int{}
	ok, inDoubt, inDoubtMade := 0, 0, 0
	for _, op := range ops {
		got, exists := onHand[op.item]
		if !exists && op.base != 0 {
			t.Errorf("%s of item %d: its ledger row is gone", op.proc, op.item)
			continue
		}
		if op.err == nil {
			ok++
			if op.answered != op.once || got != op.once {
				t.Errorf("%s of item %d (on_hand %d) answered on_hand %d; the database has %d, want %d (made once)",
					op.proc, op.item, op.base, op.answered, got, op.once)
			}
			continue
		}
		c := restest.Code(op.err)
		codes[c]++
		allow := false
		for _, a := range allowed {
			allow = allow || c == a
		}
		switch {
		case !allow:
			t.Errorf("%s of item %d: answered %v (code %d)", op.proc, op.item, op.err, c)
		case got != op.base && got != op.once:
			t.Errorf("%s of item %d (on_hand %d) answered %d; the database has %d, want %d or %d (made at most once)",
				op.proc, op.item, op.base, c, got, op.base, op.once)
		default:
			inDoubt++
			if got == op.once && got != op.base {
				inDoubtMade++
			}
		}
	}
	rep, err := reservation.CheckStock(ctx, reservation.SQLQuerier(db), reservation.PoolKey{ShopID: shop})
	if err != nil || len(rep.Bad) > 0 {
		t.Errorf("stock invariant after the switch: %+v %v", rep.Bad, err)
	}
	s := v.eng.Stats()
	held := s.Held["receive"] + s.Held["adjust"] + s.Held["set_on_hand"]
	recovered := s.Recoveries["receive"] + s.Recoveries["adjust"] + s.Recoveries["set_on_hand"]
	t.Logf("%d stock calls: %d answered success, %d in doubt (%d of them made), answers other than success %v; held %d, recovered %d",
		len(ops), ok, inDoubt, inDoubtMade, codes, held, recovered)
	if ops[len(ops)-1].item >= stockFirstItem+stockPrepared {
		t.Logf("%d items past the prepared ones: their ledger rows were made by the calls", ops[len(ops)-1].item-stockFirstItem-stockPrepared+1)
	}
	if held == 0 {
		t.Error("no stock call was held through the switch")
	}
	if ok == 0 {
		t.Error("no stock call succeeded")
	}
}

// runStockLoad runs the load across switch, for half a second on either
// side of it.
func (v *switchEnv) runStockLoad(t *testing.T, switchFn func() error) []*stockLoadOp {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan []*stockLoadOp)
	go func() { done <- v.stockLoad(8, stop) }()
	time.Sleep(500 * time.Millisecond)
	if err := switchFn(); err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	return <-done
}

// TestStockCallsAcrossPlannedSwitchover: receive, adjust and set_on_hand
// under load while the primary is switched over (read-only, the replica
// caught up and promoted, the VIP moved) meet read-only refusals, which
// certainly did nothing: they are held, run again on the new primary and
// all succeed, each made exactly once.
func TestStockCallsAcrossPlannedSwitchover(t *testing.T) {
	v := newSwitchEnv(t)
	v.prepareStock(t)
	ops := v.runStockLoad(t, func() error {
		_, err := v.pair.Switchover(t.Context())
		return err
	})
	v.checkStock(t, ops)
}

// TestStockCallsAcrossPrimaryKill: the primary killed (SIGKILL) under a
// load of receive, adjust and set_on_hand, the replica promoted 2 s later.
// A call whose COMMIT's answer was lost answers 9108 and is not run again;
// one lost before its COMMIT was sent, or refused, is held and run on the
// new primary. Every call that succeeded was made exactly once; none was
// made twice. Replication is semi-synchronous, so that every answer can
// be checked on the promoted replica.
func TestStockCallsAcrossPrimaryKill(t *testing.T) {
	v := newSwitchEnv(t)
	v.pair.SemiSync(t)
	v.prepareStock(t)
	ops := v.runStockLoad(t, func() error { return v.pair.KillAndPromote(t.Context(), 2*time.Second) })
	v.checkStock(t, ops, reservation.CodeOutcomeUnknown)
}

// TestStockCallsAcrossPartitionAndPrimaryKill: the network to the primary
// stops under the same load (the VIP stalls: round trips that reached the
// primary run, COMMITs included, and reach the replica, semi-synchronous,
// but their answers are held), the connections drop, the primary is
// killed and its replica promoted with all it received. So calls whose
// COMMIT was made lose its answer: each answers 9108 and is not run again
// (it would be made twice); the rest are held and made once on the new
// primary.
func TestStockCallsAcrossPartitionAndPrimaryKill(t *testing.T) {
	v := newSwitchEnv(t)
	v.pair.SemiSync(t)
	v.prepareStock(t)
	ops := v.runStockLoad(t, func() error {
		p := v.pair
		p.VIP.Stall()
		time.Sleep(200 * time.Millisecond) // for round trips under way to finish on the primary
		p.VIP.Cut()
		p.Primary.Kill()
		if _, err := p.Replica.PromoteApplied(t.Context(), 10*time.Second); err != nil {
			return err
		}
		p.Move(p.Replica.Addr)
		p.Primary, p.Replica = p.Replica, nil
		p.VIP.Resume()
		p.VIP.Up()
		return nil
	})
	v.checkStock(t, ops, reservation.CodeOutcomeUnknown)
}
