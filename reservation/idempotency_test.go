package reservation_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestReserveReplay: a replayed reserve (same key, same request) returns the
// original token, with replayed = 1, sequentially and with 50 concurrent
// replays (with and without the combiner), and reserves the units once. It
// returns the original even when stock has since run out, or the
// reservation was claimed: a duplicate is never a business failure.
func TestReserveReplay(t *testing.T) {
	for _, naive := range []bool{false, true} {
		t.Run(fmt.Sprintf("naive=%v", naive), func(t *testing.T) {
			v := newEnv(t, envOpts{cfg: func(c *reservation.Config) { c.DisableCoalescing = naive }})
			v.receive(11, 1, 20)
			v.receive(12, 1, 20)
			args := []any{int64(shop), "cart-42", restest.LinesJSON(11, 3, 1), int64(600)}
			_, first, err := v.call("reserve", args...)
			if err != nil {
				t.Fatal(err)
			}
			_, again, err := v.call("reserve", args...)
			if err != nil {
				t.Fatal(err)
			}
			if again[0][0] != first[0][0] || again[0][7] != int64(1) || first[0][7] != int64(0) {
				t.Fatalf("replay returned %v, first %v", again, first)
			}
			if !first[0][1].(time.Time).Equal(again[0][1].(time.Time)) {
				t.Errorf("replay expiry %v != %v", again[0][1], first[0][1])
			}

			// 50 concurrent replays of a new key: one token, reserved once.
			multi := []any{int64(shop), "cart-43", `[{"item":11,"qty":2,"locations":[1]},{"item":12,"qty":1,"locations":[1]}]`, int64(600)}
			if !naive {
				multi[2] = restest.LinesJSON(12, 2, 1) // the combiner batches single-line reserves
			}
			var wg sync.WaitGroup
			tokens := make([]string, 50)
			for i := range tokens {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, rows, err := v.eng.Call(context.Background(), "reserve", multi)
					if err != nil {
						t.Errorf("replay %d: %v", i, err)
						return
					}
					tokens[i] = rows[0][0].(string)
				}()
			}
			wg.Wait()
			for i, tk := range tokens {
				if tk != tokens[0] {
					t.Fatalf("replay %d got token %s, replay 0 got %s", i, tk, tokens[0])
				}
			}
			if n := v.scalar("SELECT COUNT(*) FROM reservations WHERE idempotency_key = 'cart-43'"); n != 1 {
				t.Errorf("%d reservations for one key", n)
			}
			_, _, r12 := v.pool(12, 1)
			if want := int64(map[bool]int64{false: 2, true: 1}[naive]); r12 != want {
				t.Errorf("item 12 reserved %d, want %d", r12, want)
			}
			v.checkInvariant(11, 1)
			v.checkInvariant(12, 1)

			// Sell out item 11, then replay cart-42: still the original.
			if _, err := reserve(context.Background(), v.eng, "other", 600, 11, 20-3-map[bool]int64{false: 0, true: 2}[naive], 1); err != nil {
				t.Fatal(err)
			}
			if _, err := reserve(context.Background(), v.eng, "one-more", 600, 11, 1, 1); restest.Code(err) != reservation.CodeInsufficientStock {
				t.Fatalf("sold-out reserve: %v", err)
			}
			_, again, err = v.call("reserve", args...)
			if err != nil || again[0][0] != first[0][0] {
				t.Fatalf("replay after sell-out: %v %v", again, err)
			}
			// A different request with the key is a conflict, sold out or not.
			_, _, err = v.call("reserve", int64(shop), "cart-42", restest.LinesJSON(11, 4, 1), int64(600))
			if restest.Code(err) != reservation.CodeIdempotencyConflict {
				t.Fatalf("same key, different request: %v", err)
			}
			if !strings.Contains(err.Error(), "cart-42") {
				t.Errorf("conflict message does not name the key: %v", err)
			}
			// After the claim a replay still returns the original, now claimed.
			v.mustCall("claim", first[0][0])
			_, again, err = v.call("reserve", args...)
			if err != nil || again[0][0] != first[0][0] || again[0][6] != "claimed" {
				t.Fatalf("replay after claim: %v %v", again, err)
			}
		})
	}
}

// TestReplayInsideBatch: a batch holding a replay of an existing key, a
// conflicting request and fresh requests answers each exactly: the replay
// gets the original token, the conflict 9102, the others succeed.
func TestReplayInsideBatch(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(13, 1, 500)
	orig, err := reserve(context.Background(), v.eng, "dup", 600, 13, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]string, 60)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, qty := fmt.Sprintf("fresh-%d", i), int64(1)
			switch i % 3 {
			case 0:
				key = "dup" // replay
			case 1:
				if i%2 == 1 {
					key, qty = "dup", 2 // conflict
				}
			}
			tk, err := reserve(context.Background(), v.eng, key, 600, 13, qty, 1)
			switch {
			case err == nil:
				results[i] = tk
			case restest.Code(err) == reservation.CodeIdempotencyConflict:
				results[i] = "conflict"
			default:
				results[i] = err.Error()
			}
		}()
	}
	wg.Wait()
	fresh := map[string]bool{}
	for i, r := range results {
		switch {
		case i%3 == 0 && r != orig:
			t.Errorf("replay %d got %s, want %s", i, r, orig)
		case i%3 == 1 && i%2 == 1 && r != "conflict":
			t.Errorf("conflicting request %d got %s", i, r)
		case i%3 != 0 && !(i%3 == 1 && i%2 == 1):
			if !strings.HasPrefix(r, "rsv_") || r == orig || fresh[r] {
				t.Errorf("fresh request %d got %s", i, r)
			}
			fresh[r] = true
		}
	}
	_, _, reserved := v.pool(13, 1)
	if want := int64(1 + len(fresh)); reserved != want {
		t.Errorf("reserved %d units, want %d", reserved, want)
	}
}

// TestClaimIdempotent: the first claim deducts, a repeat reports
// "duplicate" (success, nothing deducted); concurrent repeats deduct once.
func TestClaimIdempotent(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(21, 1, 10)
	tk, err := reserve(context.Background(), v.eng, "c1", 600, 21, 4, 1)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	outcomes := make(chan string, 20)
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, rows, err := v.eng.Call(context.Background(), "claim", []any{tk})
			if err != nil {
				t.Error(err)
				return
			}
			outcomes <- rows[0][1].(string)
		}()
	}
	wg.Wait()
	close(outcomes)
	count := map[string]int{}
	for o := range outcomes {
		count[o]++
	}
	if !reflect.DeepEqual(count, map[string]int{"claimed": 1, "duplicate": 19}) {
		t.Errorf("claim outcomes %v, want 1 claimed and 19 duplicate", count)
	}
	if onHand, _, reserved := v.pool(21, 1); onHand != 6 || reserved != 0 {
		t.Errorf("on_hand %d reserved %d after claim, want 6 and 0", onHand, reserved)
	}
	if _, _, err := v.call("claim", "rsv_00000000000000ff"); restest.Code(err) != reservation.CodeUnknownToken {
		t.Errorf("unknown token: %v", err)
	}
}

// TestClaimAfterExpiry follows the forced-deduction rule: a claim after the
// TTL (1) finds its units still held (not yet swept) and claims them,
// "late"; (2) finds them swept and forces the guarded deduction, "forced",
// the refiller then trims the pool back under on_hand; (3) finds the ledger
// short and fails with 9104 changing nothing. Each is alerted (log and
// metric), never silent.
func TestClaimAfterExpiry(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(31, 1, 10)
	key := reservation.PoolKey{ShopID: shop, ItemID: 31, GroupID: 1}
	late, _ := reserve(context.Background(), v.eng, "late", 1, 31, 2, 1)
	forced, _ := reserve(context.Background(), v.eng, "forced", 1, 31, 3, 1)
	failed, _ := reserve(context.Background(), v.eng, "failed", 1, 31, 5, 1)
	time.Sleep(1100 * time.Millisecond)

	_, rows, err := v.call("claim", late)
	if err != nil || rows[0][1] != "late" {
		t.Fatalf("claim of expired, still held: %v %v", rows, err)
	}
	if onHand, _, _ := v.pool(31, 1); onHand != 8 {
		t.Errorf("on_hand %d after late claim, want 8", onHand)
	}
	v.sweepAll()
	// The swept units return to the pool and someone else reserves them.
	yTok, err := reserve(context.Background(), v.eng, "buyer-y", 600, 31, 6, 1)
	if err != nil {
		t.Fatal(err)
	}
	_, rows, err = v.call("claim", forced)
	if err != nil || rows[0][1] != "forced" {
		t.Fatalf("claim of swept reservation: %v %v", rows, err)
	}
	onHand, pooled, reserved := v.pool(31, 1)
	if onHand != 5 || reserved != 6 || pooled != 0 {
		t.Errorf("after forced claim: on_hand %d, pool %d, reserved %d; want 5, 0 (trimmed), 6", onHand, pooled, reserved)
	}
	viol, _ := v.eng.ReconcileOnce(context.Background())
	if len(viol) != 1 || viol[0].Key != key {
		t.Errorf("reconciler found %v, want the over-promised pool", viol)
	}
	// Buyer Y's claim now meets the ledger guard: refused, nothing deducted.
	_, rows, err = v.call("claim", yTok)
	if restest.Code(err) != reservation.CodeGuardViolated {
		t.Fatalf("claim of Y after the forced claim: %v %v", rows, err)
	}
	v.mustCall("release", yTok)
	v.mustCall("adjust", int64(shop), int64(31), int64(1), int64(-1)) // on_hand 4 < 5

	before := restest.Snapshot(t, v.db)
	_, _, err = v.call("claim", failed)
	if restest.Code(err) != reservation.CodeExpired || !strings.Contains(err.Error(), "refund") {
		t.Fatalf("claim with ledger short: %v", err)
	}
	if after := restest.Snapshot(t, v.db); !reflect.DeepEqual(before, after) {
		t.Errorf("failed forced claim changed tables")
	}
	s := v.eng.Stats()
	if s.Claims["late"] != 1 || s.Claims["forced"] != 1 || s.Claims["forced_failed"] != 1 {
		t.Errorf("claim metrics %v", s.Claims)
	}
	logs := v.logs.String()
	for _, want := range []string{"units were still held", "forced deduction succeeded", "forced deduction FAILED"} {
		if !strings.Contains(logs, want) {
			t.Errorf("no alert logged containing %q:\n%s", want, logs)
		}
	}
}
