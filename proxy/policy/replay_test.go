package policy

import (
	"testing"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

func TestNotReplayable(t *testing.T) {
	for _, tc := range []struct {
		name, sql string
		cmd       Command
		replay    bool
	}{
		{"an insert", "INSERT INTO t VALUES (1)", Query, true},
		{"an update", "UPDATE t SET a = a + 1 WHERE id = 3", Query, true},
		{"a delete", "DELETE FROM t WHERE id = 3", Query, true},
		{"a replace", "REPLACE INTO t VALUES (1)", Query, true},
		{"a read", "SELECT a FROM t WHERE id = 1", Query, true},
		{"a locking read", "SELECT a FROM t WHERE id = 1 FOR UPDATE", Query, true},
		{"LAST_INSERT_ID()", "SELECT LAST_INSERT_ID()", Query, true},
		{"a prepared insert", "INSERT INTO t VALUES (?)", Execute, true},
		{"a prepared sequence", "SELECT NEXTVAL(s)", Execute, false},
		{"COM_INIT_DB", "", InitDB, false},
		{"a text of two statements", "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)", Query, false},
		{"a SET", "SET sql_mode = ''", Query, false},
		{"a user variable", "SELECT @n := a FROM t", Query, false},
		{"a user variable read", "UPDATE t SET a = @n", Query, false},
		{"a sequence", "SELECT NEXTVAL(s)", Query, false},
		{"GET_LOCK", "SELECT GET_LOCK('x', 0)", Query, false},
		{"a stored function", "SELECT f(1)", Query, false},
		{"a CALL", "CALL p()", Query, false},
		{"a temporary table", "CREATE TEMPORARY TABLE x (a INT)", Query, false},
		{"DDL", "ALTER TABLE t ADD COLUMN b INT", Query, false},
		{"LOAD DATA LOCAL", "LOAD DATA LOCAL INFILE 'x' INTO TABLE t", Query, false},
		{"a savepoint", "SAVEPOINT a", Query, false},
		{"CONNECTION_ID()", "SELECT CONNECTION_ID()", Query, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var info *sqlscan.Info
			if tc.sql != "" {
				i := sqlscan.Scan([]byte(tc.sql))
				info = &i
			}
			why := NotReplayable(tc.cmd, info)
			if (why == "") != tc.replay {
				t.Fatalf("NotReplayable(%s, %q) = %q; want replayable %v", tc.cmd, tc.sql, why, tc.replay)
			}
		})
	}
}

func TestReplayTxn(t *testing.T) {
	open := Session{Autocommit: true, VarsKnown: true, InTxn: true, Holding: true}
	checkRule(t, "ReplayTxn", ReplayTxn, open, []ruleCase{
		{"an insert in a transaction", Query, "INSERT INTO t VALUES (1)", nil, true},
		{"a prepared insert", Execute, "INSERT INTO t VALUES (?)", nil, true},
		{"COMMIT", Query, "COMMIT", nil, true},
		{"outside a transaction", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.InTxn, s.Holding = false, false }, false},
		{"with the BEGIN still deferred", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.PendingBegin, s.Holding = true, false }, false},
		{"pinned", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.Pinned = true }, false},
		{"after SET TRANSACTION", Query, "INSERT INTO t VALUES (1)", func(s *Session) { s.HoldNext = true }, false},
		{"a text of two statements", Query, "INSERT INTO t VALUES (1); INSERT INTO t VALUES (2)", nil, false},
		{"LOAD DATA LOCAL", Query, "LOAD DATA LOCAL INFILE 'x' INTO TABLE t", nil, false},
	})
}
