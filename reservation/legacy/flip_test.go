package legacy_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
)

// TestFlipUnderLoad: two instances, the same traffic as the shadow test,
// and the authority flipped redis → holdfast → redis twice during the run
// through one instance (the other follows by polling the switch). Every
// call succeeds; afterwards MySQL conserved its stock, every reservation
// made under either authority was claimed, released or expired exactly
// once on both sides, and each Redis counter equals the engine's
// availability.
func TestFlipUnderLoad(t *testing.T) {
	v := newEnv(t, envOpts{authority: "redis"})
	other := v.addInstance()
	routers := []*legacy.Router{v.r, other}
	shops, items := []int64{1, 2, 3}, []int64{201, 202}
	const perPool = 100000
	stock(v, v.r, shops, items, perPool)
	const ttl = 4
	start := time.Now()

	stop := make(chan struct{})
	var flips []int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for _, a := range []string{"holdfast", "redis", "holdfast", "redis"} {
			select {
			case <-stop:
				return
			case <-time.After(400 * time.Millisecond):
			}
			st := v.setAuthority(v.r, legacy.State{Authority: a, ChangedBy: "test"})
			flips = append(flips, st.Version)
			// The other instance is on the new version within its poll
			// interval.
			for deadline := time.Now().Add(30 * time.Second); other.Switch().Current().Version != st.Version; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Errorf("the other instance never ran version %d", st.Version)
					return
				}
			}
		}
	}()
	done := traffic(t, v, routers, 64, 40, shops, items, ttl)
	close(stop)
	wg.Wait()
	if len(flips) != 4 {
		t.Fatalf("the traffic ended before the four flips (%d made): make it longer", len(flips))
	}

	byAuth := map[reservation.Authority]int{}
	for _, c := range done {
		a, _ := legacy.TokenAuthority(c.token)
		byAuth[a]++
		switch c.fate {
		case "claimed":
			if !slices.Equal(c.replies, []string{"claimed"}) {
				t.Fatalf("claim of %s answered %v", c.token, c.replies)
			}
		case "released":
			if !slices.Equal(c.replies, []string{"released"}) {
				t.Fatalf("release of %s answered %v", c.token, c.replies)
			}
		}
	}
	if byAuth[reservation.AuthorityRedis] == 0 || byAuth[reservation.AuthorityHoldfast] == 0 {
		t.Fatalf("reservations by authority %v: the flips did not take effect", byAuth)
	}
	t.Logf("%d checkouts, by authority %v, switch versions %v", len(done), byAuth, flips)

	settle(v, v.r, ttl, start)

	// MySQL conservation.
	var claimedQty int64
	for _, c := range done {
		if c.fate == "claimed" {
			claimedQty += c.qty
		}
	}
	initial := int64(len(shops)*len(items)*2) * perPool
	if onHand := v.scalar("SELECT SUM(on_hand) FROM inventory_ledger"); onHand+claimedQty != initial {
		t.Fatalf("conservation: final on_hand %d + claimed %d != initial %d", onHand, claimedQty, initial)
	}

	// Every reservation finished exactly once, the way its checkout chose,
	// on both sides: MySQL state 1 claimed, 2 released, 0 expired; the Redis
	// record claimed, released, expired.
	ctx := context.Background()
	for _, c := range done {
		id, _ := reservation.ParseToken(c.token)
		var state int
		var kind, auth *string
		if err := v.db.QueryRow("SELECT state, claim_kind, authority FROM reservations WHERE reservation_id = ?", id).Scan(&state, &kind, &auth); err != nil {
			t.Fatalf("reservation %s (%s) in MySQL: %v", c.token, c.fate, err)
		}
		want := map[string]int{"claimed": 1, "released": 2, "abandoned": 0}[c.fate]
		if state != want {
			t.Fatalf("reservation %s was %s but MySQL has state %d", c.token, c.fate, state)
		}
		a, _ := legacy.TokenAuthority(c.token)
		if auth == nil || *auth != fmt.Sprint(int(a)) {
			t.Fatalf("reservation %s: token says %v, reservations.authority %v", c.token, a, auth)
		}
		rec, err := v.r.Store().Get(ctx, c.token)
		if err != nil || rec == nil {
			t.Fatalf("reservation %s in Redis: %v %v", c.token, rec, err)
		}
		wantRec := map[string]string{"claimed": "claimed", "released": "released", "abandoned": "expired"}[c.fate]
		if rec.State != wantRec {
			t.Fatalf("reservation %s was %s but Redis has it %s", c.token, c.fate, rec.State)
		}
	}
	if n := v.scalar("SELECT COUNT(*) FROM reservations WHERE claim_kind IS NOT NULL AND claim_kind <> 'normal'"); n != 0 {
		t.Fatalf("%d claims were late, forced or made from Redis's record: every claim came right after its reserve", n)
	}
	if bad := v.drift(v.r); len(bad) > 0 {
		t.Fatalf("counters differ from the engine's availability: %+v", bad)
	}
	for _, r := range routers {
		if d := disagreements(r); len(d) > 0 {
			t.Fatalf("the sides disagreed: %v", d)
		}
	}
}
