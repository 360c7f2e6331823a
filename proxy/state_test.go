package proxy

import (
	"context"
	"database/sql"
	"testing"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// twoBackends is a proxy with exactly two backend connections, so a test
// can steer a client onto the other one.
func twoBackends(t *testing.T) *testProxy {
	return startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 2, 2 })
}

func backendThread(t *testing.T, c *sql.Conn) string {
	t.Helper()
	return queryString(t, c, "SELECT "+selfThread())
}

// grab makes other take the backend connection returned most recently (the
// pool lends the most recently returned one first) and hold it inside a
// transaction until the returned function is called.
func grab(t *testing.T, other *sql.Conn) func() {
	t.Helper()
	mustExec(t, other, "BEGIN")
	queryString(t, other, "SELECT 1")
	return func() { mustExec(t, other, "ROLLBACK") }
}

func TestRestoredVariables(t *testing.T) {
	cases := []struct {
		name, set, check, want, dflt string
	}{
		{"names", "SET NAMES latin1", "SELECT CONCAT_WS(',', @@character_set_client, @@character_set_connection, @@character_set_results, @@collation_connection)", "latin1,latin1,latin1,latin1_swedish_ci", "utf8mb4,utf8mb4,utf8mb4,utf8mb4_general_ci"},
		{"names_collate", "SET NAMES utf8mb4 COLLATE utf8mb4_bin", "SELECT @@collation_connection", "utf8mb4_bin", "utf8mb4_general_ci"},
		{"results_null", "SET character_set_results = NULL", "SELECT IFNULL(@@character_set_results, 'NULL')", "NULL", "utf8mb4"},
		{"time_zone", "SET time_zone = '+05:30'", "SELECT @@time_zone", "+05:30", "SYSTEM"},
		{"sql_mode", "SET sql_mode = 'ANSI_QUOTES,NO_ZERO_DATE'", "SELECT @@sql_mode", "ANSI_QUOTES,NO_ZERO_DATE", ""},
		{"isolation", "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED", "SELECT @@tx_isolation", "READ-COMMITTED", "REPEATABLE-READ"},
		{"read_only", "SET SESSION TRANSACTION READ ONLY", "SELECT @@tx_read_only", "1", "0"},
		{"numeric", "SET max_error_count = 123", "SELECT @@max_error_count", "123", "64"},
		{"decimal", "SET max_statement_time = 2.5", "SELECT @@max_statement_time", "2.5", ""},
		{"select_limit", "SET sql_select_limit = 7", "SELECT @@sql_select_limit", "7", ""},
		{"at_at_session", "SET @@session.foreign_key_checks = 0", "SELECT @@foreign_key_checks", "0", "1"},
		{"several", "SET group_concat_max_len = 100000, div_precision_increment = 9", "SELECT CONCAT(@@group_concat_max_len, '/', @@div_precision_increment)", "100000/9", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := twoBackends(t)
			a, b := p.conn(t), p.conn(t)
			before := backendThread(t, a)
			dflt := queryString(t, b, tc.check)
			if tc.dflt != "" && dflt != tc.dflt {
				t.Fatalf("default %q, want %q", dflt, tc.dflt)
			}
			mustExec(t, a, tc.set)
			done := grab(t, b) // b takes a's backend connection
			if got := queryString(t, b, tc.check); got != dflt {
				t.Fatalf("the other client sees %q after %s, want its own %q", got, tc.set, dflt)
			}
			after := backendThread(t, a)
			if after == before {
				t.Fatalf("client stayed on backend thread %s; the test needs it moved", before)
			}
			if got := queryString(t, a, tc.check); got != tc.want {
				t.Fatalf("after moving to another backend connection: %q, want %q", got, tc.want)
			}
			done()
			if st := p.srv.Stats(); len(st.Pins) != 0 {
				t.Fatalf("%s pinned the session: %v", tc.set, st.Pins)
			}
		})
	}
}

func TestRestoredDatabase(t *testing.T) {
	p := twoBackends(t)
	other := dbtest.NewDatabase(t)
	mustExec(t, dbtest.Root(t), "GRANT ALL ON `"+other+"`.* TO '"+p.user+"'@'%'")
	a, b := p.conn(t), p.conn(t)
	mustExec(t, a, "USE "+other)
	done := grab(t, b)
	defer done()
	if got := queryString(t, b, "SELECT DATABASE()"); got != p.db {
		t.Fatalf("other client in %q, want %q", got, p.db)
	}
	if got := queryString(t, a, "SELECT DATABASE()"); got != other {
		t.Fatalf("client in %q after moving, want %q", got, other)
	}
}

func TestAutocommitOff(t *testing.T) {
	p := twoBackends(t)
	a, b := p.conn(t), p.conn(t)
	mustExec(t, a, "CREATE TABLE t (id INT PRIMARY KEY)")
	mustExec(t, a, "SET autocommit = 0")
	done := grab(t, b)
	// With autocommit off, the first statement opens a transaction: the
	// client must hold its backend connection until COMMIT.
	mustExec(t, a, "INSERT INTO t VALUES (1)")
	tid := backendThread(t, a)
	if got := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t"); got != "0" {
		t.Fatalf("uncommitted row visible: %s", got)
	}
	if got := queryString(t, a, "SELECT @@autocommit"); got != "0" {
		t.Fatalf("autocommit %s", got)
	}
	if backendThread(t, a) != tid {
		t.Fatal("client changed backend connection inside an implicit transaction")
	}
	mustExec(t, a, "COMMIT")
	done()
	if got := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t"); got != "1" {
		t.Fatalf("after COMMIT %s rows", got)
	}
}

func TestSetTransactionHoldsNextStatement(t *testing.T) {
	p := twoBackends(t)
	a, b := p.conn(t), p.conn(t)
	mustExec(t, a, "CREATE TABLE t (id INT PRIMARY KEY)")
	mustExec(t, a, "SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
	// b would take the connection a just used, were a not holding it.
	done := grab(t, b)
	defer done()
	mustExec(t, a, "START TRANSACTION")
	queryString(t, a, "SELECT COUNT(*) FROM t LOCK IN SHARE MODE")
	if got := queryString(t, a, "SELECT trx_isolation_level FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = "+selfThread()); got != "READ COMMITTED" {
		t.Fatalf("transaction isolation %q: SET TRANSACTION was applied on another backend connection", got)
	}
	mustExec(t, a, "COMMIT")
}

func TestPinReasons(t *testing.T) {
	cases := []struct {
		reason string
		setup  string // run directly before the test, in the test database
		stmts  []string
		check  string // still works after the client would have moved
		want   string
		leak   string // a fresh client must not see this (empty: skip)
	}{
		{"user_variable", "", []string{"SET @pinned = 42"}, "SELECT @pinned", "42", "SELECT IFNULL(@pinned, 'none')"},
		{"user_variable", "", []string{"SELECT 7 INTO @into"}, "SELECT @into", "7", "SELECT IFNULL(@into, 'none')"},
		{"temporary_table", "", []string{"CREATE TEMPORARY TABLE tmp (a INT)", "INSERT INTO tmp VALUES (5)"}, "SELECT a FROM tmp", "5", "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_NAME = 'tmp' AND TABLE_TYPE = 'TEMPORARY'"},
		{"get_lock", "", []string{"SELECT GET_LOCK('hf_pin_lock', 5)"}, "SELECT IS_USED_LOCK('hf_pin_lock') = " + selfThread(), "1", ""},
		{"lock_tables", "CREATE TABLE lt (a INT)", []string{"LOCK TABLES lt READ"}, "SELECT COUNT(*) FROM lt", "0", ""},
		{"sql_prepare", "", []string{"PREPARE ps FROM 'SELECT 99'"}, "EXECUTE ps", "99", ""},
		{"found_rows", "CREATE TABLE fr (a INT); INSERT INTO fr VALUES (1),(2),(3)", []string{"SELECT SQL_CALC_FOUND_ROWS a FROM fr LIMIT 1"}, "SELECT FOUND_ROWS()", "3", ""},
		{"handler", "CREATE TABLE h (a INT); INSERT INTO h VALUES (8)", []string{"HANDLER h OPEN"}, "HANDLER h READ FIRST", "8", ""},
		{"session_state", "CREATE PROCEDURE setvar() SET @from_proc = 3", []string{"CALL setvar()"}, "SELECT @from_proc", "3", ""},
		{"session_track", "", []string{"SET session_track_transaction_info = STATE"}, "SELECT @@session_track_transaction_info", "STATE", "SELECT @@session_track_transaction_info"},
	}
	for _, tc := range cases {
		t.Run(tc.reason, func(t *testing.T) {
			p := twoBackends(t)
			if tc.setup != "" {
				mustExec(t, dbtest.Open(t, p.db, "multiStatements=true"), tc.setup)
			}
			a, b := p.conn(t), p.conn(t)
			var leakBefore string
			if tc.leak != "" {
				leakBefore = queryString(t, b, tc.leak)
			}
			before := backendThread(t, a)
			for _, s := range tc.stmts {
				mustExec(t, a, s)
			}
			done := grab(t, b)
			if got := queryString(t, a, tc.check); got != tc.want {
				t.Fatalf("%s = %q, want %q", tc.check, got, tc.want)
			}
			if got := backendThread(t, a); got != before {
				t.Fatalf("pinned client moved from backend thread %s to %s", before, got)
			}
			if st := p.srv.Stats(); st.Pins[tc.reason] != 1 || st.PinnedSessions != 1 {
				t.Fatalf("pins %v (pinned sessions %d), want one %s", st.Pins, st.PinnedSessions, tc.reason)
			}
			done()
			if tc.leak == "" {
				return
			}
			// When the pinned client leaves, its backend connection is reset
			// before anyone else uses it.
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < 4; i++ {
				c := p.conn(t)
				if got := queryString(t, c, tc.leak); got != leakBefore {
					t.Fatalf("a later client sees %q from %s, want %q", got, tc.leak, leakBefore)
				}
				c.Close()
			}
		})
	}
}

var _ = context.Background
