package proxy

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// Every KILL form either is translated from holdfast's connection ids or
// is refused with a clear error: none reaches MariaDB as written, where a
// holdfast id would be read as a backend thread id.
func TestKillFormsNeverPassThrough(t *testing.T) {
	p := startProxy(t)
	victim := p.raw(t, rawOpts{user: "other", pass: "other"})
	vid := victim.value("SELECT CONNECTION_ID()")
	victim.mustQuery("BEGIN")
	victim.mustQuery("SELECT 1") // holds a backend connection, in a transaction
	tid := rawThread(victim)
	c := p.raw(t, rawOpts{user: "admin", pass: "admin", caps: capMultiStatements})
	for _, q := range []string{
		"SELECT 1; KILL (" + tid + "); SELECT 2",
		"BEGIN NOT ATOMIC KILL " + vid + "; END",
		"KILL QUERY ID " + vid,
		"KILL (" + tid + ")",
		"KILL " + tid + " + 0",
	} {
		c.mustErr(append([]byte{rcQuery}, q...), 1235, "42000")
	}
	c.mustErr(append([]byte{rcStmtPrepare}, "KILL ?"...), 1295, "HY000")
	c.mustErr(append([]byte{rcStmtPrepare}, ("KILL "+vid)...), 1295, "HY000")
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
	victims := []*rawConn{p.raw(t, rawOpts{user: "other", pass: "other"}), p.raw(t, rawOpts{user: "other", pass: "other"})}
	for _, v := range victims {
		v.mustQuery("BEGIN")
		v.mustQuery("SELECT 1")
	}
	bystander := p.raw(t, rawOpts{})
	bystander.mustQuery("BEGIN")
	bystander.mustQuery("SELECT 1")
	btid := rawThread(bystander)

	// Only an admin (or the user itself) may.
	p.raw(t, rawOpts{}).mustErr(append([]byte{rcQuery}, "KILL USER other"...), 1095, "HY000")
	admin := p.raw(t, rawOpts{user: "admin", pass: "admin"})
	ok := admin.mustOK(append([]byte{rcQuery}, "KILL USER 'other'@'%'"...))
	if ok.affected != 2 {
		t.Errorf("KILL USER: %d affected, want the 2 connections killed", ok.affected)
	}
	for i, v := range victims {
		v.guard = 10 * time.Second
		if _, err := v.waitClosed(); err != nil {
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
	other := p.raw(t, rawOpts{user: "other", pass: "other"})
	admin.mustOK(append([]byte{rcQuery}, "KILL QUERY USER other"...))
	if v := other.value("SELECT 'still here'"); v != "still here" {
		t.Fatal(v)
	}
	// A user may kill its own user's connections, its own included.
	self := p.raw(t, rawOpts{user: "other", pass: "other"})
	self.mustOK(append([]byte{rcQuery}, "KILL USER other"...))
	for _, c := range []*rawConn{other, self} {
		if _, err := c.waitClosed(); err != nil {
			t.Fatalf("not closed after KILL USER by its own user: %v", err)
		}
	}
}

// CONNECTION_ID() is holdfast's connection id (the one KILL takes) in
// every form, typed or prepared, never the id of whichever backend thread
// runs the statement.
func TestConnectionIDEveryForm(t *testing.T) {
	p := startProxy(t)
	c := p.raw(t, rawOpts{})
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
	if name := rs[0].cols[0].name; name != "CONNECTION_ID() + 1" {
		t.Errorf("column named %q, want the expression as written", name)
	}
	for _, q := range []string{"SELECT CONNECTION_ID()", "SELECT CONNECTION_ID() + ?", "SELECT ?, CONNECTION_ID()"} {
		st := c.mustPrepare(q)
		params := make([]rawParam, st.params)
		for i := range params {
			params[i] = pInt(0)
		}
		r := c.mustExecute(st, params, true)
		if got := r.cell(0, len(r.cols)-1); got != id {
			t.Errorf("prepared %s = %s, want %s", q, got, id)
		}
	}
	// And KILL takes it.
	killer := p.raw(t, rawOpts{})
	killer.mustOK(append([]byte{rcQuery}, ("KILL " + c.value("SELECT CONNECTION_ID() + 0"))...))
	if _, err := c.waitClosed(); err != nil {
		t.Fatal(err)
	}
}

// A client's own wait_timeout closes it when idle, as MariaDB does; the
// value is kept by holdfast and never put on the pooled backend
// connection, which MariaDB would then close a second after it returned
// to the pool.
func TestWaitTimeoutIsTheClients(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
	c := p.raw(t, rawOpts{})
	tid := rawThread(c)
	c.mustQuery("SET wait_timeout = 1")
	if v := c.value("SELECT @@wait_timeout"); v != "1" {
		t.Fatalf("SELECT @@wait_timeout = %s after SET wait_timeout = 1", v)
	}
	if v := c.value("SELECT @@session.wait_timeout, 'x'"); v != "1" {
		t.Fatalf("@@session.wait_timeout = %s", v)
	}
	other := p.raw(t, rawOpts{})
	if v := other.value("SELECT @@wait_timeout"); v == "1" {
		t.Fatal("another client sees the first client's wait_timeout")
	}
	// Idle past its wait_timeout, the client is closed without a word.
	c.guard = 10 * time.Second
	rest, err := c.waitClosed()
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
	ic := p.raw(t, rawOpts{caps: capInteractive})
	ic.mustQuery("SET interactive_timeout = 1")
	ic.guard = 10 * time.Second
	if rest, err := ic.waitClosed(); err != nil || len(rest) != 0 {
		t.Fatalf("interactive client: % x, %v", rest, err)
	}
	nc := p.raw(t, rawOpts{})
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
	c, d := p.raw(t, rawOpts{caps: capSessionTrack}), p.rawDirect(t, rawOpts{caps: capSessionTrack})
	for _, q := range []string{"SET sql_mode = ''", "SET @v = 1", "SET time_zone = '+02:00'", "SET autocommit = 1"} {
		okp, okd := c.mustOK(append([]byte{rcQuery}, q...)), d.mustOK(append([]byte{rcQuery}, q...))
		if okp.status != okd.status || string(okp.state) != string(okd.state) {
			t.Errorf("%s: holdfast status %#x state % x, MariaDB status %#x state % x", q, okp.status, okp.state, okd.status, okd.state)
		}
	}
	for _, v := range []string{"@@session_track_system_variables", "@@session_track_state_change", "@@session_track_schema"} {
		if got, want := c.value("SELECT "+v), d.value("SELECT "+v); got != want {
			t.Errorf("%s = %q through holdfast, %q directly", v, got, want)
		}
	}
	rs := c.mustQuery("SHOW VARIABLES LIKE 'session_track_system_variables'")
	if got, want := rs[0].cell(0, 1), d.value("SELECT @@session_track_system_variables"); got != want {
		t.Errorf("SHOW VARIABLES: %q, want %q", got, want)
	}
	if strings.Contains(rs[0].cell(0, 1), "*") {
		t.Error("holdfast's own tracking setting leaked")
	}
}
