package proxy

import (
	"testing"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// One session's state must never reach another's. These sequences run a
// first client that leaves state behind on a backend connection and a
// second that must not see it, on a pool of one connection so that the
// second client gets the very connection the first used.

// A client without CLIENT_MULTI_STATEMENTS pins its session and leaves;
// the connection it used is reset. COM_RESET_CONNECTION does not turn
// multi-statements back on (MariaDB keeps the COM_SET_OPTION state), so
// holdfast must, or the next multi-statement client gets 1064.
func TestIsolationMultiStatementsAfterReset(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
	for i := 0; i < 100; i++ {
		a := p.raw(t, rawmysql.Options{})
		if a.Caps&rawmysql.CapMultiStatements != 0 {
			t.Fatal("setup: the first client negotiated multi-statements")
		}
		a.mustQuery("SET @q = 1")
		if err := a.Command([]byte{rawmysql.ComQuit}); err != nil {
			t.Fatal(err)
		}
		if _, err := a.WaitClosed(); err != nil {
			t.Fatal(err)
		}
		a.NC.Close()
		b := p.raw(t, rawmysql.Options{Caps: rawmysql.CapMultiStatements})
		rs, err := b.Results("select 1; select 2")
		if err != nil || len(rs) != 2 || rs[1].Cell(0, 0) != "2" {
			t.Fatalf("round %d: multi-statement after a reset connection: %+v, %v", i, rs, err)
		}
		b.NC.Close()
	}
}

// MariaDB marks a JSON column as JSON only in its extended type info
// (MARIADB_CLIENT_EXTENDED_TYPE_INFO): holdfast offers it in front of
// MariaDB and relays it to the clients that ask, and only to them, also
// on one backend connection shared in turn.
func TestTypeInfoRelayed(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
	d := p.rawDirect(t, rawmysql.Options{Ext: mysqlwire.ExtTypeInfo})
	if d.Ext&mysqlwire.ExtTypeInfo == 0 {
		t.Fatalf("setup: MariaDB offers extended capabilities %#x", d.ServerExt)
	}
	d.mustQuery("CREATE TABLE tj (id INT PRIMARY KEY, j JSON, u UUID)")
	d.mustQuery(`INSERT INTO tj VALUES (1, '{"a": 1}', 'cd6d1f5e-5b55-11ee-9b7a-000000000001')`)
	const q = "SELECT id, j, u FROM tj"
	want := d.mustQuery(q)
	if len(want) != 1 || len(want[0].Cols) != 3 || len(want[0].Cols[1].TypeInfo) == 0 {
		t.Fatalf("setup: MariaDB sent no extended type info for a JSON column: %+v", want)
	}
	for i := 0; i < 3; i++ {
		c := p.raw(t, rawmysql.Options{Ext: mysqlwire.ExtTypeInfo})
		if c.Ext&mysqlwire.ExtTypeInfo == 0 {
			t.Fatalf("holdfast offers extended capabilities %#x, want type info", c.ServerExt)
		}
		if c.ServerExt&(mysqlwire.ExtCacheMetadata|mysqlwire.ExtBulk|mysqlwire.ExtProgress) != 0 {
			t.Fatalf("holdfast offers extended capabilities %#x it cannot honour", c.ServerExt)
		}
		got := c.mustQuery(q)
		for j := range want[0].Cols {
			if g, w := got[0].Cols[j], want[0].Cols[j]; string(g.TypeInfo) != string(w.TypeInfo) || g.Type != w.Type || g.Charset != w.Charset {
				t.Errorf("column %s: holdfast %+v, MariaDB %+v", w.Name, g, w)
			}
		}
		// holdfast's own result sets carry (empty) type info too.
		if v := c.value("SELECT LAST_INSERT_ID()"); v != "0" {
			t.Errorf("LAST_INSERT_ID() = %s", v)
		}
		// A client that did not ask gets plain column definitions (the
		// strict decoder fails on anything else), on the same connection.
		plain := p.raw(t, rawmysql.Options{})
		if plain.Ext != 0 {
			t.Fatal("setup: extended capabilities negotiated")
		}
		if rs := plain.mustQuery(q); len(rs[0].Cols) != 3 {
			t.Fatalf("%+v", rs)
		}
		c.NC.Close()
		plain.NC.Close()
	}
}
