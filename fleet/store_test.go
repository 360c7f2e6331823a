package fleet

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
)

// migrated is a fresh database at the schema's current version.
func migrated(t *testing.T) *Store {
	t.Helper()
	name := dbtest.NewDatabase(t)
	db := dbtest.Open(t, name, "parseTime=true")
	if _, err := reservation.Migrate(context.Background(), reservation.SQLConns(db)); err != nil {
		t.Fatal(err)
	}
	return NewStore(db)
}

// Instances renewing their grants of one cap concurrently, with wants
// going up and down, never hold grants adding up to more than the cap, and
// each gets close to its fair share once wants settle.
func TestGrantsNeverExceedTheCap(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const capN, ttl = 6, 5 * time.Second
	if err := st.SetControl(ctx, Control{Tag: "t", Kind: KindLimit, Value: capN, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	held := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		id := fmt.Sprint("inst", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < 40; round++ {
				want := (round*(i+1) + i) % 7
				mu.Lock()
				used := min(held[id], want) // what it still holds
				mu.Unlock()
				g, err := st.Grant(ctx, "t", id, capN, want, used, ttl)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				held[id] = min(g, max(used, want))
				mu.Unlock()
				var sum int
				if err := st.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(granted), 0) FROM holdfast_cap_grants WHERE tag = 't'").Scan(&sum); err != nil {
					errs <- err
					return
				}
				if sum > capN {
					errs <- fmt.Errorf("grants add up to %d, over the cap %d", sum, capN)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Settled: each wants everything; a few rounds bring each to its share.
	var grants [4]int
	for round := 0; round < 6; round++ {
		for i := range grants {
			g, err := st.Grant(ctx, "t", fmt.Sprint("inst", i), capN, capN, min(grants[i], capN), ttl)
			if err != nil {
				t.Fatal(err)
			}
			grants[i] = g
		}
	}
	sum := 0
	for _, g := range grants {
		sum += g
		if g < 1 || g > 2 {
			t.Errorf("grants %v: each of 4 instances wanting all of %d should get 1 or 2", grants, capN)
		}
	}
	if sum != capN {
		t.Errorf("grants %v add up to %d, want the whole cap %d", grants, sum, capN)
	}
}

// A grant not renewed within the ttl goes back to the others.
func TestGrantOfAGoneInstanceReturns(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	if err := st.SetControl(ctx, Control{Tag: "t", Kind: KindLimit, Value: 4, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	if g, err := st.Grant(ctx, "t", "gone", 4, 4, 0, ttl); err != nil || g != 4 {
		t.Fatalf("first instance granted %d (%v), want all 4", g, err)
	}
	if g, err := st.Grant(ctx, "t", "new", 4, 4, 0, ttl); err != nil || g != 0 {
		t.Fatalf("while the first holds all: %d (%v), want 0", g, err)
	}
	time.Sleep(2 * ttl)
	if g, err := st.Grant(ctx, "t", "new", 4, 4, 0, ttl); err != nil || g != 4 {
		t.Fatalf("after the first lapsed: %d (%v), want all 4", g, err)
	}
}

// One holder at a time; a lapsed lease is taken over.
func TestDutyLease(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	if ok, err := st.HoldDuty(ctx, "sweeper", "a", ttl); err != nil || !ok {
		t.Fatalf("a: %v %v", ok, err)
	}
	if ok, err := st.HoldDuty(ctx, "sweeper", "b", ttl); err != nil || ok {
		t.Fatalf("b took a live lease: %v %v", ok, err)
	}
	if ok, err := st.HoldDuty(ctx, "sweeper", "a", ttl); err != nil || !ok {
		t.Fatalf("a renewing: %v %v", ok, err)
	}
	time.Sleep(2 * ttl)
	if ok, err := st.HoldDuty(ctx, "sweeper", "b", ttl); err != nil || !ok {
		t.Fatalf("b after a's lease lapsed: %v %v", ok, err)
	}
	if ok, err := st.HoldDuty(ctx, "sweeper", "a", ttl); err != nil || ok {
		t.Fatalf("a took b's live lease back: %v %v", ok, err)
	}
}

// Controls: set, read with their expiry by the database's clock, removed.
func TestControlsStore(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	if err := st.SetControl(ctx, Control{Tag: "checkout", Kind: KindDrain, SetBy: "test", Reason: "incident"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.SetControl(ctx, Control{Tag: "report", Kind: KindLimit, Value: 3, SetBy: "test"}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := st.SetControl(ctx, Control{Tag: "bad", Kind: "nope"}, 0); err == nil {
		t.Fatal("an unknown kind was written")
	}
	cs, now, err := st.Controls(ctx)
	if err != nil || len(cs) != 2 || now.IsZero() {
		t.Fatalf("controls %+v at %v (%v), want 2", cs, now, err)
	}
	if cs[1].Tag != "report" || cs[1].Expires.Sub(now) <= 0 || cs[1].Expires.Sub(now) > 300*time.Millisecond {
		t.Fatalf("report's expiry %v at %v", cs[1].Expires, now)
	}
	time.Sleep(400 * time.Millisecond)
	if cs, _, err = st.Controls(ctx); err != nil || len(cs) != 1 || cs[0].Tag != "checkout" {
		t.Fatalf("after the limit expired: %+v (%v)", cs, err)
	}
	if had, err := st.RemoveControl(ctx, "checkout", KindDrain); err != nil || !had {
		t.Fatalf("remove: %v %v", had, err)
	}
	if had, err := st.RemoveControl(ctx, "checkout", KindDrain); err != nil || had {
		t.Fatalf("remove again: %v %v", had, err)
	}
}
