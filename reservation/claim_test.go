package reservation_test

import (
	"context"
	"database/sql"
	"fmt"
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
			type answer struct {
				rows [][]any
				err  error
			}
			done := make(chan answer, 1)
			go func() {
				_, rows, err := v.eng.Call(ctx, "claim", []any{tok})
				done <- answer{rows, err}
			}()
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
	v, f := oneTripFaultEnv(t, envOpts{cfg: func(c *reservation.Config) { c.CallTimeout = 300 * time.Millisecond }})
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
			if got := v.eng.Stats().Recoveries["claim"]; got <= before {
				t.Errorf("recoveries of claim: %d before, %d after; want more", before, got)
			}
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
	released := make(chan error, 1)
	go func() {
		_, rows, err := v.eng.Call(ctx, "release", []any{tok})
		if err == nil && (rows[0][1] != "released" || rows[0][2] != int64(2)) {
			err = fmt.Errorf("release answered %v; want released 2", rows[0])
		}
		released <- err
	}()
	dbtest.Eventually(t, "the release to hold its locks", func() bool { return f.Fired(held) == 1 })
	type answer struct {
		rows [][]any
		err  error
	}
	claimed := make(chan answer, 1)
	go func() {
		_, rows, err := v.eng.Call(ctx, "claim", []any{tok})
		claimed <- answer{rows, err}
	}()
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
	if err := <-released; err != nil {
		t.Fatal(err)
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

// stmtExtendOneTrip is in the one-round-trip extend's statement alone.
const stmtExtendOneTrip = "SET @holdfast_extend_exp = UTC_TIMESTAMP(6)"

// TestExtendOneTrip: an extend of an active reservation reads it, then
// locks its ledger rows and sets the new expiry on its lines and on the
// reservation in one round trip: two in all (it took three). The expiry
// it answers is the one the database has.
func TestExtendOneTrip(t *testing.T) {
	v, _, trips := tripEnv(t, reservation.TagExtend, 0)
	v.receive(2111, 1, 10)
	v.receive(2112, 1, 10)
	ctx := context.Background()
	js := `[{"item":2112,"qty":2,"locations":[1]},{"item":2111,"qty":1,"locations":[1]}]`
	_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), "extend-one-trip", js, int64(600)})
	if err != nil {
		t.Fatal(err)
	}
	tok := rows[0][0].(string)
	was := v.reservationByToken(tok).expiresAt
	trips.take()
	_, rows, err = v.eng.Call(ctx, "extend", []any{tok, int64(3000)})
	if err != nil {
		t.Fatal(err)
	}
	if got := trips.take(); len(got) != 2 {
		t.Errorf("extend took %d round trips, want 2:\n%s", len(got), strings.Join(got, "\n"))
	}
	exp := rows[0][1].(time.Time)
	got := v.reservationByToken(tok)
	if !exp.Equal(got.expiresAt) || exp.Sub(was) < 2000*time.Second {
		t.Errorf("extend answered %v; the reservation has %v (was %v)", exp, got.expiresAt, was)
	}
	if n := v.scalar("SELECT COUNT(*) FROM reserved_quantities WHERE reservation_id = ? AND expires_at = ?", tokenID(t, tok), exp.Format("2006-01-02 15:04:05.999999")); n != 2 {
		t.Errorf("%d of 2 lines carry the answered expiry", n)
	}
	if s := v.eng.Stats(); s.ExtendOneTrip != 1 || s.ExtendOneTripFallbacks != 0 {
		t.Errorf("%d one-trip extends and %d fallbacks, want 1 and 0", s.ExtendOneTrip, s.ExtendOneTripFallbacks)
	}
}

// TestExtendOneTripExpiredMeanwhile: a reservation that expires between an
// extend's read and its one round trip fails the lines' guard; the extend
// rolls back and answers 9104 (expired) from the two-round-trip form, and
// no connection goes back to the pool with the extend's variable set.
func TestExtendOneTripExpiredMeanwhile(t *testing.T) {
	v, f := oneTripFaultEnv(t, envOpts{maxConns: 2})
	v.receive(2113, 1, 10)
	ctx := context.Background()
	tok, err := reserve(ctx, v.eng, "extend-expired", 600, 2113, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	hold := make(chan struct{})
	r := f.Add(&restest.FaultRule{Match: stmtExtendOneTrip, Hold: hold})
	done := make(chan error, 1)
	go func() {
		_, _, err := v.eng.Call(ctx, "extend", []any{tok, int64(3000)})
		done <- err
	}()
	dbtest.Eventually(t, "the extend's one round trip to be held", func() bool { return f.Fired(r) == 1 })
	v.expireAll()
	close(hold)
	if err := <-done; restest.Code(err) != reservation.CodeExpired {
		t.Fatalf("extend of a reservation expired meanwhile: %v, want %d", err, reservation.CodeExpired)
	}
	if s := v.eng.Stats(); s.ExtendOneTripFallbacks != 1 {
		t.Errorf("%d one-trip extend fallbacks, want 1", s.ExtendOneTripFallbacks)
	}
	// Both of the pool's connections, one of them the extend's.
	v.eachPoolConn(2, func(row func(q string, args ...any) *sql.Row) {
		var set bool
		if err := row("SELECT @holdfast_extend_exp IS NOT NULL").Scan(&set); err != nil {
			t.Fatal(err)
		}
		if set {
			t.Error("a connection back in the pool still has the extend's variable set")
		}
	})
}

// TestOneTripExtendFaultsTellTheTruth: an extend whose one round trip loses
// its connection (before the database ran it, or after) answers the
// expiry the database has, set once, by its recovery.
func TestOneTripExtendFaultsTellTheTruth(t *testing.T) {
	v, f := oneTripFaultEnv(t, envOpts{})
	v.receive(2114, 1, 100)
	ctx := context.Background()
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("after=%v", after), func(t *testing.T) {
			tok, err := reserve(ctx, v.eng, fmt.Sprintf("extend-fault-%v", after), 600, 2114, 1, 1)
			if err != nil {
				t.Fatal(err)
			}
			before := v.eng.Stats().Recoveries["extend"]
			r := f.Inject(stmtExtendOneTrip, after)
			_, rows, err := v.eng.Call(ctx, "extend", []any{tok, int64(3000)})
			checkFired(t, f, r)
			f.Clear()
			if err != nil {
				t.Fatalf("extend: %v", err)
			}
			if exp, got := rows[0][1].(time.Time), v.reservationByToken(tok).expiresAt; !exp.Equal(got) {
				t.Errorf("extend answered %v; the database has %v", exp, got)
			}
			if got := v.eng.Stats().Recoveries["extend"]; got <= before {
				t.Errorf("recoveries of extend: %d before, %d after; want more", before, got)
			}
		})
	}
}
