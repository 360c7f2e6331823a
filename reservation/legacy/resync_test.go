package legacy_test

import (
	"context"
	"testing"

	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestResyncRacingAClaim: a claim that committed in MySQL before
// resync-redis read the pool, but whose write to Redis arrives after the
// resync, leaves the counter equal to the engine's availability: the
// resync finds the reservation finished and stops holding its units, so the
// late claim changes nothing twice.
func TestResyncRacingAClaim(t *testing.T) {
	v := newEnv(t, envOpts{authority: "holdfast"})
	ctx := context.Background()
	k := reservation.PoolKey{ShopID: 1, ItemID: 701, GroupID: 1}
	v.must(v.r, "receive", k.ShopID, k.ItemID, k.GroupID, int64(10))
	tok := v.must(v.r, "reserve", k.ShopID, "a", restest.LinesJSON(701, 3, 1), int64(600))[0][0].(string)
	// The claim commits in MySQL; its Redis write is late.
	if _, _, err := v.eng.Call(ctx, "claim", []any{tok}); err != nil {
		t.Fatal(err)
	}
	if _, err := legacy.Resync(ctx, v.conns, v.r.Store(), legacy.ResyncOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := v.r.Store().Claim(ctx, tok, k.ShopID, []reservation.Line{{Item: 701, Group: 1, Qty: 3}}); err != nil {
		t.Fatal(err)
	}
	if bad := v.drift(v.r); len(bad) > 0 {
		t.Fatalf("counter differs from the engine's availability: %+v", bad)
	}
}

// TestResyncThenForcedClaim: a reservation the engine released (here
// behind the router's back, as a release whose Redis write was lost) is
// given the engine's end by resync-redis, so that a forced claim of it
// afterwards takes its units off the counter again.
func TestResyncThenForcedClaim(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	ctx := context.Background()
	k := reservation.PoolKey{ShopID: 1, ItemID: 702, GroupID: 1}
	if _, err := v.db.Exec("INSERT INTO inventory_ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, updated_at) VALUES (1, 702, 1, 10, UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
	if err := v.r.Store().AddStock(ctx, k, 10); err != nil {
		t.Fatal(err)
	}
	tokA := v.must(v.r, "reserve", k.ShopID, "a", restest.LinesJSON(702, 10, 1), int64(600))[0][0].(string)
	if _, _, err := v.eng.Call(ctx, "release", []any{tokA}); err != nil { // the engine's side only
		t.Fatal(err)
	}
	if _, err := legacy.Resync(ctx, v.conns, v.r.Store(), legacy.ResyncOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if rows := v.must(v.r, "claim", tokA); rows[0][1] != "forced" {
		t.Fatalf("claim: %v", rows)
	}
	if bad := v.drift(v.r); len(bad) > 0 {
		t.Fatalf("counter differs from the engine's availability: %+v", bad)
	}
}
