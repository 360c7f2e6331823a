package proxy

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
)

// readOnly reports whether err is a readonly control's refusal: 9011,
// SQLSTATE 25006, naming the tag.
func readOnly(err error, tag string) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 9011 && string(me.SQLState[:]) == "25006" &&
		strings.Contains(me.Message, "tag '"+tag+"' is read-only by on-call")
}

// A read-only tag, through a real driver: every statement that cannot
// write runs (reads, SHOW, SET, USE, BEGIN / COMMIT / ROLLBACK), text and
// prepared; every one that may (INSERT, UPDATE, DELETE, DDL, CALL
// holdfast.*, a locking read) gets 9011 before it runs, text and
// prepared, inside a transaction too, which stays usable. Other tags
// write as before; lifted, the tag writes again. Refusals are counted
// under the tag.
func TestReadOnlyTag(t *testing.T) {
	procs := &callerProcs{}
	p := startProxyProcs(t, procs)
	mustExec(t, p.direct(t), "CREATE TABLE ro (id INT PRIMARY KEY, v INT)")
	mustExec(t, p.direct(t), "INSERT INTO ro VALUES (1, 10)")
	if err := p.srv.SetControl("readonly", "batch_*", 0, "INC-42", "oncall"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	db := p.open(t)
	const tag = "/* conn_tag:batch_7 */ "
	for _, q := range []string{
		"SELECT v FROM ro WHERE id = 1",
		"SHOW TABLES",
		"SET SESSION wait_timeout = 1234",
		"USE " + p.db,
		"SELECT @@wait_timeout",
	} {
		if _, err := db.ExecContext(ctx, tag+q); err != nil {
			t.Errorf("%s: %v, want it to run", q, err)
		}
	}
	writes := []string{
		"INSERT INTO ro VALUES (2, 20)",
		"UPDATE ro SET v = 11 WHERE id = 1",
		"DELETE FROM ro WHERE id = 1",
		"CREATE TABLE ro2 (id INT)",
		"CALL holdfast.reserve(1, 2, 3)",
		"SELECT v FROM ro WHERE id = 1 FOR UPDATE",
	}
	for _, q := range writes {
		if _, err := db.ExecContext(ctx, tag+q); !readOnly(err, "batch_7") {
			t.Errorf("%s: %v, want 9011", q, err)
		}
	}

	// Prepared (go-sql-driver prepares on the server): reads run, writes
	// are refused at execute.
	for _, q := range append([]string{"SELECT v FROM ro WHERE id = ?"}, "INSERT INTO ro VALUES (?, 20)", "UPDATE ro SET v = ? WHERE id = 1",
		"DELETE FROM ro WHERE id = ?", "CALL holdfast.reserve(?, 2, 3)") {
		st, err := db.PrepareContext(ctx, tag+q)
		if err != nil {
			t.Fatalf("prepare %s: %v", q, err)
		}
		if strings.HasPrefix(q, "SELECT") {
			var v int
			if err := st.QueryRowContext(ctx, 1).Scan(&v); err != nil || v != 10 {
				t.Errorf("prepared read: %d %v", v, err)
			}
		} else if _, err := st.ExecContext(ctx, 3); !readOnly(err, "batch_7") {
			t.Errorf("prepared %s: %v, want 9011", q, err)
		}
		st.Close()
	}

	// Inside a transaction: the write is refused, the transaction goes on
	// and ends as the client says.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := tx.QueryRowContext(ctx, tag+"SELECT v FROM ro WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("read in a transaction: %d %v", v, err)
	}
	if _, err := tx.ExecContext(ctx, tag+"UPDATE ro SET v = 12 WHERE id = 1"); !readOnly(err, "batch_7") {
		t.Errorf("write in a transaction: %v, want 9011", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit after a refused write: %v", err)
	}

	if procs := procs.seen(); len(procs) != 0 {
		t.Errorf("the engine ran refused calls: %q", procs)
	}
	if err := p.direct(t).QueryRow("SELECT v FROM ro WHERE id = 1").Scan(&v); err != nil || v != 10 {
		t.Fatalf("the row after the refused writes: %d %v, want 10", v, err)
	}
	if _, err := db.ExecContext(ctx, "/* conn_tag:checkout */ UPDATE ro SET v = 13 WHERE id = 1"); err != nil {
		t.Errorf("a write of another tag: %v", err)
	}
	var refused uint64
	for _, s := range p.srv.Recorder().Snapshot() {
		if s.Tag == "batch_7" {
			refused = s.Rejected["refused"]
		}
	}
	if want := uint64(len(writes) + 4 + 1); refused != want {
		t.Errorf("rejected{reason=refused} of batch_7 = %d, want %d", refused, want)
	}
	if cs := p.srv.Controls(); len(cs) != 1 || cs[0].Kind != "readonly" || cs[0].Tag != "batch_*" || cs[0].Shown != "read-only" || cs[0].SetBy != "oncall" {
		t.Errorf("controls in force: %+v", cs)
	}

	if err := p.srv.LiftControl("readonly", "batch_*"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, tag+"UPDATE ro SET v = 14 WHERE id = 1"); err != nil {
		t.Errorf("a write once lifted: %v", err)
	}
}

// A readonly control applies to the tag a statement carries also when
// accounting does not look at tags (attribution.disabled).
func TestReadOnlyAttributionDisabled(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Attribution.Disabled = true })
	mustExec(t, p.direct(t), "CREATE TABLE ro (id INT PRIMARY KEY)")
	if err := p.srv.SetControl("readonly", "batch", 0, "", "oncall"); err != nil {
		t.Fatal(err)
	}
	db := p.open(t)
	if _, err := db.Exec("/* conn_tag:batch */ INSERT INTO ro VALUES (1)"); !readOnly(err, "batch") {
		t.Fatalf("a write of the read-only tag: %v, want 9011", err)
	}
	mustExec(t, db, "/* conn_tag:batch */ SELECT * FROM ro")
	mustExec(t, db, "/* conn_tag:other_flow */ INSERT INTO ro VALUES (2)")
}
