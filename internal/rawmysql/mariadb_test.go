package rawmysql

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// lean are the options of a connection that holds no more than it needs,
// as the benchmarks dial: CLIENT_DEPRECATE_EOF, no LOCAL INFILE.
var lean = Options{Caps: CapDeprecateEOF, Drop: CapPSMultiResults | CapLocalFiles}

func dialTest(t *testing.T, addr string, o Options, user, db string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	o.User, o.Password, o.DB = user, user, db
	c, err := Dial(ctx, addr, o)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	t.Cleanup(func() { c.Close() })
	return c
}

func TestQueryMariaDB(t *testing.T) {
	addr, db, user := dbtest.NewAccount(t)
	// Directly, and through a delaying relay (which must not change a byte).
	r := dbtest.StartRelay(t, addr, time.Millisecond)
	for _, target := range []string{addr, r.Addr().String()} {
		c := dialTest(t, target, lean, user, db)
		for _, tc := range []struct {
			q    string
			rows int
		}{
			{"SELECT 1", 1},
			{"SELECT seq, REPEAT('x', 300) FROM seq_1_to_1000", 1000}, // rows over several reads
			{"SELECT 1 FROM DUAL WHERE 0", 0},
			{"CREATE TABLE t (id INT PRIMARY KEY, v LONGTEXT)", 0},
			{"INSERT INTO t VALUES (1, REPEAT('y', 100000))", 0},
			{"SELECT v FROM t", 1},
			{"SELECT DATABASE()", 1},
		} {
			n, err := c.Query(tc.q)
			if err != nil {
				t.Fatalf("%s via %s: %v", tc.q, target, err)
			}
			if n != tc.rows {
				t.Fatalf("%s via %s: %d rows, want %d", tc.q, target, n, tc.rows)
			}
		}
		// An error reply leaves the connection usable.
		_, err := c.Query("SELECT * FROM no_such_table")
		var se *mysqlwire.SQLError
		if !errors.As(err, &se) || se.Code != 1146 || se.State != "42S02" {
			t.Fatalf("query of a missing table: %v, want error 1146 (42S02)", err)
		}
		if n, err := c.Query("SELECT 2"); err != nil || n != 1 {
			t.Fatalf("after an error: %d rows, %v", n, err)
		}
		if _, err := c.Query("DROP TABLE t"); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoginFailuresMariaDB(t *testing.T) {
	addr, db, user := dbtest.NewAccount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, addr, Options{User: user, Password: "wrong", DB: db})
	var se *mysqlwire.SQLError
	if !errors.As(err, &se) || se.Code != 1045 {
		t.Fatalf("wrong password: %v, want error 1045", err)
	}
	_, err = Dial(ctx, addr, Options{User: user, Password: user, DB: "no_such_db_for_rawmysql"})
	if !errors.As(err, &se) || (se.Code != 1044 && se.Code != 1049) {
		t.Fatalf("unknown database: %v, want error 1044 or 1049", err)
	}
	// A server that accepts and says nothing: the context bounds the login.
	// (The relay sleeps out its delay before Close returns: keep it short.)
	r := dbtest.StartRelay(t, addr, 2*time.Second)
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	start := time.Now()
	if _, err := Dial(short, r.Addr().String(), Options{User: user, Password: user, DB: db}); err == nil {
		t.Fatal("login through a relay that never delivers succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("login gave up after %v, want about 200ms", d)
	}
}

func TestExecMariaDB(t *testing.T) {
	for _, o := range []Options{{}, lean} {
		t.Run(fmt.Sprintf("caps+%#x", o.Caps), func(t *testing.T) { testExec(t, o) })
	}
}

func testExec(t *testing.T, o Options) {
	addr, db, user := dbtest.NewAccount(t)
	c := dialTest(t, addr, o, user, db)
	for _, q := range []string{
		"CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
		"INSERT INTO t VALUES (1, 'a'), (2, NULL), (3, 'c')",
		// A procedure answers with a result set, then the OK that ends
		// the CALL: it needs CLIENT_MULTI_RESULTS, as CALL holdfast.* does.
		"CREATE PROCEDURE two() BEGIN SELECT id, v FROM t ORDER BY id; END",
	} {
		if _, err := c.Exec(q, nil); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r, err := c.Exec("UPDATE t SET v = 'z' WHERE id >= 2", nil)
	if err != nil || r.Affected != 2 || r.Rows != 0 {
		t.Fatalf("UPDATE: %+v, %v", r, err)
	}
	if r, err := c.Exec("UPDATE t SET v = 'z' WHERE id = 99", nil); err != nil || r.Affected != 0 {
		t.Fatalf("UPDATE of nothing: %+v, %v", r, err)
	}
	if _, err := c.Exec("UPDATE t SET v = NULL WHERE id = 2", nil); err != nil {
		t.Fatal(err)
	}
	var got []string
	r, err = c.Exec("CALL two()", func(cols [][]byte) error {
		if cols[1] == nil {
			got = append(got, string(cols[0])+"=NULL")
		} else {
			got = append(got, string(cols[0])+"="+string(cols[1]))
		}
		return nil
	})
	if err != nil || r.Rows != 3 || !slices.Equal(got, []string{"1=a", "2=NULL", "3=z"}) {
		t.Fatalf("CALL: %+v, %v, rows %v", r, err, got)
	}
	// A row callback's error comes back once the reply is read: the
	// connection stays usable.
	stop := errors.New("stop")
	calls := 0
	if _, err := c.Exec("SELECT seq FROM seq_1_to_100", func([][]byte) error { calls++; return stop }); !errors.Is(err, stop) || calls != 1 {
		t.Fatalf("callback error: %v after %d calls", err, calls)
	}
	var se *mysqlwire.SQLError
	if _, err := c.Exec("SELECT * FROM nope", nil); !errors.As(err, &se) || se.Code != 1146 {
		t.Fatalf("missing table: %v", err)
	}
	if r, err := c.Exec("SELECT 1", nil); err != nil || r.Rows != 1 {
		t.Fatalf("after errors: %+v, %v", r, err)
	}
}
