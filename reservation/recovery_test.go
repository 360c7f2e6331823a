package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// faultPoint is where in a call its backend connection fails.
type faultPoint struct {
	name  string
	match string // the statement hit
	after bool   // the database ran it; its answer was lost
}

// faultPoints lists, per procedure, the connection failing before the call
// sent anything of its transaction, in the middle of it (after its locking
// round trip ran), just before COMMIT was sent, and after COMMIT ran.
var faultPoints = map[string][]faultPoint{
	"reserve": {
		{"before the units are locked", stmtReserveLock, false},
		{"after the units were locked", stmtReserveLock, true},
		{"before COMMIT", stmtReserveCommit, false},
		{"after COMMIT", stmtReserveCommit, true},
	},
	"claim": {
		{"before the first read", stmtHeaderRead, false},
		{"after the rows were locked", stmtClaimLock, true},
		{"before COMMIT", stmtClaimCommit, false},
		{"after COMMIT", stmtClaimCommit, true},
	},
	"release": {
		{"before the rows are locked", stmtReleaseLock, false},
		{"after the rows were locked", stmtReleaseLock, true},
		{"before COMMIT", stmtReleaseCommit, false},
		{"after COMMIT", stmtReleaseCommit, true},
	},
	"extend": {
		{"before the first read", stmtHeaderRead, false},
		{"after the rows were locked", stmtClaimLock, true},
		{"before COMMIT", stmtExtendCommit, false},
		{"after COMMIT", stmtExtendCommit, true},
	},
}

// checkFired fails the test unless r fired exactly once.
func checkFired(t *testing.T, f *restest.FaultConns, r *restest.FaultRule) {
	t.Helper()
	if n := f.Fired(r); n != 1 {
		t.Fatalf("the fault on %q fired %d times, want 1 (did the statement change?)", r.Match, n)
	}
}

// checkReservation fails the test unless rows answer a fresh reservation
// (not a replay) that the database holds exactly once under key, with qty
// units in lines lines.
func (v *env) checkReservation(rows [][]any, key string, lines int, qty int64) string {
	v.t.Helper()
	if len(rows) != lines || rows[0][6] != "active" || rows[0][7] != int64(0) {
		v.t.Fatalf("reserve answered %v; want %d lines of a fresh reservation (active, replayed 0)", rows, lines)
	}
	tok := rows[0][0].(string)
	got := v.reservationByToken(tok)
	if got.n != 1 || got.key != key || got.reservationCount != 1 || got.lines != int64(lines) || got.qty != qty || got.state != 0 {
		v.t.Fatalf("the database has %+v for the answered token %s; want one active reservation under %q of %d units", got, tok, key, qty)
	}
	if !got.expiresAt.Equal(rows[0][1].(time.Time)) {
		v.t.Fatalf("reserve answered expires_at %v; the database has %v", rows[0][1], got.expiresAt)
	}
	return tok
}

// TestFaultsTellTheTruth: whenever the engine's backend connection fails in
// a reserve, claim, release or extend (before the call's transaction, in
// its middle, just before COMMIT, or after COMMIT ran but before its answer
// arrived), the call answers exactly what it would have answered without
// the fault, and the database shows the change made exactly once. Each
// case counts a recovery.
func TestFaultsTellTheTruth(t *testing.T) {
	for _, naive := range []bool{false, true} {
		t.Run(fmt.Sprintf("coalescing=%v", !naive), func(t *testing.T) {
			v, f := faultEnv(t, envOpts{cfg: func(c *reservation.Config) { c.DisableCoalescing = naive }})
			v.receive(41, 1, 1000)
			v.receive(42, 1, 1000)
			ctx := context.Background()
			n := 0
			newReservation := func() string {
				n++
				tok, err := reserve(ctx, v.eng, fmt.Sprintf("setup-%d", n), 600, 41, 2, 1)
				if err != nil {
					t.Fatal(err)
				}
				return tok
			}
			for _, p := range faultPoints["reserve"] {
				for _, lines := range []int{1, 2} {
					t.Run(fmt.Sprintf("reserve %d lines %s", lines, p.name), func(t *testing.T) {
						key := fmt.Sprintf("k-%d-%s", lines, p.name)
						js := restest.LinesJSON(41, 3, 1)
						if lines == 2 {
							js = `[{"item":41,"qty":3,"locations":[1]},{"item":42,"qty":2,"locations":[1]}]`
						}
						before := v.eng.Stats().Recoveries["reserve"]
						r := f.Inject(p.match, p.after)
						_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), key, js, int64(600)})
						checkFired(t, f, r)
						if err != nil {
							t.Fatalf("reserve: %v", err)
						}
						v.checkReservation(rows, key, lines, map[int]int64{1: 3, 2: 5}[lines])
						v.checkRecovered(t, "reserve", before)
					})
				}
			}
			for _, p := range faultPoints["claim"] {
				t.Run("claim "+p.name, func(t *testing.T) {
					tok := newReservation()
					onHand, _, _ := v.pool(41, 1)
					before := v.eng.Stats().Recoveries["claim"]
					r := f.Inject(p.match, p.after)
					_, rows, err := v.eng.Call(ctx, "claim", []any{tok})
					checkFired(t, f, r)
					if err != nil || rows[0][1] != "claimed" {
						t.Fatalf("claim answered %v, %v; want claimed", rows, err)
					}
					if after, _, _ := v.pool(41, 1); after != onHand-2 {
						t.Fatalf("on_hand %d -> %d; want one deduction of 2", onHand, after)
					}
					if got := v.reservationByToken(tok); got.state != 1 || got.lines != 0 {
						t.Fatalf("after the claim the database has %+v", got)
					}
					if _, rows, err := v.eng.Call(ctx, "claim", []any{tok}); err != nil || rows[0][1] != "duplicate" {
						t.Fatalf("the next claim answered %v, %v; want duplicate", rows, err)
					}
					v.checkRecovered(t, "claim", before)
				})
			}
			for _, p := range faultPoints["release"] {
				t.Run("release "+p.name, func(t *testing.T) {
					tok := newReservation()
					before := v.eng.Stats().Recoveries["release"]
					r := f.Inject(p.match, p.after)
					_, rows, err := v.eng.Call(ctx, "release", []any{tok})
					checkFired(t, f, r)
					if err != nil || rows[0][1] != "released" || rows[0][2] != int64(2) {
						t.Fatalf("release answered %v, %v; want released 2", rows, err)
					}
					if got := v.reservationByToken(tok); got.state != 2 || got.lines != 0 {
						t.Fatalf("after the release the database has %+v", got)
					}
					if _, rows, err := v.eng.Call(ctx, "release", []any{tok}); err != nil || rows[0][1] != "duplicate" {
						t.Fatalf("the next release answered %v, %v; want duplicate", rows, err)
					}
					v.checkRecovered(t, "release", before)
				})
			}
			for _, p := range faultPoints["extend"] {
				t.Run("extend "+p.name, func(t *testing.T) {
					tok := newReservation()
					was := v.reservationByToken(tok).expiresAt
					before := v.eng.Stats().Recoveries["extend"]
					r := f.Inject(p.match, p.after)
					_, rows, err := v.eng.Call(ctx, "extend", []any{tok, int64(3000)})
					checkFired(t, f, r)
					if err != nil {
						t.Fatalf("extend: %v", err)
					}
					got := v.reservationByToken(tok)
					if exp := rows[0][1].(time.Time); !exp.Equal(got.expiresAt) || !exp.After(was) {
						t.Fatalf("extend answered expires_at %v; the database has %v (was %v)", exp, got.expiresAt, was)
					}
					v.checkRecovered(t, "extend", before)
				})
			}
			v.checkInvariant(41, 1)
			v.checkInvariant(42, 1)
		})
	}
}

// TestAnotherCallBetweenCommitAndRecovery: the attempt that did the work is
// the one that answers it. A claim whose COMMIT's answer is lost, with a
// second claim of the token arriving before the first recovers, answers
// "claimed" and the second "duplicate"; likewise a reserve and a replay of
// its key: the reserve answers its reservation, the replay replayed = 1.
func TestAnotherCallBetweenCommitAndRecovery(t *testing.T) {
	v, f := faultEnv(t, envOpts{})
	v.receive(43, 1, 100)
	ctx := context.Background()
	args := []any{int64(shop), "between", restest.LinesJSON(43, 1, 1), int64(600)}
	var other [][]any
	var otherErr error
	r := f.Add(&restest.FaultRule{Match: stmtReserveCommit, After: true, Then: func() {
		_, other, otherErr = v.eng.Call(ctx, "reserve", args)
	}})
	_, rows, err := v.eng.Call(ctx, "reserve", args)
	checkFired(t, f, r)
	if err != nil {
		t.Fatal(err)
	}
	tok := v.checkReservation(rows, "between", 1, 1)
	if otherErr != nil || other[0][0] != tok || other[0][7] != int64(1) {
		t.Fatalf("the replay in between answered %v, %v; want token %s replayed", other, otherErr, tok)
	}

	// The claim, in two round trips (faultEnv) and in one.
	for _, oneTrip := range []bool{false, true} {
		t.Run(fmt.Sprintf("claim one_trip=%v", oneTrip), func(t *testing.T) {
			cv, cf, ctok := v, f, tok
			if oneTrip {
				cv, cf = oneTripFaultEnv(t, envOpts{})
				cv.receive(43, 1, 100)
				if ctok, err = reserve(ctx, cv.eng, "between", 600, 43, 1, 1); err != nil {
					t.Fatal(err)
				}
			}
			var other [][]any
			var otherErr error
			r := cf.Add(&restest.FaultRule{Match: stmtClaimCommit, After: true, Then: func() {
				_, other, otherErr = cv.eng.Call(ctx, "claim", []any{ctok})
			}})
			_, rows, err := cv.eng.Call(ctx, "claim", []any{ctok})
			checkFired(t, cf, r)
			if err != nil || rows[0][1] != "claimed" {
				t.Fatalf("the claim whose answer was lost answered %v, %v; want claimed", rows, err)
			}
			if otherErr != nil || other[0][1] != "duplicate" {
				t.Fatalf("the claim in between answered %v, %v; want duplicate", other, otherErr)
			}
			if onHand, _, _ := cv.pool(43, 1); onHand != 99 {
				t.Fatalf("on_hand %d; want 99 (one deduction)", onHand)
			}
			if s := cv.eng.Stats(); oneTrip && s.ClaimOneTripFallbacks != 0 {
				t.Errorf("%d one-trip claim fallbacks, want 0: the lost answer was not the one round trip's", s.ClaimOneTripFallbacks)
			}
		})
	}
}

// TestCoalescedReservesSettledKeyByKey: when the connection of a batch of
// coalesced reserves dies after its COMMIT ran, every reserve in it finds
// its own reservation by its key and answers it (replayed 0), once each.
func TestCoalescedReservesSettledKeyByKey(t *testing.T) {
	v, f := faultEnv(t, envOpts{cfg: func(c *reservation.Config) { c.BatchesPerPool = 1 }})
	v.receive(44, 1, 100)
	ctx := context.Background()
	const n = 8
	// The first reserve leads and is held in its locking read until the
	// others have queued behind it; they then run as one batch, whose
	// COMMIT's answer is lost.
	hold := make(chan struct{})
	f.Add(&restest.FaultRule{Match: stmtReserveLock, Hold: hold})
	lost := f.Add(&restest.FaultRule{Match: stmtReserveCommit, After: true, Skip: 1})
	type answer struct {
		rows [][]any
		err  error
	}
	answers := make([]answer, n)
	var wg sync.WaitGroup
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), fmt.Sprintf("co-%d", i), restest.LinesJSON(44, 1, 1), int64(600)})
			answers[i] = answer{rows, err}
		}()
	}
	start(0)
	key := reservation.PoolKey{ShopID: shop, ItemID: 44, GroupID: 1}
	dbtest.Eventually(t, "the leader to take its batch", func() bool { return reservation.Queued(v.eng, key) == 0 && v.eng.Stats().Batches == 1 })
	for i := 1; i < n; i++ {
		start(i)
	}
	dbtest.Eventually(t, "the others to queue", func() bool { return reservation.Queued(v.eng, key) == n-1 })
	close(hold)
	wg.Wait()
	checkFired(t, f, lost)
	for i, a := range answers {
		if a.err != nil {
			t.Fatalf("reserve %d: %v", i, a.err)
		}
		v.checkReservation(a.rows, fmt.Sprintf("co-%d", i), 1, 1)
	}
	if got := v.eng.Stats().Recoveries["reserve"]; got < n-1 {
		t.Errorf("%d recoveries; want one per reserve of the lost batch (%d)", got, n-1)
	}
	if _, _, reserved := v.pool(44, 1); reserved != n {
		t.Errorf("%d units reserved; want %d", reserved, n)
	}
	v.checkInvariant(44, 1)
}

// mysqlError returns the code, SQLSTATE and message err reaches a client
// with.
func mysqlError(err error) (uint16, string, string) {
	var m interface {
		MySQLError() (uint16, string, string)
	}
	if errors.As(err, &m) {
		return m.MySQLError()
	}
	return 0, "", ""
}

// TestOutcomeUnknownPastDeadline: when the connection fails during COMMIT
// and the database stays unreachable until the call's deadline, the call
// answers 9108 (SQLSTATE 08S01), saying the outcome is unknown and that
// repeating the CALL is safe. The database is consistent with "unknown"
// (the change was made, or not, whole), and once the database is back the
// repeated identical CALL answers the truth.
func TestOutcomeUnknownPastDeadline(t *testing.T) {
	v, f := faultEnv(t, envOpts{hold: 600 * time.Millisecond, cfg: func(c *reservation.Config) { c.CallTimeout = 300 * time.Millisecond }})
	v.receive(45, 1, 100)
	ctx := context.Background()
	unknown := func(t *testing.T, err error) {
		t.Helper()
		c, state, msg := mysqlError(err)
		if c != reservation.CodeOutcomeUnknown || state != "08S01" || !errors.Is(err, reservation.ErrOutcomeUnknown) ||
			!strings.Contains(msg, "outcome unknown") || !strings.Contains(msg, "Repeating the same CALL is safe") {
			t.Fatalf("got %v (%d %s %q); want 9108 08S01, outcome unknown, safe to repeat", err, c, state, msg)
		}
	}
	n := 0
	for _, after := range []bool{false, true} {
		done := map[bool]string{false: "not committed", true: "committed"}[after]
		down := func(match string) {
			f.Add(&restest.FaultRule{Match: match, After: after, Then: func() { f.SetDown(true) }})
		}

		t.Run("reserve "+done, func(t *testing.T) {
			key := "unknown-" + done
			args := []any{int64(shop), key, restest.LinesJSON(45, 2, 1), int64(600)}
			down(stmtReserveCommit)
			_, _, err := v.eng.Call(ctx, "reserve", args)
			unknown(t, err)
			f.Clear()
			if got := v.scalar("SELECT COUNT(*) FROM reservations WHERE idempotency_key = ?", key); got != map[bool]int64{false: 0, true: 1}[after] {
				t.Fatalf("%d reservations under the key; the COMMIT was %s", got, done)
			}
			_, rows, err := v.eng.Call(ctx, "reserve", args)
			if err != nil {
				t.Fatal(err)
			}
			tok := rows[0][0].(string)
			if got := v.reservationByToken(tok); got.n != 1 || got.reservationCount != 1 || rows[0][7] != map[bool]int64{false: 0, true: 1}[after] {
				t.Fatalf("the repeated reserve answered %v; the database has %+v", rows[0], got)
			}
		})

		n++
		tok, err := reserve(ctx, v.eng, fmt.Sprintf("unknown-setup-%d", n), 600, 45, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Run("extend "+done, func(t *testing.T) {
			down(stmtExtendCommit)
			_, _, err := v.eng.Call(ctx, "extend", []any{tok, int64(1200)})
			unknown(t, err)
			f.Clear()
			_, rows, err := v.eng.Call(ctx, "extend", []any{tok, int64(1200)})
			if err != nil || !rows[0][1].(time.Time).Equal(v.reservationByToken(tok).expiresAt) {
				t.Fatalf("the repeated extend answered %v, %v", rows, err)
			}
		})
		t.Run("claim "+done, func(t *testing.T) {
			onHand, _, _ := v.pool(45, 1)
			down(stmtClaimCommit)
			_, _, err := v.eng.Call(ctx, "claim", []any{tok})
			unknown(t, err)
			f.Clear()
			if got, _, _ := v.pool(45, 1); got != onHand-map[bool]int64{false: 0, true: 1}[after] {
				t.Fatalf("on_hand %d -> %d; the COMMIT was %s", onHand, got, done)
			}
			_, rows, err := v.eng.Call(ctx, "claim", []any{tok})
			if want := map[bool]string{false: "claimed", true: "duplicate"}[after]; err != nil || rows[0][1] != want {
				t.Fatalf("the repeated claim answered %v, %v; want %s", rows, err, want)
			}
			if got, _, _ := v.pool(45, 1); got != onHand-1 {
				t.Fatalf("on_hand %d -> %d; want one deduction", onHand, got)
			}
		})

		n++
		tok, err = reserve(ctx, v.eng, fmt.Sprintf("unknown-setup-%d", n), 600, 45, 1, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Run("release "+done, func(t *testing.T) {
			down(stmtReleaseCommit)
			_, _, err := v.eng.Call(ctx, "release", []any{tok})
			unknown(t, err)
			f.Clear()
			_, rows, err := v.eng.Call(ctx, "release", []any{tok})
			if want := map[bool]string{false: "released", true: "duplicate"}[after]; err != nil || rows[0][1] != want {
				t.Fatalf("the repeated release answered %v, %v; want %s", rows, err, want)
			}
		})
	}
	if s := v.eng.Stats(); s.Reserves["outcome_unknown"] != 2 || s.Claims["outcome_unknown"] != 2 || s.Ops["release"]["outcome_unknown"] != 2 {
		t.Errorf("outcome_unknown answers counted: reserve %d, claim %d, release %d; want 2 each",
			s.Reserves["outcome_unknown"], s.Claims["outcome_unknown"], s.Ops["release"]["outcome_unknown"])
	}
	v.checkInvariant(45, 1)
}

// TestNothingDoneWhenUnreachable: a call that cannot reach the database
// before it could have committed anything answers 2003 "nothing was done"
// (UnavailableError, with the Borrow error for the proxy to refine), never
// 9108 and never the driver's message, and changes nothing.
func TestNothingDoneWhenUnreachable(t *testing.T) {
	v, f := faultEnv(t, envOpts{hold: 600 * time.Millisecond, cfg: func(c *reservation.Config) { c.CallTimeout = 300 * time.Millisecond }})
	v.receive(46, 1, 100)
	ctx := context.Background()
	tok, err := reserve(ctx, v.eng, "nothing-setup", 600, 46, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	before := restest.Snapshot(t, v.db)
	calls := []struct {
		proc string
		args []any
		mid  string // a statement before COMMIT
	}{
		{"reserve", []any{int64(shop), "nothing", restest.LinesJSON(46, 1, 1), int64(600)}, stmtReserveLock},
		{"claim", []any{tok}, stmtClaimLock},
		{"release", []any{tok}, stmtReleaseLock},
		{"extend", []any{tok, int64(1200)}, stmtClaimLock},
		{"availability", []any{int64(shop), int64(46)}, "FROM (SELECT l.inventory_group_id"},
		{"receive", []any{int64(shop), int64(46), int64(1), int64(5)}, "SELECT 'L', on_hand"},
	}
	for _, c := range calls {
		t.Run(c.proc+" database down", func(t *testing.T) {
			f.SetDown(true)
			_, _, err := v.eng.Call(ctx, c.proc, c.args)
			f.Clear()
			var ue *reservation.UnavailableError
			code, _, msg := mysqlError(err)
			if !errors.As(err, &ue) || !errors.Is(ue.BorrowErr(), restest.ErrRefused) || code != reservation.CodeUnavailable || !strings.Contains(msg, "nothing was done") {
				t.Fatalf("got %v (%d %q); want 2003, nothing was done, carrying the Borrow error", err, code, msg)
			}
		})
		t.Run(c.proc+" lost before COMMIT, then down", func(t *testing.T) {
			r := f.Add(&restest.FaultRule{Match: c.mid, After: true, Then: func() { f.SetDown(true) }})
			_, _, err := v.eng.Call(ctx, c.proc, c.args)
			checkFired(t, f, r)
			f.Clear()
			var ue *reservation.UnavailableError
			if code, _, msg := mysqlError(err); !errors.As(err, &ue) || code != reservation.CodeUnavailable || strings.Contains(msg, "EOF") {
				t.Fatalf("got %v (%d %q); want 2003, nothing was done", err, code, msg)
			}
		})
	}
	after := restest.Snapshot(t, v.db)
	for table, rows := range before {
		if table == reservation.TableUnits || table == reservation.TableCounters {
			continue // the refiller may top the pool up meanwhile
		}
		if fmt.Sprint(rows) != fmt.Sprint(after[table]) {
			t.Errorf("%s changed:\nbefore %v\nafter  %v", table, rows, after[table])
		}
	}
}

// TestStockChangeNotRepeatedAfterUnknownCommit: receive is not idempotent,
// so one whose COMMIT's answer was lost is not run again: it answers 9108
// at once, saying so, and the stock was received once; one lost before its
// COMMIT is run again and received once.
func TestStockChangeNotRepeatedAfterUnknownCommit(t *testing.T) {
	v, f := faultEnv(t, envOpts{})
	v.receive(47, 1, 10)
	ctx := context.Background()

	r := f.Inject("UPDATE inventory_ledger SET on_hand = ", true)
	_, _, err := v.eng.Call(ctx, "receive", []any{int64(shop), int64(47), int64(1), int64(5)})
	checkFired(t, f, r)
	code, state, msg := mysqlError(err)
	if code != reservation.CodeOutcomeUnknown || state != "08S01" || !strings.Contains(msg, "not idempotent") {
		t.Fatalf("receive whose COMMIT's answer was lost: %v; want 9108 saying it is not idempotent", err)
	}
	if onHand, _, _ := v.pool(47, 1); onHand != 15 {
		t.Fatalf("on_hand %d; want 15 (received once)", onHand)
	}

	r = f.Inject("SELECT 'L', on_hand", true)
	_, rows, err := v.eng.Call(ctx, "receive", []any{int64(shop), int64(47), int64(1), int64(5)})
	checkFired(t, f, r)
	if err != nil || rows[0][2] != int64(20) {
		t.Fatalf("receive lost before COMMIT answered %v, %v; want on_hand 20", rows, err)
	}
	if onHand, _, _ := v.pool(47, 1); onHand != 20 {
		t.Fatalf("on_hand %d; want 20", onHand)
	}
	v.checkInvariant(47, 1)
}

// stmtReserveOneTrip is in the statement of a reserve batch sent in one
// round trip (lock, delete, insert, COMMIT), and in no other.
const stmtReserveOneTrip = "@holdfast_batch_units"

// TestOneTripFaultsTellTheTruth: a coalesced reserve sent in one round trip
// has no point between locking its units and its COMMIT, so a connection
// lost on that round trip leaves the outcome unknown whether or not the
// database ran it. The reserve finds out by its key on a fresh connection
// and answers once either way; when the database stays unreachable it
// answers 9108 (it cannot know that nothing was done), and the same CALL
// repeated later answers what was done.
func TestOneTripFaultsTellTheTruth(t *testing.T) {
	v, f := oneTripFaultEnv(t, envOpts{hold: 600 * time.Millisecond, cfg: func(c *reservation.Config) { c.CallTimeout = 300 * time.Millisecond }})
	v.receive(48, 1, 100)
	ctx := context.Background()
	for _, after := range []bool{false, true} {
		name := map[bool]string{false: "lost before it ran", true: "ran, answer lost"}[after]
		t.Run(name, func(t *testing.T) {
			key := fmt.Sprintf("one-trip-%v", after)
			before := v.eng.Stats().Recoveries["reserve"]
			r := f.Inject(stmtReserveOneTrip, after)
			_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), key, restest.LinesJSON(48, 3, 1), int64(600)})
			checkFired(t, f, r)
			f.Clear()
			if err != nil {
				t.Fatalf("reserve: %v", err)
			}
			v.checkReservation(rows, key, 1, 3)
			v.checkRecovered(t, "reserve", before)
		})
	}
	t.Run("ran, answer lost, then down", func(t *testing.T) {
		args := []any{int64(shop), "one-trip-down", restest.LinesJSON(48, 2, 1), int64(600)}
		r := f.Add(&restest.FaultRule{Match: stmtReserveOneTrip, After: true, Then: func() { f.SetDown(true) }})
		_, _, err := v.eng.Call(ctx, "reserve", args)
		checkFired(t, f, r)
		f.Clear()
		if code, _, msg := mysqlError(err); code != reservation.CodeOutcomeUnknown {
			t.Fatalf("got %v (%d %q); want 9108, outcome unknown", err, code, msg)
		}
		_, rows, err := v.eng.Call(ctx, "reserve", args)
		if err != nil || len(rows) != 1 || rows[0][7] != int64(1) {
			t.Fatalf("the repeated CALL answered %v, %v; want the reservation the first one made, replayed", rows, err)
		}
	})
	if _, _, reserved := v.pool(48, 1); reserved != 8 {
		t.Errorf("%d units reserved; want 8 (3 + 3 + 2, each once)", reserved)
	}
	v.checkInvariant(48, 1)
}
