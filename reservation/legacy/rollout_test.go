package legacy_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestRolloutByPercent: with authority redis and percent 50, about half of
// the shops' reserves are decided by holdfast, each shop always by the same
// side (its token says which), and the split is the switch's stable hash.
func TestRolloutByPercent(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	v.setAuthority(v.r, legacy.State{Authority: "redis", Percent: 50, ChangedBy: "test"})
	const shops = 200
	for s := int64(1); s <= shops; s++ {
		v.must(v.r, "receive", s, int64(1), int64(1), int64(100))
	}
	onHoldfast := 0
	for s := int64(1); s <= shops; s++ {
		want := reservation.AuthorityRedis
		if legacy.Bucket(s) < 50 {
			want = reservation.AuthorityHoldfast
			onHoldfast++
		}
		for i := range 3 {
			rows := v.must(v.r, "reserve", s, fmt.Sprintf("k%d", i), restest.LinesJSON(1, 1, 1), int64(600))
			if a, _ := legacy.TokenAuthority(rows[0][0].(string)); a != want {
				t.Fatalf("shop %d (bucket %d) reserve %d decided by %v, want %v", s, legacy.Bucket(s), i, a, want)
			}
		}
	}
	if onHoldfast < shops*35/100 || onHoldfast > shops*65/100 {
		t.Fatalf("%d of %d shops on holdfast at 50%%", onHoldfast, shops)
	}
	d := v.r.Stats().Decided
	if d["holdfast"] != uint64(3*onHoldfast) || d["redis"] != uint64(3*(shops-onHoldfast)) {
		t.Fatalf("reserves decided %v, want holdfast %d redis %d", d, 3*onHoldfast, 3*(shops-onHoldfast))
	}
	t.Logf("percent 50: %d of %d shops on holdfast", onHoldfast, shops)
	if disagree := disagreements(v.r); len(disagree) > 0 {
		t.Fatalf("disagreements: %v", disagree)
	}
}

// TestRolloutOnlyAdds: raising the percent only adds shops, and a listed
// shop is on holdfast whatever its bucket.
func TestRolloutOnlyAdds(t *testing.T) {
	for p := 0; p < 100; p++ {
		lo, hi := legacy.State{Authority: "redis", Percent: p}, legacy.State{Authority: "redis", Percent: p + 1}
		for s := int64(1); s <= 5000; s++ {
			if lo.For(s) == reservation.AuthorityHoldfast && hi.For(s) != reservation.AuthorityHoldfast {
				t.Fatalf("shop %d is on holdfast at %d%% but not at %d%%", s, p, p+1)
			}
		}
	}
	st := legacy.State{Authority: "redis", Shops: []int64{7}}
	if st.For(7) != reservation.AuthorityHoldfast || st.For(8) != reservation.AuthorityRedis {
		t.Fatal("a listed shop must be on holdfast, another on redis")
	}
	if (legacy.State{Authority: "redis", Percent: 100}).For(123) != reservation.AuthorityHoldfast {
		t.Fatal("100% puts every shop on holdfast")
	}
	// The bucket is CRC32 of the decimal id mod 100, as SQL computes it.
	if got := legacy.Bucket(12345); got != 44 { // MariaDB: SELECT CRC32(12345) % 100 gives 44
		t.Fatalf("Bucket(12345) = %d", got)
	}
}

// TestSwitchPolledAndGuarded: a change made through one instance is in force
// on another within its poll interval, each exports its version; putting
// shops back on Redis while its counters are stale is refused unless forced.
func TestSwitchPolledAndGuarded(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	other := v.addInstance()
	if v.r.Switch().Current().Version != 1 || other.Switch().Current().Version != 1 {
		t.Fatalf("seeded versions %d and %d, want 1", v.r.Switch().Current().Version, other.Switch().Current().Version)
	}
	st := v.setAuthority(v.r, legacy.State{Authority: "holdfast", ChangedBy: "test", Reason: "go"})
	if st.Version != 2 || v.r.Switch().Current().Authority != "holdfast" {
		t.Fatalf("after Set: %+v", st)
	}
	dbtest.Eventually(t, "the other instance polls version 2", func() bool { return other.Switch().Current().Version == 2 })
	if _, err := v.r.Switch().Set(context.Background(), legacy.State{Authority: "holdfast", Percent: 10}, false); err == nil {
		t.Fatal("authority holdfast with a percent was accepted")
	}

	if err := legacy.MarkStale(context.Background(), v.conns, "test"); err != nil {
		t.Fatal(err)
	}
	_, err := v.r.Switch().Set(context.Background(), legacy.State{Authority: "redis", ChangedBy: "test"}, false)
	if !errors.Is(err, legacy.ErrStale) {
		t.Fatalf("switch to redis while stale: %v, want ErrStale", err)
	}
	if _, err := v.r.Switch().Set(context.Background(), legacy.State{Authority: "redis", Percent: 100}, false); err != nil {
		t.Fatalf("percent 100 keeps every shop on holdfast, so staleness does not matter: %v", err)
	}
	if st, err = v.r.Switch().Set(context.Background(), legacy.State{Authority: "redis", ChangedBy: "test"}, true); err != nil || st.Version != 4 {
		t.Fatalf("forced: %+v %v", st, err)
	}
	dbtest.Eventually(t, "the other instance polls version 4 and sees Redis stale", func() bool {
		return other.Switch().Current().Version == 4 && other.Switch().Redis().Stale
	})
}
