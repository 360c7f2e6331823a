package reservation_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// switchEnv is an engine on a private primary and replica behind a VIP
// (restest.Pair), as holdfast's own pools reach them, with an ordinary
// account that read_only refuses.
type switchEnv struct {
	pair *restest.Pair
	eng  *reservation.Engine
}

const (
	switchItems  = 4
	switchOnHand = 5000
)

// newSwitchEnv starts the pair and the engine, with call_timeout (1 s)
// shorter than the switch: a held call runs on up to the hold (15 s).
func newSwitchEnv(t *testing.T) *switchEnv {
	t.Helper()
	pair := restest.StartPair(t)
	db := pair.Open(t, 16)
	conns := reservation.SQLConns(db)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := reservation.Migrate(ctx, conns); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	logs := restest.Logger(t.Output())
	ref, err := refiller.New(conns, refiller.Config{Interval: 20 * time.Millisecond, ScanInterval: -1, PoolCap: 1000}, logs)
	if err != nil {
		t.Fatal(err)
	}
	cfg := restest.Config()
	cfg.PoolCap = 1000
	cfg.CallTimeout = time.Second
	eng, err := reservation.New(cfg, reservation.Options{Conns: conns, Refiller: ref, Logger: logs})
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(context.Background())
	if err := ref.Start(rctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rcancel()
		eng.Close()
		ref.Close()
	})
	for item := int64(1); item <= switchItems; item++ {
		if _, _, err := eng.Call(ctx, "receive", []any{int64(shop), item, int64(1), int64(switchOnHand)}); err != nil {
			t.Fatalf("receive: %v", err)
		}
	}
	return &switchEnv{pair: pair, eng: eng}
}

// switchOp is one key's reserve and the claim or release of its token,
// as the caller was answered.
type switchOp struct {
	key, lines string
	item       int64
	claim      bool   // the second call is claim, else release
	token      string // reserve's answer; "" on error
	resErr     error
	second     string // claim's or release's outcome; "" on error
	secErr     error
	after      bool          // the reserve started after the switch ended
	took       time.Duration // the longest of its two calls
}

// load runs workers reserving one unit each and claiming or releasing it
// until stop is closed; switched says whether the switch has ended.
func (v *switchEnv) load(workers int, stop <-chan struct{}, switched *atomic.Bool) []*switchOp {
	var mu sync.Mutex
	var ops []*switchOp
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				item := int64(1 + w%switchItems)
				op := &switchOp{key: fmt.Sprintf("k-%d-%d", w, i), lines: restest.LinesJSON(item, 1, 1), item: item, claim: i%2 == 0,
					after: switched.Load()}
				ctx := context.Background()
				start := time.Now()
				_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), op.key, op.lines, nil})
				op.took = time.Since(start)
				op.resErr = err
				if err == nil {
					op.token = rows[0][0].(string)
					proc := "release"
					if op.claim {
						proc = "claim"
					}
					start := time.Now()
					_, rows, err := v.eng.Call(ctx, proc, []any{op.token})
					op.took = max(op.took, time.Since(start))
					op.secErr = err
					if err == nil {
						op.second = rows[0][1].(string)
					}
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

// check verifies every answer against the new primary: each reserve
// answered a token made exactly once, and a repeat of it with its key
// answers that token again (replayed); each claim and release answered
// is in the reservation's state; on_hand fell by the claims answered
// claimed, once each; the invariant holds. lost lists the keys whose
// reserve was answered but which the new primary never received
// (asynchronous replication of a killed primary); allowed the codes other
// than success that may be answered (the in-doubt 9108).
func (v *switchEnv) check(t *testing.T, ops []*switchOp, allowLost bool, allowed ...uint16) {
	t.Helper()
	db := v.pair.Primary.Open(v.pair.DB)
	defer db.Close()
	ctx := t.Context()
	claimed := map[int64]int64{}
	codes := map[uint16]int{}
	var longest time.Duration
	lost, answered := 0, 0
	for _, op := range ops {
		longest = max(longest, op.took)
		var id uint64
		var state string
		err := db.QueryRowContext(ctx, "SELECT reservation_id, state FROM reservations WHERE shop_id = ? AND idempotency_key = ?", shop, op.key).Scan(&id, &state)
		for _, cerr := range []error{op.resErr, op.secErr} {
			if cerr == nil {
				continue
			}
			c := restest.Code(cerr)
			codes[c]++
			ok := allowLost && c == reservation.CodeUnknownToken && err == sql.ErrNoRows // lost with the killed primary
			for _, a := range allowed {
				ok = ok || c == a
			}
			if !ok {
				t.Errorf("key %s: answered %v (code %d)", op.key, cerr, c)
			}
		}
		switch {
		case err == sql.ErrNoRows && op.token != "" && allowLost && !op.after:
			lost++
			continue
		case err == sql.ErrNoRows && op.token != "":
			t.Errorf("key %s: reserve answered %s, but there is no reservation", op.key, op.token)
			continue
		case err == sql.ErrNoRows:
			continue
		case err != nil:
			t.Fatal(err)
		}
		if op.token == "" {
			continue // in doubt: made or not
		}
		answered++
		if got := reservation.FormatToken(id); got != op.token {
			t.Errorf("key %s: reserve answered %s, the reservation is %s", op.key, op.token, got)
		}
		_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), op.key, op.lines, nil})
		if err != nil || rows[0][0] != op.token || rows[0][7] != int64(1) {
			t.Errorf("key %s: repeated reserve answered %v %v, want %s replayed", op.key, rows, err, op.token)
		}
		want := map[string]string{"claimed": "1", "released": "2"}[op.second] // reservations.state
		if op.second != "" && state != want {
			t.Errorf("key %s: %s answered %q, the reservation is %s", op.key, map[bool]string{true: "claim", false: "release"}[op.claim], op.second, state)
		}
		if state == "1" {
			claimed[op.item]++
		}
	}
	for item := int64(1); item <= switchItems; item++ {
		onHand := restest.Scalar(t, db, "SELECT on_hand FROM inventory_ledger WHERE shop_id = ? AND inventory_item_id = ? AND inventory_group_id = 1", shop, item)
		if lost == 0 && onHand != switchOnHand-claimed[item] {
			t.Errorf("item %d: on_hand %d, want %d - %d claims", item, onHand, switchOnHand, claimed[item])
		}
	}
	rep, err := reservation.CheckStock(ctx, reservation.SQLQuerier(db), reservation.PoolKey{ShopID: shop})
	if err != nil || len(rep.Bad) > 0 {
		t.Errorf("stock invariant after the switch: %+v %v", rep.Bad, err)
	}
	held := uint64(0)
	for _, n := range v.eng.Stats().Held {
		held += n
	}
	t.Logf("%d keys, %d reservations checked, calls held %d, longest call %v, answers other than success %v, lost by the replication of the killed primary %d",
		len(ops), answered, held, longest.Round(time.Millisecond), codes, lost)
	if held == 0 {
		t.Error("no call was held through the switch")
	}
	if answered == 0 {
		t.Error("no reserve answered")
	}
}

// TestEngineCallsAcrossPlannedSwitchover: engine calls under load while
// the primary is switched over (read-only, the replica caught up and
// promoted, the VIP moved) are held and answered on the new primary:
// every call succeeds, exactly once by its key or token.
func TestEngineCallsAcrossPlannedSwitchover(t *testing.T) {
	v := newSwitchEnv(t)
	stop := make(chan struct{})
	var switched atomic.Bool
	done := make(chan []*switchOp)
	go func() { done <- v.load(8, stop, &switched) }()
	time.Sleep(500 * time.Millisecond)
	steps, err := v.pair.Switchover(t.Context())
	switched.Store(true)
	if err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	ops := <-done
	t.Logf("switchover: read-only to VIP moved %v", steps.Moved.Sub(steps.ReadOnly))
	v.check(t, ops, false)
}

// TestEngineCallsAcrossPrimaryKill: the primary killed under load and the
// replica promoted 2 s later: every answer is true (success, or 9108 for
// a COMMIT whose answer was lost), exactly once by key or token, and the
// stock invariant holds. Replication is semi-synchronous, so that every
// answer can be checked on the promoted replica.
func TestEngineCallsAcrossPrimaryKill(t *testing.T) {
	v := newSwitchEnv(t)
	v.pair.SemiSync(t) // no acknowledged write is lost with the primary
	stop := make(chan struct{})
	var switched atomic.Bool
	done := make(chan []*switchOp)
	go func() { done <- v.load(8, stop, &switched) }()
	time.Sleep(500 * time.Millisecond)
	err := v.pair.KillAndPromote(t.Context(), 2*time.Second)
	switched.Store(true)
	if err != nil {
		close(stop)
		<-done
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	close(stop)
	ops := <-done
	v.check(t, ops, false, reservation.CodeOutcomeUnknown)
}
