package reservation_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// stmtClaimOneTrip is in the one-round-trip claim's statement alone: its
// claim record is guarded to find the reservation active.
const stmtClaimOneTrip = "WHERE reservation_id = ? AND state = 0"

// TestClaimOneTrip: a claim of an active reservation reads it, then
// deducts, deletes its lines, records the claim and commits in one round
// trip: two in all (it took three: the read, the locking read, the
// writes). Each line is deducted once, lines of several items in the
// ledger's key order, and the pool counters stay true.
func TestClaimOneTrip(t *testing.T) {
	v, _, trips := tripEnv(t, reservation.TagClaim, 0)
	v.receive(2101, 1, 10)
	v.receive(2102, 1, 10)
	ctx := context.Background()
	for i, js := range []string{
		restest.LinesJSON(2101, 3, 1),
		`[{"item":2102,"qty":6,"locations":[1]},{"item":2101,"qty":1,"locations":[1]}]`,
	} {
		_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), "one-trip-" + js, js, int64(600)})
		if err != nil {
			t.Fatal(err)
		}
		tok := rows[0][0].(string)
		on1, _, _ := v.pool(2101, 1)
		on2, _, _ := v.pool(2102, 1)
		trips.take()
		_, rows, err = v.eng.Call(ctx, "claim", []any{tok})
		if err != nil || rows[0][1] != "claimed" {
			t.Fatalf("claim %d answered %v, %v; want claimed", i, rows, err)
		}
		if got := trips.take(); len(got) != 2 {
			t.Errorf("claim %d took %d round trips, want 2:\n%s", i, len(got), strings.Join(got, "\n"))
		}
		want1, want2 := on1-3, on2
		if i == 1 {
			want1, want2 = on1-1, on2-6
		}
		after1, _, _ := v.pool(2101, 1)
		after2, _, _ := v.pool(2102, 1)
		if after1 != want1 || after2 != want2 {
			t.Errorf("claim %d: on_hand %d, %d -> %d, %d; want %d, %d", i, on1, on2, after1, after2, want1, want2)
		}
		if got := v.reservationByToken(tok); got.state != 1 || got.lines != 0 {
			t.Errorf("after claim %d the database has %+v", i, got)
		}
		if _, rows, err := v.eng.Call(ctx, "claim", []any{tok}); err != nil || rows[0][1] != "duplicate" {
			t.Errorf("claim %d again answered %v, %v; want duplicate", i, rows, err)
		}
	}
	if s := v.eng.Stats(); s.ClaimOneTrip != 2 || s.ClaimOneTripFallbacks != 0 {
		t.Errorf("%d one-trip claims and %d fallbacks, want 2 and 0", s.ClaimOneTrip, s.ClaimOneTripFallbacks)
	}
	v.checkInvariant(2101, 1)
	v.checkInvariant(2102, 1)
	if viol, err := v.eng.ReconcileOnce(ctx); err != nil || len(viol) != 0 {
		t.Errorf("reconcile after the claims: %v, %v; want no violation", viol, err)
	}
}

// TestClaimOneTripRaces: what a claim read can be out of date by the time
// its one round trip runs. Each case changes the reservation between the
// read and the claim's transaction; the guards roll the one round trip
// back, and the claim answers what it finds, deducting at most once.
func TestClaimOneTripRaces(t *testing.T) {
	v, f := oneTripFaultEnv(t, envOpts{})
	v.receive(2103, 1, 100)
	ctx := context.Background()
	cases := []struct {
		name    string
		between func(tok string)
		answer  string
		deduct  int64
	}{
		{"claimed by another call", func(tok string) {
			if _, rows, err := v.eng.Call(ctx, "claim", []any{tok}); err != nil || rows[0][1] != "claimed" {
				t.Fatalf("the other claim answered %v, %v", rows, err)
			}
		}, "duplicate", 2},
		{"released", func(tok string) {
			if _, _, err := v.eng.Call(ctx, "release", []any{tok}); err != nil {
				t.Fatal(err)
			}
		}, "forced", 2},
		{"expired", func(tok string) {
			v.expireAll()
		}, "late", 2},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tok, err := reserve(ctx, v.eng, "race-"+c.name, 600, 2103, 2, 1)
			if err != nil {
				t.Fatal(err)
			}
			onHand, _, _ := v.pool(2103, 1)
			// The claim's one round trip is held until the change is made.
			hold := make(chan struct{})
			r := f.Add(&restest.FaultRule{Match: stmtClaimOneTrip, Hold: hold})
			done := goCall(v.eng, "claim", tok)
			dbtest.Eventually(t, "the claim's one round trip to be held", func() bool { return f.Fired(r) == 1 })
			c.between(tok)
			close(hold)
			a := <-done
			if a.err != nil || a.rows[0][1] != c.answer {
				t.Fatalf("claim answered %v, %v; want %s", a.rows, a.err, c.answer)
			}
			if after, _, _ := v.pool(2103, 1); after != onHand-c.deduct {
				t.Errorf("on_hand %d -> %d; want %d deducted once", onHand, after, c.deduct)
			}
			if got := v.reservationByToken(tok); got.state != 1 || got.lines != 0 {
				t.Errorf("after the claim the database has %+v", got)
			}
			if s := v.eng.Stats(); s.ClaimOneTripFallbacks != uint64(i+1) {
				t.Errorf("%d one-trip claim fallbacks, want %d", s.ClaimOneTripFallbacks, i+1)
			}
		})
	}
	v.checkInvariant(2103, 1)
}

// TestOneTripClaimFaultsTellTheTruth: a claim's one round trip has no
// point between its first write and its COMMIT, so a connection lost on it
// leaves the outcome unknown whether or not the database ran it. The claim
// finds out on a fresh connection and answers "claimed" either way,
// deducting once; when the database stays unreachable it answers 9108.
func TestOneTripClaimFaultsTellTheTruth(t *testing.T) {
	v, f := oneTripFaultEnv(t, envOpts{hold: 600 * time.Millisecond, cfg: func(c *reservation.Config) { c.CallTimeout = 300 * time.Millisecond }})
	v.receive(2104, 1, 100)
	ctx := context.Background()
	for _, after := range []bool{false, true} {
		name := map[bool]string{false: "lost before it ran", true: "ran, answer lost"}[after]
		t.Run(name, func(t *testing.T) {
			tok, err := reserve(ctx, v.eng, "claim-fault-"+name, 600, 2104, 3, 1)
			if err != nil {
				t.Fatal(err)
			}
			onHand, _, _ := v.pool(2104, 1)
			before := v.eng.Stats().Recoveries["claim"]
			r := f.Inject(stmtClaimOneTrip, after)
			_, rows, err := v.eng.Call(ctx, "claim", []any{tok})
			checkFired(t, f, r)
			f.Clear()
			if err != nil || rows[0][1] != "claimed" {
				t.Fatalf("claim answered %v, %v; want claimed", rows, err)
			}
			if got, _, _ := v.pool(2104, 1); got != onHand-3 {
				t.Errorf("on_hand %d -> %d; want one deduction of 3", onHand, got)
			}
			v.checkRecovered(t, "claim", before)
		})
	}
	t.Run("ran, answer lost, then down", func(t *testing.T) {
		tok, err := reserve(ctx, v.eng, "claim-fault-down", 600, 2104, 2, 1)
		if err != nil {
			t.Fatal(err)
		}
		onHand, _, _ := v.pool(2104, 1)
		r := f.Add(&restest.FaultRule{Match: stmtClaimOneTrip, After: true, Then: func() { f.SetDown(true) }})
		_, _, err = v.eng.Call(ctx, "claim", []any{tok})
		checkFired(t, f, r)
		f.Clear()
		if code, _, msg := mysqlError(err); code != reservation.CodeOutcomeUnknown {
			t.Fatalf("got %v (%d %q); want 9108, outcome unknown", err, code, msg)
		}
		if got, _, _ := v.pool(2104, 1); got != onHand-2 {
			t.Errorf("on_hand %d -> %d; want the deduction of 2 the database ran", onHand, got)
		}
		if _, rows, err := v.eng.Call(ctx, "claim", []any{tok}); err != nil || rows[0][1] != "duplicate" {
			t.Errorf("the claim repeated answered %v, %v; want duplicate (claimed once)", rows, err)
		}
	})
	v.checkInvariant(2104, 1)
}

// TestClaimOneTripWaitsOnRelease: a claim's one round trip that has
// deducted and then waits for the lines a release holds (the release has
// locked them and not yet committed) finds them gone once the release
// commits, rolls its deduction back, and answers what the two-round-trip
// claim finds: a forced claim of the released reservation, deducted once.
func TestClaimOneTripWaitsOnRelease(t *testing.T) {
	v, f := oneTripFaultEnv(t, envOpts{})
	v.receive(2105, 1, 100)
	ctx := context.Background()
	tok, err := reserve(ctx, v.eng, "waits-on-release", 600, 2105, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	onHand, _, _ := v.pool(2105, 1)
	hold := make(chan struct{})
	held := f.Add(&restest.FaultRule{Match: stmtReleaseCommit, Hold: hold})
	released := goCall(v.eng, "release", tok)
	dbtest.Eventually(t, "the release to hold its locks", func() bool { return f.Fired(held) == 1 })
	claimed := goCall(v.eng, "claim", tok)
	// INNODB_TRX is a cache InnoDB refreshes only when it has not been
	// read for 0.1 s: poll it more slowly than that.
	for deadline := time.Now().Add(30 * time.Second); ; {
		time.Sleep(200 * time.Millisecond)
		if v.scalar("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT'") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim never waited for the release's locks")
		}
	}
	close(hold)
	if r := <-released; r.err != nil || r.rows[0][1] != "released" || r.rows[0][2] != int64(2) {
		t.Fatalf("release answered %v, %v; want released 2", r.rows, r.err)
	}
	a := <-claimed
	if a.err != nil || a.rows[0][1] != "forced" {
		t.Fatalf("claim answered %v, %v; want forced (the release committed first)", a.rows, a.err)
	}
	if after, _, _ := v.pool(2105, 1); after != onHand-2 {
		t.Errorf("on_hand %d -> %d; want one deduction of 2", onHand, after)
	}
	if s := v.eng.Stats(); s.ClaimOneTripFallbacks != 1 {
		t.Errorf("%d one-trip claim fallbacks, want 1", s.ClaimOneTripFallbacks)
	}
	v.checkInvariant(2105, 1)
}
