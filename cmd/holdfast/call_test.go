package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// startWithSchema starts holdfast after `holdfast migrate` on its database.
func startWithSchema(t *testing.T) *process {
	t.Helper()
	p := start(t, appUser)
	out, err := guarded(t, binary(t), "migrate", "-config", p.config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "applied reservation schema migrations") {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	return p
}

func (p *process) cli(t *testing.T, sql string) (string, error) {
	host, port, _ := strings.Cut(p.addr, ":")
	cmd := guarded(t, "mariadb", "--no-defaults", "--protocol=tcp", "-h", host, "-P", port, "-uapp", "-papp", "--batch", p.db)
	cmd.Stdin = strings.NewReader(sql)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// snapshot is the business state, for "changed nothing": stock, active
// reservations and their records. The unit pool is left out: the refiller
// tops it up in the background at any time (and the insufficient-stock
// path may refill inline), which changes no business fact.
func snapshot(t *testing.T, db *sql.DB) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		"SELECT shop_id, inventory_item_id, inventory_group_id, on_hand FROM inventory_ledger ORDER BY 1, 2, 3",
		"SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM reserved_quantities",
		"SELECT COUNT(*) FROM reservations",
	} {
		rows, err := db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := dbtest.ScanStrings(rows)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				b.WriteString(v)
				b.WriteByte(' ')
			}
			b.WriteByte('\n')
		}
		rows.Close()
	}
	return b.String()
}

func TestCallFromCLI(t *testing.T) {
	p := startWithSchema(t)
	out, err := p.cli(t, `CALL holdfast.receive(7, 1001, 1, 10);
CALL holdfast.reserve(7, 'cli-1', '[{"item":1001,"qty":3,"locations":[1]}]', 1800);
CALL holdfast.availability(7, 1001);
`)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{
		"inventory_item_id\tinventory_group_id\ton_hand\treserved\tpooled\n1001\t1\t10\t0\t",
		"token\texpires_at\tline_no\tinventory_item_id\tinventory_group_id\tquantity\tstate\treplayed\nrsv_",
		"\t1\t1001\t1\t3\tactive\t0\n",
		"inventory_group_id\ton_hand\treserved\tpooled\tavailable\n1\t10\t3\t",
	} {
		if !strings.Contains(out, want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	token := out[strings.Index(out, "rsv_"):]
	token = token[:strings.IndexByte(token, '\t')]
	out, err = p.cli(t, fmt.Sprintf("CALL holdfast.extend('%s', 3600);\nCALL holdfast.claim('%s');\nCALL holdfast.claim('%s');\n", token, token, token))
	if err != nil || !strings.Contains(out, "\tclaimed\t") || !strings.Contains(out, "\tduplicate\t") {
		t.Fatalf("extend/claim: %v\n%s", err, out)
	}
	out, err = p.cli(t, "CALL holdfast.reserve(7, 'cli-2', 'not json', 600);\n")
	if err == nil || !strings.Contains(out, "ERROR 9105 (22023)") {
		t.Fatalf("bad JSON from the CLI: %v\n%s", err, out)
	}
	out, err = p.cli(t, "CALL holdfast.release('rsv_0123456789abcdef');\n")
	if err == nil || !strings.Contains(out, "ERROR 9103 (45000)") {
		t.Fatalf("unknown token: %v\n%s", err, out)
	}
}

// TestCallFromDriver runs every procedure through go-sql-driver/mysql, as
// prepared statements and with interpolateParams, and checks each bad
// argument gets its error and changes nothing.
func TestCallFromDriver(t *testing.T) {
	p := startWithSchema(t)
	direct := dbtest.Open(t, dbtest.TablesDB(p.db))
	for _, mode := range []string{"prepared", "interpolated"} {
		t.Run(mode, func(t *testing.T) {
			dsn := fmt.Sprintf("app:app@tcp(%s)/%s?parseTime=true", p.addr, p.db)
			if mode == "interpolated" {
				dsn += "&interpolateParams=true"
			}
			db, err := sql.Open("mysql", dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			shop := 100
			if mode == "interpolated" {
				shop = 200
			}
			one := func(q string, args ...any) []string {
				t.Helper()
				rows, err := db.Query(q, args...)
				if err != nil {
					t.Fatalf("%s %v: %v", q, args, err)
				}
				defer rows.Close()
				var first []string
				for rows.Next() {
					vals, err := dbtest.ScanStrings(rows)
					if err != nil {
						t.Fatal(err)
					}
					if first == nil {
						first = vals
					}
				}
				if err := rows.Err(); err != nil {
					t.Fatal(err)
				}
				return first
			}
			one("CALL holdfast.receive(?, ?, ?, ?)", shop, 5, 1, 20)
			one("CALL holdfast.receive(?, ?, ?, ?)", shop, 5, 2, 20)
			if r := one("CALL holdfast.set_on_hand(?, ?, ?, ?)", shop, 5, 2, 15); r[2] != "15" {
				t.Fatalf("set_on_hand: %v", r)
			}
			if r := one("CALL holdfast.adjust(?, ?, ?, ?)", shop, 5, 2, -5); r[2] != "10" {
				t.Fatalf("adjust: %v", r)
			}
			res := one("CALL holdfast.reserve(?, ?, ?, ?)", shop, "key-"+mode, `[{"item":5,"qty":4,"locations":[2,1]}]`, 1800)
			token := res[0]
			// Location 2 is preferred and has stock (10 after adjust).
			if !strings.HasPrefix(token, "rsv_") || res[4] != "2" || res[5] != "4" {
				t.Fatalf("reserve: %v", res)
			}
			if r := one("CALL holdfast.reserve(?, ?, ?, ?)", shop, "key-"+mode, `[{"item":5,"qty":4,"locations":[2,1]}]`, 1800); r[0] != token || r[7] != "1" {
				t.Fatalf("replay: %v, want token %s replayed", r, token)
			}
			one("CALL holdfast.extend(?, ?)", token, 2400)
			if r := one("CALL holdfast.availability(?, ?)", shop, 5); r[0] != "1" || r[2] != "0" {
				t.Fatalf("availability of location 1: %v", r)
			}
			if r := one("CALL holdfast.claim(?)", token); r[1] != "claimed" {
				t.Fatalf("claim: %v", r)
			}
			t2 := one("CALL holdfast.reserve(?, ?, ?, NULL)", shop, "key2-"+mode, `[{"item":5,"qty":1,"locations":[1]}]`)[0]
			if r := one("CALL holdfast.release(?)", t2); r[1] != "released" {
				t.Fatalf("release: %v", r)
			}

			before := snapshot(t, direct)
			for _, bad := range []struct {
				args []any
				code uint16
				why  string // the message names the cause
			}{
				{[]any{shop, "k-neg", `[{"item":5,"qty":-1,"locations":[1]}]`, 1800}, 9105, "qty"},
				{[]any{shop, "k-json", `[{"item":5,`, 1800}, 9105, "lines_json"},
				{[]any{shop, "k-type", `[{"item":"five","qty":1,"locations":[1]}]`, 1800}, 9105, "item"},
				{[]any{shop, "k-ttl", `[{"item":5,"qty":1,"locations":[1]}]`, "abc"}, 9105, "ttl_seconds"},
				{[]any{shop, "k-ttl2", `[{"item":5,"qty":1,"locations":[1]}]`, 1}, 9105, "ttl_seconds"},
				{[]any{shop, "k-loc", `[{"item":5,"qty":1,"locations":[99]}]`, 1800}, 9105, "location 99"},
				{[]any{shop, "k-many", manyLines(10000), 1800}, 9105, "lines"},
				{[]any{shop, "k-stock", `[{"item":5,"qty":500,"locations":[1]}]`, 1800}, 9101, "line 1"},
				{[]any{shop, "key-" + mode, `[{"item":5,"qty":2,"locations":[1]}]`, 1800}, 9102, "key-" + mode},
			} {
				_, err := db.Exec("CALL holdfast.reserve(?, ?, ?, ?)", bad.args...)
				var me *mysql.MySQLError
				if !errors.As(err, &me) || me.Number != bad.code || !strings.Contains(me.Message, bad.why) {
					t.Fatalf("reserve%v: %v, want error %d about %q", bad.args[1:2], err, bad.code, bad.why)
				}
			}
			if _, err := db.Exec("CALL holdfast.reserve(?, ?, ?)", shop, "k", "[]"); mysqlNumber(err) != 1318 {
				t.Fatalf("wrong argument count: %v", err)
			}
			if after := snapshot(t, direct); after != before {
				t.Fatalf("failed calls changed the tables:\nbefore\n%s\nafter\n%s", before, after)
			}
		})
	}
}

func mysqlNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func manyLines(n int) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"item":%d,"qty":1,"locations":[1]}`, i+1)
	}
	b.WriteByte(']')
	return b.String()
}

// TestCallRefusedWhileSessionKeepsConnection: a session that keeps a
// backend connection, pinned by session state or held by SET TRANSACTION
// for its next transaction, gets 9004 for a CALL holdfast.* (the engine
// would borrow a second connection while the session holds the first);
// inside a transaction 9003. Once the session holds none, the call runs.
func TestCallRefusedWhileSessionKeepsConnection(t *testing.T) {
	p := startWithSchema(t)
	ctx := context.Background()
	for _, c := range []struct {
		setup []string
		code  uint16
		why   string
	}{
		{[]string{"SET @cart = 'x'"}, 9004, "pinned by user_variable"},
		{[]string{"CREATE TEMPORARY TABLE t_pin (a INT)"}, 9004, "pinned by temporary_table"},
		{[]string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED"}, 9004, "SET TRANSACTION"},
		{[]string{"BEGIN", "SELECT 1"}, 9003, "cannot join yours"},
	} {
		db := p.open(t, "app", "app") // a client connection of its own, closed below
		conn, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range c.setup {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		_, err = conn.ExecContext(ctx, "CALL holdfast.availability(1, 1)")
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != c.code || string(me.SQLState[:]) != "HY000" || !strings.Contains(me.Message, c.why) {
			t.Errorf("after %v: %v; want %d about %q", c.setup, err, c.code, c.why)
		}
		conn.Close()
		db.Close() // the session ends and gives its backend connection back
	}
	conn, err := p.open(t, "app", "app").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "BEGIN", "SELECT 1", "COMMIT", "CALL holdfast.availability(1, 1)"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s after the transaction SET TRANSACTION prepared ended: %v", q, err)
		}
	}
}

// cutRelay relays TCP to a database until it sees the armed trigger in
// what the client side sends: it forwards those bytes, then cuts (every
// relayed connection closed, new ones refused), so the database is
// unreachable (and the answer to the triggering statement lost) until
// Up.
type cutRelay struct {
	*netrelay.Relay
	addr    string
	trigger atomic.Pointer[[]byte]
	cut     atomic.Bool
}

func newCutRelay(t *testing.T, target string) *cutRelay {
	t.Helper()
	r := &cutRelay{Relay: &netrelay.Relay{Target: target}}
	r.CutWhen = func(chunk []byte) bool {
		tr := r.trigger.Load()
		if tr == nil || !bytes.Contains(chunk, *tr) || !r.trigger.CompareAndSwap(tr, nil) {
			return false
		}
		r.cut.Store(true)
		return true
	}
	if err := r.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	r.addr = r.Addr().String()
	return r
}

// arm makes the next chunk holding trigger cut the relay.
func (r *cutRelay) arm(trigger string) {
	b := []byte(trigger)
	r.cut.Store(false)
	r.trigger.Store(&b)
}

func (r *cutRelay) wasCut() bool { return r.cut.Load() }

// startVia starts holdfast with its backend at backend (a relay),
// call_timeout set and a hold (failover.hold) of 2 s, so that calls the
// cut database refuses answer soon, after `holdfast migrate`.
func startVia(t *testing.T, backend string, callTimeout time.Duration) *process {
	t.Helper()
	p := newProcess(t)
	dbtest.WriteHoldfastConfig(t, p.config, holdfastproc.Config{Listen: p.addr, Users: appUser,
		Backend: holdfastproc.Backend{Address: backend, Database: p.db}, YAML: fmt.Sprintf("reservation:\n  call_timeout: %s\nfailover:\n  hold: 2s\n", callTimeout)})
	p.migrate(t)
	return p.serve(t)
}

// TestCallOutcomeUnknownThroughProxy: a claim whose backend connection is
// cut right after its COMMIT was sent, with the database unreachable until
// past call_timeout, reaches a go-sql-driver client as 9108, SQLSTATE
// 08S01, saying the outcome is unknown and repeating is safe (never 1105,
// never the socket's message). Once the database is back, the repeated
// CALL answers consistently with the database: the deduction was made
// exactly once. A call made while the database is unreachable, before
// anything was sent, is 2003 "nothing was done".
func TestCallOutcomeUnknownThroughProxy(t *testing.T) {
	relay := newCutRelay(t, dbtest.Config(t).Addr)
	p := startVia(t, relay.addr, 2*time.Second)
	db, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s?interpolateParams=true", p.addr, p.db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	direct := dbtest.Open(t, dbtest.TablesDB(p.db))
	onHand := func() int64 {
		var n int64
		if err := direct.QueryRow("SELECT on_hand FROM inventory_ledger WHERE shop_id = 9 AND inventory_item_id = 77").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := db.Exec("CALL holdfast.receive(9, 77, 1, 10)"); err != nil {
		t.Fatal(err)
	}
	var tok string
	rows, err := db.Query("CALL holdfast.reserve(9, 'e2e-unknown', '[{\"item\":77,\"qty\":3,\"locations\":[1]}]', 1800)")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var a, b, c, d, e, f, g, h sql.RawBytes
		if err := rows.Scan(&a, &b, &c, &d, &e, &f, &g, &h); err != nil {
			t.Fatal(err)
		}
		tok = string(a)
	}
	rows.Close()

	relay.arm("SET state = 1") // the claim's COMMIT round trip
	_, err = db.Exec("CALL holdfast.claim(?)", tok)
	if !relay.wasCut() {
		t.Fatalf("the relay never saw the claim's COMMIT (did the statement change?); claim answered %v", err)
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9108 || string(me.SQLState[:]) != "08S01" ||
		!strings.Contains(me.Message, "outcome unknown") || !strings.Contains(me.Message, "Repeating the same CALL is safe") {
		t.Fatalf("claim with its COMMIT cut: %v; want 9108 (08S01) outcome unknown, safe to repeat", err)
	}
	committed := onHand() == 7

	_, err = db.Exec("CALL holdfast.availability(9, 77)")
	if !errors.As(err, &me) || me.Number != 2003 || !strings.Contains(me.Message, "nothing was done") {
		t.Fatalf("a call while the database is unreachable: %v; want 2003, nothing was done", err)
	}

	relay.Up()
	var outcome string
	for give := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var a, c, d, e, f sql.NullString
		err = db.QueryRow("CALL holdfast.claim(?)", tok).Scan(&a, &outcome, &c, &d, &e, &f)
		if err == nil || time.Now().After(give) {
			break
		}
	}
	if want := map[bool]string{true: "duplicate", false: "claimed"}[committed]; err != nil || outcome != want {
		t.Fatalf("the repeated claim answered %q, %v; want %s (the first had committed: %v)", outcome, err, want, committed)
	}
	if n := onHand(); n != 7 {
		t.Fatalf("on_hand %d after the repeated claim; want 7 (one deduction)", n)
	}
}

// A CALL holdfast.* runs under a context of its own: KILL QUERY from
// another client, or its client hanging up, ends it within moments, not
// at call_timeout, and nothing is done. Here a reserve finds every unit
// of its item locked by another transaction, so it backs off and tries
// again until call_timeout (5 s), as it would under contention.
func TestCallInterrupted(t *testing.T) {
	p := startWithSchema(t)
	if out, err := p.cli(t, "CALL holdfast.receive(7, 2001, 1, 10);\n"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	direct := dbtest.Open(t, dbtest.TablesDB(p.db))
	db, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s", p.addr, p.db))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	reservations := func(key string) string {
		var n string
		if err := direct.QueryRow("SELECT COUNT(*) FROM reservations WHERE shop_id = 7 AND idempotency_key = ?", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, how := range []string{"kill_query", "disconnect"} {
		t.Run(how, func(t *testing.T) {
			lock, err := direct.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lock.Close()
			mustExecCtx(t, lock, "BEGIN")
			mustExecCtx(t, lock, "SELECT id FROM reservation_units WHERE shop_id = 7 AND inventory_item_id = 2001 FOR UPDATE")
			unlocked := false
			unlock := func() {
				if !unlocked {
					unlocked = true
					mustExecCtx(t, lock, "ROLLBACK")
				}
			}
			defer unlock()

			caller, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer caller.Close()
			var id string
			if err := caller.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
				t.Fatal(err)
			}
			key := "interrupted-" + how
			callCtx, hangUp := context.WithCancel(ctx)
			defer hangUp()
			done := make(chan error, 1)
			go func() {
				_, err := caller.ExecContext(callCtx, `CALL holdfast.reserve(7, '`+key+`', '[{"item":2001,"qty":1,"locations":[1]}]', 1800)`)
				done <- err
			}()
			time.Sleep(500 * time.Millisecond)
			select {
			case err := <-done:
				t.Fatalf("the reserve ended before it was interrupted (the units are locked): %v", err)
			default:
			}
			interrupted := time.Now()
			if how == "kill_query" {
				if _, err := db.ExecContext(ctx, "KILL QUERY "+id); err != nil {
					t.Fatalf("KILL QUERY %s: %v", id, err)
				}
				select {
				case err := <-done:
					var me *mysql.MySQLError
					if !errors.As(err, &me) || me.Number != 1317 || string(me.SQLState[:]) != "70100" || !strings.Contains(me.Message, "nothing was done") {
						t.Fatalf("the interrupted reserve answered %v, want 1317 (70100) saying nothing was done", err)
					}
					t.Logf("KILL QUERY ended the reserve after %v: %v", time.Since(interrupted).Round(time.Millisecond), err)
				case <-time.After(time.Second):
					t.Fatalf("the reserve ran on for more than a second after KILL QUERY")
				}
			} else {
				hangUp() // the driver closes the connection
				<-done
				// holdfast notices a client gone mid-statement by reading
				// its socket: give it the second the bound allows.
				time.Sleep(time.Second)
			}
			// Were the call still running, it would take the units now.
			unlock()
			time.Sleep(1500 * time.Millisecond)
			if n := reservations(key); n != "0" {
				t.Fatalf("the %s reserve made %s reservations once the units were free", how, n)
			}
			var held string
			if err := direct.QueryRow("SELECT COUNT(*) FROM reservation_units WHERE shop_id = 7 AND inventory_item_id = 2001").Scan(&held); err != nil || held != "10" {
				t.Fatalf("pool of item 2001: %s units (%v), want all 10 back", held, err)
			}
		})
	}
}

func mustExecCtx(t *testing.T, c *sql.Conn, q string) {
	t.Helper()
	if _, err := c.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}
