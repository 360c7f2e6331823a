package legacy_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast-db/holdfast/reservation"
)

func redisZ(score int64, member string) redis.Z {
	return redis.Z{Score: float64(score), Member: member}
}

// TestSweepExpiresLegacyRecords: a reservation the legacy checkout recorded
// before holdfast took over (the default layout, no state field) expires
// through holdfast's Redis sweeper and gives its units back, once; one not
// yet due is left alone, and a due entry whose record is gone is dropped.
func TestSweepExpiresLegacyRecords(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	ctx := context.Background()
	st, rc := v.r.Store(), v.r.Store().Client()
	k := reservation.PoolKey{ShopID: 1, ItemID: 601, GroupID: 1}
	past, future := time.Now().Add(-time.Minute).UnixMilli(), time.Now().Add(time.Hour).UnixMilli()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rc.Set(ctx, st.CounterKey(k), 5, 0).Err())
	must(rc.HSet(ctx, "reservation:legacy-1", "shop_id", 1, "lines", "601:1:2", "expires_at", past).Err())
	must(rc.HSet(ctx, "reservation:legacy-2", "shop_id", 1, "lines", "601:1:3", "expires_at", future).Err())
	must(rc.ZAdd(ctx, "reservations:expiring", redisZ(past, "legacy-1"), redisZ(future, "legacy-2"), redisZ(past, "gone")).Err())
	for range 2 {
		if _, err := v.r.SweepOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n, _ := rc.Get(ctx, st.CounterKey(k)).Int64(); n != 7 {
		t.Fatalf("counter %d after the sweep, want 5 + 2", n)
	}
	if s, _ := rc.HGet(ctx, "reservation:legacy-1", "state").Result(); s != "expired" {
		t.Fatalf("legacy-1 is %q", s)
	}
	left, _ := rc.ZRange(ctx, "reservations:expiring", 0, -1).Result()
	if len(left) != 1 || left[0] != "legacy-2" {
		t.Fatalf("expiry set left with %v", left)
	}
}
