package reservation_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestMigrateIdempotent: the schema migrates once, a second run applies
// nothing, versions are recorded, and the tables have the designed keys.
func TestMigrateIdempotent(t *testing.T) {
	db, _ := restest.NewDB(t, 4) // NewDB ran Migrate once
	applied, err := reservation.Migrate(context.Background(), reservation.SQLConns(db))
	if err != nil || len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, err %v; want nothing", applied, err)
	}
	var v int
	if err := db.QueryRow("SELECT MAX(version) FROM holdfast_schema_migrations").Scan(&v); err != nil || v != reservation.SchemaVersion() {
		t.Fatalf("recorded version %d (%v), want %d", v, err, reservation.SchemaVersion())
	}
	keys := func(table string) string {
		rows, err := db.Query(`SELECT index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index), MIN(non_unique)
FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? GROUP BY index_name ORDER BY index_name`, table)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var name, cols string
			var nonUnique int
			rows.Scan(&name, &cols, &nonUnique)
			kind := "unique"
			if nonUnique == 1 {
				kind = "index"
			}
			out = append(out, name+"("+cols+") "+kind)
		}
		return strings.Join(out, "; ")
	}
	for table, want := range map[string]string{
		"inventory_ledger":    "PRIMARY(shop_id,inventory_item_id,inventory_group_id) unique",
		"reservation_units":   "PRIMARY(shop_id,inventory_item_id,inventory_group_id,id) unique",
		"reserved_quantities": "PRIMARY(reservation_id,line_no) unique; rq_expires(expires_at) index; rq_pool(shop_id,inventory_item_id,inventory_group_id,expires_at) index",
		"reservations":        "PRIMARY(reservation_id) unique; reservations_expires(expires_at) index; reservations_idempotency(shop_id,idempotency_key) unique",
	} {
		if got := keys(table); got != want {
			t.Errorf("%s keys:\n got %s\nwant %s", table, got, want)
		}
	}
}

// TestReserveClaimRoundTrip walks one reservation through every procedure
// and checks the result shapes.
func TestReserveClaimRoundTrip(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(1001, 1, 10)
	v.receive(1001, 2, 5)
	v.receive(1002, 1, 3)

	cols, rows, err := v.call("reserve", int64(shop), "order-1",
		`[{"item":1001,"qty":7,"locations":[1,2]},{"item":1002,"qty":2,"locations":[1]}]`, int64(600))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cols, reservation.ReserveColumns) || len(rows) != 2 {
		t.Fatalf("reserve returned %v %v", cols, rows)
	}
	tok := rows[0][0].(string)
	exp := rows[0][1].(time.Time)
	if d := time.Until(exp); d < 590*time.Second || d > 610*time.Second {
		t.Errorf("expires_at %v is not ~600s away", exp)
	}
	if got := rows[0][2:]; !reflect.DeepEqual(got, []any{int64(1), int64(1001), int64(1), int64(7), "active", int64(0)}) {
		t.Errorf("line 1 = %v", got)
	}
	if got := rows[1][2:6]; !reflect.DeepEqual(got, []any{int64(2), int64(1002), int64(1), int64(2)}) {
		t.Errorf("line 2 = %v", got)
	}
	v.checkInvariant(1001, 1)

	// A second order for 4 of item 1001 no longer fits location 1 (3 left):
	// it goes to location 2.
	_, rows, err = v.call("reserve", int64(shop), "order-2", restest.LinesJSON(1001, 4, 1, 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if g := rows[0][4]; g != int64(2) {
		t.Errorf("order-2 went to location %v, want 2", g)
	}
	tok2 := rows[0][0].(string)

	_, av, _ := v.call("availability", int64(shop), int64(1001))
	want := [][]any{{int64(1), int64(10), int64(7), av[0][3], int64(3)}, {int64(2), int64(5), int64(4), av[1][3], int64(1)}}
	if !reflect.DeepEqual(av, want) {
		t.Errorf("availability = %v, want %v", av, want)
	}

	cols, ext, err := v.call("extend", tok, int64(1200))
	if err != nil || !reflect.DeepEqual(cols, reservation.ExtendColumns) {
		t.Fatalf("extend: %v %v", cols, err)
	}
	if d := time.Until(ext[0][1].(time.Time)); d < 1190*time.Second {
		t.Errorf("extended expiry %v too early", ext[0][1])
	}

	cols, cl, err := v.call("claim", tok)
	if err != nil || !reflect.DeepEqual(cols, reservation.ClaimColumns) {
		t.Fatalf("claim: %v %v", cols, err)
	}
	if cl[0][1] != "claimed" || len(cl) != 2 {
		t.Errorf("claim rows %v", cl)
	}
	if onHand, _, _ := v.pool(1001, 1); onHand != 3 {
		t.Errorf("on_hand after claim = %d, want 3", onHand)
	}
	cols, rel, err := v.call("release", tok2)
	if err != nil || !reflect.DeepEqual(cols, reservation.ReleaseColumns) {
		t.Fatalf("release: %v %v", cols, err)
	}
	if !reflect.DeepEqual(rel, [][]any{{tok2, "released", int64(4)}}) {
		t.Errorf("release rows %v", rel)
	}
	if _, rel, _ = v.call("release", tok2); rel[0][1] != "duplicate" {
		t.Errorf("second release %v", rel)
	}
	if _, rel, _ = v.call("release", tok); rel[0][1] != "claimed" {
		t.Errorf("release of claimed %v", rel)
	}
	if _, _, err := v.call("extend", tok2, int64(60)); restest.Code(err) != reservation.CodeExpired {
		t.Errorf("extend of released: %v", err)
	}
	for _, it := range [][2]int64{{1001, 1}, {1001, 2}, {1002, 1}} {
		v.checkInvariant(it[0], it[1])
	}
}

// TestCallErrors: unknown procedures and wrong argument counts get MySQL's
// own codes.
func TestCallErrors(t *testing.T) {
	v := newEnv(t, envOpts{})
	_, _, err := v.call("nope")
	var me interface {
		MySQLError() (uint16, string, string)
	}
	if !errors.As(err, &me) {
		t.Fatalf("unknown procedure: %v", err)
	}
	if c, s, m := me.MySQLError(); c != 1305 || s != "42000" || m != "PROCEDURE holdfast.nope does not exist" {
		t.Errorf("got %d %s %q", c, s, m)
	}
	_, _, err = v.call("claim")
	errors.As(err, &me)
	if c, s, m := me.MySQLError(); c != 1318 || s != "42000" || m != "Incorrect number of arguments for PROCEDURE holdfast.claim; expected 1, got 0" {
		t.Errorf("got %d %s %q", c, s, m)
	}
}

// TestLifecycle: New starts nothing, Start runs the loops, Close is
// idempotent and later calls fail.
func TestLifecycle(t *testing.T) {
	v := newEnv(t, envOpts{})
	if err := v.eng.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := v.eng.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	if err := v.eng.Close(); err != nil {
		t.Fatal(err)
	}
	if err := v.eng.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := v.call("availability", int64(1), int64(1)); !errors.Is(err, reservation.ErrClosed) {
		t.Errorf("call after Close: %v", err)
	}
}

// TestOneTripBatch: reserves of an item/location with units to spare commit
// in one round trip and write what a two-round-trip batch writes; one that
// finds the pool short rolls back, runs again in two and is answered 9101. Neither leaves the batch's user variables on the
// connection (the env's pool has one, which the checks then read from).
func TestOneTripBatch(t *testing.T) {
	v := newEnv(t, envOpts{maxConns: 1})
	v.receive(2001, 1, 10)
	noVars := func(when string) {
		t.Helper()
		var units, last, now sql.NullString
		if err := v.db.QueryRow("SELECT @holdfast_batch_units, @holdfast_batch_max, @holdfast_batch_now").Scan(&units, &last, &now); err != nil {
			t.Fatal(err)
		}
		if units.Valid || last.Valid || now.Valid {
			t.Errorf("%s: the connection kept the batch's variables: %v %v %v", when, units, last, now)
		}
	}
	for i := range 3 {
		_, rows, err := v.call("reserve", int64(shop), fmt.Sprintf("one-trip-%d", i), restest.LinesJSON(2001, 3, 1), int64(600))
		if err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		id, ok := reservation.ParseToken(rows[0][0].(string))
		if !ok {
			t.Fatalf("reserve %d: token %v", i, rows[0][0])
		}
		var exp string
		var ttl int64
		if err := v.db.QueryRow("SELECT DATE_FORMAT(r.expires_at, '%Y-%m-%d %H:%i:%s.%f'), TIMESTAMPDIFF(MICROSECOND, r.created_at, r.expires_at) FROM reservations r JOIN reserved_quantities q USING (reservation_id) WHERE q.expires_at = r.expires_at AND r.reservation_id = ?",
			id).Scan(&exp, &ttl); err != nil {
			t.Fatalf("reserve %d: its rows: %v", i, err)
		}
		if got := rows[0][1].(time.Time).UTC().Format("2006-01-02 15:04:05.000000"); got != exp || ttl != 600e6 {
			t.Errorf("reserve %d answered expires_at %v; stored %v, %d µs after created_at", i, got, exp, ttl)
		}
		noVars(fmt.Sprintf("after reserve %d", i))
	}
	s := v.eng.Stats()
	if s.Batches != 3 || s.OneTrip != 3 || s.OneTripFallbacks != 0 {
		t.Errorf("3 reserves with stock to spare: %d transactions, %d in one round trip, %d fell back; want 3, 3, 0", s.Batches, s.OneTrip, s.OneTripFallbacks)
	}
	if onHand, pooled, reserved := v.pool(2001, 1); onHand != 10 || pooled != 1 || reserved != 9 {
		t.Errorf("after 3 reserves of 3: on_hand %d, pooled %d, reserved %d; want 10, 1, 9", onHand, pooled, reserved)
	}

	// One unit left, two wanted: the one-trip batch rolls back, the
	// two-trip one finds the pool short, and the reserve gets 9101.
	if _, _, err := v.call("reserve", int64(shop), "one-trip-short", restest.LinesJSON(2001, 2, 1), int64(600)); restest.Code(err) != reservation.CodeInsufficientStock {
		t.Errorf("reserve of 2 with 1 left: %v, want %d", err, reservation.CodeInsufficientStock)
	}
	if s := v.eng.Stats(); s.OneTripFallbacks != 1 {
		t.Errorf("a reserve the pool could not fill: %d one-trip fallbacks, want 1", s.OneTripFallbacks)
	}
	noVars("after the fallback")
	if onHand, pooled, reserved := v.pool(2001, 1); onHand != 10 || pooled != 1 || reserved != 9 {
		t.Errorf("after the short reserve: on_hand %d, pooled %d, reserved %d; want 10, 1, 9", onHand, pooled, reserved)
	}
	v.checkInvariant(2001, 1)
}

// rewriteConns changes every statement its connections send (old → new):
// a database that refuses what the engine sends.
type rewriteConns struct {
	reservation.Conns
	old, new string
}

func (r rewriteConns) Borrow(ctx context.Context, tag string) (reservation.Conn, error) {
	c, err := r.Conns.Borrow(ctx, tag)
	if err != nil {
		return nil, err
	}
	return rewriteConn{c, r.old, r.new}, nil
}

type rewriteConn struct {
	reservation.Conn
	old, new string
}

func (c rewriteConn) Exec(ctx context.Context, q string, args ...any) (reservation.Result, error) {
	return c.Conn.Exec(ctx, strings.ReplaceAll(q, c.old, c.new), args...)
}

func (c rewriteConn) Query(ctx context.Context, q string, args ...any) ([][][]byte, error) {
	return c.Conn.Query(ctx, strings.ReplaceAll(q, c.old, c.new), args...)
}

// TestOneTripRefusedFallsBack: a database that does not take the
// one-round-trip statement (here: it has no JSON_TABLE, error 1064) costs
// one attempt and a warning; every reserve still succeeds, in two round
// trips from then on.
func TestOneTripRefusedFallsBack(t *testing.T) {
	v := newEnv(t, envOpts{wrap: func(c reservation.Conns) reservation.Conns {
		return rewriteConns{c, "JSON_TABLE(", "JSON_TABLEX("}
	}})
	v.receive(2002, 1, 10)
	for i := range 3 {
		if _, _, err := v.call("reserve", int64(shop), fmt.Sprintf("refused-%d", i), restest.LinesJSON(2002, 2, 1), int64(600)); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
	}
	if s := v.eng.Stats(); s.OneTrip != 0 || s.OneTripFallbacks != 1 {
		t.Errorf("%d one-trip commits, %d fallbacks; want 0 and 1 (one attempt, then two round trips)", s.OneTrip, s.OneTripFallbacks)
	}
	if n := strings.Count(v.logs.String(), "refused the one-round-trip reserve batch"); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, v.logs.String())
	}
	if _, _, reserved := v.pool(2002, 1); reserved != 6 {
		t.Errorf("%d units reserved, want 6", reserved)
	}
	v.checkInvariant(2002, 1)
}

// tripConns counts the round trips of the connections borrowed with one
// tag.
type tripConns struct {
	reservation.Conns
	tag string

	mu    sync.Mutex // guards following
	trips []string
	ended []string // statements whose answer came back (or failed)
}

func (r *tripConns) Borrow(ctx context.Context, tag string) (reservation.Conn, error) {
	c, err := r.Conns.Borrow(ctx, tag)
	if err != nil || tag != r.tag {
		return c, err
	}
	return tripConn{c, r}, nil
}

func (r *tripConns) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.trips
	r.trips = nil
	return t
}

func (r *tripConns) note(q string) {
	r.mu.Lock()
	r.trips = append(r.trips, q)
	r.mu.Unlock()
}

func (r *tripConns) end(q string) {
	r.mu.Lock()
	r.ended = append(r.ended, q)
	r.mu.Unlock()
}

// hasEnded reports whether a statement containing sub has had its answer.
func (r *tripConns) hasEnded(sub string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.ContainsFunc(r.ended, func(q string) bool { return strings.Contains(q, sub) })
}

type tripConn struct {
	reservation.Conn
	r *tripConns
}

func (c tripConn) Exec(ctx context.Context, q string, args ...any) (reservation.Result, error) {
	c.r.note(q)
	defer c.r.end(q)
	return c.Conn.Exec(ctx, q, args...)
}

func (c tripConn) Query(ctx context.Context, q string, args ...any) ([][][]byte, error) {
	c.r.note(q)
	defer c.r.end(q)
	return c.Conn.Query(ctx, q, args...)
}

// setsUpSession reports whether q is a locking read with a session's SET
// in front of it.
func setsUpSession(q string) bool {
	return strings.HasPrefix(q, "SET SESSION ") && strings.Contains(q, "autocommit = 0; ") && strings.Contains(q, stmtReserveLock)
}

// tripEnv is an env (with maxConns backend connections; 0: the default)
// whose engine borrows through a FaultConns, and whose connections borrowed
// under tag have their round trips recorded.
func tripEnv(t *testing.T, tag string, maxConns int) (*env, *restest.FaultConns, *tripConns) {
	t.Helper()
	var f *restest.FaultConns
	trips := &tripConns{tag: tag}
	v := newEnv(t, envOpts{maxConns: maxConns, wrap: func(c reservation.Conns) reservation.Conns {
		f = restest.NewFaultConns(c)
		trips.Conns = f
		return trips
	}})
	return v, f, trips
}

// holdFirstReserve starts a reserve of one unit of item at location 1
// whose batch is held before its locking read is sent, and returns once
// it is held: with it the pool has a batch running. release lets it go on;
// done then carries its answer.
func (v *env) holdFirstReserve(f *restest.FaultConns, item int64) (release func(), done <-chan error) {
	v.t.Helper()
	hold := make(chan struct{})
	held := f.Add(&restest.FaultRule{Match: stmtReserveLock, Hold: hold})
	first := make(chan error, 1)
	go func() {
		_, _, err := v.call("reserve", int64(shop), "held", restest.LinesJSON(item, 1, 1), int64(600))
		first <- err
	}()
	dbtest.Eventually(v.t, "the first batch's statement to be held", func() bool { return f.Fired(held) == 1 })
	return func() { close(hold) }, first
}

// TestLoneReserveOneRoundTrip: a reserve nobody queues behind commits in
// one round trip; it opens no session (a round trip to set the connection
// up, another to put it back) that no later batch would use. A batch that
// starts while another of its pool runs does open one, set up in the round
// trip of its first statement, and put back after its answer.
func TestLoneReserveOneRoundTrip(t *testing.T) {
	v, f, trips := tripEnv(t, reservation.TagReserve, 0)
	v.receive(2003, 1, 10)
	for i := range 3 {
		trips.take()
		if _, _, err := v.call("reserve", int64(shop), fmt.Sprintf("lone-%d", i), restest.LinesJSON(2003, 1, 1), int64(600)); err != nil {
			t.Fatalf("reserve %d: %v", i, err)
		}
		if got := trips.take(); len(got) != 1 {
			t.Errorf("reserve %d took %d round trips, want 1:\n%s", i, len(got), strings.Join(got, "\n"))
		}
	}
	if s := v.eng.Stats(); s.OneTrip != 3 {
		t.Errorf("%d one-trip commits, want 3", s.OneTrip)
	}

	// The first reserve's batch is held before its statement is sent; the
	// second, arriving meanwhile, leads a batch of its own on a session.
	release, first := v.holdFirstReserve(f, 2003)
	trips.take()
	// Its session is put back after its answer, not before: the answer
	// does not wait for that round trip (held here).
	holdClose := make(chan struct{})
	f.Add(&restest.FaultRule{Match: "autocommit = 1", Hold: holdClose})
	if _, _, err := v.call("reserve", int64(shop), "beside", restest.LinesJSON(2003, 1, 1), int64(600)); err != nil {
		t.Fatalf("reserve beside a running batch: %v", err)
	}
	if trips.hasEnded("autocommit = 1") {
		t.Error("the reserve beside a running batch was answered only after its session was put back")
	}
	close(holdClose)
	if got := trips.take(); !slices.ContainsFunc(got, setsUpSession) {
		t.Errorf("a batch beside a running one sent, want a session set up in front of its first statement:\n%s", strings.Join(got, "\n"))
	}
	dbtest.Eventually(t, "the session to be put back", func() bool { return trips.hasEnded("autocommit = 1") })
	release()
	if err := <-first; err != nil {
		t.Fatalf("held reserve: %v", err)
	}
	v.checkInvariant(2003, 1)
}

// TestSessionPutBack: a session whose first batch rolls back (the pool is
// short, so the one-round-trip attempt fails its guard after the session
// SET ran) sends the SET again with the retry, and the connection goes
// back to the pool at the server's defaults.
func TestSessionPutBack(t *testing.T) {
	v, f, trips := tripEnv(t, reservation.TagReserve, 2)
	v.receive(2004, 1, 1)
	globalIso := isolation(t, v.db.QueryRow, "GLOBAL")
	// The first reserve (one unit) is held before its statement is sent;
	// the second (two units, one on hand) leads a batch on a session.
	release, first := v.holdFirstReserve(f, 2004)
	trips.take()
	if _, _, err := v.call("reserve", int64(shop), "two", restest.LinesJSON(2004, 2, 1), int64(600)); restest.Code(err) != reservation.CodeInsufficientStock {
		t.Fatalf("reserve of 2 with 1 on hand: %v, want %d", err, reservation.CodeInsufficientStock)
	}
	if s := v.eng.Stats(); s.OneTripFallbacks != 1 {
		t.Errorf("%d one-trip fallbacks, want 1 (the session's first batch)", s.OneTripFallbacks)
	}
	sets := 0
	for _, q := range trips.take() {
		if setsUpSession(q) {
			sets++
		}
	}
	if sets != 2 {
		t.Errorf("the session's SET went in front of %d locking reads, want 2 (the one-trip attempt, then its retry)", sets)
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("held reserve: %v", err)
	}
	// Both connections of the pool: at the defaults (a connection the
	// session is still putting back is handed out once it is back).
	v.eachPoolConn(2, func(row func(q string, args ...any) *sql.Row) {
		var ac int64
		if err := row("SELECT @@SESSION.autocommit").Scan(&ac); err != nil {
			t.Fatal(err)
		}
		if iso := isolation(t, row, "SESSION"); ac != 1 || iso != globalIso {
			t.Errorf("a connection back in the pool has autocommit %d, isolation %s; want 1, %s", ac, iso, globalIso)
		}
	})
	v.checkInvariant(2004, 1)
}

// TestBrokenSessionNotReused: when a session's ROLLBACK is lost (the
// one-round-trip attempt of its first batch found the pool short), the
// session's connection is in an unknown state. The batch's retry in two
// round trips runs on a connection of its own, so the reserve gets its
// true answer (insufficient stock) without losing a connection on the way.
func TestBrokenSessionNotReused(t *testing.T) {
	v, f, trips := tripEnv(t, reservation.TagReserve, 3)
	v.receive(2005, 1, 1)
	release, first := v.holdFirstReserve(f, 2005)
	trips.take()
	lost := f.Inject("ROLLBACK; SET @holdfast_batch_units", false)
	if _, _, err := v.call("reserve", int64(shop), "two", restest.LinesJSON(2005, 2, 1), int64(600)); restest.Code(err) != reservation.CodeInsufficientStock {
		t.Errorf("reserve of 2 with 1 on hand: %v, want %d", err, reservation.CodeInsufficientStock)
	}
	if f.Fired(lost) != 1 {
		t.Fatal("the one-trip attempt's ROLLBACK was not sent")
	}
	if !slices.ContainsFunc(trips.take(), setsUpSession) {
		t.Fatal("the batch did not run on a session")
	}
	s := v.eng.Stats()
	if s.OneTripFallbacks != 1 {
		t.Errorf("%d one-trip fallbacks, want 1", s.OneTripFallbacks)
	}
	if n := s.Recoveries["reserve"]; n != 0 {
		t.Errorf("%d reserve recoveries after the lost ROLLBACK, want 0: the retry ran on the broken session", n)
	}
	release()
	if err := <-first; err != nil {
		t.Fatalf("held reserve: %v", err)
	}
	v.checkInvariant(2005, 1)
}
