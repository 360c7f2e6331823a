package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// Every KILL form either is translated from holdfast's connection ids or
// is refused with a clear error: none reaches MariaDB as written, where a
// holdfast id would be read as a backend thread id.
func TestKillFormsNeverPassThrough(t *testing.T) {
	p := startProxy(t)
	victim := p.raw(t, rawmysql.Options{User: "other", Password: "other"})
	vid := victim.value("SELECT CONNECTION_ID()")
	victim.mustQuery("BEGIN")
	victim.mustQuery("SELECT 1") // holds a backend connection, in a transaction
	tid := rawThread(victim)
	c := p.raw(t, rawmysql.Options{User: "admin", Password: "admin", Caps: rawmysql.CapMultiStatements})
	for _, q := range []string{
		"SELECT 1; KILL (" + tid + "); SELECT 2",
		"BEGIN NOT ATOMIC KILL " + vid + "; END",
		"KILL QUERY ID " + vid,
		"KILL (" + tid + ")",
		"KILL " + tid + " + 0",
	} {
		c.mustErr(append([]byte{rawmysql.ComQuery}, q...), 1235, "42000")
	}
	c.mustErr(append([]byte{rawmysql.ComStmtPrepare}, "KILL ?"...), 1295, "HY000")
	c.mustErr(append([]byte{rawmysql.ComStmtPrepare}, ("KILL "+vid)...), 1295, "HY000")
	if v := victim.value("SELECT @@in_transaction"); v != "1" {
		t.Fatalf("the victim's transaction ended (in_transaction %s)", v)
	}
	if got := rawThread(victim); got != tid {
		t.Fatalf("the victim's backend connection changed from %s to %s", tid, got)
	}
}

// KILL USER name acts on holdfast's clients logged in as name, and only
// on them (every client reaches MariaDB as the one backend account, so
// MariaDB's own KILL USER would kill everyone's backend connections).
func TestKillUser(t *testing.T) {
	p := startProxy(t)
	victims := []*rawConn{p.raw(t, rawmysql.Options{User: "other", Password: "other"}), p.raw(t, rawmysql.Options{User: "other", Password: "other"})}
	for _, v := range victims {
		v.mustQuery("BEGIN")
		v.mustQuery("SELECT 1")
	}
	bystander := p.raw(t, rawmysql.Options{})
	bystander.mustQuery("BEGIN")
	bystander.mustQuery("SELECT 1")
	btid := rawThread(bystander)

	// Only an admin (or the user itself) may.
	p.raw(t, rawmysql.Options{}).mustErr(append([]byte{rawmysql.ComQuery}, "KILL USER other"...), 1095, "HY000")
	admin := p.raw(t, rawmysql.Options{User: "admin", Password: "admin"})
	ok := admin.mustOK(append([]byte{rawmysql.ComQuery}, "KILL USER 'other'@'%'"...))
	if ok.AffectedRows != 2 {
		t.Errorf("KILL USER: %d affected, want the 2 connections killed", ok.AffectedRows)
	}
	for i, v := range victims {
		v.Guard = 10 * time.Second
		if _, err := v.WaitClosed(); err != nil {
			t.Fatalf("victim %d not closed: %v", i, err)
		}
	}
	if got := rawThread(bystander); got != btid {
		t.Fatalf("the bystander's backend connection changed from %s to %s", btid, got)
	}
	if v := bystander.value("SELECT @@in_transaction"); v != "1" {
		t.Fatal("the bystander's transaction ended")
	}
	// KILL QUERY USER leaves the connections open.
	other := p.raw(t, rawmysql.Options{User: "other", Password: "other"})
	admin.mustOK(append([]byte{rawmysql.ComQuery}, "KILL QUERY USER other"...))
	if v := other.value("SELECT 'still here'"); v != "still here" {
		t.Fatal(v)
	}
	// A user may kill its own user's connections, its own included.
	self := p.raw(t, rawmysql.Options{User: "other", Password: "other"})
	self.mustOK(append([]byte{rawmysql.ComQuery}, "KILL USER other"...))
	for _, c := range []*rawConn{other, self} {
		if _, err := c.WaitClosed(); err != nil {
			t.Fatalf("not closed after KILL USER by its own user: %v", err)
		}
	}
}

// CONNECTION_ID() is holdfast's connection id (the one KILL takes) in
// every form, typed or prepared, never the id of whichever backend thread
// runs the statement.
func TestConnectionIDEveryForm(t *testing.T) {
	p := startProxy(t)
	c := p.raw(t, rawmysql.Options{})
	id := c.value("SELECT CONNECTION_ID()")
	if n, err := strconv.Atoi(id); err != nil || n < firstConnID {
		t.Fatalf("CONNECTION_ID() = %s, want a holdfast connection id", id)
	}
	for _, q := range []string{
		"select connection_id() AS id",
		"SELECT CONNECTION_ID()+0",
		"SELECT CAST(CONNECTION_ID() AS CHAR)",
		"SELECT * FROM (SELECT CONNECTION_ID() AS c) t",
		"SELECT IF(CONNECTION_ID() = " + id + ", " + id + ", 0)",
	} {
		if got := c.value(q); got != id {
			t.Errorf("%s = %s, want %s", q, got, id)
		}
	}
	rs := c.mustQuery("SELECT CONNECTION_ID() + 1")
	if name := rs[0].Cols[0].Name; name != "CONNECTION_ID() + 1" {
		t.Errorf("column named %q, want the expression as written", name)
	}
	for _, q := range []string{"SELECT CONNECTION_ID()", "SELECT CONNECTION_ID() + ?", "SELECT ?, CONNECTION_ID()"} {
		st := c.mustPrepare(q)
		params := make([]rawmysql.Param, st.Params)
		for i := range params {
			params[i] = rawmysql.IntParam(0)
		}
		r := c.mustExecute(st, params, true)
		if got := r.Cell(0, len(r.Cols)-1); got != id {
			t.Errorf("prepared %s = %s, want %s", q, got, id)
		}
	}
	// Also on the connection the session holds: inside a transaction, the
	// prepared SELECT CONNECTION_ID() is still holdfast's id.
	st := c.mustPrepare("SELECT CONNECTION_ID()")
	c.mustQuery("BEGIN")
	c.mustQuery("SELECT 1")
	if r := c.mustExecute(st, nil, true); r.Cell(0, 0) != id {
		t.Errorf("prepared SELECT CONNECTION_ID() inside a transaction = %s, want %s", r.Cell(0, 0), id)
	}
	c.mustQuery("COMMIT")
	// And KILL takes it.
	killer := p.raw(t, rawmysql.Options{})
	killer.mustOK(append([]byte{rawmysql.ComQuery}, ("KILL " + c.value("SELECT CONNECTION_ID() + 0"))...))
	if _, err := c.WaitClosed(); err != nil {
		t.Fatal(err)
	}
}

// A client's own wait_timeout closes it when idle, as MariaDB does; the
// value is kept by holdfast and never put on the pooled backend
// connection, which MariaDB would then close a second after it returned
// to the pool.
func TestWaitTimeoutIsTheClients(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
	c := p.raw(t, rawmysql.Options{})
	tid := rawThread(c)
	c.mustQuery("SET wait_timeout = 1")
	if v := c.value("SELECT @@wait_timeout"); v != "1" {
		t.Fatalf("SELECT @@wait_timeout = %s after SET wait_timeout = 1", v)
	}
	if v := c.value("SELECT @@session.wait_timeout, 'x'"); v != "1" {
		t.Fatalf("@@session.wait_timeout = %s", v)
	}
	other := p.raw(t, rawmysql.Options{})
	if v := other.value("SELECT @@wait_timeout"); v == "1" {
		t.Fatal("another client sees the first client's wait_timeout")
	}
	// Idle past its wait_timeout, the client is closed without a word.
	c.Guard = 10 * time.Second
	rest, err := c.WaitClosed()
	if err != nil || len(rest) != 0 {
		t.Fatalf("idle client with wait_timeout 1: % x, %v; want closed without a packet", rest, err)
	}
	// The pooled connection it used is still the one serving others.
	if got := rawThread(other); got != tid {
		t.Fatalf("backend connection %s was replaced by %s: MariaDB closed it", tid, got)
	}
	if st := p.srv.Stats().Pool; st.Closed[pool.CloseBroken]+st.Closed[pool.CloseUnhealthy] != 0 {
		t.Fatalf("backend connections closed as broken or unhealthy: %+v", st)
	}

	// interactive_timeout applies to clients that say they are interactive.
	ic := p.raw(t, rawmysql.Options{Caps: rawmysql.CapInteractive})
	ic.mustQuery("SET interactive_timeout = 1")
	ic.Guard = 10 * time.Second
	if rest, err := ic.WaitClosed(); err != nil || len(rest) != 0 {
		t.Fatalf("interactive client: % x, %v", rest, err)
	}
	nc := p.raw(t, rawmysql.Options{})
	nc.mustQuery("SET interactive_timeout = 1")
	time.Sleep(1500 * time.Millisecond)
	if v := nc.value("SELECT 'alive'"); v != "alive" {
		t.Fatal(v)
	}
}

// With the server's default tracking settings, a client that negotiated
// CLIENT_SESSION_TRACK is told only what MariaDB would tell it: not the
// state changes holdfast's own tracking settings produce, and not those
// settings.
func TestSessionTrackingIsTheClients(t *testing.T) {
	p := startProxy(t)
	c, d := p.raw(t, rawmysql.Options{Caps: rawmysql.CapSessionTrack}), p.rawDirect(t, rawmysql.Options{Caps: rawmysql.CapSessionTrack})
	for _, q := range []string{"SET sql_mode = ''", "SET @v = 1", "SET time_zone = '+02:00'", "SET autocommit = 1"} {
		okp, okd := c.mustOK(append([]byte{rawmysql.ComQuery}, q...)), d.mustOK(append([]byte{rawmysql.ComQuery}, q...))
		if okp.Status != okd.Status || string(okp.StateInfo) != string(okd.StateInfo) {
			t.Errorf("%s: holdfast status %#x state % x, MariaDB status %#x state % x", q, okp.Status, okp.StateInfo, okd.Status, okd.StateInfo)
		}
	}
	for _, v := range []string{"@@session_track_system_variables", "@@session_track_state_change", "@@session_track_schema"} {
		if got, want := c.value("SELECT "+v), d.value("SELECT "+v); got != want {
			t.Errorf("%s = %q through holdfast, %q directly", v, got, want)
		}
	}
	rs := c.mustQuery("SHOW VARIABLES LIKE 'session_track_system_variables'")
	if got, want := rs[0].Cell(0, 1), d.value("SELECT @@session_track_system_variables"); got != want {
		t.Errorf("SHOW VARIABLES: %q, want %q", got, want)
	}
	if strings.Contains(rs[0].Cell(0, 1), "*") {
		t.Error("holdfast's own tracking setting leaked")
	}
}
