package proxy

// The raw client (internal/rawmysql) as the tests use it: logins with a
// hang guard, and must* forms that fail the test.

import (
	"net"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// stFlagsCompared are the status flags a test compares between holdfast
// and MariaDB.
const stFlagsCompared = mysqlwire.StatusInTrans | mysqlwire.StatusAutocommit | mysqlwire.StatusMoreResults

// rawConn is a raw connection with the test that owns it.
type rawConn struct {
	*rawmysql.Conn
	t testing.TB // for the must* helpers; nil outside a test goroutine
}

// rawGuard bounds each read and write of a test's raw connection.
const rawGuard = 15 * time.Second

// newRawConn wraps nc (whose greeting is still to be read) for test t.
func newRawConn(t testing.TB, nc net.Conn) *rawConn {
	return &rawConn{Conn: rawmysql.NewConn(nc, rawmysql.Options{Guard: rawGuard, ReadBuffer: 64 << 10}), t: t}
}

// rawDial connects and logs in. An ERR from the server comes back as
// *mysqlwire.SQLError.
func rawDial(addr string, o rawmysql.Options) (*rawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := newRawConn(nil, nc)
	if err := c.Handshake(o); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// rawLogin is rawDial that fails the test on error and closes at cleanup.
func rawLogin(t testing.TB, addr string, o rawmysql.Options) *rawConn {
	t.Helper()
	c, err := rawDial(addr, o)
	if err != nil {
		t.Fatalf("raw login to %s as %q: %v", addr, o.User, err)
	}
	c.t = t
	t.Cleanup(func() { c.NC.Close() })
	return c
}

func (c *rawConn) mustQuery(sql string) []rawmysql.Result {
	c.t.Helper()
	rs, err := c.Results(sql)
	if err != nil {
		c.t.Fatalf("%s: %v", sql, err)
	}
	return rs
}

// value returns the first cell of the first result set of sql.
func (c *rawConn) value(sql string) string {
	c.t.Helper()
	rs := c.mustQuery(sql)
	if len(rs) == 0 || rs[0].OK != nil {
		c.t.Fatalf("%s: no result set", sql)
	}
	return rs[0].Cell(0, 0)
}

// mustOK sends a command whose answer must be a single OK packet.
func (c *rawConn) mustOK(payload []byte) mysqlwire.OK {
	c.t.Helper()
	p, err := c.RoundTrip(payload)
	if err != nil {
		c.t.Fatalf("command 0x%02x: %v", payload[0], err)
	}
	if p[0] == mysqlwire.HeaderErr {
		c.t.Fatalf("command 0x%02x: %v", payload[0], rawmysql.ErrPacket(p))
	}
	ok, err := rawmysql.DecodeOK(p, c.Caps&rawmysql.CapSessionTrack != 0)
	if err != nil {
		c.t.Fatalf("command 0x%02x: %v", payload[0], err)
	}
	return ok
}

// mustErr sends a command whose answer must be ERR code with SQLSTATE state.
func (c *rawConn) mustErr(payload []byte, code uint16, state string) *mysqlwire.SQLError {
	c.t.Helper()
	p, err := c.RoundTrip(payload)
	if err != nil {
		c.t.Fatalf("command % x: %v, want ERR %d", trunc(payload), err, code)
	}
	e, err := rawmysql.DecodeErr(p)
	if err != nil {
		c.t.Fatalf("command % x: %v, want ERR %d", trunc(payload), err, code)
	}
	if e.Code != code || e.State != state || e.Msg == "" {
		c.t.Fatalf("command % x: %v, want ERR %d (%s) with a message", trunc(payload), e, code, state)
	}
	return e
}

func trunc(b []byte) []byte { return b[:min(len(b), 16)] }

// ping sends COM_PING and returns the OK's status flags.
func (c *rawConn) ping() uint16 {
	c.t.Helper()
	return c.mustOK([]byte{rawmysql.ComPing}).Status
}

func (c *rawConn) mustPrepare(query string) *rawmysql.Stmt {
	c.t.Helper()
	st, err := c.Prepare(query)
	if err != nil {
		c.t.Fatalf("prepare %s: %v", query, err)
	}
	return st
}

func (c *rawConn) mustExecute(st *rawmysql.Stmt, params []rawmysql.Param, bind bool) rawmysql.Result {
	c.t.Helper()
	rs, err := c.Execute(st.ID, 0, params, bind)
	if err != nil {
		c.t.Fatalf("execute statement %d: %v", st.ID, err)
	}
	if len(rs) != 1 {
		c.t.Fatalf("execute statement %d: %d results", st.ID, len(rs))
	}
	return rs[0]
}
