package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/reservation"
)

// newAccount creates a MariaDB account for the test, with no privileges
// (password = name), dropped at cleanup.
func newAccount(t *testing.T, prefix string) string {
	t.Helper()
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	u := prefix + hex.EncodeToString(rb[:])
	root := dbtest.Root(t)
	if _, err := root.Exec(fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%[1]s'", u)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", u)) })
	return u
}

// grantsOf runs `holdfast migrate -print-grants` on p's configuration and
// returns its statements; legacy adds the commented grants for tables
// still in backend.database.
func grantsOf(t *testing.T, p *process, legacy bool) []string {
	t.Helper()
	out, err := guarded(t, binary(t), "migrate", "-config", p.config, "-print-grants").CombinedOutput()
	if err != nil {
		t.Fatalf("migrate -print-grants: %v\n%s", err, out)
	}
	var stmts []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "GRANT ") {
			stmts = append(stmts, l)
		} else if g, ok := strings.CutPrefix(l, "-- GRANT "); ok && legacy {
			stmts = append(stmts, "GRANT "+g)
		}
	}
	if len(stmts) == 0 {
		t.Fatalf("migrate -print-grants printed no GRANT:\n%s", out)
	}
	return stmts
}

// applyGrants runs stmts as the test server's administrator.
func applyGrants(t *testing.T, stmts []string) {
	t.Helper()
	for _, q := range stmts {
		if _, err := dbtest.Root(t).Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// secured is a holdfast whose backend.user is an ordinary application
// account and whose own work runs as an account of its own (fleet.user),
// both with the grants `holdfast migrate -print-grants` prints.
type secured struct {
	*fleetMember
	app, fleet string // the backend accounts
	tables     string // fleet.database
}

// newSecured configures (but does not start) a secured holdfast on a
// fresh database, with its grants applied; before, when not nil, runs
// first on the database (as the administrator), and legacy applies the
// grants for tables still in backend.database.
func newSecured(t *testing.T, legacy bool, before func(db string)) *secured {
	t.Helper()
	db := dbtest.NewDatabase(t)
	if before != nil {
		before(db)
	}
	s := &secured{app: newAccount(t, "hfapp_"), fleet: newAccount(t, "hffleet_"), tables: dbtest.NewTablesDB(t, db)}
	p := newProcessOn(t, db)
	admin := dbtest.FreeAddr(t)
	dbtest.WriteHoldfastConfig(t, p.config, holdfastproc.Config{Listen: p.addr, Users: appUser, Admin: admin,
		Backend: holdfastproc.Backend{Database: db, User: s.app, Password: s.app},
		Fleet:   holdfastproc.Fleet{Database: s.tables, User: s.fleet, Password: s.fleet},
		YAML:    "log:\n  level: info\nreservation:\n  call_timeout: 20s\n"})
	applyGrants(t, grantsOf(t, p, legacy))
	s.fleetMember = &fleetMember{process: p, admin: "http://" + admin}
	return s
}

// threadsOf lists the backend threads of user, by id, with their current
// database ("" none).
func threadsOf(t *testing.T, user string) map[int64]string {
	t.Helper()
	rows, err := dbtest.Root(t).Query("SELECT ID, COALESCE(DB, '') FROM information_schema.PROCESSLIST WHERE USER = ?", user)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var db string
		if err := rows.Scan(&id, &db); err != nil {
			t.Fatal(err)
		}
		out[id] = db
	}
	return out
}

func errNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// With fleet.user set and an ordinary application account as
// backend.user, an application cannot end holdfast's own backend
// connections with a KILL holdfast cannot see into (EXECUTE IMMEDIATE of
// a CONCAT): the fleet's, the engine's and the kill connection's threads
// belong to holdfast's account, and MariaDB refuses (1095). A client's
// own KILL QUERY still ends its statement (holdfast's account has
// CONNECTION ADMIN from the printed grants).
func TestOwnAccountConnectionsSurviveApplicationKills(t *testing.T) {
	s := newSecured(t, false, nil)
	s.migrate(t)
	s.serve(t)
	app := s.client(t)
	ctx := context.Background()

	// holdfast's own connections: the fleet's (its first poll opened
	// them), the engine's (a CALL borrows one from the pool) and the kill
	// connection (opened by a client's KILL QUERY of its own statement).
	if _, err := app.Exec("CALL holdfast.receive(1, 1001, 1, 10)"); err != nil {
		t.Fatal(err)
	}
	if got := threadsOf(t, s.app); len(got) == 0 {
		t.Fatal("no thread of the application's account: the pool does not use backend.user")
	}
	victim, err := app.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	var vid string
	if err := victim.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&vid); err != nil {
		t.Fatal(err)
	}
	slept := make(chan error, 1)
	go func() { _, err := victim.ExecContext(ctx, "SELECT SLEEP(30)"); slept <- err }()
	within(t, 10*time.Second, "the SLEEP runs", func() bool {
		var n int
		_ = dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO = 'SELECT SLEEP(30)'", s.app).Scan(&n)
		return n == 1
	})
	if _, err := app.Exec("KILL QUERY " + vid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-slept:
		if err != nil && errNumber(err) != 1317 {
			t.Fatalf("the killed SLEEP answered %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("KILL QUERY through holdfast did not end the SLEEP: holdfast's account may not kill the application's statement")
	}
	// Which is which: the kill connection and the topology check's have
	// no database; the others are in fleet.database, the engine's being
	// the pool's connections that are not the application's.
	own := threadsOf(t, s.fleet)
	var ids, killConn []int64
	inTables := 0
	for id, db := range own {
		ids = append(ids, id)
		switch db {
		case "":
			killConn = append(killConn, id)
		case s.tables:
			inTables++
		default:
			t.Fatalf("thread %d of %s is in database %q", id, s.fleet, db)
		}
	}
	inUse, _ := s.metric(t, `holdfast_pool_connections{state="in_use"}`)
	idle, _ := s.metric(t, `holdfast_pool_connections{state="idle"}`)
	engine := int(inUse+idle) - len(threadsOf(t, s.app))
	if len(killConn) != 2 || engine < 1 || inTables-engine < 1 {
		t.Fatalf("threads of %s: %v; want the kill connection and the topology check's (no database), the engine's (%d: the pool's %v less the application's) and the fleet's in %s",
			s.fleet, own, engine, inUse+idle, s.tables)
	}
	t.Logf("holdfast's own threads: %d of the fleet, %d of the engine, kill and topology check connections %v", inTables-engine, engine, killConn)

	// Now the application aims at every one of them, in a form holdfast
	// cannot read (it refuses CONCAT('KI','LL ', id) itself, 1235).
	for _, id := range ids {
		q := fmt.Sprintf("EXECUTE IMMEDIATE CONCAT(CHAR(75, 73, 76, 76, 32), %d)", id)
		_, err := app.Exec(q)
		if errNumber(err) != 1095 {
			t.Errorf("%s (a thread of holdfast's own, database %q) through holdfast: %v, want MariaDB's 1095",
				q, own[id], err)
		}
	}
	time.Sleep(200 * time.Millisecond) // a kill that landed has ended its thread by now
	still := threadsOf(t, s.fleet)
	for _, id := range ids {
		if _, ok := still[id]; !ok {
			t.Errorf("holdfast's thread %d (database %q) died", id, own[id])
		}
	}
	// And holdfast works on: an engine call, a fleet control.
	if _, err := app.Exec("CALL holdfast.receive(1, 1001, 1, 5)"); err != nil {
		t.Fatal(err)
	}
	s.api(t, http.MethodPost, "/api/tags/checkout/drain")
	within(t, 3*time.Second, "the drain in force", func() bool { return refuses(app, "checkout") })
}

// With the printed grants, the application's account cannot write
// holdfast's tables in fleet.database, neither directly nor through
// holdfast in a form holdfast cannot see into: MariaDB refuses (1142).
func TestApplicationAccountCannotWriteHoldfastTables(t *testing.T) {
	s := newSecured(t, false, nil)
	s.migrate(t)
	s.serve(t)
	direct := dbtest.OpenAs(t, s.app, s.app, s.db)
	through := s.client(t)
	q := func(table, stmt string) string { return strings.ReplaceAll(stmt, "{T}", "`"+s.tables+"`."+table) }
	writes := []string{
		q(reservation.TableControls, "INSERT INTO {T} (tag, kind, value, set_by, reason, set_at, expires_at) VALUES ('checkout', 'drain', 0, 'oncall-lead', 'INC-1', NOW(6), NULL)"),
		q(reservation.TableDuties, "INSERT INTO {T} (duty, holder, expires_at) VALUES ('sweeper', 'app', '2099-01-01')"),
		q(reservation.TableGrants, "DELETE FROM {T}"),
		q(reservation.TableAuthority, "INSERT INTO {T} VALUES (99, 'redis', '', 0, NOW(6), 'app', 'x')"),
		q(reservation.TableLedger, "UPDATE {T} SET on_hand = on_hand + 1"),
		q(reservation.TableUnits, "DELETE FROM {T}"),
		q(reservation.TableReservations, "UPDATE {T} SET state = 1"),
	}
	for _, w := range writes {
		if _, err := direct.Exec(w); errNumber(err) != 1142 {
			t.Errorf("as the application's account, directly: %s: %v, want 1142", w, err)
		}
		// A form holdfast cannot read (it refuses CONCAT of the text
		// itself, 9009): the grants must.
		hidden := fmt.Sprintf("EXECUTE IMMEDIATE FROM_BASE64(%s)", sqlQuote(base64.StdEncoding.EncodeToString([]byte(w))))
		if _, err := through.Exec(hidden); errNumber(err) != 1142 {
			t.Errorf("through holdfast: %s: %v, want 1142", hidden, err)
		}
	}
	var n int
	if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM `" + s.tables + "`.holdfast_controls").Scan(&n); err != nil || n != 0 {
		t.Fatalf("holdfast_controls has %d rows (%v), want none", n, err)
	}
}

// sqlQuote is s as an SQL string literal.
func sqlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// fleetStatus is what /api/fleet says of the tables.
type fleetStatus struct {
	Tables       string `json:"tables_schema"`
	TablesLegacy bool   `json:"tables_legacy"`
	Stale        bool   `json:"stale"`
	NoSchema     bool   `json:"no_schema"`
	Failures     int    `json:"failures"`
}

func (m *fleetMember) fleetStatus(t *testing.T) fleetStatus {
	t.Helper()
	var ans struct {
		Status fleetStatus `json:"status"`
	}
	if err := json.Unmarshal([]byte(m.api(t, http.MethodGet, "/api/fleet")), &ans); err != nil {
		t.Fatal(err)
	}
	return ans.Status
}

// schemaHasTables reports whether schema holds holdfast's tables.
func schemaHasTables(t *testing.T, schema string) bool {
	t.Helper()
	ctx := context.Background()
	c, err := reservation.SQLConns(dbtest.Root(t)).Borrow(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(false)
	ok, err := reservation.HasTables(ctx, c, schema)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// checkouts runs reserve and release through db until stop closes,
// counting answers by error number (0: success).
func checkoutLoop(db *sql.DB, worker int, stop <-chan struct{}, mu *sync.Mutex, answers map[uint16]int, firstErr *error) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		var token string
		err := db.QueryRow("CALL holdfast.reserve(1, ?, '[{\"item\":1001,\"qty\":1,\"locations\":[1]}]', 1800)", fmt.Sprintf("w%d-%d", worker, i)).
			Scan(&token, new(string), new(int), new(int), new(int), new(int), new(string), new(int))
		if err == nil {
			_, err = db.Exec("CALL holdfast.release(?)", token)
		}
		mu.Lock()
		n := errNumber(err)
		if err != nil && n == 0 {
			n = 1 // not a MySQL error
		}
		answers[n]++
		if err != nil && *firstErr == nil {
			*firstErr = err
		}
		mu.Unlock()
	}
}

// An install migrated before fleet.database (its tables in
// backend.database) keeps working after the upgrade, where they are, and
// says so; `holdfast migrate -move-tables` then moves them into
// fleet.database under engine traffic, and the running instance follows
// without a restart: engine calls, the background work and on-call
// controls go on in the new schema.
func TestLegacyTablesMoveUnderTraffic(t *testing.T) {
	ctx := context.Background()
	var legacyDB string
	s := newSecured(t, true, func(db string) {
		// What `holdfast migrate` did before fleet.database: the tables in
		// backend.database.
		legacyDB = db
		if _, err := reservation.Migrate(ctx, reservation.SQLConns(dbtest.Open(t, db))); err != nil {
			t.Fatal(err)
		}
	})
	out, err := s.Migrate(ctx)
	if err != nil || !strings.Contains(out, "holdfast's tables are in backend.database ("+legacyDB+")") || !strings.Contains(out, "-move-tables") {
		t.Fatalf("migrate on a legacy install: %v\n%s", err, out)
	}
	if schemaHasTables(t, s.tables) {
		t.Fatal("migrate made tables in fleet.database while the fleet's are in backend.database")
	}
	s.serve(t)
	app := s.client(t)
	if !strings.Contains(s.Out.String(), "holdfast's tables are in backend.database") {
		t.Fatalf("no start-up warning of the legacy location:\n%s", s.Out.String())
	}
	if v, _ := s.metric(t, "holdfast_tables_legacy_location"); v != 1 {
		t.Fatalf("holdfast_tables_legacy_location %v, want 1", v)
	}
	if st := s.fleetStatus(t); st.Tables != legacyDB || !st.TablesLegacy {
		t.Fatalf("/api/fleet: %+v, want the tables in %s, legacy", st, legacyDB)
	}
	// Controls and engine calls work there.
	s.api(t, http.MethodPost, "/api/tags/checkout/drain")
	within(t, 3*time.Second, "the drain in force", func() bool { return refuses(app, "checkout") })
	var n int
	if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM `" + legacyDB + "`.holdfast_controls").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the drain's row in backend.database: %d, %v", n, err)
	}
	s.api(t, http.MethodDelete, "/api/tags/checkout/drain")
	if _, err := app.Exec("CALL holdfast.receive(1, 1001, 1, 100000)"); err != nil {
		t.Fatal(err)
	}

	// Engine traffic, and the move in the middle of it.
	var (
		mu       sync.Mutex
		answers  = map[uint16]int{}
		firstErr error
		wg       sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); checkoutLoop(app, w, stop, &mu, answers, &firstErr) }()
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range answers {
			n += v
		}
		return n
	}
	within(t, 20*time.Second, "checkouts before the move", func() bool { return count() >= 50 })
	pollFailures := s.fleetStatus(t).Failures
	moveOut, err := guarded(t, binary(t), "migrate", "-config", s.config, "-move-tables").CombinedOutput()
	if err != nil || !strings.Contains(string(moveOut), fmt.Sprintf("moved %d tables", len(reservation.Tables))) {
		close(stop)
		wg.Wait()
		t.Fatalf("migrate -move-tables: %v\n%s", err, moveOut)
	}
	t.Logf("%s", strings.TrimSpace(string(moveOut)))
	if !schemaHasTables(t, s.tables) || schemaHasTables(t, legacyDB) {
		t.Fatal("the tables did not move")
	}
	within(t, 10*time.Second, "the instance follows the tables", func() bool {
		v, _ := s.metric(t, "holdfast_tables_legacy_location")
		return v == 0
	})
	if log := s.Out.String(); !strings.Contains(log, `msg="holdfast's tables found" schema=`+s.tables) {
		t.Errorf("the instance did not say it follows the tables:\n%s", log)
	}
	before := count()
	within(t, 20*time.Second, "checkouts after the move", func() bool { return count() >= before+50 })
	close(stop)
	wg.Wait()
	for _, l := range strings.Split(s.api(t, http.MethodGet, "/metrics"), "\n") {
		if strings.Contains(l, "tx_retries_total{") {
			t.Logf("%s", l) // the statements that met the move and ran again
		}
	}
	mu.Lock()
	t.Logf("answers by error number (0: success): %v", answers)
	for code, k := range answers {
		if code != 0 {
			t.Errorf("%d calls failed with %d (first: %v): the move must be invisible to callers", k, code, firstErr)
		}
	}
	mu.Unlock()

	// After the move: where the tables are is said, controls work in the
	// new schema, the fleet reads them, the stock holds.
	if st := s.fleetStatus(t); st.Tables != s.tables || st.TablesLegacy || st.Stale || st.NoSchema || st.Failures != pollFailures {
		t.Fatalf("/api/fleet after the move: %+v; want no failed poll (%d before)", st, pollFailures)
	}
	s.api(t, http.MethodPost, "/api/tags/checkout/drain")
	within(t, 3*time.Second, "a drain after the move in force", func() bool { return refuses(app, "checkout") })
	if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM `" + s.tables + "`.holdfast_controls").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the drain's row in fleet.database: %d, %v", n, err)
	}
	if _, err := app.Exec("CALL holdfast.receive(1, 1002, 1, 10)"); err != nil {
		t.Fatal(err)
	}
	r, err := reservation.CheckStock(ctx, reservation.SQLQuerier(dbtest.Open(t, s.tables)), reservation.PoolKey{ShopID: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Bad) > 0 || r.Pools == 0 {
		t.Fatalf("stock after the move: %d pools read, breaches %+v", r.Pools, r.Bad)
	}
	// A second move finds nothing to move.
	if out, err := s.Migrate(ctx); err != nil || strings.Contains(out, "-move-tables") {
		t.Fatalf("migrate after the move: %v\n%s", err, out)
	}
}

// A new install: `holdfast migrate` creates fleet.database and holdfast's
// tables there, none in backend.database; engine calls and fleet
// controls work end to end, and nothing says legacy.
func TestNewInstallCreatesHoldfastSchema(t *testing.T) {
	s := newSecured(t, false, nil)
	var n int
	if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", s.tables).Scan(&n); err != nil || n != 0 {
		t.Fatalf("fleet.database exists before migrate (%d, %v)", n, err)
	}
	out, err := s.Migrate(context.Background())
	if err != nil || !strings.Contains(out, "applied reservation schema migrations") || !strings.Contains(out, s.tables) {
		t.Fatalf("migrate: %v\n%s", err, out)
	}
	if !schemaHasTables(t, s.tables) || schemaHasTables(t, s.db) {
		t.Fatalf("after migrate: tables in %s %v, in %s %v", s.tables, schemaHasTables(t, s.tables), s.db, schemaHasTables(t, s.db))
	}
	s.serve(t)
	app := s.client(t)
	if _, err := app.Exec("CALL holdfast.receive(1, 1001, 1, 10)"); err != nil {
		t.Fatal(err)
	}
	var token string
	if err := app.QueryRow(`CALL holdfast.reserve(1, 'k1', '[{"item":1001,"qty":2,"locations":[1]}]', 1800)`).
		Scan(&token, new(string), new(int), new(int), new(int), new(int), new(string), new(int)); err != nil {
		t.Fatal(err)
	}
	var outcome string
	if err := app.QueryRow("CALL holdfast.claim(?)", token).Scan(new(string), &outcome, new(int), new(int), new(int), new(int)); err != nil || outcome != "claimed" {
		t.Fatalf("claim: %q, %v", outcome, err)
	}
	var onHand int
	if err := dbtest.Root(t).QueryRow("SELECT on_hand FROM `" + s.tables + "`.inventory_ledger WHERE shop_id = 1 AND inventory_item_id = 1001").Scan(&onHand); err != nil || onHand != 8 {
		t.Fatalf("on_hand in fleet.database: %d, %v; want 8", onHand, err)
	}
	s.api(t, http.MethodPost, "/api/tags/checkout/drain")
	within(t, 3*time.Second, "the drain in force", func() bool { return refuses(app, "checkout") })
	s.api(t, http.MethodDelete, "/api/tags/checkout/drain")
	within(t, 3*time.Second, "the drain lifted", func() bool { return serves(app, "checkout") })
	if v, _ := s.metric(t, "holdfast_tables_legacy_location"); v != 0 {
		t.Fatalf("holdfast_tables_legacy_location %v on a new install", v)
	}
	if st := s.fleetStatus(t); st.Tables != s.tables || st.TablesLegacy || st.NoSchema {
		t.Fatalf("/api/fleet: %+v", st)
	}
	if strings.Contains(s.Out.String(), "fleet.user is empty") || strings.Contains(s.Out.String(), "holdfast's tables are in backend.database") {
		t.Fatalf("warnings on a new install with fleet.user:\n%s", s.Out.String())
	}
}

// The location's gauge is in README.md's table of metrics.
func TestTablesCollectorDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *prometheus.Desc, 4)
	(&tables{}).collector().Describe(ch)
	close(ch)
	for d := range ch {
		m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String())
		if m == nil || !strings.Contains(string(readme), "| `"+m[1]+"` |") {
			t.Errorf("%s is not in README.md's table of metrics", d)
		}
	}
}

// Started while the backend does not answer, holdfast cannot tell where
// its tables are: it takes fleet.database meanwhile and looks again until
// it can, then finds an install's tables in backend.database and works
// there (it never settles on its guess).
func TestTablesFoundWhenTheBackendAnswers(t *testing.T) {
	db := dbtest.NewDatabase(t)
	if _, err := reservation.Migrate(context.Background(), reservation.SQLConns(dbtest.Open(t, db))); err != nil {
		t.Fatal(err)
	}
	relay := dbtest.StartRelay(t, dbtest.Config(t).Addr, 0)
	relay.Cut()
	p := newProcessOn(t, db)
	admin := dbtest.FreeAddr(t)
	dbtest.WriteHoldfastConfig(t, p.config, holdfastproc.Config{Listen: p.addr, Users: appUser, Admin: admin,
		Backend: holdfastproc.Backend{Address: relay.Addr().String(), Database: db}, YAML: "log:\n  level: info\n"})
	p.serve(t)
	m := &fleetMember{process: p, admin: "http://" + admin}
	if !strings.Contains(p.Out.String(), "could not find where holdfast's tables are") {
		t.Fatalf("no word of the search:\n%s", p.Out.String())
	}
	relay.Up()
	within(t, 15*time.Second, "the tables found in backend.database", func() bool {
		v, _ := m.metric(t, "holdfast_tables_legacy_location")
		return v == 1
	})
	app := m.client(t)
	if _, err := app.Exec("CALL holdfast.receive(1, 1001, 1, 10)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := dbtest.Root(t).QueryRow("SELECT on_hand FROM `" + db + "`.inventory_ledger WHERE shop_id = 1").Scan(&n); err != nil || n != 10 {
		t.Fatalf("on_hand in backend.database: %d, %v", n, err)
	}
	within(t, 10*time.Second, "the fleet reads its tables", func() bool {
		st := m.fleetStatus(t)
		return st.Tables == db && st.TablesLegacy && !st.Stale && !st.NoSchema
	})
}
