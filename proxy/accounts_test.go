package proxy

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// newBackendUser creates a backend account with password pass and the
// given grants (each "PRIV ON what"), dropped at cleanup.
func newBackendUser(t *testing.T, host, pass string, grants ...string) string {
	t.Helper()
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	u := "hfa_" + hex.EncodeToString(rb[:])
	root := dbtest.Root(t)
	mustExec(t, root, fmt.Sprintf("CREATE USER '%s'@'%s' IDENTIFIED BY '%s'", u, host, pass))
	t.Cleanup(func() { _, _ = root.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%s'", u, host)) })
	for _, g := range grants {
		mustExec(t, root, fmt.Sprintf("GRANT %s TO '%s'@'%s'", g, u, host))
	}
	return u
}

// connsOf counts MariaDB's connections for each user (its process list).
func connsOf(t *testing.T, users ...string) []int {
	t.Helper()
	out := make([]int, len(users))
	for i, u := range users {
		out[i] = dbtest.Connections(t, u)
	}
	return out
}

// Per-user backend accounts: two client users mapped to two accounts with
// different grants each see only what theirs allow (MariaDB refuses the
// rest, through holdfast); their connections share the one pool.max, and
// an account's own max holds; COM_CHANGE_USER moves a client to the new
// user's account; drains, attribution and kills work across accounts.
func TestBackendAccounts(t *testing.T) {
	var reader, writer string
	p := startProxy(t, func(c *config.Config) {
		db := c.Backend.Database
		mustExec(t, dbtest.Root(t), "CREATE TABLE `"+db+"`.pub (id INT PRIMARY KEY)")
		mustExec(t, dbtest.Root(t), "CREATE TABLE `"+db+"`.secret (id INT PRIMARY KEY)")
		reader = newBackendUser(t, "%", "r-secret", "SELECT ON `"+db+"`.pub")
		writer = newBackendUser(t, "%", "w-secret", "SELECT, INSERT ON `"+db+"`.*")
		c.Users = append(c.Users,
			config.User{Name: "rep", Password: "rep", BackendUser: reader, BackendPassword: "r-secret", BackendPool: config.AccountPool{Max: 1}},
			config.User{Name: "wr", Password: "wr", BackendUser: writer, BackendPassword: "w-secret"},
			config.User{Name: "wr2", Password: "wr2", BackendUser: writer, BackendPassword: "w-secret"})
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 3, 3
		ownAccount(t, c) // the topology check's and the kills' connections are not the pool's
	})
	// The kill connection is holdfast's own account's: it may kill other
	// accounts' threads, which they themselves may not.
	mustExec(t, dbtest.Root(t), "GRANT CONNECTION ADMIN ON *.* TO '"+p.cfg.Fleet.User+"'@'%'")
	open := func(user string) *sql.DB {
		db, err := sql.Open("mysql", p.dsn(user, user))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	rep, wr, app := open("rep"), open("wr"), open("app")
	ctx := context.Background()

	if u := queryString(t, rep, "SELECT CURRENT_USER()"); u != reader+"@%" {
		t.Fatalf("rep runs as %s, want %s@%%", u, reader)
	}
	if u := queryString(t, app, "SELECT CURRENT_USER()"); u != p.user+"@%" {
		t.Fatalf("app runs as %s, want the service account %s", u, p.user)
	}
	mustExec(t, wr, "INSERT INTO pub VALUES (1)")
	if n := queryString(t, rep, "SELECT COUNT(*) FROM pub"); n != "1" {
		t.Fatal(n)
	}
	for _, q := range []string{"INSERT INTO pub VALUES (2)", "SELECT * FROM secret"} {
		if _, err := rep.ExecContext(ctx, q); mysqlErrNo(err) != 1142 {
			t.Fatalf("rep: %s: %v, want MariaDB's 1142 (command denied)", q, err)
		}
	}
	if _, err := wr.ExecContext(ctx, "DROP TABLE pub"); mysqlErrNo(err) != 1142 {
		t.Fatalf("wr: DROP TABLE: %v, want 1142", err)
	}

	// The global cap over accounts, and rep's own cap of 1.
	hold := func(db *sql.DB) *sql.Tx {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		queryString(t, tx, "SELECT COUNT(*) FROM pub") // holds a connection
		return tx
	}
	rep1, wr1, wr2 := hold(rep), hold(wr), hold(open("wr2"))
	if c := connsOf(t, reader, writer, p.user); c[0] != 1 || c[1] != 2 || c[0]+c[1]+c[2] > 3 {
		t.Fatalf("connections of reader, writer, service: %v, want 1, 2 under pool.max 3", c)
	}
	rep2 := make(chan *sql.Tx)
	go func() {
		tx, err := rep.BeginTx(ctx, nil)
		if err == nil {
			_, err = tx.ExecContext(ctx, "SELECT COUNT(*) FROM pub")
		}
		if err != nil {
			t.Error(err)
		}
		rep2 <- tx
	}()
	waitFor(t, "rep's second transaction queued", func() bool { return p.srv.Stats().Pool.Waiting == 1 })
	if err := wr1.Commit(); err != nil {
		t.Fatal(err)
	}
	// A writer connection is free, but rep may have only one: it waits on.
	if st := p.srv.Stats().Pool; st.Waiting != 1 {
		t.Fatalf("rep's second transaction went ahead of its account's max: %+v", st)
	}
	if err := rep1.Commit(); err != nil {
		t.Fatal(err)
	}
	tx := <-rep2
	if c := connsOf(t, reader, writer, p.user); c[0] != 1 || c[0]+c[1]+c[2] > 3 {
		t.Fatalf("connections of reader, writer, service: %v", c)
	}
	// The service account's transaction needs a connection of its own: an
	// idle writer connection makes room for it.
	svc := hold(app)
	if c := connsOf(t, reader, writer, p.user); c[0]+c[1]+c[2] > 3 || c[2] < 1 {
		t.Fatalf("connections of reader, writer, service: %v, want at most pool.max 3", c)
	}
	for _, x := range []*sql.Tx{tx, wr2, svc} {
		if err := x.Commit(); err != nil {
			t.Fatal(err)
		}
	}

	// Drains and attribution apply to every account's statements.
	p.srv.DrainTag("rep_flow", "test", 0)
	if _, err := rep.ExecContext(ctx, "SELECT /* conn_tag:rep_flow */ 1"); mysqlErrNo(err) != codeTagDrained {
		t.Fatalf("a drained tag on rep's account: %v, want 9001", err)
	}
	p.srv.UndrainTag("rep_flow")
	queryString(t, rep, "SELECT /* conn_tag:rep_flow */ 1")
	found := false
	for _, ts := range p.srv.Recorder().Snapshot() {
		found = found || ts.Tag == "rep_flow" && ts.Borrows > 0
	}
	if !found {
		t.Fatal("rep's tagged statement is not attributed")
	}

	// COM_CHANGE_USER: the account follows the user.
	c := p.raw(t, rawmysql.Options{})
	if _, _, err := c.ChangeUser("rep", "rep", p.db); err != nil {
		t.Fatal(err)
	}
	if u := c.value("SELECT CURRENT_USER()"); u != reader+"@%" {
		t.Fatalf("after COM_CHANGE_USER to rep: %s", u)
	}
	if _, err := c.Results("INSERT INTO pub VALUES (3)"); errCode(err) != 1142 {
		t.Fatalf("rep after COM_CHANGE_USER: %v, want 1142", err)
	}
	if _, _, err := c.ChangeUser("app", "app", p.db); err != nil {
		t.Fatal(err)
	}
	if u := c.value("SELECT CURRENT_USER()"); u != p.user+"@%" {
		t.Fatalf("after COM_CHANGE_USER back to app: %s", u)
	}

	// KILL QUERY of a restricted account's statement, sent by the service
	// account.
	victim, err := rep.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	vid := queryString(t, victim, "SELECT CONNECTION_ID()")
	errc := make(chan error, 1)
	go func() {
		var v int
		err := victim.QueryRowContext(ctx, "SELECT SLEEP(30) FROM pub LIMIT 1").Scan(&v)
		if err == nil && v != 1 {
			err = fmt.Errorf("SLEEP returned %d, not interrupted", v)
		}
		errc <- err
	}()
	waitFor(t, "rep's SLEEP running", func() bool {
		return queryString(t, dbtest.Root(t), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '"+reader+"' AND INFO LIKE 'SELECT SLEEP%'") == "1"
	})
	if _, err := open("rep").ExecContext(ctx, "KILL QUERY "+vid); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil && mysqlErrNo(err) != 1317 {
		t.Fatalf("the killed statement: %v", err)
	}
	if !strings.HasPrefix(queryString(t, rep, "SELECT 'still here'"), "still") {
		t.Fatal("rep's connection after the kill")
	}
}

// A client whose backend account the server refuses (a wrong
// backend_password) gets 2003 with the server's refusal at once, not after
// pool.acquire_timeout; and while the refusal is recent, other clients of
// that account get it without another dial.
func TestBackendAccountRefused(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		acct := newBackendUser(t, "%", "right", "SELECT ON `"+c.Backend.Database+"`.*")
		c.Users = append(c.Users, config.User{Name: "bad", Password: "bad", BackendUser: acct, BackendPassword: "wrong"})
		c.Pool.AcquireTimeout = time.Hour // a wait for it would hang the test
	})
	before := p.srv.Stats().Pool.DialErrors
	for i := range 5 {
		c := p.raw(t, rawmysql.Options{User: "bad", Password: "bad", DB: p.db})
		if _, err := c.Results("SELECT 1"); errCode(err) != 2003 || !strings.Contains(err.Error(), "Access denied") {
			t.Fatalf("client %d: %v, want 2003 with the server's refusal", i, err)
		}
	}
	if n := p.srv.Stats().Pool.DialErrors - before; n != 1 {
		t.Fatalf("%d dials refused for 5 clients, want 1", n)
	}
	// The others' accounts are not refused.
	if v := p.raw(t, rawmysql.Options{}).value("SELECT 1"); v != "1" {
		t.Fatalf("the default account: %q", v)
	}
}

// holdfast's own account: the engine's borrows log in as fleet.user (an
// account id of its own, not the service account's), with the schema
// SetTablesSchema names as their current database, a pooled connection
// included once that changes; clients without an account of their own
// keep backend.user. Without fleet.user the engine's borrows are
// backend.user's, still under an id of their own and in the tables'
// schema.
func TestOwnAccount(t *testing.T) {
	ctx := context.Background()
	engineAs := func(t *testing.T, p *testProxy) (user, db string) {
		t.Helper()
		ec, err := p.srv.BorrowEngine(ctx, "holdfast:test")
		if err != nil {
			t.Fatal(err)
		}
		defer ec.Release(false)
		rows, err := ec.Query(ctx, "SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1), COALESCE(DATABASE(), '')")
		if err != nil {
			t.Fatal(err)
		}
		if string(rows[0][1]) != ec.Database() {
			t.Fatalf("DATABASE() %s, EngineConn.Database %s", rows[0][1], ec.Database())
		}
		return string(rows[0][0]), string(rows[0][1])
	}
	clientAs := func(t *testing.T, p *testProxy) string {
		t.Helper()
		var u string
		if err := p.open(t).QueryRow("SELECT SUBSTRING_INDEX(CURRENT_USER(), '@', 1)").Scan(&u); err != nil {
			t.Fatal(err)
		}
		return u
	}
	t.Run("fleet.user", func(t *testing.T) {
		var own, tables1, tables2 string
		p := startProxy(t, func(c *config.Config) {
			tables1, tables2 = dbtest.NewDatabase(t), dbtest.NewDatabase(t)
			own = newBackendUser(t, "%", "own-secret", "ALL ON `"+tables1+"`.*", "ALL ON `"+tables2+"`.*")
			c.Fleet.User, c.Fleet.Password = own, "own-secret"
		})
		if p.srv.accts.own == 0 {
			t.Fatal("holdfast's own account has the service account's id")
		}
		if got := p.srv.TablesSchema(); got != p.db {
			t.Fatalf("TablesSchema before SetTablesSchema: %s, want backend.database %s", got, p.db)
		}
		p.srv.SetTablesSchema(tables1)
		if u, db := engineAs(t, p); u != own || db != tables1 {
			t.Fatalf("the engine's connection: %s in %s, want %s in %s", u, db, own, tables1)
		}
		if u := clientAs(t, p); u != p.user {
			t.Fatalf("a client without backend_user runs as %s, want backend.user %s", u, p.user)
		}
		p.srv.SetTablesSchema(tables2) // the tables moved: the pooled connection follows
		if u, db := engineAs(t, p); u != own || db != tables2 {
			t.Fatalf("after SetTablesSchema: the engine's connection: %s in %s, want %s in %s", u, db, own, tables2)
		}
		ec, err := p.srv.BorrowEngine(ctx, "holdfast:test")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := ec.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		if err := ec.UseDatabase(ctx, tables1); err != nil || ec.Database() != tables1 {
			t.Fatalf("UseDatabase inside a transaction: %v, database %s", err, ec.Database())
		}
		rows, err := ec.Query(ctx, "SELECT DATABASE(), @@in_transaction")
		if err != nil || string(rows[0][0]) != tables1 || string(rows[0][1]) != "1" {
			t.Fatalf("after UseDatabase: %q, %v", rows, err)
		}
		if _, _, err := ec.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
		ec.Release(false)
		if _, db := engineAs(t, p); db != tables2 {
			t.Fatalf("the next borrow is in %s, want the tables' schema %s", db, tables2)
		}
	})
	t.Run("fallback", func(t *testing.T) {
		var tables string
		p := startProxy(t, func(c *config.Config) {
			tables = dbtest.NewDatabase(t)
			mustExec(t, dbtest.Root(t), "GRANT ALL ON `"+tables+"`.* TO '"+c.Backend.User+"'@'%'")
		})
		if p.srv.accts.own == 0 {
			t.Fatal("without fleet.user, the engine's account shares the service account's id")
		}
		p.srv.SetTablesSchema(tables)
		if u, db := engineAs(t, p); u != p.user || db != tables {
			t.Fatalf("the engine's connection: %s in %s, want backend.user %s in %s", u, db, p.user, tables)
		}
		var cur string
		if err := p.open(t).QueryRow("SELECT DATABASE()").Scan(&cur); err != nil || cur != p.db {
			t.Fatalf("a client's database: %q, %v; want backend.database %s", cur, err, p.db)
		}
	})
}
