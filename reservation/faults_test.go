package reservation_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// Statements the faults are aimed at, by what they contain. Each test
// checks that its rule fired, so a change to the engine's SQL cannot make
// a test pass by missing its target.
const (
	stmtReserveLock   = "FOR UPDATE SKIP LOCKED"           // reserve: take the units
	stmtReserveCommit = "INSERT INTO reservations"         // reserve: lines, reservation, COMMIT
	stmtHeaderRead    = "WHERE reservation_id = "          // claim/extend: the unlocked read of the reservation
	stmtClaimLock     = "SELECT 'L', shop_id"              // claim/extend: lock ledger, lines, reservation
	stmtClaimCommit   = "SET state = 1"                    // claim: deduct, delete lines, record, COMMIT
	stmtReleaseLock   = "SELECT 'Q', shop_id"              // release: lock lines and reservation
	stmtReleaseCommit = "SET state = 2"                    // release: delete lines, returns, record, COMMIT
	stmtExtendCommit  = "UPDATE reserved_quantities SET"   // extend: new expiry, COMMIT
	stmtKeyLookup     = "FROM reservations WHERE (shop_id" // reserve: is the key used? (before a business failure)
)

// faultEnv is an env whose engine borrows through a faultConns, with every
// coalesced batch in two round trips (disable_one_trip), so that a round
// trip separates a reserve's locking read (stmtReserveLock) from the one
// that carries its COMMIT (stmtReserveCommit).
func faultEnv(t *testing.T, o envOpts) (*env, *restest.FaultConns) {
	t.Helper()
	cfg := o.cfg
	o.cfg = func(c *reservation.Config) {
		c.DisableOneTrip = true
		if cfg != nil {
			cfg(c)
		}
	}
	return oneTripFaultEnv(t, o)
}

// oneTripFaultEnv is faultEnv with one-round-trip batches as configured
// (on by default): a batch with units to spare sends both in one.
func oneTripFaultEnv(t *testing.T, o envOpts) (*env, *restest.FaultConns) {
	t.Helper()
	var f *restest.FaultConns
	o.wrap = func(c reservation.Conns) reservation.Conns {
		f = restest.NewFaultConns(c)
		return f
	}
	return newEnv(t, o), f
}

// reservationRow is the reservations row of a token, as the database has it.
type reservationRow struct {
	n                int64 // rows with this id: 0 or 1
	state            int64
	lines, qty       int64 // reserved_quantities rows and their quantity
	expiresAt        time.Time
	key              string
	reservationCount int64 // reservations with the key
}

func (v *env) reservationByToken(tok string) reservationRow {
	v.t.Helper()
	var r reservationRow
	var exp string
	id := tokenID(v.t, tok)
	err := v.db.QueryRow(`SELECT COUNT(*), COALESCE(MAX(state), -1), COALESCE(MAX(expires_at), '1970-01-01 00:00:00'), COALESCE(MAX(idempotency_key), ''),
 (SELECT COUNT(*) FROM reserved_quantities WHERE reservation_id = ?), (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities WHERE reservation_id = ?)
 FROM reservations WHERE reservation_id = ?`, id, id, id).Scan(&r.n, &r.state, &exp, &r.key, &r.lines, &r.qty)
	if err != nil {
		v.t.Fatal(err)
	}
	if r.expiresAt, err = time.ParseInLocation("2006-01-02 15:04:05.999999", exp, time.UTC); err != nil {
		v.t.Fatal(err)
	}
	r.reservationCount = v.scalar("SELECT COUNT(*) FROM reservations WHERE shop_id = ? AND idempotency_key = ?", shop, r.key)
	return r
}

func tokenID(t *testing.T, tok string) uint64 {
	t.Helper()
	var id uint64
	if _, err := fmt.Sscanf(strings.TrimPrefix(tok, "rsv_"), "%x", &id); err != nil || !strings.HasPrefix(tok, "rsv_") {
		t.Fatalf("bad token %q", tok)
	}
	return id
}

// TestAnswerLostAfterCommit: when the backend connection dies after the
// database committed a call's transaction but before its answer arrived,
// the call still answers what it would have answered without the fault,
// and the change was made exactly once: a reserve answers its reservation
// (not a replay), a claim answers "claimed" (not "duplicate"), a release
// "released", an extend the expiry it set.
func TestAnswerLostAfterCommit(t *testing.T) {
	for _, naive := range []bool{false, true} {
		t.Run(fmt.Sprintf("coalescing=%v", !naive), func(t *testing.T) {
			v, f := faultEnv(t, envOpts{cfg: func(c *reservation.Config) { c.DisableCoalescing = naive }})
			v.receive(31, 1, 50)
			ctx := context.Background()
			lost := func(stmt string) *restest.FaultRule { return f.Inject(stmt, true) }

			r := lost(stmtReserveCommit)
			_, rows, err := v.eng.Call(ctx, "reserve", []any{int64(shop), "lost-1", restest.LinesJSON(31, 4, 1), int64(600)})
			checkFired(t, f, r)
			if err != nil {
				t.Fatalf("reserve whose COMMIT answer was lost: %v", err)
			}
			tok := rows[0][0].(string)
			if rows[0][6] != "active" || rows[0][7] != int64(0) {
				t.Fatalf("reserve answered %v; want the reservation it made (active, replayed 0)", rows[0])
			}
			if got := v.reservationByToken(tok); got.n != 1 || got.reservationCount != 1 || got.qty != 4 {
				t.Fatalf("after the reserve the database has %+v; want one reservation of 4 under the key", got)
			}

			r = lost(stmtExtendCommit)
			_, rows, err = v.eng.Call(ctx, "extend", []any{tok, int64(900)})
			checkFired(t, f, r)
			if err != nil {
				t.Fatalf("extend whose COMMIT answer was lost: %v", err)
			}
			if got := v.reservationByToken(tok); !got.expiresAt.Equal(rows[0][1].(time.Time)) {
				t.Fatalf("extend answered expires_at %v; the database has %v", rows[0][1], got.expiresAt)
			}

			onHand, _, _ := v.pool(31, 1)
			r = lost(stmtClaimCommit)
			_, rows, err = v.eng.Call(ctx, "claim", []any{tok})
			checkFired(t, f, r)
			if err != nil {
				t.Fatalf("claim whose COMMIT answer was lost: %v", err)
			}
			if rows[0][1] != "claimed" {
				t.Fatalf("claim answered %q; want claimed (this call did the claim)", rows[0][1])
			}
			if after, _, reserved := v.pool(31, 1); after != onHand-4 || reserved != 0 {
				t.Fatalf("on_hand %d -> %d, reserved %d; want one deduction of 4", onHand, after, reserved)
			}
			_, rows, err = v.eng.Call(ctx, "claim", []any{tok})
			if err != nil || rows[0][1] != "duplicate" {
				t.Fatalf("a second claim answered %v, %v; want duplicate", rows, err)
			}

			tok2, err := reserve(ctx, v.eng, "lost-2", 600, 31, 3, 1)
			if err != nil {
				t.Fatal(err)
			}
			r = lost(stmtReleaseCommit)
			_, rows, err = v.eng.Call(ctx, "release", []any{tok2})
			checkFired(t, f, r)
			if err != nil {
				t.Fatalf("release whose COMMIT answer was lost: %v", err)
			}
			if rows[0][1] != "released" || rows[0][2] != int64(3) {
				t.Fatalf("release answered %v; want released 3", rows[0])
			}
			if got := v.reservationByToken(tok2); got.state != 2 || got.lines != 0 {
				t.Fatalf("after the release the database has %+v", got)
			}
			v.checkInvariant(31, 1)
		})
	}
}

// TestLostLookupBeforeInsufficientStock: a reserve that found every
// location of a line short checks that its key was not used meanwhile
// before it answers insufficient stock; when that lookup loses its
// connection, the reserve looks again and still answers insufficient stock
// (it used to run the whole reserve again from past the line's last
// location, and panic).
func TestLostLookupBeforeInsufficientStock(t *testing.T) {
	for _, naive := range []bool{false, true} {
		t.Run(fmt.Sprintf("coalescing=%v", !naive), func(t *testing.T) {
			v, f := faultEnv(t, envOpts{cfg: func(c *reservation.Config) { c.DisableCoalescing = naive }})
			v.receive(32, 1, 2)
			v.receive(32, 2, 1)
			r := f.Inject(stmtKeyLookup, false)
			_, err := reserve(context.Background(), v.eng, "short-1", 600, 32, 5, 1, 2)
			if n := f.Fired(r); n != 1 {
				t.Fatalf("fault fired %d times, want 1 (did the statement change?)", n)
			}
			var re *reservation.Error
			if !errors.As(err, &re) || re.Code != reservation.CodeInsufficientStock {
				t.Fatalf("reserve answered %v; want insufficient stock (%d)", err, reservation.CodeInsufficientStock)
			}
			if !strings.Contains(err.Error(), "2 at location 1, 1 at location 2") {
				t.Fatalf("answer %q does not say what each location had", err)
			}
			v.checkInvariant(32, 1)
			v.checkInvariant(32, 2)
		})
	}
}
