package bench

import (
	"context"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// testServer returns the test MariaDB's address and a fresh database with
// an account (password = name) that may use it.
func testServer(t *testing.T) (addr, db, user string) {
	t.Helper()
	db = dbtest.NewDatabase(t)
	user = dbtest.NewUser(t, db)
	return dbtest.Config(t).Addr, db, user
}

func TestClientQueries(t *testing.T) {
	addr, db, user := testServer(t)
	// Directly, and through a delaying relay (which must not change a byte).
	r := dbtest.StartRelay(t, addr, time.Millisecond)
	for _, target := range []string{addr, r.Addr().String()} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, target, user, user, db)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
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
		_, err = c.Query("SELECT * FROM no_such_table")
		var se *ServerError
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

func TestClientLoginFailures(t *testing.T) {
	addr, db, user := testServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Dial(ctx, addr, user, "wrong", db)
	var se *ServerError
	if !errors.As(err, &se) || se.Code != 1045 {
		t.Fatalf("wrong password: %v, want error 1045", err)
	}
	_, err = Dial(ctx, addr, user, user, "no_such_db_for_bench")
	if !errors.As(err, &se) || (se.Code != 1044 && se.Code != 1049) {
		t.Fatalf("unknown database: %v, want error 1044 or 1049", err)
	}
	// A server that accepts and says nothing: the context bounds the login.
	// (The relay sleeps out its delay before Close returns: keep it short.)
	r := dbtest.StartRelay(t, addr, 2*time.Second)
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	start := time.Now()
	if _, err := Dial(short, r.Addr().String(), user, user, db); err == nil {
		t.Fatal("login through a relay that never delivers succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("login gave up after %v, want about 200ms", d)
	}
}

func TestScrambleNative(t *testing.T) {
	// SHA1(pw) XOR SHA1(scramble + SHA1(SHA1(pw))), computed independently
	// (Python hashlib); TestClientQueries checks it against a real server.
	got := hex.EncodeToString(scrambleNative([]byte("abcdefghijklmnopqrst"), "secret"))
	if want := "8817c50fa779daef010ee7577825b0847df9842e"; got != want {
		t.Fatalf("scramble %s, want %s", got, want)
	}
	if scrambleNative([]byte("abcdefghijklmnopqrst"), "") != nil {
		t.Fatal("an empty password must send an empty auth response")
	}
}

func TestLenenc(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		v    uint64
		n    int
		okay bool
	}{
		{[]byte{0x05}, 5, 1, true},
		{[]byte{0xfc, 0x01, 0x02}, 0x0201, 3, true},
		{[]byte{0xfd, 1, 2, 3}, 0x030201, 4, true},
		{[]byte{0xfe, 1, 0, 0, 0, 0, 0, 0, 0}, 1, 9, true},
		{[]byte{0xfe, 1}, 0, 0, false},
		{[]byte{0xfb}, 0, 0, false},
		{nil, 0, 0, false},
	} {
		v, n, ok := lenenc(tc.in)
		if v != tc.v || n != tc.n || ok != tc.okay {
			t.Errorf("lenenc(% x) = %d, %d, %v; want %d, %d, %v", tc.in, v, n, ok, tc.v, tc.n, tc.okay)
		}
	}
}
