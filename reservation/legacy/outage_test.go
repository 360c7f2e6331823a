package legacy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestRedisKilledUnderHoldfast: with authority holdfast, Redis is killed
// while 32 clients check out, and comes back empty (no persistence). No
// call fails; the counters are marked stale, fleet-wide; after Redis
// returns, resync-redis rewrites them while the traffic goes on, and then
// every counter equals the engine's availability and the mark is cleared.
func TestRedisKilledUnderHoldfast(t *testing.T) {
	v := newEnv(t, envOpts{authority: "holdfast"})
	shops, items := []int64{1, 2}, []int64{301, 302}
	stock(v, v.r, shops, items, 100000)
	const ttl = 4

	phase := func(n int) []checkout { return traffic(t, v, []*legacy.Router{v.r}, 32, n, shops, items, ttl) }
	var all []checkout
	all = append(all, phase(5)...)

	// Kill Redis in the middle of a phase.
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(100 * time.Millisecond)
		v.redis.Kill()
	}()
	all = append(all, phase(15)...) // fails the test if any call fails
	wg.Wait()
	all = append(all, phase(5)...) // Redis down for all of it
	if !v.r.Stats().Redis.Stale {
		dbtest.Eventually(t, "the counters marked stale", func() bool {
			_ = v.r.Switch().Poll(context.Background())
			return v.r.Switch().Redis().Stale
		})
	}
	if e := v.r.Stats().RedisErrors; e["mirror"] == 0 {
		t.Fatalf("no failed mirror counted: %v", e)
	}
	if !strings.Contains(v.logs.String(), "redis command failed") {
		t.Fatal("Redis failures not logged")
	}
	// Redis must not decide while stale.
	if _, err := v.r.Switch().Set(context.Background(), legacy.State{Authority: "redis"}, false); err == nil {
		t.Fatal("switching to redis while its counters are stale was accepted")
	}

	// Redis comes back, empty.
	v.redis.Restart()
	dbtest.Eventually(t, "the client reconnects", func() bool { return v.r.Store().Ping(context.Background()) == nil })
	all = append(all, phase(5)...)
	if len(v.drift(v.r)) == 0 {
		t.Fatal("the counters match although Redis lost everything: the test shows nothing")
	}

	// resync-redis while checkouts go on.
	var rep legacy.ResyncReport
	var rerr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		rep, rerr = legacy.Resync(context.Background(), v.conns, v.r.Store(), legacy.ResyncOptions{})
	}()
	all = append(all, phase(10)...)
	wg.Wait()
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !rep.Cleared || rep.Pools != len(shops)*len(items)*2 {
		t.Fatalf("resync report %+v", rep)
	}
	all = append(all, phase(5)...)
	if bad := v.drift(v.r); len(bad) > 0 {
		t.Fatalf("after resync-redis, counters differ from the engine's availability: %+v", bad)
	}
	_ = v.r.Switch().Poll(context.Background())
	if v.r.Switch().Redis().Stale {
		t.Fatal("still stale after resync-redis")
	}

	// And they keep matching as the reservations made before and during
	// the outage end: claimed, released, expired.
	start := time.Now()
	for _, c := range all {
		if c.fate == "abandoned" {
			if _, _, err := v.call(v.r, "release", c.token); err != nil {
				t.Fatal(err)
			}
		}
	}
	settle(v, v.r, ttl, start)
	if bad := v.drift(v.r); len(bad) > 0 {
		t.Fatalf("once every reservation ended, counters differ from the engine's availability: %+v", bad)
	}
	t.Logf("%d checkouts, none failed; resync %+v", len(all), rep)
}

// TestRedisDownUnderRedisAuthority: when Redis decides and cannot be
// reached, a reserve or an extend fails with 2003 (nothing was done), while
// a claim of a reservation already made still deducts the ledger and a
// release still gives it back: no paid order waits for Redis.
func TestRedisDownUnderRedisAuthority(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	stock(v, v.r, []int64{1}, []int64{401}, 100)
	tok1 := v.must(v.r, "reserve", int64(1), "a", restest.LinesJSON(401, 2, 1), int64(600))[0][0].(string)
	tok2 := v.must(v.r, "reserve", int64(1), "b", restest.LinesJSON(401, 3, 1), int64(600))[0][0].(string)
	before := v.scalar("SELECT on_hand FROM inventory_ledger WHERE shop_id = 1 AND inventory_item_id = 401 AND inventory_group_id = 1")
	v.redis.Kill()

	_, _, err := v.call(v.r, "reserve", int64(1), "c", restest.LinesJSON(401, 1, 1), int64(600))
	if restest.Code(err) != reservation.CodeUnavailable {
		t.Fatalf("reserve with Redis down: %v, want 2003", err)
	}
	if n := v.scalar("SELECT COUNT(*) FROM reservations WHERE idempotency_key = 'c'"); n != 0 {
		t.Fatal("the refused reserve left a reservation in MySQL")
	}
	if _, _, err := v.call(v.r, "extend", tok1, int64(900)); restest.Code(err) != reservation.CodeUnavailable {
		t.Fatalf("extend with Redis down: %v, want 2003", err)
	}
	if rows := v.must(v.r, "claim", tok1); rows[0][1] != "claimed" {
		t.Fatalf("claim with Redis down: %v", rows)
	}
	if after := v.scalar("SELECT on_hand FROM inventory_ledger WHERE shop_id = 1 AND inventory_item_id = 401 AND inventory_group_id = 1"); after != before-2 {
		t.Fatalf("on_hand %d after the claim, want %d", after, before-2)
	}
	if rows := v.must(v.r, "release", tok2); rows[0][1] != "released" {
		t.Fatalf("release with Redis down: %v", rows)
	}
}

// TestLegacyClaimOfAReservationOnlyRedisHas: a reserve Redis decided whose
// shadow failed (here: the engine's pool was emptied behind its back, so the
// shadow found no stock) is claimed from Redis's record, once.
func TestLegacyClaimOfAReservationOnlyRedisHas(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	ctx := context.Background()
	k := reservation.PoolKey{ShopID: 1, ItemID: 501, GroupID: 1}
	if err := v.r.Store().AddStock(ctx, k, 10); err != nil { // Redis has stock the engine does not
		t.Fatal(err)
	}
	v.must(v.r, "receive", int64(1), int64(502), int64(1), int64(1)) // another item, so the ledger row exists below
	if _, err := v.db.Exec("INSERT INTO inventory_ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, updated_at) VALUES (1, 501, 1, 5, UTC_TIMESTAMP(6))"); err != nil {
		t.Fatal(err)
	}
	// The shadow holds all 5 of the ledger's units...
	tokA := v.must(v.r, "reserve", int64(1), "a", restest.LinesJSON(501, 5, 1), int64(600))[0][0].(string)
	// ...so the next reserve is Redis's alone.
	tokB := v.must(v.r, "reserve", int64(1), "b", restest.LinesJSON(501, 2, 1), int64(600))[0][0].(string)
	if n := comparisons(v.r)["reserve ok insufficient"]; n != 1 {
		t.Fatalf("comparisons %v", comparisons(v.r))
	}
	v.must(v.r, "release", tokA) // the ledger can cover B again
	for i, want := range []string{"claimed", "duplicate"} {
		if rows := v.must(v.r, "claim", tokB); rows[0][1] != want {
			t.Fatalf("claim %d of a reservation only Redis had: %v, want %s", i+1, rows, want)
		}
	}
	if on := v.scalar("SELECT on_hand FROM inventory_ledger WHERE shop_id = 1 AND inventory_item_id = 501"); on != 3 {
		t.Fatalf("on_hand %d, want 5 - 2", on)
	}
	if kind := v.scalar("SELECT COUNT(*) FROM reservations WHERE claim_kind = 'legacy' AND authority = 2"); kind != 1 {
		t.Fatal("the claim was not recorded as a legacy claim")
	}
}

// TestRedisPoolBusyUnderRedisAuthority: with authority redis, a reserve
// (and a claim only Redis could answer) that finds every connection to
// Redis in use for the whole timeout is answered 9107 (busy, nothing was
// done, retry), not 2003 (Redis could not be reached): Redis is up.
// Nothing is reserved on either side, and once the connection is free the
// same CALL reserves.
func TestRedisPoolBusyUnderRedisAuthority(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis", redisPool: 1})
	stock(v, v.r, []int64{1}, []int64{401}, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st := v.r.Store()
	key := st.CounterKey(reservation.PoolKey{ShopID: 1, ItemID: 401, GroupID: 1})
	before, err := st.Client().Get(ctx, key).Int64()
	if err != nil {
		t.Fatal(err)
	}

	// The pool's only connection waits in a BLPOP on a list nobody fills;
	// another client sees it there.
	held := make(chan error, 1)
	go func() { held <- st.Client().BLPop(ctx, 3*time.Second, "holdfast-test-empty").Err() }()
	watch := redis.NewClient(&redis.Options{Addr: v.redis.Addr})
	defer watch.Close()
	for !strings.Contains(watch.ClientList(ctx).Val(), "cmd=blpop") {
		if ctx.Err() != nil {
			t.Fatal("the BLPOP never started")
		}
		time.Sleep(5 * time.Millisecond)
	}

	_, _, err = v.call(v.r, "reserve", int64(1), "busy", restest.LinesJSON(401, 1, 1), int64(600))
	if restest.Code(err) != reservation.CodeBusy || !strings.Contains(err.Error(), "reservation.redis.pool_size") {
		t.Fatalf("reserve with every Redis connection busy: %v, want 9107 naming reservation.redis.pool_size", err)
	}
	// A claim of a reservation the engine does not know, which only Redis
	// could: the same answer.
	only := reservation.FormatToken(legacy.NewReservationID(reservation.AuthorityRedis))
	if _, _, err := v.call(v.r, "claim", only); restest.Code(err) != reservation.CodeBusy {
		t.Fatalf("claim with every Redis connection busy: %v, want 9107", err)
	}
	if err := <-held; !errors.Is(err, redis.Nil) {
		t.Fatalf("BLPOP: %v, want its timeout", err)
	}
	if n := v.scalar("SELECT COUNT(*) FROM reservations WHERE idempotency_key = 'busy'"); n != 0 {
		t.Fatal("the refused reserve left a reservation in MySQL")
	}
	if after, err := st.Client().Get(ctx, key).Int64(); err != nil || after != before {
		t.Fatalf("counter %d (%v) after the refused reserve, want %d", after, err, before)
	}
	v.must(v.r, "reserve", int64(1), "busy", restest.LinesJSON(401, 1, 1), int64(600))
	if after, err := st.Client().Get(ctx, key).Int64(); err != nil || after != before-1 {
		t.Fatalf("counter %d (%v) after the retried reserve, want %d", after, err, before-1)
	}
}
