package controls

import (
	"errors"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// A read-only tag's statements that may write get 9011 (SQLSTATE 25006)
// and those that cannot pass, as the one lexing pass classifies them.
func TestReadOnlyRule(t *testing.T) {
	tbl := put(map[Source][]Control{Fleet: {{Kind: ReadOnlyKind, Key: "batch_*", Reason: "INC-42"}}})
	for _, tc := range []struct {
		sql  string
		want string // "" passes; else a part of the refusal
	}{
		{"SELECT * FROM t WHERE id = 1", ""},
		{"WITH x AS (SELECT 1) SELECT * FROM x", ""},
		{"(SELECT 1) UNION (SELECT 2)", ""},
		{"SELECT @a := 1", ""},
		{"SELECT COUNT(*), NOW(), CONCAT('a', 'b') FROM t", ""},
		{"SHOW TABLES", ""},
		{"SET NAMES utf8mb4", ""},
		{"SET SESSION wait_timeout = 10", ""},
		{"SET @x = 5", ""},
		{"SET autocommit = 0", ""},
		{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", ""},
		{"SET STATEMENT max_statement_time=1 FOR SELECT 1", ""},
		{"USE app", ""},
		{"BEGIN", ""},
		{"START TRANSACTION READ ONLY", ""},
		{"COMMIT", ""},
		{"ROLLBACK", ""},
		{"KILL QUERY 7", ""},
		{"DEALLOCATE PREPARE s", ""},
		{"UNLOCK TABLES", ""},
		{"/* nothing */", ""},
		{"INSERT INTO t VALUES (1)", "INSERT is refused"},
		{"WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", "INSERT is refused"},
		{"UPDATE t SET v = 1", "UPDATE is refused"},
		{"DELETE FROM t", "DELETE is refused"},
		{"REPLACE INTO t VALUES (1)", "REPLACE is refused"},
		{"SET STATEMENT max_statement_time=1 FOR UPDATE t SET v = 1", "UPDATE is refused"},
		{"CREATE TABLE u (id INT)", "this statement (DDL"},
		{"DROP TABLE t", "this statement (DDL"},
		{"TRUNCATE t", "this statement (DDL"},
		{"SAVEPOINT s", "this statement"},
		{"CALL holdfast.reserve(1, 2, 3)", "CALL (a procedure may write; CALL holdfast.* does)"},
		{"CALL app.p()", "CALL"},
		{"SELECT * FROM t WHERE id = 1 FOR UPDATE", "a locking read"},
		{"SELECT * FROM t LOCK IN SHARE MODE", "a locking read"},
		{"SELECT * FROM t INTO OUTFILE '/tmp/x'", "side effect"},
		{"SELECT NEXTVAL(s)", "side effect"},
		{"SELECT app.f(1)", "a function that is not built in"},
		{"SET GLOBAL max_connections = 10", "SET GLOBAL"},
		{"EXECUTE IMMEDIATE 'DELETE FROM t'", "dynamic SQL"},
		{"PREPARE s FROM 'SELECT 1'", "dynamic SQL"},
		{"LOCK TABLES t WRITE", "LOCK TABLES is refused"},
		{"LOAD DATA INFILE '/x' INTO TABLE t", "LOAD DATA is refused"},
		{"DO 1", "DO is refused"},
		{"XA START 'x'", "XA is refused"},
		{"SELECT 1; DELETE FROM t", "a text of 2 statements"},
	} {
		info := sqlscan.Scan([]byte(tc.sql))
		err := tbl.Refuse("batch_7", &info)
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: refused (%v), want it to pass", tc.sql, err)
			}
			continue
		}
		var r *Refusal
		if !errors.As(err, &r) || r.Code != 9011 || r.State != "25006" || !strings.Contains(r.Msg, tc.want) {
			t.Errorf("%s: %v, want 9011 (25006) with %q", tc.sql, err, tc.want)
			continue
		}
		if !strings.HasPrefix(r.Msg, "holdfast: tag 'batch_7' is read-only by on-call under batch_* (INC-42): ") {
			t.Errorf("%s: message %q does not say which tag, what and why", tc.sql, r.Msg)
		}
		if err := tbl.Refuse("report", &info); err != nil {
			t.Errorf("%s of another tag: %v", tc.sql, err)
		}
	}
	// A statement that passes costs no allocation, with the control in
	// force for its tag; nor does Refuse keep its statement's scan (the
	// caller's stays on its stack: the statement path allocates nothing).
	sel := []byte("SELECT 1")
	if n := testing.AllocsPerRun(100, func() {
		info := sqlscan.Scan(sel)
		_ = tbl.Refuse("batch_7", &info)
		_ = tbl.Refuse("report", &info)
	}); n != 0 {
		t.Errorf("a read of a read-only tag: %v allocations", n)
	}
}

// Any source's readonly holds (strictest); lifting one leaves the
// others'. Lifted everywhere, nothing refuses and Refuse is one load.
func TestReadOnlySources(t *testing.T) {
	var tbl Table
	ins := sqlscan.Scan([]byte("INSERT INTO t VALUES (1)"))
	tbl.Put(Local, Control{Kind: ReadOnlyKind, Key: "batch", SetBy: "oncall"})
	tbl.Put(Fleet, Control{Kind: ReadOnlyKind, Key: "b*", Reason: "INC-7"})
	if err := tbl.Refuse("batch", &ins); err == nil || !strings.Contains(err.Error(), "(set by oncall)") {
		t.Errorf("local and fleet readonly: %v, want the local one's refusal (the weaker source's of two alike)", err)
	}
	tbl.Lift(Local, ReadOnlyKind, "batch")
	if err := tbl.Refuse("batch", &ins); err == nil || !strings.Contains(err.Error(), "under b* (INC-7)") {
		t.Errorf("the fleet's pattern alone: %v", err)
	}
	if !tbl.Free("batch") {
		t.Error("readonly stops borrows: it should refuse statements only")
	}
	tbl.Lift(Fleet, ReadOnlyKind, "b*")
	if tbl.Refusing() || tbl.Refuse("batch", &ins) != nil || tbl.Load() != nil {
		t.Error("lifted everywhere, yet something refuses")
	}
	if c := (&Control{Kind: ReadOnlyKind}); c.Show() != "read-only" {
		t.Errorf("shown as %q", c.Show())
	}
	if err := ValidateNamed("readonly", "batch_*", 1); err == nil {
		t.Error("readonly with a value is valid")
	}
	if err := ValidateNamed("readonly", "shape/0123456789abcdef", 0); err == nil {
		t.Error("readonly of a shape is valid")
	}
}
