package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// holdfastTables are holdfast's own tables (reservation/schema.go; proxy
// does not import reservation), which cmd/holdfast protects.
var holdfastTables = []string{
	"inventory_ledger", "reservation_units", "reserved_quantities", "reservations", "pool_counters",
	"reservation_returns", "holdfast_schema_migrations", "holdfast_authority", "holdfast_redis_state",
	"holdfast_controls", "holdfast_members", "holdfast_cap_grants", "holdfast_duties",
}

// protectedProxy is holdfast with stand-ins for its own tables (id, v; two
// rows each) in the test's database, which it protects, and an
// application table app_t.
func protectedProxy(t *testing.T) *testProxy {
	t.Helper()
	p := startProxy(t)
	d := p.direct(t)
	for _, tb := range append([]string{"app_t"}, holdfastTables...) {
		mustExec(t, d, "CREATE TABLE `"+tb+"` (id INT PRIMARY KEY, v INT)")
		mustExec(t, d, "INSERT INTO `"+tb+"` VALUES (1, 10), (2, 20)")
	}
	p.srv.ProtectTables(p.db, holdfastTables)
	return p
}

// tablesState is every table of the database as it is now: definitions,
// triggers and rows.
func tablesState(t *testing.T, d *sql.DB, db string) string {
	t.Helper()
	var b strings.Builder
	rows, err := d.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY 1", db)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	rows.Close()
	for _, n := range names {
		var name, create string
		if err := d.QueryRow("SHOW CREATE TABLE `"+n+"`").Scan(&name, &create); err != nil {
			t.Fatal(err)
		}
		b.WriteString(create + "\n" + queryString(t, d, "SELECT GROUP_CONCAT(id, ':', v ORDER BY id) FROM `"+n+"`") + "\n")
	}
	b.WriteString(queryString(t, d, "SELECT GROUP_CONCAT(TRIGGER_NAME) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = ?", db))
	return b.String()
}

// is9009 reports whether err is holdfast's refusal of a write to its
// tables: 9009, SQLSTATE 42000, saying where to go instead.
func is9009(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == codeProtected && string(me.SQLState[:]) == "42000" &&
		strings.Contains(me.Message, "CALL holdfast.*") && strings.Contains(me.Message, "holdfastctl")
}

// Through holdfast as app, every statement that writes, locks or alters
// one of holdfast's tables is refused with 9009 and changes nothing, in
// text, multi-statement, prepared and dynamic (EXECUTE IMMEDIATE,
// PREPARE) forms, named bare, qualified, quoted or in any case; reads of
// the tables work.
func TestProtectedTablesRefuseWrites(t *testing.T) {
	p := protectedProxy(t)
	d := p.direct(t)
	before := tablesState(t, d, p.db)
	conn := p.conn(t, "multiStatements=true")
	ctx := context.Background()
	forms := []string{
		"INSERT INTO %[1]s (id, v) VALUES (100, 1)",
		"INSERT INTO %[1]s (id, v) SELECT 101, 1",
		"INSERT INTO %[1]s (id, v) VALUES (1, 1) ON DUPLICATE KEY UPDATE v = 99",
		"INSERT INTO app_t (id, v) SELECT id + 100, v FROM %[1]s",
		"REPLACE INTO %[1]s (id, v) VALUES (1, 99)",
		"UPDATE %[1]s SET v = 99",
		"UPDATE %[2]s.%[1]s SET v = 99 WHERE id = 1",
		"UPDATE `%[3]s` SET v = 99",
		"UPDATE app_t a JOIN %[1]s b ON a.id = b.id SET a.v = b.v, b.v = 99",
		"DELETE FROM %[1]s",
		"DELETE b FROM app_t a JOIN %[1]s b ON a.id = b.id",
		"DELETE FROM app_t WHERE id IN (SELECT id FROM %[1]s)",
		"TRUNCATE TABLE %[1]s",
		"LOAD DATA INFILE '/nonexistent' INTO TABLE %[1]s",
		"ALTER TABLE %[1]s ADD COLUMN x INT",
		"DROP TABLE %[1]s",
		"RENAME TABLE %[1]s TO %[1]s_old",
		"CREATE TRIGGER trg_%[1]s BEFORE INSERT ON %[1]s FOR EACH ROW SET NEW.v = 0",
		"CREATE TABLE copy_%[1]s LIKE %[1]s",
		"CREATE VIEW view_%[1]s AS SELECT * FROM %[1]s",
		"LOCK TABLES %[1]s READ",
		"LOCK TABLES app_t WRITE, %[1]s WRITE",
		"HANDLER %[1]s OPEN",
		"SELECT * FROM %[1]s FOR UPDATE",
		"SELECT * FROM %[1]s WHERE id = 1 LOCK IN SHARE MODE",
		"SELECT 1; DELETE FROM %[1]s",
		"EXECUTE IMMEDIATE 'DELETE FROM %[1]s'",
		"PREPARE s FROM 'UPDATE %[1]s SET v = 99'",
		"EXECUTE IMMEDIATE CONCAT('DELETE FROM ', '%[1]s')",
		"BEGIN NOT ATOMIC UPDATE %[1]s SET v = 99; END",
		"DROP DATABASE %[2]s",
	}
	for _, tb := range holdfastTables {
		for _, f := range forms {
			q := fmt.Sprintf(f, tb, p.db, strings.ToUpper(tb))
			if _, err := conn.ExecContext(ctx, q); !is9009(err) {
				t.Errorf("%s: %v, want error 9009", q, err)
			}
		}
		// Prepared (COM_STMT_PREPARE): refused at the prepare.
		if _, err := conn.ExecContext(ctx, "UPDATE "+tb+" SET v = ? WHERE id = ?", 99, 1); !is9009(err) {
			t.Errorf("prepared UPDATE %s: %v, want error 9009", tb, err)
		}
		// Reads work.
		if got := queryString(t, conn, "SELECT GROUP_CONCAT(v ORDER BY id) FROM "+tb); got != "10,20" {
			t.Errorf("SELECT from %s: %q", tb, got)
		}
		if got := queryString(t, conn, "SELECT SUM(v) FROM "+p.db+"."+tb+" WHERE id > ?", 0); got != "30" {
			t.Errorf("prepared SELECT from %s: %q", tb, got)
		}
	}
	if after := tablesState(t, d, p.db); after != before {
		t.Errorf("holdfast's tables changed:\nbefore %s\nafter %s", before, after)
	}
	// The session is still usable, not pinned by anything refused.
	mustExec(t, conn, "UPDATE app_t SET v = v + 1")
	if got := queryString(t, d, "SELECT GROUP_CONCAT(v ORDER BY id) FROM app_t"); got != "11,21" {
		t.Errorf("app_t after an update: %q", got)
	}
}

// A statement prepared before holdfast protected its tables is refused at
// its next execute.
func TestProtectedTablesCheckedAtExecute(t *testing.T) {
	p := startProxy(t)
	d := p.direct(t)
	mustExec(t, d, "CREATE TABLE holdfast_controls (id INT PRIMARY KEY, v INT)")
	mustExec(t, d, "INSERT INTO holdfast_controls VALUES (1, 10)")
	db := p.open(t)
	st, err := db.Prepare("UPDATE holdfast_controls SET v = v + ? WHERE id = 1")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Exec(1); err != nil {
		t.Fatal(err)
	}
	p.srv.ProtectTables(p.db, holdfastTables)
	if _, err := st.Exec(1); !is9009(err) {
		t.Fatalf("execute after ProtectTables: %v, want error 9009", err)
	}
	if got := queryString(t, d, "SELECT v FROM holdfast_controls"); got != "11" {
		t.Fatalf("v = %s, want 11 (one execute before the tables were protected)", got)
	}
	p.srv.ProtectTables("", nil)
	if _, err := st.Exec(1); err != nil {
		t.Fatalf("execute after the tables are no longer protected: %v", err)
	}
}

// Tables of the same names in another database are the application's: an
// UPDATE after USE other_db passes, in one text and in two.
func TestProtectedTablesOtherDatabase(t *testing.T) {
	p := protectedProxy(t)
	other := dbtest.NewDatabase(t)
	root := dbtest.Root(t)
	mustExec(t, root, fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", other, p.user))
	mustExec(t, root, "CREATE TABLE `"+other+"`.reservations (id INT PRIMARY KEY, v INT)")
	mustExec(t, root, "INSERT INTO `"+other+"`.reservations VALUES (1, 10)")
	conn := p.conn(t, "multiStatements=true")
	mustExec(t, conn, "USE `"+other+"`; UPDATE reservations SET v = v + 1")
	mustExec(t, conn, "UPDATE reservations SET v = v + 1")
	if _, err := conn.ExecContext(context.Background(), "UPDATE "+p.db+".reservations SET v = 99"); !is9009(err) {
		t.Fatalf("qualified UPDATE of holdfast's table from another database: %v, want 9009", err)
	}
	mustExec(t, conn, "USE "+p.db)
	if _, err := conn.ExecContext(context.Background(), "UPDATE reservations SET v = 99"); !is9009(err) {
		t.Fatalf("UPDATE of holdfast's table after USE back: %v, want 9009", err)
	}
	if got := queryString(t, root, "SELECT v FROM `"+other+"`.reservations"); got != "12" {
		t.Fatalf("the application's reservations: v = %s, want 12", got)
	}
	if got := queryString(t, root, "SELECT GROUP_CONCAT(v ORDER BY id) FROM `"+p.db+"`.reservations"); got != "10,20" {
		t.Fatalf("holdfast's reservations: %s, want 10,20", got)
	}
}

// A KILL hidden in EXECUTE IMMEDIATE's literal text is translated like
// KILL (its id is holdfast's connection id); PREPARE of one, and one built
// by an expression, are refused. None reaches the pooled backend thread
// whose id it names, which stays alive.
func TestKillCannotBeSmuggled(t *testing.T) {
	p := startProxy(t)
	db := p.open(t, "multiStatements=true")
	var tid int64
	if err := db.QueryRow("SELECT " + selfThread()).Scan(&tid); err != nil || tid == 0 {
		t.Fatalf("backend thread: %d %v", tid, err)
	}
	alive := func() bool {
		var n int
		if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?", tid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	id := strconv.FormatInt(tid, 10)
	_, plain := db.Exec("KILL " + id) // what KILL of that id answers through holdfast
	if !alive() {
		t.Fatal("a plain KILL reached the backend thread")
	}
	for _, tt := range []struct {
		q    string
		want uint16 // 0: as the plain KILL
	}{
		{"EXECUTE IMMEDIATE 'KILL " + id + "'", 0},
		{"EXECUTE IMMEDIATE 'KILL CONNECTION " + id + "';", 0},
		{"EXECUTE IMMEDIATE 'KILL QUERY " + id + "'", 0},
		{"execute immediate 'kill ' '" + id + "'", 0},
		{"EXECUTE IMMEDIATE _utf8mb4'KILL " + id + "'", 0},
		{"EXECUTE IMMEDIATE 'EXECUTE IMMEDIATE ''KILL " + id + "'''", 0},
		{"EXECUTE IMMEDIATE X'" + fmt.Sprintf("%X", "KILL "+id) + "'", 0},
		{"SELECT 1; EXECUTE IMMEDIATE 'KILL " + id + "'", 0},
		{"PREPARE s FROM 'KILL QUERY " + id + "'", codeUnsupportedPS},
		{"PREPARE s FROM 'KILL " + id + "'; EXECUTE s", codeUnsupportedPS},
		{"EXECUTE IMMEDIATE CONCAT('KILL ', " + id + ")", codeNotSupported},
		{"EXECUTE IMMEDIATE 'KILL ?' USING " + id, codeNotSupported},
		{"BEGIN NOT ATOMIC EXECUTE IMMEDIATE 'KILL " + id + "'; END", codeNotSupported},
	} {
		_, err := db.Exec(tt.q)
		switch {
		case tt.want == 0 && mysqlErrNo(err) != mysqlErrNo(plain):
			t.Errorf("%s: %v; want what KILL answers: %v", tt.q, err, plain)
		case tt.want != 0 && mysqlErrNo(err) != tt.want:
			t.Errorf("%s: %v, want error %d", tt.q, err, tt.want)
		}
		if !alive() {
			t.Fatalf("%s killed the pooled backend thread %s", tt.q, id)
		}
	}
	// Dynamic statements that hold no KILL run as usual.
	for _, q := range []string{"EXECUTE IMMEDIATE CONCAT('SELECT ', '''kill''', ', 1')", "EXECUTE IMMEDIATE 'SELECT ''KILL 1'''"} {
		if _, err := db.Exec(q); err != nil {
			t.Errorf("%s: %v", q, err)
		}
	}
	// Translated, it reaches holdfast's own client: EXECUTE IMMEDIATE
	// 'KILL QUERY <client id>' interrupts that client's statement.
	victim := p.conn(t)
	var vid int64
	if err := victim.QueryRowContext(context.Background(), "SELECT CONNECTION_ID()").Scan(&vid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var v int
		done <- victim.QueryRowContext(context.Background(), "SELECT SLEEP(20)").Scan(&v)
	}()
	waitFor(t, "the victim's SLEEP to run", func() bool {
		var n int
		_ = dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(20)'").Scan(&n)
		return n == 1
	})
	if _, err := db.Exec(fmt.Sprintf("EXECUTE IMMEDIATE 'KILL QUERY %d'", vid)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil && mysqlErrNo(err) != codeQueryInterrupted {
		t.Fatalf("the victim's statement: %v", err)
	}
}
