package proxy

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// TestDeferredBeginRidesWithSelect: a deferred BEGIN sent in one write with
// the transaction's first SELECT still starts the transaction before that
// SELECT: the SELECT's snapshot (REPEATABLE READ) is the transaction's, so
// a change committed by another client after it stays invisible until
// COMMIT. Both a typed BEGIN and a prepared one (as sysbench sends), with a
// typed and a prepared SELECT.
func TestDeferredBeginRidesWithSelect(t *testing.T) {
	p := startProxy(t)
	direct := p.direct(t)
	mustExec(t, direct, "CREATE TABLE snap (id INT PRIMARY KEY, n INT)")
	mustExec(t, direct, "INSERT INTO snap VALUES (1, 0)")
	ctx := context.Background()
	for _, mode := range []string{"text", "prepared"} {
		t.Run(mode, func(t *testing.T) {
			conn, err := p.open(t).Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			exec := func(q string) {
				t.Helper()
				var err error
				if mode == "prepared" {
					var st *sql.Stmt
					if st, err = conn.PrepareContext(ctx, q); err == nil {
						_, err = st.Exec()
						st.Close()
					}
				} else {
					_, err = conn.ExecContext(ctx, q)
				}
				if err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			sel, err := conn.PrepareContext(ctx, "SELECT n FROM snap WHERE id = ?")
			if err != nil {
				t.Fatal(err)
			}
			defer sel.Close()
			read := func() (n int) {
				t.Helper()
				if mode == "prepared" {
					err = sel.QueryRow(1).Scan(&n)
				} else {
					err = conn.QueryRowContext(ctx, "SELECT n FROM snap WHERE id = 1").Scan(&n)
				}
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			read() // the statement is prepared on the backend connection
			ahead := p.srv.Stats().BeginsAhead
			exec("BEGIN")
			first := read()
			if p.srv.Stats().BeginsAhead != ahead+1 {
				t.Fatal("the deferred BEGIN did not go out with the first SELECT: the test shows nothing")
			}
			mustExec(t, direct, "UPDATE snap SET n = n + 1 WHERE id = 1")
			if again := read(); again != first {
				t.Fatalf("inside the transaction the SELECT saw %d, then %d after another client's commit: the first SELECT ran outside the transaction", first, again)
			}
			exec("COMMIT")
			if after := read(); after != first+1 {
				t.Fatalf("after COMMIT the SELECT saw %d, want %d", after, first+1)
			}
		})
	}
}

// TestDeferredBeginBeforeWrite: a transaction whose first statement is not
// a plain SELECT starts with its own BEGIN exchange; ROLLBACK undoes it.
func TestDeferredBeginBeforeWrite(t *testing.T) {
	p := startProxy(t)
	direct := p.direct(t)
	mustExec(t, direct, "CREATE TABLE w (id INT PRIMARY KEY, n INT)")
	mustExec(t, direct, "INSERT INTO w VALUES (1, 0)")
	db := p.open(t)
	ahead := p.srv.Stats().BeginsAhead
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("UPDATE w SET n = 5 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow("SELECT n FROM w WHERE id = 1").Scan(&n); err != nil || n != 5 {
		t.Fatalf("n = %d (%v) inside the transaction, want 5", n, err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if got := queryString(t, direct, "SELECT n FROM w"); got != "0" {
		t.Fatalf("n = %s after ROLLBACK", got)
	}
	if p.srv.Stats().BeginsAhead != ahead {
		t.Fatal("a BEGIN rode along with an UPDATE")
	}
}

// TestDeferredBeginRidesWithHugeSelect: a first SELECT of more than one
// packet (16 MiB) still reads BEGIN's OK and its own response in step.
func TestDeferredBeginRidesWithHugeSelect(t *testing.T) {
	if _, err := dbtest.Root(t).Exec("SET GLOBAL max_allowed_packet = 64*1024*1024"); err != nil {
		t.Fatal(err)
	}
	p := startProxy(t)
	ctx := context.Background()
	conn, err := p.open(t, "maxAllowedPacket=0").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	big := "SELECT LENGTH('" + strings.Repeat("x", 17<<20) + "')"
	ahead := p.srv.Stats().BeginsAhead
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(ctx, big).Scan(&n); err != nil || n != 17<<20 {
		t.Fatalf("first statement after BEGIN: %d, %v", n, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if p.srv.Stats().BeginsAhead != ahead+1 {
		t.Fatal("the BEGIN did not ride along: the test shows nothing")
	}
}
