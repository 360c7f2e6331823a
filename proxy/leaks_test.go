package proxy

import (
	"bytes"
	"context"
	"database/sql"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
)

// SELECT @@identity, @@last_insert_id and ROW_COUNT() are the client's
// own values, whichever pooled connection serves them: two clients
// sharing one backend connection each read their own insert id and their
// own row count, in text and prepared forms, with the columns MariaDB
// gives them.
func TestSessionValuesAreTheSessions(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Max = 1 })
	d := p.direct(t)
	mustExec(t, d, "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	ctx := context.Background()
	a, b := p.conn(t), p.conn(t)
	value := func(c *sql.Conn, q string) int64 {
		t.Helper()
		n, err := strconv.ParseInt(queryString(t, c, q), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	for range 3 {
		ra := mustExec(t, a, "INSERT INTO t (v) VALUES (1)")
		rb := mustExec(t, b, "INSERT INTO t (v) VALUES (2), (3)")
		idA, _ := ra.LastInsertId()
		idB, _ := rb.LastInsertId()
		for _, q := range []string{"SELECT @@identity", "select @@last_insert_id", "SELECT @@session.identity AS id", "SELECT LAST_INSERT_ID()"} {
			if got := value(a, q); got != idA {
				t.Errorf("client a: %s = %d, want its own %d", q, got, idA)
			}
			if got := value(b, q); got != idB {
				t.Errorf("client b: %s = %d, want its own %d", q, got, idB)
			}
		}
		st, err := a.PrepareContext(ctx, "SELECT @@IDENTITY")
		if err != nil {
			t.Fatal(err)
		}
		var got int64
		if err := st.QueryRowContext(ctx).Scan(&got); err != nil || got != idA {
			t.Errorf("client a: prepared SELECT @@IDENTITY = %d %v, want %d", got, err, idA)
		}
		st.Close()
	}
	mustExec(t, a, "UPDATE t SET v = v + 1 WHERE id <= 3")
	mustExec(t, b, "UPDATE t SET v = 7 WHERE id = 1")
	if got := value(a, "SELECT ROW_COUNT()"); got != 3 {
		t.Errorf("client a: ROW_COUNT() after its UPDATE of 3 rows = %d", got)
	}
	if got := value(b, "SELECT row_count() AS n"); got != 1 {
		t.Errorf("client b: ROW_COUNT() after its UPDATE of 1 row = %d", got)
	}
	if got := value(a, "SELECT ROW_COUNT()"); got != -1 {
		t.Errorf("client a: ROW_COUNT() after a SELECT = %d, want -1", got)
	}
	mustExec(t, b, "DELETE FROM t WHERE id > 4")
	st, err := b.PrepareContext(ctx, "SELECT ROW_COUNT()")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var n int64
	if err := st.QueryRowContext(ctx).Scan(&n); err != nil || n != 5 {
		t.Errorf("client b: prepared ROW_COUNT() after deleting 5 rows = %d %v", n, err)
	}
	if _, err := a.ExecContext(ctx, "UPDATE no_such_table SET v = 1"); err == nil {
		t.Fatal("an UPDATE of a missing table succeeded")
	}
	if got := value(a, "SELECT ROW_COUNT()"); got != -1 {
		t.Errorf("client a: ROW_COUNT() after an error = %d, want -1", got)
	}
	// The columns are MariaDB's.
	for _, q := range []string{"SELECT @@identity", "SELECT LAST_INSERT_ID()", "SELECT ROW_COUNT()"} {
		if got, want := columnOf(t, a, q), columnOf(t, d, q); got != want {
			t.Errorf("%s: column %s through holdfast, %s from MariaDB", q, got, want)
		}
	}
}

// columnOf describes the column of a one-column query.
func columnOf(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, query string) string {
	t.Helper()
	rows, err := q.QueryContext(context.Background(), query)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	cts, err := rows.ColumnTypes()
	if err != nil || len(cts) != 1 {
		t.Fatalf("%s: %v %v", query, cts, err)
	}
	ct := cts[0]
	nullable, _ := ct.Nullable()
	length, _ := ct.Length()
	for rows.Next() {
	}
	return ct.Name() + " " + ct.DatabaseTypeName() + " null=" + strconv.FormatBool(nullable) + " len=" + strconv.FormatInt(length, 10)
}

// Clients inserting at once, on a pool of two, each read their own id.
func TestIdentityConcurrentClients(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Max = 2 })
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	conns := make([]*sql.Conn, 6)
	for i := range conns {
		conns[i] = p.conn(t)
	}
	concurrently(t, len(conns), func(i int) error {
		c := conns[i]
		for range 30 {
			r, err := c.ExecContext(context.Background(), "INSERT INTO t (v) VALUES (?)", i)
			if err != nil {
				return err
			}
			id, _ := r.LastInsertId()
			var got int64
			if err := c.QueryRowContext(context.Background(), "SELECT @@identity").Scan(&got); err != nil {
				return err
			}
			if got != id {
				t.Errorf("client %d: SELECT @@identity = %d, want its own %d", i, got, id)
				return nil
			}
		}
		return nil
	})
}

// IS_FREE_LOCK and IS_USED_LOCK ask the primary, which holds user-level
// locks, even for a tag routed to a replica (where every lock is free).
func TestLockInfoOnPrimary(t *testing.T) {
	p := startPairProxy(t, map[string]string{"report": "replica_stale_ok"})
	holder, err := p.pdb.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	var got, holderID int64
	if err := holder.QueryRowContext(t.Context(), "SELECT GET_LOCK('j', 10), CONNECTION_ID()").Scan(&got, &holderID); err != nil || got != 1 {
		t.Fatalf("GET_LOCK: %d %v", got, err)
	}
	db := p.open(t)
	pr, rr := p.counted(t, func() {
		readV(t, db, "/* conn_tag:report */ SELECT IS_FREE_LOCK('j')", 0)
		readV(t, db, "/* conn_tag:report */ SELECT IS_USED_LOCK('j')", int(holderID))
	})
	if pr != 2 || rr != 0 {
		t.Fatalf("IS_FREE_LOCK and IS_USED_LOCK of a replica-routed tag: %d on the primary, %d on the replica; want 2 and 0", pr, rr)
	}
}

// syncBuffer is a bytes.Buffer for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The digests people see, in the holders view and the slow-transaction
// log, are lexed under the session's sql_mode: under NO_BACKSLASH_ESCAPES
// 'C:\' is a whole literal, and the literal after it is no more shown than
// any other.
func TestDigestsFollowSQLMode(t *testing.T) {
	var logs syncBuffer
	p := newTestProxy(t, slog.New(slog.NewTextHandler(&logs, nil)), func(c *config.Config) {
		c.Attribution.SlowTransaction = 100 * time.Millisecond
	})
	c := p.conn(t)
	ctx := context.Background()
	mustExec(t, c, "SET sql_mode = 'NO_BACKSLASH_ESCAPES'")
	var id int64
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var a, b int
		done <- c.QueryRowContext(ctx, `SELECT SLEEP(1), 'C:\' <> 'hunter2'`).Scan(&a, &b)
	}()
	var shown string
	waitFor(t, "the statement in the holders view", func() bool {
		for _, h := range p.srv.Holders() {
			if int64(h.ClientID) == id && strings.Contains(h.Statement, "SLEEP") {
				shown = h.Statement
				return true
			}
		}
		return false
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(shown, "hunter2") {
		t.Errorf("the holders view shows a literal: %q", shown)
	}
	tx, err := c.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT 'C:\' <> 'hunter2'`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // idle in the transaction: a slow one
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the slow-transaction log line", func() bool {
		return strings.Contains(logs.String(), "far longer than it executed")
	})
	if line := logs.String(); strings.Contains(line, "hunter2") {
		t.Errorf("the slow-transaction log shows a literal:\n%s", line)
	}
}
