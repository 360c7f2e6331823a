package reservation

import (
	"context"
	"errors"
	"testing"
)

type fakeText struct {
	sqls     []string
	released []bool
}

func (f *fakeText) Exec(_ context.Context, sql string) (uint64, uint64, error) {
	f.sqls = append(f.sqls, sql)
	return 3, 7, nil
}

func (f *fakeText) Query(_ context.Context, sql string) ([][][]byte, error) {
	f.sqls = append(f.sqls, sql)
	return [][][]byte{{[]byte("x")}}, nil
}

func (f *fakeText) Release(broken bool) { f.released = append(f.released, broken) }

func TestTextConns(t *testing.T) {
	f := &fakeText{}
	var tags []string
	conns := TextConns(func(_ context.Context, tag string) (TextConn, error) {
		tags = append(tags, tag)
		if tag == "refused" {
			return nil, errors.New("drained")
		}
		return f, nil
	})
	if _, err := conns.Borrow(context.Background(), "refused"); err == nil {
		t.Fatal("a refused borrow lent a connection")
	}
	c, err := conns.Borrow(context.Background(), "holdfast:reserve")
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Exec(context.Background(), "UPDATE t SET a = ? WHERE k = ?", 5, "it's")
	if err != nil || res.AffectedRows != 3 || res.LastInsertID != 7 {
		t.Fatalf("Exec: %+v, %v", res, err)
	}
	rows, err := c.Query(context.Background(), "SELECT ? FROM t", []byte{0})
	if err != nil || len(rows) != 1 {
		t.Fatalf("Query: %v, %v", rows, err)
	}
	if _, err := c.Exec(context.Background(), "SELECT ?, ?", 1); err == nil {
		t.Fatal("a missing argument was not refused")
	}
	c.Release(true)
	want := []string{"UPDATE t SET a = 5 WHERE k = X'69742773'", "SELECT X'00' FROM t"} // strings go as hex: no quoting to get wrong
	if len(f.sqls) != 2 || f.sqls[0] != want[0] || f.sqls[1] != want[1] || len(f.released) != 1 || !f.released[0] {
		t.Fatalf("sent %q, released %v; want %q and one broken release", f.sqls, f.released, want)
	}
	if len(tags) != 2 || tags[1] != "holdfast:reserve" {
		t.Fatalf("borrowed under %q", tags)
	}
}
