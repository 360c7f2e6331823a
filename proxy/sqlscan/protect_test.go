package sqlscan

import (
	"bytes"
	"strings"
	"testing"
)

// holdfastTables are holdfast's own tables (reservation/schema.go), which
// cmd/holdfast protects.
var holdfastTables = []string{
	"inventory_ledger", "reservation_units", "reserved_quantities", "reservations", "pool_counters",
	"reservation_returns", "holdfast_schema_migrations", "holdfast_authority", "holdfast_redis_state",
	"holdfast_controls", "holdfast_members", "holdfast_cap_grants", "holdfast_duties",
}

var testProtected = NewProtected("holdfast", holdfastTables)

type protCase struct {
	sql    string
	db     string // "" means "holdfast", the protected schema; "-" none
	mode   Mode
	table  string // the table refused; "" passes
	unsure bool
}

var protTests = []protCase{
	// Writes of every kind.
	{sql: "INSERT INTO holdfast_controls (tag, kind, value, set_by, reason, set_at, expires_at) VALUES ('checkout','drain',0,'oncall-lead','INC-1',NOW(6),NULL)", table: "holdfast_controls"},
	{sql: "INSERT holdfast_controls SET tag = 'x'", table: "holdfast_controls"},
	{sql: "insert ignore into `holdfast_controls` values (1)", table: "holdfast_controls"},
	{sql: "INSERT LOW_PRIORITY IGNORE INTO HOLDFAST_CONTROLS VALUES (1)", table: "holdfast_controls"},
	{sql: "REPLACE INTO holdfast.holdfast_members VALUES (1)", db: "app", table: "holdfast_members"},
	{sql: "REPLACE holdfast_members SET id = 1", table: "holdfast_members"},
	{sql: "INSERT INTO app_t SELECT * FROM reservations", table: "reservations"},
	{sql: "INSERT INTO holdfast_controls (tag) VALUES ('x') ON DUPLICATE KEY UPDATE value = 1", table: "holdfast_controls"},
	{sql: "INSERT INTO app_t (a) VALUES ((SELECT COUNT(*) FROM holdfast_members))", table: "holdfast_members"},
	{sql: "INSERT INTO app_t TABLE reservations", table: "reservations"},
	{sql: "UPDATE reservation_units SET quantity = 0", table: "reservation_units"},
	{sql: "UPDATE LOW_PRIORITY IGNORE app_t, reserved_quantities SET app_t.a = 1", table: "reserved_quantities"},
	{sql: "UPDATE app_t JOIN holdfast.reservations r ON r.id = app_t.id SET app_t.a = r.b", db: "app", table: "reservations"},
	{sql: "UPDATE app_t SET a = (SELECT COUNT(*) FROM pool_counters)", table: "pool_counters"},
	{sql: "UPDATE app_t, (SELECT id FROM reservations) AS r SET app_t.a = r.id", table: "reservations"},
	{sql: "UPDATE `holdfast`.`reservations` SET a = 1", db: "app", table: "reservations"},
	{sql: "UPDATE holdfast . reservations SET a = 1", db: "app", table: "reservations"},
	{sql: "UPDATE /* x */ holdfast_controls SET value = 0", table: "holdfast_controls"},
	{sql: "/*!50000 UPDATE holdfast_controls SET value = 0 */", table: "holdfast_controls"},
	{sql: "UPDATE reservations SET a = 1", db: "HOLDFAST", table: "reservations"},
	{sql: "DELETE FROM reservations WHERE 1", table: "reservations"},
	{sql: "DELETE FROM holdfast_controls PARTITION (p0)", table: "holdfast_controls"},
	{sql: "DELETE r FROM reservations r JOIN app_t a ON a.id = r.id", table: "reservations"},
	{sql: "DELETE app_t FROM app_t JOIN holdfast.holdfast_duties d ON d.id = app_t.id", db: "app", table: "holdfast_duties"},
	{sql: "DELETE FROM app_t USING app_t JOIN holdfast_duties", table: "holdfast_duties"},
	{sql: "DELETE FROM app_t USING app_t, holdfast_duties", table: "holdfast_duties"},
	{sql: "DELETE QUICK FROM app_t WHERE id IN (SELECT id FROM holdfast.holdfast_duties)", db: "app", table: "holdfast_duties"},
	{sql: "DELETE FROM app_t WHERE x = ANY (SELECT id FROM holdfast_duties)", table: "holdfast_duties"},
	{sql: "TRUNCATE holdfast_cap_grants", table: "holdfast_cap_grants"},
	{sql: "TRUNCATE TABLE HOLDFAST_CAP_GRANTS", table: "holdfast_cap_grants"},
	{sql: "LOAD DATA INFILE '/tmp/x' INTO TABLE inventory_ledger", table: "inventory_ledger"},
	{sql: "LOAD DATA LOCAL INFILE '/tmp/x' REPLACE INTO TABLE holdfast.inventory_ledger (a, b)", db: "app", table: "inventory_ledger"},
	{sql: "LOAD XML INFILE '/tmp/x' INTO TABLE reservations", table: "reservations"},
	// DDL and maintenance.
	{sql: "ALTER TABLE holdfast_authority ADD COLUMN x INT", table: "holdfast_authority"},
	{sql: "ALTER ONLINE IGNORE TABLE holdfast_authority ENGINE = InnoDB", table: "holdfast_authority"},
	{sql: "DROP TABLE IF EXISTS app_t, holdfast_redis_state", table: "holdfast_redis_state"},
	{sql: "DROP TEMPORARY TABLE holdfast_controls", table: "holdfast_controls"},
	{sql: "RENAME TABLE app_t TO holdfast_controls", table: "holdfast_controls"},
	{sql: "RENAME TABLE app_t TO app_u, holdfast_controls TO x", table: "holdfast_controls"},
	{sql: "ALTER TABLE app_t RENAME TO holdfast_controls", table: "holdfast_controls"},
	{sql: "ALTER TABLE app_t RENAME AS holdfast.holdfast_controls", db: "app", table: "holdfast_controls"},
	{sql: "CREATE TABLE x LIKE holdfast_controls", table: "holdfast_controls"},
	{sql: "CREATE TABLE x (LIKE holdfast_controls)", table: "holdfast_controls"},
	{sql: "CREATE TABLE x AS SELECT * FROM reservations", table: "reservations"},
	{sql: "CREATE TABLE holdfast_controls (a INT)", table: "holdfast_controls"},
	{sql: "CREATE TABLE IF NOT EXISTS holdfast.holdfast_controls (a INT)", db: "app", table: "holdfast_controls"},
	{sql: "CREATE OR REPLACE VIEW v AS SELECT * FROM holdfast.holdfast_controls", db: "app", table: "holdfast_controls"},
	{sql: "CREATE INDEX i ON reservations (a)", table: "reservations"},
	{sql: "DROP INDEX i ON reservations", table: "reservations"},
	{sql: "CREATE TABLE t (a INT, FOREIGN KEY (a) REFERENCES reservations (id))", table: "reservations"},
	{sql: "GRANT SELECT ON holdfast.holdfast_controls TO app", db: "app", table: "holdfast_controls"},
	{sql: "OPTIMIZE TABLE reservations", table: "reservations"},
	{sql: "ANALYZE TABLE reservations", table: "reservations"},
	{sql: "REPAIR NO_WRITE_TO_BINLOG TABLE reservations", table: "reservations"},
	{sql: "FLUSH TABLES holdfast_controls WITH READ LOCK", table: "holdfast_controls"},
	{sql: "DROP DATABASE holdfast", db: "app"},
	{sql: "drop schema if exists `HoldFast`", db: "app"},
	// Locks.
	{sql: "LOCK TABLES reservations READ", table: "reservations"},
	{sql: "LOCK TABLE app_t WRITE, holdfast.holdfast_members AS m READ", db: "app", table: "holdfast_members"},
	{sql: "HANDLER holdfast_controls OPEN", table: "holdfast_controls"},
	{sql: "SELECT * FROM holdfast_controls FOR UPDATE", table: "holdfast_controls"},
	{sql: "SELECT * FROM holdfast_controls WHERE tag = 'x' FOR SHARE SKIP LOCKED", table: "holdfast_controls"},
	{sql: "SELECT * FROM holdfast.holdfast_controls LOCK IN SHARE MODE", db: "app", table: "holdfast_controls"},
	{sql: "SELECT * FROM app_t WHERE id IN (SELECT id FROM reservations) FOR UPDATE", table: "reservations"},
	{sql: "SELECT * FROM app_t JOIN holdfast_controls FOR UPDATE NOWAIT", table: "holdfast_controls"},
	{sql: "(SELECT * FROM reservations FOR UPDATE) UNION (SELECT 1)", table: "reservations"},
	{sql: "DO (SELECT id FROM reservations FOR UPDATE)", table: "reservations"},
	{sql: "SET @x = (SELECT value FROM holdfast_controls LIMIT 1 FOR UPDATE)", table: "holdfast_controls"},
	{sql: "WITH c AS (SELECT * FROM reservations) SELECT * FROM c FOR UPDATE", table: "reservations"},
	// Several statements, the current database.
	{sql: "SELECT 1; DELETE FROM holdfast_controls", table: "holdfast_controls"},
	{sql: "USE holdfast; UPDATE reservations SET a = 1", db: "app", table: "reservations"},
	{sql: "USE `holdfast`; UPDATE reservations SET a = 1", db: "app", table: "reservations"},
	{sql: "WITH c AS (SELECT 1) UPDATE holdfast_controls SET value = 1", table: "holdfast_controls"},
	{sql: "EXPLAIN DELETE FROM holdfast_controls", table: "holdfast_controls"},
	// What holdfast cannot tell, it refuses when the name appears.
	{sql: "CREATE TRIGGER tr BEFORE INSERT ON app_t FOR EACH ROW UPDATE holdfast_controls SET value = 0", table: "holdfast_controls", unsure: true},
	{sql: "CREATE TRIGGER tr BEFORE INSERT ON app_t FOR EACH ROW UPDATE holdfast.holdfast_controls SET value = 0", db: "app", table: "holdfast_controls", unsure: true},
	{sql: "CREATE PROCEDURE p() BEGIN SELECT 1; DELETE FROM holdfast_controls; END", table: "holdfast_controls"},
	{sql: "CREATE PROCEDURE p() UPDATE holdfast_controls SET value = 0", table: "holdfast_controls", unsure: true},
	{sql: "CREATE DEFINER = CURRENT_USER EVENT e ON SCHEDULE EVERY 1 DAY DO UPDATE holdfast_duties SET x = 1", table: "holdfast_duties", unsure: true},
	{sql: "BEGIN NOT ATOMIC UPDATE holdfast_controls SET value = 0; END", table: "holdfast_controls", unsure: true},
	{sql: "IF 1 THEN DELETE FROM holdfast_controls; END IF", table: "holdfast_controls", unsure: true},
	{sql: "lbl: LOOP UPDATE holdfast_controls SET value = 0; END LOOP", table: "holdfast_controls", unsure: true},
	{sql: "BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR SQLEXCEPTION UPDATE holdfast_controls SET value = 0; SELECT 1; END", table: "holdfast_controls", unsure: true},
	{sql: "BEGIN NOT ATOMIC SELECT 1; DROP DATABASE holdfast; END", db: "app", unsure: false},
	{sql: "SET STATEMENT max_statement_time = 1 FOR UPDATE holdfast_controls SET value = 0", table: "holdfast_controls", unsure: true},
	{sql: "BACKUP LOCK holdfast.reservations", db: "app", table: "reservations", unsure: true},
	// Dynamic statements.
	{sql: "EXECUTE IMMEDIATE 'DELETE FROM holdfast_controls'", table: "holdfast_controls"},
	{sql: "PREPARE s FROM 'UPDATE holdfast_controls SET value = 0'", table: "holdfast_controls"},
	{sql: "EXECUTE IMMEDIATE 'INSERT INTO holdfast_controls VALUES (''x'')'", table: "holdfast_controls"},
	{sql: "EXECUTE IMMEDIATE 'DELETE FROM ' 'holdfast_controls'", table: "holdfast_controls"},
	{sql: "EXECUTE IMMEDIATE _utf8mb4'DELETE FROM holdfast_controls'", table: "holdfast_controls"},
	{sql: "EXECUTE IMMEDIATE X'44454C4554452046524F4D20686F6C64666173745F636F6E74726F6C73'", table: "holdfast_controls"},
	{sql: "EXECUTE IMMEDIATE 'EXECUTE IMMEDIATE ''DELETE FROM holdfast_controls'''", table: "holdfast_controls"},
	{sql: "EXECUTE IMMEDIATE 'UPDATE holdfast_controls SET reason = ?' USING 'x'", table: "holdfast_controls"},
	{sql: "EXECUTE IMMEDIATE CONCAT('DELETE FROM ', 'holdfast_controls')", table: "holdfast_controls", unsure: true},
	{sql: "EXECUTE IMMEDIATE CONCAT('UPDATE holdfast_controls SET value = ', @v)", table: "holdfast_controls", unsure: true},
	{sql: "PREPARE s FROM CONCAT('DELETE FROM holdfast', '.holdfast_controls')", db: "app", table: "holdfast_controls", unsure: true},
	{sql: "USE holdfast; EXECUTE IMMEDIATE 'DELETE FROM holdfast_controls'", db: "app", table: "holdfast_controls"},
	{sql: "CREATE PROCEDURE p() EXECUTE IMMEDIATE 'DELETE FROM holdfast_controls'", db: "app", table: ""},
	{sql: "BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR SQLEXCEPTION EXECUTE IMMEDIATE 'DELETE FROM holdfast_controls'; SELECT 1; END", table: "holdfast_controls"},
	// sql_mode decides what is a literal.
	{sql: `SELECT 'C:\'; DELETE FROM holdfast_controls; -- '`, table: ""},
	{sql: `SELECT 'C:\'; DELETE FROM holdfast_controls; -- '`, mode: NoBackslashEscapes, table: "holdfast_controls"},
	{sql: `UPDATE "holdfast_controls" SET value = 0`, table: ""},
	{sql: `UPDATE "holdfast_controls" SET value = 0`, mode: ANSIQuotes, table: "holdfast_controls"},
	{sql: `EXECUTE IMMEDIATE 'SELECT ''C:\'' ; DELETE FROM holdfast_controls'`, table: "holdfast_controls"},
	{sql: `EXECUTE IMMEDIATE 'SELECT ''C:\\'' ; DELETE FROM holdfast_controls'`, table: ""},
	{sql: `EXECUTE IMMEDIATE 'SELECT ''C:\\'' ; DELETE FROM holdfast_controls'`, mode: NoBackslashEscapes, table: "holdfast_controls"},

	// Reads pass.
	{sql: "SELECT * FROM holdfast_controls"},
	{sql: "SELECT * FROM holdfast.reservations", db: "app"},
	{sql: "SELECT r.* FROM reservations r JOIN app_t a ON a.id = r.id WHERE r.id IN (SELECT id FROM holdfast_duties)"},
	{sql: "SHOW CREATE TABLE holdfast_controls"},
	{sql: "SHOW COLUMNS FROM holdfast.holdfast_controls", db: "app"},
	{sql: "DESCRIBE reservations"},
	{sql: "EXPLAIN SELECT * FROM reservations"},
	{sql: "EXPLAIN FORMAT=JSON SELECT * FROM reservations"},
	{sql: "TABLE reservations"},
	{sql: "WITH c AS (SELECT * FROM reservations) SELECT * FROM c"},
	{sql: "SELECT * FROM reservations INTO OUTFILE '/tmp/x'"},
	{sql: "SELECT * FROM reservations FOR SYSTEM_TIME ALL"},
	{sql: "CHECKSUM TABLE reservations"},
	{sql: "CALL app_proc((SELECT COUNT(*) FROM reservations))"},
	{sql: "SET @n = (SELECT COUNT(*) FROM reservations)"},
	{sql: "EXECUTE IMMEDIATE 'SELECT * FROM holdfast_controls'"},
	{sql: "EXECUTE IMMEDIATE CONCAT('SELECT * FROM ', 'holdfast_controls')"},
	{sql: "PREPARE s FROM @sql"},
	{sql: "EXECUTE s"},
	// Other databases' tables of the same names, and names that are not
	// tables.
	{sql: "USE app; UPDATE reservations SET a = 1"},
	{sql: "UPDATE reservations SET a = 1", db: "other_db"},
	{sql: "UPDATE other_db.reservations SET a = 1"},
	{sql: "DELETE FROM reservations", db: "-"},
	{sql: "LOCK TABLES reservations WRITE", db: "app"},
	{sql: "SELECT * FROM reservations FOR UPDATE", db: "app"},
	{sql: "UPDATE app_t SET reservations = reservations + 1"},
	{sql: "INSERT INTO app_t (reservations, pool_counters) VALUES (1, 2)"},
	{sql: "INSERT INTO app_t SET reservations = 1, pool_counters = 2"},
	{sql: "UPDATE app_t AS reservations SET reservations.a = 1"},
	{sql: "UPDATE app_t SET a = EXTRACT(YEAR FROM reservations)"},
	{sql: "UPDATE app_t SET a = TRIM(LEADING 'x' FROM reservations), b = SUBSTRING(c FROM 2)"},
	{sql: "SELECT reservations FROM app_t FOR UPDATE"},
	{sql: "DELETE FROM app_t WHERE note = 'holdfast_controls'"},
	{sql: "INSERT INTO app_t SELECT 'reservations'"},
	{sql: "CREATE TABLE app_t (reservations INT)"},
	{sql: "ALTER TABLE app_t ADD COLUMN reservations INT"},
	{sql: "DROP DATABASE app"},
	{sql: "SAVEPOINT reservations"},
	{sql: "HANDLER app_t OPEN AS holdfast_controls"},
	{sql: "SELECT * FROM holdfast_controls -- FOR UPDATE"},
	{sql: "UPDATE app_t SET note = 'x' WHERE id IN (1, 2) /* FROM reservations */"},
	{sql: "INSERT INTO app_t (a, b) SELECT x, reservations FROM app_u"},
}

func TestCheckProtected(t *testing.T) {
	for _, tt := range protTests {
		db := tt.db
		switch db {
		case "":
			db = "holdfast"
		case "-":
			db = ""
		}
		r, refused := tt.mode.CheckProtected([]byte(tt.sql), testProtected, db)
		wantRefused := tt.table != "" || strings.Contains(strings.ToUpper(tt.sql), "DROP DATABASE HOLDFAST") ||
			strings.Contains(strings.ToUpper(tt.sql), "DROP SCHEMA IF EXISTS `HOLDFAST`")
		switch {
		case refused != wantRefused:
			t.Errorf("CheckProtected(%q, db %q, mode %d) = %+v, %v; want refused %v", tt.sql, db, tt.mode, r, refused, wantRefused)
		case refused && (r.Table != tt.table || r.Unsure != tt.unsure || r.Schema != "holdfast"):
			t.Errorf("CheckProtected(%q, db %q) = %+v; want table %q, unsure %v", tt.sql, db, r, tt.table, tt.unsure)
		case refused && r.Unsure && r.Where == "":
			t.Errorf("CheckProtected(%q) = %+v: unsure without where", tt.sql, r)
		}
		// The fast path marks every text the slow path may refuse.
		info := tt.mode.ScanProtected([]byte(tt.sql), testProtected)
		if refused && !info.NamesProtected && info.Features&(FeatExecImmediate|FeatSQLPrepare) == 0 {
			t.Errorf("ScanProtected(%q) does not mark a text CheckProtected refuses", tt.sql)
		}
	}
}

func TestScanNamesProtected(t *testing.T) {
	for _, tt := range []struct {
		sql  string
		want bool
	}{
		{"SELECT * FROM holdfast_controls", true},
		{"UPDATE `HOLDFAST_CONTROLS` SET a = 1", true},
		{"UPDATE holdfast.reservations SET a = 1", true},
		{"SELECT a.reservations FROM t AS a", true},
		{"DROP DATABASE x", true},
		{"BEGIN NOT ATOMIC DROP SCHEMA x; END", true},
		{"SELECT 'holdfast_controls', `holdfast_control`, holdfast_controls_x /* reservations */", false},
		{"SELECT id, name, price, stock FROM products WHERE shop_id = 42 AND id = 1001", false},
		{"INSERT INTO reserved (quantities) VALUES (1)", false},
		{"EXECUTE IMMEDIATE 'DELETE FROM holdfast_controls'", false},
	} {
		if got := ScanProtected(tt.sql).NamesProtected; got != tt.want {
			t.Errorf("ScanProtected(%q).NamesProtected = %v, want %v", tt.sql, got, tt.want)
		}
		if Scan([]byte(tt.sql)).NamesProtected {
			t.Errorf("Scan(%q) without a Protected set NamesProtected", tt.sql)
		}
	}
}

// ScanProtected is Mode(0).ScanProtected of a string with testProtected.
func ScanProtected(sql string) Info { return Mode(0).ScanProtected([]byte(sql), testProtected) }

func TestScanProtectedDoesNotAllocate(t *testing.T) {
	for _, sql := range append(typical, "UPDATE holdfast_controls SET value = 0", "SELECT * FROM `reservations`") {
		b := []byte(sql)
		if n := testing.AllocsPerRun(100, func() { Mode(0).ScanProtected(b, testProtected) }); n != 0 {
			t.Errorf("ScanProtected(%q) allocates %v times", sql, n)
		}
		// Apart from NamesProtected, it is Scan.
		a, b2 := Mode(0).ScanProtected(b, testProtected), Scan(b)
		a.NamesProtected = false
		if a != b2 {
			t.Errorf("ScanProtected(%q) = %+v, Scan %+v", sql, a, b2)
		}
	}
}

func TestNewProtected(t *testing.T) {
	if NewProtected("", holdfastTables) != nil || NewProtected("holdfast", nil) != nil || NewProtected("x", []string{""}) != nil {
		t.Error("NewProtected of nothing is not nil")
	}
	p := NewProtected("HoldFast", []string{"A_Table", "a_table", "b"})
	if p.Schema() != "holdfast" || strings.Join(p.Tables(), ",") != "a_table,b" {
		t.Errorf("NewProtected = %q %q", p.Schema(), p.Tables())
	}
	var none *Protected
	if _, refused := Mode(0).CheckProtected([]byte("DROP TABLE x"), none, "x"); refused {
		t.Error("a nil Protected refuses")
	}
	if Mode(0).ScanProtected([]byte("DROP DATABASE x"), nil).NamesProtected {
		t.Error("a nil Protected marks")
	}
}

func TestAppendDynamic(t *testing.T) {
	for _, tt := range []struct {
		sql  string
		mode Mode
		want []Dynamic
	}{
		{"EXECUTE IMMEDIATE 'KILL 5'", 0, []Dynamic{{Literal: true, Text: []byte("KILL 5"), Whole: true}}},
		{"execute immediate 'KILL 5' ; -- x", 0, []Dynamic{{Literal: true, Text: []byte("KILL 5"), Whole: true}}},
		{"/* c */ EXECUTE IMMEDIATE 'KILL ' \"5\"", 0, []Dynamic{{Literal: true, Text: []byte("KILL 5"), Whole: true}}},
		{"EXECUTE IMMEDIATE 'KILL 5'; SELECT 1", 0, []Dynamic{{Literal: true, Text: []byte("KILL 5")}}},
		{"SELECT 1; EXECUTE IMMEDIATE 'KILL 5'", 0, []Dynamic{{Literal: true, Text: []byte("KILL 5")}}},
		{"EXECUTE IMMEDIATE 'KILL ?' USING 5", 0, []Dynamic{{Literal: true, Text: []byte("KILL ?"), Using: true}}},
		{"PREPARE s FROM 'KILL QUERY 5'", 0, []Dynamic{{Prepare: true, Literal: true, Text: []byte("KILL QUERY 5"), Whole: true}}},
		{"PREPARE `s` FROM _latin1 'KILL 5'", 0, []Dynamic{{Prepare: true, Literal: true, Text: []byte("KILL 5"), Whole: true}}},
		{"EXECUTE IMMEDIATE X'4B494C4C2035'", 0, []Dynamic{{Literal: true, Text: []byte("KILL 5"), Whole: true}}},
		{"EXECUTE IMMEDIATE 'it''s \\'x\\''", 0, []Dynamic{{Literal: true, Text: []byte("it's 'x'"), Whole: true}}},
		{`EXECUTE IMMEDIATE 'C:\'`, NoBackslashEscapes, []Dynamic{{Literal: true, Text: []byte(`C:\`), Whole: true}}},
		{"EXECUTE IMMEDIATE CONCAT('KILL ', @id)", 0, []Dynamic{{Parts: [][]byte{[]byte("KILL ")}}}},
		{"PREPARE s FROM @sql", 0, []Dynamic{{Prepare: true}}},
		{"EXECUTE IMMEDIATE _ucs2 X'004B'", 0, []Dynamic{{Parts: [][]byte{{0, 'K'}}}}},
		{"EXECUTE IMMEDIATE ('KILL 5')", 0, []Dynamic{{Parts: [][]byte{[]byte("KILL 5")}}}},
		{"BEGIN NOT ATOMIC EXECUTE IMMEDIATE 'KILL 5'; END", 0, []Dynamic{{Literal: true, Text: []byte("KILL 5")}}},
		{"EXECUTE s", 0, nil},
		{"SELECT 'EXECUTE IMMEDIATE ''KILL 5'''", 0, nil},
		{"SELECT db.execute immediate", 0, nil},
	} {
		got := tt.mode.AppendDynamic(nil, []byte(tt.sql))
		if !sameDynamic(got, tt.want) {
			t.Errorf("AppendDynamic(%q) = %+v, want %+v", tt.sql, got, tt.want)
		}
	}
}

func sameDynamic(a, b []Dynamic) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Prepare != y.Prepare || x.Literal != y.Literal || x.Using != y.Using || x.Whole != y.Whole ||
			!bytes.Equal(x.Text, y.Text) || len(x.Parts) != len(y.Parts) {
			return false
		}
		for j := range x.Parts {
			if !bytes.Equal(x.Parts[j], y.Parts[j]) {
				return false
			}
		}
	}
	return true
}

// FuzzCheckProtected checks that CheckProtected does not panic, is
// deterministic, leaves its input alone, and never refuses a text that
// ScanProtected did not mark: the fast path sees every text the slow path
// may refuse.
func FuzzCheckProtected(f *testing.F) {
	for _, tt := range protTests {
		f.Add([]byte(tt.sql), uint8(tt.mode))
	}
	f.Fuzz(func(t *testing.T, sql []byte, mode uint8) {
		m := Mode(mode) & (NoBackslashEscapes | ANSIQuotes)
		orig := bytes.Clone(sql)
		r, refused := m.CheckProtected(sql, testProtected, "holdfast")
		if !bytes.Equal(sql, orig) {
			t.Fatalf("input modified")
		}
		if r2, again := m.CheckProtected(sql, testProtected, "holdfast"); r2 != r || again != refused {
			t.Fatalf("not deterministic: %+v then %+v", r, r2)
		}
		info := m.ScanProtected(sql, testProtected)
		if refused && !info.NamesProtected && info.Features&(FeatExecImmediate|FeatSQLPrepare) == 0 {
			t.Fatalf("refused (%+v) a text ScanProtected did not mark: %+v", r, info)
		}
		if refused && (r.Schema != "holdfast" || r.Unsure && r.Where == "") {
			t.Fatalf("bad refusal %+v", r)
		}
		m.AppendDynamic(nil, sql)
		if !bytes.Equal(sql, orig) {
			t.Fatalf("input modified by AppendDynamic")
		}
	})
}
