package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

func mysqlErrNo(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func TestDriverTransactions(t *testing.T) {
	p := startProxy(t)
	db := p.open(t)
	mustExec(t, db, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")

	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO t VALUES (1, 'committed')")
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, "INSERT INTO t VALUES (2, 'rolled back')")
	// Inside the transaction the row is visible, outside it is not.
	if got := queryString(t, tx, "SELECT COUNT(*) FROM t"); got != "2" {
		t.Fatalf("inside tx: %s rows, want 2", got)
	}
	if got := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t"); got != "1" {
		t.Fatalf("outside tx: %s rows, want 1", got)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, db, "SELECT GROUP_CONCAT(v) FROM t"); got != "committed" {
		t.Fatalf("after rollback: %q", got)
	}

	// BeginTx with an isolation level sends SET TRANSACTION (next
	// transaction only) and START TRANSACTION as two statements: the
	// second must run on the same backend connection.
	for i := 0; i < 20; i++ {
		tx, err := db.BeginTx(context.Background(), &sql.TxOptions{Isolation: sql.LevelReadCommitted, ReadOnly: i%2 == 0})
		if err != nil {
			t.Fatal(err)
		}
		// Touch a table so InnoDB starts the transaction, then ask InnoDB
		// which isolation level it runs at (the session value stays
		// REPEATABLE-READ; SET TRANSACTION affects this transaction only).
		queryString(t, tx, "SELECT COUNT(*) FROM t LOCK IN SHARE MODE")
		if got := queryString(t, tx, "SELECT @@tx_isolation"); got != "REPEATABLE-READ" {
			t.Fatalf("session tx_isolation %s", got)
		}
		var trxIso string
		if err := tx.QueryRow("SELECT trx_isolation_level FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = " + selfThread()).Scan(&trxIso); err != nil {
			t.Fatalf("reading the transaction's isolation level: %v", err)
		}
		if trxIso != "READ COMMITTED" {
			t.Fatalf("transaction isolation %q, want READ COMMITTED", trxIso)
		}
		if i%2 == 0 {
			if _, err := tx.Exec("INSERT INTO t VALUES (100, 'x')"); mysqlErrNo(err) != 1792 {
				t.Fatalf("insert in a READ ONLY transaction: %v, want error 1792", err)
			}
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDriverPreparedStatements(t *testing.T) {
	// Two backend connections and concurrent clients, so statements
	// prepared on one backend connection execute on the other.
	p := startProxy(t, func(c *config.Config) { c.Pool.Max, c.Pool.MaxIdle = 2, 2 })
	db := p.open(t)
	db.SetMaxOpenConns(6)
	mustExec(t, db, "CREATE TABLE t (id INT PRIMARY KEY, s VARCHAR(40) NULL, n BIGINT NULL, f DOUBLE NULL)")

	concurrently(t, 6, func(w int) error {
		ins, err := db.Prepare("INSERT INTO t (id, s, n, f) VALUES (?, ?, ?, ?)")
		if err != nil {
			return err
		}
		defer ins.Close()
		sel, err := db.Prepare("SELECT s, n, f FROM t WHERE id = ?")
		if err != nil {
			return err
		}
		defer sel.Close()
		for i := 0; i < 50; i++ {
			id := w*1000 + i
			// Parameter types change between executions, NULLs included.
			var s, n, f any = fmt.Sprint("row-", id), int64(id) * 1_000_000_007, float64(id) / 3
			switch i % 4 {
			case 1:
				s = nil
			case 2:
				n, f = nil, nil
			case 3:
				n = strconv.Itoa(id) // a string where a number was sent before
			}
			if _, err := ins.Exec(id, s, n, f); err != nil {
				return fmt.Errorf("insert %d: %w", id, err)
			}
			var gs sql.NullString
			var gn sql.NullInt64
			var gf sql.NullFloat64
			if err := sel.QueryRow(id).Scan(&gs, &gn, &gf); err != nil {
				return fmt.Errorf("select %d: %w", id, err)
			}
			wantS, wantN := s != nil, n != nil
			if gs.Valid != wantS || (wantS && gs.String != s) {
				return fmt.Errorf("row %d: s = %v, want %v", id, gs, s)
			}
			if gn.Valid != wantN || (wantN && i%4 != 3 && gn.Int64 != n.(int64)) || (i%4 == 3 && gn.Int64 != int64(id)) {
				return fmt.Errorf("row %d: n = %v, want %v", id, gn, n)
			}
			if gf.Valid != (f != nil) {
				return fmt.Errorf("row %d: f = %v, want %v", id, gf, f)
			}
		}
		return nil
	})
	if got := queryString(t, db, "SELECT COUNT(*) FROM t"); got != "300" {
		t.Fatalf("%s rows, want 300", got)
	}
	if st := p.srv.Stats(); st.PinnedSessions != 0 || len(st.Pins) != 0 {
		t.Fatalf("prepared statements pinned sessions: %+v", st.Pins)
	}
}

func TestDriverTypes(t *testing.T) {
	p := startProxy(t)
	mustExec(t, p.direct(t), `CREATE TABLE types (
		id INT PRIMARY KEY, ti TINYINT, bu BIGINT UNSIGNED, dec_ DECIMAL(30,6), fl FLOAT, db DOUBLE,
		d DATE, dt DATETIME(6), tm TIME(6), ts TIMESTAMP(3) NULL, vb VARBINARY(300), bl BLOB,
		js JSON, bt BIT(8), en ENUM('a','b'), tx TEXT CHARACTER SET utf8mb4)`)
	allBytes := make([]byte, 256)
	for i := range allBytes {
		allBytes[i] = byte(i)
	}
	dt := time.Date(2026, 2, 28, 23, 59, 58, 123456000, time.UTC)
	args := []any{int64(-128), uint64(math.MaxUint64), "-123456789012345678901234.123456", float32(1.5), math.Pi,
		"2026-02-28", dt, "-838:59:59.000001", "2026-11-29 12:00:00.123", allBytes, bytes.Repeat([]byte{0, 0xff, 'x'}, 1000),
		`{"k": [1, "two", null]}`, []byte{0xa5}, "b", "héllo wörld ✓ 🎉"}
	const cols = "ti, bu, dec_, fl, db, d, dt, tm, ts, vb, bl, js, bt, en, tx"
	ph := "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?"

	for i, params := range []string{"parseTime=true&loc=UTC", "parseTime=true&loc=UTC&interpolateParams=true"} {
		db := p.open(t, params)
		if _, err := db.Exec("INSERT INTO types (id, "+cols+") VALUES (?, "+ph+")", append([]any{i}, args...)...); err != nil {
			t.Fatalf("%s: insert: %v", params, err)
		}
	}
	// Read back through both protocols and compare with a direct read.
	read := func(db *sql.DB, binary bool) [][]string {
		q := "SELECT id, " + cols + " FROM types ORDER BY id"
		var rows *sql.Rows
		var err error
		if binary {
			rows, err = db.Query(q+" LIMIT ?", 10) // prepared: binary protocol
		} else {
			rows, err = db.Query(q) // text protocol
		}
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out [][]string
		for rows.Next() {
			vals := make([]sql.RawBytes, 16)
			ptrs := make([]any, 16)
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			r := make([]string, 16)
			for i, v := range vals {
				r[i] = string(v)
			}
			out = append(out, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	direct := dbtest.Open(t, p.db, "parseTime=true", "loc=UTC")
	for _, binary := range []bool{false, true} {
		want := read(direct, binary)
		got := read(p.open(t, "parseTime=true&loc=UTC"), binary)
		if len(want) != 2 || fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("binary=%v: through holdfast\n%q\ndirect\n%q", binary, got, want)
		}
		if want[0][10] != string(allBytes) || want[1][10] != string(allBytes) {
			t.Fatalf("varbinary did not round-trip")
		}
	}
}

func TestDriverLargeBlob(t *testing.T) {
	if _, err := dbtest.Root(t).Exec("SET GLOBAL max_allowed_packet = 64*1024*1024"); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t)
	db := p.open(t, "maxAllowedPacket=0")
	mustExec(t, db, "CREATE TABLE blobs (id INT PRIMARY KEY, b LONGBLOB)")
	blob := make([]byte, 20<<20)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(blob)
	// Prepared (binary protocol) and interpolated (text protocol, one
	// 20 MiB COM_QUERY split over two packets).
	if _, err := db.Exec("INSERT INTO blobs VALUES (?, ?)", 1, blob); err != nil {
		t.Fatal(err)
	}
	idb := p.open(t, "maxAllowedPacket=0", "interpolateParams=true")
	if _, err := idb.Exec("INSERT INTO blobs VALUES (?, ?)", 2, blob); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		db   *sql.DB
		args []any
	}{{db, []any{1}}, {idb, []any{2}}} {
		var got []byte
		query := "SELECT b FROM blobs WHERE id = ?"
		if err := q.db.QueryRow(query, q.args...).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(got) != sum {
			t.Fatalf("blob %v came back different (%d bytes)", q.args, len(got))
		}
	}
	// A LENGTH() check on the server side proves both inserts stored it all.
	if got := queryString(t, db, "SELECT SUM(LENGTH(b)) FROM blobs"); got != strconv.Itoa(2*len(blob)) {
		t.Fatalf("stored %s bytes", got)
	}
}

func TestDriverMultiStatements(t *testing.T) {
	p := startProxy(t)
	multi := p.open(t, "multiStatements=true")
	mustExec(t, multi, "CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t VALUES (1); INSERT INTO t VALUES (2), (3)")
	rows, err := multi.Query("SELECT COUNT(*) FROM t; SELECT id FROM t ORDER BY id DESC; DO 1")
	if err != nil {
		t.Fatal(err)
	}
	var sets [][]int
	for {
		var set []int
		for rows.Next() {
			var v int
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			set = append(set, v)
		}
		sets = append(sets, set)
		if !rows.NextResultSet() {
			break
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if fmt.Sprint(sets) != "[[3] [3 2 1]]" {
		t.Fatalf("result sets %v", sets)
	}
	// A client that did not ask for multi-statements gets MySQL's syntax
	// error, even though it shares backend connections with one that did.
	single := p.open(t)
	for i := 0; i < 5; i++ {
		_, err := single.Exec("INSERT INTO t VALUES (10); INSERT INTO t VALUES (11)")
		if mysqlErrNo(err) != 1064 {
			t.Fatalf("multi-statement without multiStatements: %v, want 1064", err)
		}
		mustExec(t, multi, "DO 1; DO 2")
	}
	if got := queryString(t, single, "SELECT COUNT(*) FROM t"); got != "3" {
		t.Fatalf("%s rows, want 3", got)
	}
}

func TestDriverContextCancel(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Max, c.Pool.MaxIdle = 1, 1 })
	db := p.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := db.ExecContext(ctx, "SELECT SLEEP(30)")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context deadline exceeded", err)
	}
	// holdfast notices the client went away and interrupts the backend
	// statement, so the only backend connection is free again well before
	// SLEEP(30) would have ended.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO LIKE 'SELECT SLEEP(30)%'", p.user).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("backend statement still running %v after the client cancelled", time.Since(start))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := queryString(t, db, "SELECT 'still works'"); got != "still works" {
		t.Fatal(got)
	}
}

func TestKill(t *testing.T) {
	p := startProxy(t)
	a := p.conn(t)
	b := p.conn(t)
	id := queryString(t, a, "SELECT CONNECTION_ID()")
	if queryString(t, b, "SELECT CONNECTION_ID()") == id {
		t.Fatal("two clients share a connection id")
	}

	// KILL QUERY interrupts the statement the client runs now, on whatever
	// backend connection serves it; the client keeps its connection.
	errc := make(chan error, 1)
	go func() {
		_, err := a.ExecContext(context.Background(), "SELECT SLEEP(30)")
		errc <- err
	}()
	waitRunning(t, p, "SELECT SLEEP(30)")
	mustExec(t, b, "KILL QUERY "+id)
	select {
	case err := <-errc:
		// MariaDB returns the SLEEP's result 1 when interrupted, or error 1317.
		if err != nil && mysqlErrNo(err) != 1317 {
			t.Fatalf("interrupted statement: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("KILL QUERY did not interrupt the statement")
	}
	if got := queryString(t, a, "SELECT 'alive'"); got != "alive" {
		t.Fatal("connection unusable after KILL QUERY")
	}

	// Only the owner (or an admin) may kill; unknown ids are errors.
	other, err := sql.Open("mysql", p.dsn("other", "other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Exec("KILL " + id); mysqlErrNo(err) != 1095 {
		t.Fatalf("KILL by another user: %v, want 1095", err)
	}
	if _, err := b.ExecContext(context.Background(), "KILL 4000000000"); mysqlErrNo(err) != 1094 {
		t.Fatalf("KILL unknown id: %v, want 1094", err)
	}

	// KILL CONNECTION closes the client's connection.
	mustExec(t, b, "KILL CONNECTION "+id)
	time.Sleep(100 * time.Millisecond)
	if _, err := a.ExecContext(context.Background(), "SELECT 1"); err == nil {
		t.Fatal("killed connection still answers")
	}
}

// waitRunning waits until the backend shows query running for the proxy's
// backend account.
func waitRunning(t *testing.T, p *testProxy, query string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO = ?", p.user, query).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%q never started on the backend", query)
}
