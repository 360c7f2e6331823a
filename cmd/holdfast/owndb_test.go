package main

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// fakeTopology is a topologyWatch the test moves.
type fakeTopology struct {
	gen       atomic.Uint64
	readOnlys atomic.Int32
}

func (f *fakeTopology) TopologyGeneration() uint64 { return f.gen.Load() }
func (f *fakeTopology) NoteReadOnly()              { f.readOnlys.Add(1) }

// A followDB connection opened before the topology changed is not lent
// again (database/sql opens another), nor is one answered 1290, which also
// has the servers checked at once.
func TestFollowDBRetiresStaleConnections(t *testing.T) {
	db := dbtest.NewDatabase(t)
	c := dbtest.Config(t)
	topo := &fakeTopology{}
	tb := &tables{fleetDB: db}
	tb.schema.Store(&db)
	sdb := followDB(c, tb, topo)
	defer sdb.Close()
	sdb.SetMaxOpenConns(1)
	ctx := context.Background()
	id := func() (n int64) {
		t.Helper()
		if err := sdb.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	first := id()
	if again := id(); again != first {
		t.Fatalf("the idle connection was not reused: %d then %d", first, again)
	}
	topo.gen.Add(1) // a switchover
	second := id()
	if second == first {
		t.Fatal("a connection opened before the topology changed was lent again")
	}
	conn, err := sdb.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = conn.Raw(func(dc any) error {
		fc := dc.(*followConn)
		fc.noteErr(&mysql.MySQLError{Number: codeReadOnly, Message: "The MariaDB server is running with the --read-only option"})
		return nil
	})
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	if topo.readOnlys.Load() != 1 {
		t.Fatalf("NoteReadOnly called %d times, want 1", topo.readOnlys.Load())
	}
	if third := id(); third == second {
		t.Fatal("a connection answered 1290 was lent again")
	}
}
