package proxy

// Protocol commands through the raw client (internal/rawmysql), most
// of them compared with the same exchange straight to MariaDB.

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// raw logs in to the proxy (as app, in the test database unless o says).
func (p *testProxy) raw(t *testing.T, o rawmysql.Options) *rawConn {
	t.Helper()
	if o.User == "" {
		o.User, o.Password = "app", "app"
	}
	if o.DB == "" {
		o.DB = p.db
	}
	return rawLogin(t, p.addr, o)
}

// rawDirect logs in straight to MariaDB as the proxy's backend account.
func (p *testProxy) rawDirect(t *testing.T, o rawmysql.Options) *rawConn {
	t.Helper()
	o.User, o.Password = p.user, p.user
	if o.DB == "" {
		o.DB = p.db
	}
	return rawLogin(t, p.cfg.Backend.Address, o)
}

// grantedDatabase is a second database the backend account may use.
func grantedDatabase(t *testing.T, p *testProxy) string {
	t.Helper()
	name := dbtest.NewDatabase(t)
	mustExec(t, dbtest.Root(t), "GRANT ALL ON `"+name+"`.* TO '"+p.user+"'@'%'")
	return name
}

// rawThread is the backend thread serving c's next statement.
func rawThread(c *rawConn) string { return c.value("SELECT " + selfThread()) }

// checkStillInTransaction checks that c, after what after says it did, is
// still in its transaction and holds its backend connection (thread tid):
// COM_PING reports IN_TRANS, and the other client b is lent another one.
func checkStillInTransaction(t *testing.T, c *rawConn, b *sql.Conn, tid, after string) {
	t.Helper()
	if st := c.ping(); st&mysqlwire.StatusInTrans == 0 {
		t.Errorf("COM_PING %s: status %#x lacks IN_TRANS", after, st)
	}
	done := grab(t, b)
	defer done()
	if bt := backendThread(t, b); bt == tid {
		t.Errorf("%s, another client was lent backend thread %s, inside this client's open transaction", after, tid)
	}
}

// errCode is the MySQL error code in err, 0 for nil, -1 for another error.
func errCode(err error) int {
	var e *mysqlwire.SQLError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return int(e.Code)
	}
	return -1
}

func initDB(name string) []byte { return append([]byte{rawmysql.ComInitDB}, name...) }

func TestRawPing(t *testing.T) {
	p := startProxy(t)
	c := p.raw(t, rawmysql.Options{})
	if c.GreetingStatus&mysqlwire.StatusAutocommit == 0 {
		t.Errorf("greeting status %#x lacks AUTOCOMMIT", c.GreetingStatus)
	}
	for i := 0; i < 3; i++ {
		ok := c.mustOK([]byte{rawmysql.ComPing})
		if ok.Status != mysqlwire.StatusAutocommit || ok.AffectedRows != 0 || ok.InsertID != 0 || ok.Warnings != 0 || len(ok.Info) != 0 {
			t.Fatalf("COM_PING: %+v", ok)
		}
	}
	c.mustQuery("BEGIN")
	if st := c.ping(); st&stFlagsCompared != mysqlwire.StatusInTrans|mysqlwire.StatusAutocommit {
		t.Fatalf("COM_PING in a transaction: status %#x", st)
	}
	c.mustQuery("ROLLBACK")
	if st := c.ping(); st&stFlagsCompared != mysqlwire.StatusAutocommit {
		t.Fatalf("COM_PING after ROLLBACK: status %#x", st)
	}
}

func TestRawInitDB(t *testing.T) {
	// An account without global privileges gets 1044 for a database it may
	// not see; the test server's admin account learns that it does not
	// exist (1049), so it is the backend account here.
	root := dbtest.Config(t)
	p := startProxy(t, func(c *config.Config) { c.Backend.User, c.Backend.Password = root.User, root.Passwd })
	other := dbtest.NewDatabase(t)
	c := p.raw(t, rawmysql.Options{})
	d := rawLogin(t, root.Addr, rawmysql.Options{User: root.User, Password: root.Passwd, DB: p.db})
	for _, x := range []*rawConn{c, d} {
		x.mustOK(initDB(other))
		if got := x.value("SELECT DATABASE()"); got != other {
			t.Fatalf("after COM_INIT_DB: in %q, want %q", got, other)
		}
	}
	const missing = "hf_no_such_database"
	ep, ed := c.mustErr(initDB(missing), 1049, "42000"), d.mustErr(initDB(missing), 1049, "42000")
	if *ep != *ed {
		t.Fatalf("unknown database: holdfast %v, MariaDB %v", ep, ed)
	}
	if !strings.Contains(ep.Msg, missing) {
		t.Fatalf("error text %q does not name the database", ep.Msg)
	}
	if got := c.value("SELECT DATABASE()"); got != other {
		t.Fatalf("a failed COM_INIT_DB moved the session to %q", got)
	}
	c.mustErr([]byte{rawmysql.ComInitDB}, 1046, "3D000")
}

// COM_INIT_DB is what drivers send to change database: holdfast tracks it
// like USE and restores it, rather than pinning the session.
func TestRawInitDBDoesNotPin(t *testing.T) {
	p := twoBackends(t)
	other := grantedDatabase(t, p)
	c, b := p.raw(t, rawmysql.Options{}), p.conn(t)
	before := rawThread(c)
	c.mustOK(initDB(other))
	if st := p.srv.Stats(); len(st.Pins) != 0 || st.PinnedSessions != 0 {
		t.Errorf("COM_INIT_DB pinned the session: pins %v", st.Pins)
	}
	done := grab(t, b)
	defer done()
	if got := c.value("SELECT DATABASE()"); got != other {
		t.Fatalf("in %q after moving, want %q", got, other)
	}
	if rawThread(c) == before {
		t.Fatalf("client stayed on backend thread %s after COM_INIT_DB", before)
	}
}

func TestRawFieldList(t *testing.T) {
	p := startProxy(t)
	mustExec(t, p.direct(t), "CREATE TABLE fl (id INT NOT NULL PRIMARY KEY, name VARCHAR(20) DEFAULT 'x', b BLOB)")
	c, d := p.raw(t, rawmysql.Options{}), p.rawDirect(t, rawmysql.Options{})
	got, err := c.FieldList("fl")
	if err != nil {
		t.Fatal(err)
	}
	want, err := d.FieldList("fl")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) || len(got) != 3 || got[1].Name != "name" {
		t.Fatalf("COM_FIELD_LIST through holdfast\n%+v\nstraight from MariaDB\n%+v", got, want)
	}
	if st := c.ping(); st&stFlagsCompared != mysqlwire.StatusAutocommit {
		t.Fatalf("COM_PING after COM_FIELD_LIST: status %#x", st)
	}
	_, errp := c.FieldList("no_such_table")
	_, errd := d.FieldList("no_such_table")
	if errCode(errp) != 1146 || fmt.Sprint(errp) != fmt.Sprint(errd) {
		t.Fatalf("unknown table: holdfast %v, MariaDB %v", errp, errd)
	}
}

func TestRawStatistics(t *testing.T) {
	p := startProxy(t)
	c, d := p.raw(t, rawmysql.Options{}), p.rawDirect(t, rawmysql.Options{})
	for _, x := range []*rawConn{c, d} {
		s, err := x.RoundTrip([]byte{rawmysql.ComStatistics})
		if err != nil || !strings.HasPrefix(string(s), "Uptime: ") {
			t.Fatalf("COM_STATISTICS: %q, %v", s, err)
		}
	}
	if got, want := c.ping()&stFlagsCompared, d.ping()&stFlagsCompared; got != want {
		t.Fatalf("COM_PING after COM_STATISTICS: status %#x through holdfast, %#x from MariaDB", got, want)
	}
}

// COM_STATISTICS inside a transaction must not end the client's hold on
// its backend connection.
func TestRawStatisticsInTransaction(t *testing.T) {
	p := twoBackends(t)
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY)")
	c, b := p.raw(t, rawmysql.Options{}), p.conn(t)
	c.mustQuery("BEGIN")
	c.mustQuery("INSERT INTO t VALUES (1)")
	tid := rawThread(c)
	if s, err := c.RoundTrip([]byte{rawmysql.ComStatistics}); err != nil || !strings.HasPrefix(string(s), "Uptime: ") {
		t.Fatalf("COM_STATISTICS: %q, %v", s, err)
	}
	checkStillInTransaction(t, c, b, tid, "after COM_STATISTICS")
	c.mustQuery("ROLLBACK")
	if n := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t"); n != "0" {
		t.Fatalf("%s rows after ROLLBACK: the transaction did not survive COM_STATISTICS", n)
	}
}

func TestRawSetOption(t *testing.T) {
	p := twoBackends(t)
	c, b, d := p.raw(t, rawmysql.Options{}), p.conn(t), p.rawDirect(t, rawmysql.Options{})
	const multi = "SELECT 1; SELECT 2"
	refused := func(x *rawConn, when string) {
		t.Helper()
		_, err := x.Results(multi)
		var e *mysqlwire.SQLError
		if !errors.As(err, &e) || e.Code != 1064 || e.State != "42000" {
			t.Fatalf("%s: multi-statement query gave %v, want ERR 1064 (42000)", when, err)
		}
	}
	accepted := func(x *rawConn, when string) {
		t.Helper()
		rs, err := x.Results(multi)
		if err != nil || len(rs) != 2 || rs[0].Cell(0, 0) != "1" || rs[1].Cell(0, 0) != "2" ||
			rs[0].Status&mysqlwire.StatusMoreResults == 0 || rs[1].Status&mysqlwire.StatusMoreResults != 0 {
			t.Fatalf("%s: multi-statement query gave %+v, %v", when, rs, err)
		}
	}
	set := func(x *rawConn, opt uint16) {
		t.Helper()
		pk, err := x.SetOption(opt)
		if err != nil {
			t.Fatal(err)
		}
		// (Its status flags are checked in TestRawErrorKeepsStatus.)
		if _, _, err := rawmysql.DecodeEOF(pk); err != nil {
			t.Fatalf("COM_SET_OPTION %d: reply % x (%v), want an EOF packet as MariaDB sends", opt, pk, err)
		}
	}
	refused(c, "without CLIENT_MULTI_STATEMENTS")
	refused(d, "MariaDB without CLIENT_MULTI_STATEMENTS")
	set(c, 0)
	set(d, 0)
	accepted(c, "after MULTI_STATEMENTS_ON")
	accepted(d, "MariaDB after MULTI_STATEMENTS_ON")
	done := grab(t, b) // c continues on the other backend connection
	accepted(c, "after MULTI_STATEMENTS_ON, on another backend connection")
	set(c, 1)
	refused(c, "after MULTI_STATEMENTS_OFF")
	done()
	refused(c, "after MULTI_STATEMENTS_OFF, back on the first backend connection")
	set(c, 0)
	accepted(c, "after MULTI_STATEMENTS_ON again")
	opt7 := binary16(rawmysql.ComSetOption, 7)
	d.mustErr(opt7, 1047, "08S01") // what MariaDB answers
	c.mustErr(opt7, 1047, "08S01")
	accepted(c, "after an unknown option")
}

func binary16(cmd byte, v uint16) []byte { return []byte{cmd, byte(v), byte(v >> 8)} }

func TestRawResetConnection(t *testing.T) {
	p := twoBackends(t)
	other := grantedDatabase(t, p)
	mustExec(t, p.direct(t), "CREATE TABLE ai (id INT AUTO_INCREMENT PRIMARY KEY)")
	c, b := p.raw(t, rawmysql.Options{}), p.conn(t)
	vars := []string{"@@sql_mode", "@@time_zone", "@@character_set_client", "@@collation_connection", "@@autocommit", "@@tx_isolation", "@@div_precision_increment"}
	defaults := map[string]string{}
	for _, v := range vars {
		defaults[v] = c.value("SELECT " + v)
	}
	// MariaDB keeps the current database across COM_RESET_CONNECTION.
	d := p.rawDirect(t, rawmysql.Options{})
	d.mustQuery("USE " + other)
	d.mustOK([]byte{rawmysql.ComResetConnection})
	wantDB := d.value("SELECT DATABASE()")

	c.mustQuery("USE " + other)
	c.mustQuery("SET @u = 42")
	c.mustQuery("CREATE TEMPORARY TABLE tmp (a INT)")
	c.mustQuery("SET sql_mode = 'ANSI_QUOTES', time_zone = '+03:00', div_precision_increment = 9")
	c.mustQuery("SET NAMES latin1")
	c.mustQuery("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
	c.mustQuery("INSERT INTO " + p.db + ".ai VALUES ()")
	st := c.mustPrepare("SELECT 1")
	c.mustQuery("PREPARE sp FROM 'SELECT 2'")
	c.mustQuery("SET autocommit = 0")
	c.mustQuery("INSERT INTO " + p.db + ".ai VALUES ()") // opens a transaction
	if ok := c.mustOK([]byte{rawmysql.ComResetConnection}); ok.Status&stFlagsCompared != mysqlwire.StatusAutocommit {
		t.Fatalf("COM_RESET_CONNECTION: status %#x", ok.Status)
	}
	check := func(when string) {
		t.Helper()
		if v := c.value("SELECT IFNULL(@u, 'gone')"); v != "gone" {
			t.Errorf("%s: @u = %s", when, v)
		}
		if _, err := c.Results("SELECT * FROM tmp"); errCode(err) != 1146 {
			t.Errorf("%s: temporary table: %v, want ERR 1146", when, err)
		}
		if _, err := c.Execute(st.ID, 0, nil, true); errCode(err) != 1243 {
			t.Errorf("%s: prepared statement %d: %v, want ERR 1243", when, st.ID, err)
		}
		if _, err := c.Results("EXECUTE sp"); errCode(err) != 1243 {
			t.Errorf("%s: EXECUTE sp: %v, want ERR 1243", when, err)
		}
		for _, v := range vars {
			if got := c.value("SELECT " + v); got != defaults[v] {
				t.Errorf("%s: %s = %q, want the default %q", when, v, got, defaults[v])
			}
		}
		if got := c.value("SELECT LAST_INSERT_ID()"); got != "0" {
			t.Errorf("%s: LAST_INSERT_ID() = %s", when, got)
		}
		if got := c.value("SELECT DATABASE()"); got != wantDB {
			t.Errorf("%s: database %q, want %q as MariaDB keeps it", when, got, wantDB)
		}
	}
	check("after COM_RESET_CONNECTION")
	if n := queryString(t, p.direct(t), "SELECT COUNT(*) FROM ai"); n != "1" {
		t.Errorf("%s rows: the open transaction was not rolled back", n)
	}
	if st := p.srv.Stats(); st.PinnedSessions != 0 {
		t.Errorf("session still pinned after COM_RESET_CONNECTION")
	}
	done := grab(t, b)
	check("on another backend connection")
	done()
}

func TestRawChangeUser(t *testing.T) {
	p := startProxy(t)
	other := grantedDatabase(t, p)
	t.Run("native", func(t *testing.T) {
		c := p.raw(t, rawmysql.Options{})
		defaultMode := c.value("SELECT @@sql_mode")
		victim := p.raw(t, rawmysql.Options{User: "other", Password: "other"})
		vid := victim.value("SELECT CONNECTION_ID()")
		c.mustErr(append([]byte{rawmysql.ComQuery}, "KILL QUERY "+vid...), 1095, "HY000")
		c.mustQuery("SET @u = 1")
		c.mustQuery("CREATE TEMPORARY TABLE tmp (a INT)")
		c.mustQuery("SET sql_mode = 'ANSI_QUOTES'")
		c.mustQuery("BEGIN")
		sw, fast, err := c.ChangeUser("admin", "admin", other)
		if err != nil || sw != "mysql_native_password" || fast {
			t.Fatalf("COM_CHANGE_USER: switch %q, fast %v, %v", sw, fast, err)
		}
		if st := c.ping(); st&stFlagsCompared != mysqlwire.StatusAutocommit {
			t.Errorf("status %#x after COM_CHANGE_USER", st)
		}
		if v := c.value("SELECT IFNULL(@u, 'gone')"); v != "gone" {
			t.Errorf("@u = %s after COM_CHANGE_USER", v)
		}
		if _, err := c.Results("SELECT * FROM tmp"); errCode(err) != 1146 {
			t.Errorf("temporary table after COM_CHANGE_USER: %v", err)
		}
		if v := c.value("SELECT @@sql_mode"); v != defaultMode {
			t.Errorf("sql_mode %q after COM_CHANGE_USER, want %q", v, defaultMode)
		}
		if v := c.value("SELECT DATABASE()"); v != other {
			t.Errorf("database %q, want %q from the COM_CHANGE_USER packet", v, other)
		}
		if st := p.srv.Stats(); st.PinnedSessions != 0 {
			t.Errorf("session still pinned after COM_CHANGE_USER")
		}
		// Now an admin: may KILL QUERY another user's connection.
		c.mustQuery("KILL QUERY " + vid)
	})
	t.Run("caching_sha2", func(t *testing.T) {
		c := p.raw(t, rawmysql.Options{})
		sw, fast, err := c.ChangeUser("sha", "sha-secret", p.db)
		if err != nil || sw != "caching_sha2_password" || !fast {
			t.Fatalf("COM_CHANGE_USER to sha: switch %q, fast auth (0x01 0x03) %v, %v", sw, fast, err)
		}
		if v := c.value("SELECT 'as sha'"); v != "as sha" {
			t.Fatal(v)
		}
	})
	for _, tc := range []struct{ name, user, pass string }{{"wrong_password", "other", "wrong"}, {"unknown_user", "nobody", "x"}} {
		t.Run(tc.name, func(t *testing.T) {
			c := p.raw(t, rawmysql.Options{})
			_, _, err := c.ChangeUser(tc.user, tc.pass, "")
			var e *mysqlwire.SQLError
			if !errors.As(err, &e) || e.Code != 1045 || e.State != "28000" || !strings.Contains(e.Msg, "Access denied for user '"+tc.user+"'") {
				t.Fatalf("COM_CHANGE_USER with bad credentials: %v, want ERR 1045 (28000) Access denied", err)
			}
			if rest, err := c.WaitClosed(); err != nil || len(rest) != 0 {
				t.Fatalf("connection not closed after a failed COM_CHANGE_USER: % x, %v", rest, err)
			}
		})
	}
}

func TestRawQuit(t *testing.T) {
	p := startProxy(t)
	c := p.raw(t, rawmysql.Options{})
	c.mustQuery("SET @pinned = 1") // holds a backend connection
	if err := c.Command([]byte{rawmysql.ComQuit}); err != nil {
		t.Fatal(err)
	}
	if rest, err := c.WaitClosed(); err != nil || len(rest) != 0 {
		t.Fatalf("COM_QUIT: server sent % x (%v) instead of closing", rest, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := p.srv.Stats()
		if st.ClientsActive == 0 && st.Pool.InUse == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after COM_QUIT: %d clients, %d backend connections in use", st.ClientsActive, st.Pool.InUse)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRawSessionTrackOff(t *testing.T) {
	p := startProxy(t)
	other := grantedDatabase(t, p)
	c, d := p.raw(t, rawmysql.Options{}), p.rawDirect(t, rawmysql.Options{})
	if c.Caps&rawmysql.CapSessionTrack != 0 {
		t.Fatal("setup: session tracking negotiated")
	}
	for _, q := range []string{"SET NAMES latin1", "USE " + other, "SET time_zone = '+01:00'", "SET autocommit = 0", "SET autocommit = 1"} {
		rp, rd := c.mustQuery(q), d.mustQuery(q)
		if len(rp) != 1 || rp[0].OK == nil {
			t.Fatalf("%s: %+v", q, rp)
		}
		okp, okd := rp[0].OK, rd[0].OK
		if okp.Status&mysqlwire.StatusSessionChanged != 0 {
			t.Errorf("%s: status %#x has SESSION_STATE_CHANGED for a client without CLIENT_SESSION_TRACK", q, okp.Status)
		}
		if string(okp.Info) != string(okd.Info) || okp.Status != okd.Status {
			t.Errorf("%s: OK info %q status %#x, MariaDB sends info %q status %#x", q, okp.Info, okp.Status, okd.Info, okd.Status)
		}
	}
}

// holdfast's own replies (COM_PING, COM_SET_OPTION, results it answers
// itself) must not carry SESSION_STATE_CHANGED to a client without
// CLIENT_SESSION_TRACK either, even right after a statement that set it on
// the backend.
func TestRawSessionTrackOffLocalReplies(t *testing.T) {
	p := startProxy(t)
	c := p.raw(t, rawmysql.Options{})
	c.mustQuery("SET NAMES latin1")
	if st := c.ping(); st&mysqlwire.StatusSessionChanged != 0 {
		t.Errorf("COM_PING: status %#x", st)
	}
	c.mustQuery("SET NAMES latin1")
	if pk, err := c.SetOption(1); err != nil {
		t.Fatal(err)
	} else if _, st, err := rawmysql.DecodeEOF(pk); err != nil || st&mysqlwire.StatusSessionChanged != 0 {
		t.Errorf("COM_SET_OPTION: reply % x (%v)", pk, err)
	}
	for _, q := range []string{"SELECT LAST_INSERT_ID()", "SELECT CONNECTION_ID()"} {
		c.mustQuery("SET NAMES latin1")
		for _, st := range rawmysql.Statuses(c.mustQuery(q)) {
			if st&mysqlwire.StatusSessionChanged != 0 {
				t.Errorf("%s: EOF status %#x has SESSION_STATE_CHANGED", q, st)
			}
		}
	}
}

func TestRawSessionTrackOn(t *testing.T) {
	p := startProxy(t)
	other := grantedDatabase(t, p)
	c := p.raw(t, rawmysql.Options{Caps: rawmysql.CapSessionTrack})
	if c.Caps&rawmysql.CapSessionTrack == 0 {
		t.Fatal("setup: session tracking not negotiated")
	}
	find := func(q string, typ byte, name, value string) {
		t.Helper()
		rs := c.mustQuery(q)
		ok := rs[0].OK
		if ok == nil || ok.StateInfo == nil {
			t.Fatalf("%s: no session state in %+v", q, rs[0])
		}
		es, err := rawmysql.DecodeState(ok.StateInfo)
		if err != nil {
			t.Fatalf("%s: session state % x: %v", q, ok.StateInfo, err)
		}
		for _, e := range es {
			if e.Type == typ && e.Name == name && e.Value == value {
				return
			}
		}
		t.Fatalf("%s: session state %+v lacks %d %s=%s", q, es, typ, name, value)
	}
	find("SET NAMES latin1", 0, "character_set_client", "latin1")
	find("USE "+other, 1, "", other)
	find("SET time_zone = '+02:00'", 0, "time_zone", "+02:00")
	if st := c.ping(); st&mysqlwire.StatusSessionChanged != 0 {
		t.Fatalf("COM_PING: status %#x without state", st)
	}
	if got := c.value("SELECT @@time_zone"); got != "+02:00" {
		t.Fatal(got)
	}
}

func TestRawStatusFlagsMatchMariaDB(t *testing.T) {
	p := startProxy(t)
	dDB := grantedDatabase(t, p)
	o := rawmysql.Options{Caps: rawmysql.CapMultiStatements}
	c := p.raw(t, o)
	d := p.rawDirect(t, rawmysql.Options{Caps: rawmysql.CapMultiStatements, DB: dDB})
	for _, x := range []*rawConn{c, d} {
		x.mustQuery("CREATE TABLE t (id INT PRIMARY KEY)")
	}
	steps := []string{
		"BEGIN", "SELECT 1", "INSERT INTO t VALUES (1)", "COMMIT", "SELECT 1",
		"SET autocommit = 0", "SELECT 1", "INSERT INTO t VALUES (2)", "SELECT COUNT(*) FROM t", "COMMIT",
		"SELECT 1", "ROLLBACK", "SET autocommit = 1",
		"SELECT 1; SELECT 2", "BEGIN; INSERT INTO t VALUES (3); SELECT 3; COMMIT",
		"INSERT INTO t VALUES (4); SELECT 4; DO 1", "START TRANSACTION; SELECT 5", "ROLLBACK",
		"SELECT 6; INSERT INTO t VALUES (1)", // the second statement fails
	}
	for _, s := range steps {
		rp, errp := c.Results(s)
		rd, errd := d.Results(s)
		gp, gd := masked(rawmysql.Statuses(rp)), masked(rawmysql.Statuses(rd))
		if fmt.Sprint(gp) != fmt.Sprint(gd) || errCode(errp) != errCode(errd) {
			t.Errorf("%s: status flags %x (%v) through holdfast, %x (%v) from MariaDB", s, gp, errp, gd, errd)
		}
		if sp, sd := c.ping()&stFlagsCompared, d.ping()&stFlagsCompared; sp != sd {
			t.Errorf("COM_PING after %s: status %#x through holdfast, %#x from MariaDB", s, sp, sd)
		}
	}
}

func masked(sts []uint16) []uint16 {
	out := make([]uint16, len(sts))
	for i, s := range sts {
		out[i] = s & stFlagsCompared
	}
	return out
}

func TestRawLastInsertIDAfterMove(t *testing.T) {
	p := twoBackends(t)
	mustExec(t, p.direct(t), "CREATE TABLE ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	c, b := p.raw(t, rawmysql.Options{}), p.conn(t)
	for i := uint64(1); i <= 3; i++ {
		if ok := c.mustQuery("INSERT INTO ai (v) VALUES (0)")[0].OK; ok == nil || ok.InsertID != i {
			t.Fatalf("insert %d: %+v", i, ok)
		}
	}
	tid := rawThread(c)
	done := grab(t, b)
	defer done()
	if backendThread(t, b) != tid {
		t.Fatal("setup: the other client did not take the backend connection")
	}
	rs := c.mustQuery("SELECT LAST_INSERT_ID()")
	if len(rs) != 1 || len(rs[0].Cols) != 1 || rs[0].Cols[0].Name != "LAST_INSERT_ID()" || rs[0].Cell(0, 0) != "3" {
		t.Fatalf("SELECT LAST_INSERT_ID() after moving: %+v", rs)
	}
	if rawThread(c) == tid {
		t.Fatal("client did not move to another backend connection")
	}
}

// An ERR packet carries no status flags: after one, the client's status is
// what it was, as MariaDB reports it.
func TestRawErrorKeepsStatus(t *testing.T) {
	p := startProxy(t)
	c, d := p.raw(t, rawmysql.Options{}), p.rawDirect(t, rawmysql.Options{})
	for _, cmd := range [][]byte{
		append([]byte{rawmysql.ComQuery}, "SELECT * FROM no_such_table"...),
		append([]byte{rawmysql.ComFieldList}, "no_such_table\x00"...),
		initDB("hf_no_such_database"),
		rawmysql.StmtCmd(rawmysql.ComStmtReset, 12345),
	} {
		for _, x := range []*rawConn{c, d} {
			if pk, err := x.RoundTrip(cmd); err != nil || pk[0] != 0xff {
				t.Fatalf("% x: % x, %v, want an ERR", trunc(cmd), pk, err)
			}
		}
		if sp, sd := c.ping()&stFlagsCompared, d.ping()&stFlagsCompared; sp != sd {
			t.Errorf("COM_PING after an error from % x: status %#x through holdfast, %#x from MariaDB", trunc(cmd), sp, sd)
		}
		pp, errp := c.SetOption(1)
		pd, errd := d.SetOption(1)
		if errp != nil || errd != nil || !bytes.Equal(pp, pd) {
			t.Errorf("COM_SET_OPTION after an error from % x: % x (%v) through holdfast, % x (%v) from MariaDB", trunc(cmd), pp, errp, pd, errd)
		}
	}
}

// A statement that fails inside a transaction leaves the transaction open
// (MariaDB rolls back only the statement): the client keeps its backend
// connection until COMMIT or ROLLBACK.
func TestRawErrorInTransactionKeepsConnection(t *testing.T) {
	for _, mode := range []string{"text", "prepared"} {
		t.Run(mode, func(t *testing.T) {
			p := twoBackends(t)
			mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY)")
			c, b := p.raw(t, rawmysql.Options{}), p.conn(t)
			st := c.mustPrepare("INSERT INTO t VALUES (?)")
			c.mustQuery("BEGIN")
			c.mustQuery("INSERT INTO t VALUES (1)")
			tid := rawThread(c)
			var err error
			if mode == "text" {
				_, err = c.Results("INSERT INTO t VALUES (1)")
			} else {
				_, err = c.Execute(st.ID, 0, []rawmysql.Param{rawmysql.IntParam(1)}, true)
			}
			if errCode(err) != 1062 {
				t.Fatalf("duplicate insert: %v, want ERR 1062", err)
			}
			checkStillInTransaction(t, c, b, tid, "after the failed statement")
			if got := rawThread(c); got != tid {
				t.Errorf("the transaction's next statement ran on backend thread %s, not %s", got, tid)
			}
			c.mustQuery("ROLLBACK")
			if n := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t"); n != "0" {
				t.Fatalf("%s rows after ROLLBACK: the first insert was committed", n)
			}
		})
	}
}

// A client that named no database in its handshake must not find itself
// in the database another client chose with USE on a shared backend
// connection.
func TestRawNoDatabaseNotInherited(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Max, c.Pool.MaxIdle = 1, 1 })
	other := grantedDatabase(t, p)
	a := p.raw(t, rawmysql.Options{})
	a.mustQuery("USE " + other)
	b := rawLogin(t, p.addr, rawmysql.Options{User: "app", Password: "app"})
	if got := b.value("SELECT IFNULL(DATABASE(), 'NULL')"); got == other {
		t.Fatalf("a client without a database is in %q, chosen by another client (want NULL or the configured %q)", got, p.db)
	}
}
