package proxy

// Binary-protocol prepared statements through the raw test client, while
// the client moves between backend connections.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// stepTo makes sure b holds the backend connection tid (the one c used
// last) so that c's next statement runs on the other one.
func stepTo(t *testing.T, p *testProxy, tid string) func() {
	t.Helper()
	b := p.conn(t)
	done := grab(t, b)
	if got := backendThread(t, b); got != tid {
		done()
		t.Fatalf("setup: the other client took backend thread %s, not %s", got, tid)
	}
	return done
}

func TestRawStmtLongDataOtherBackend(t *testing.T) {
	p := twoBackends(t)
	c := p.raw(t, rawOpts{})
	tid := rawThread(c)
	st := c.mustPrepare("SELECT CONCAT(?, ''), ? + 1, " + selfThread())
	if st.params != 2 || st.ncols != 3 {
		t.Fatalf("prepare: %d parameters, %d columns", st.params, st.ncols)
	}
	done := stepTo(t, p, tid) // prepared on tid; executes elsewhere
	defer done()
	chunks := []string{"first-", strings.Repeat("0123456789", 10000), "-last"}
	for _, ch := range chunks {
		if err := c.sendLongData(st.id, 0, []byte(ch)); err != nil {
			t.Fatal(err)
		}
	}
	r := c.mustExecute(st, []rawParam{pLong(), pInt(41)}, true)
	want := strings.Join(chunks, "")
	if got := r.cell(0, 0); got != want {
		t.Fatalf("long data parameter: %d bytes %.20q..., want %d bytes %.20q...", len(got), got, len(want), want)
	}
	if r.cell(0, 1) != "42" {
		t.Fatalf("second parameter: %s", r.cell(0, 1))
	}
	if r.cell(0, 2) == tid {
		t.Fatal("the statement executed on the backend connection it was prepared on; the test needs another")
	}
	// Long data is used by one execute only.
	r = c.mustExecute(st, []rawParam{pStr("plain"), pInt(1)}, true)
	if r.cell(0, 0) != "plain" || r.cell(0, 1) != "2" {
		t.Fatalf("execute after the long-data one: %v", r.rows)
	}
}

func TestRawStmtTypesOnlyOnFirstExecute(t *testing.T) {
	p := twoBackends(t)
	c := p.raw(t, rawOpts{})
	st := c.mustPrepare("SELECT ? + 0, CONCAT(?, '!'), " + selfThread())
	r := c.mustExecute(st, []rawParam{pInt(7), pStr("a")}, true)
	if r.cell(0, 0) != "7" || r.cell(0, 1) != "a!" {
		t.Fatalf("first execute: %v", r.rows)
	}
	tid := r.cell(0, 2)
	done := stepTo(t, p, tid)
	// new-params-bound 0: the types of the first execute apply.
	r = c.mustExecute(st, []rawParam{pInt(8), pStr("b")}, false)
	if r.cell(0, 0) != "8" || r.cell(0, 1) != "b!" || r.cell(0, 2) == tid {
		t.Fatalf("second execute, without types, on another backend connection: %v (first ran on %s)", r.rows, tid)
	}
	done()
	r = c.mustExecute(st, []rawParam{pInt(9), pNull()}, false)
	if r.cell(0, 0) != "9" || r.cell(0, 1) != "NULL" {
		t.Fatalf("third execute, without types, with a NULL: %v", r.rows)
	}
	if st := p.srv.Stats(); st.PinnedSessions != 0 {
		t.Fatalf("prepared statements pinned the session: %v", st.Pins)
	}
}

// cursorScript runs a cursor through x and describes what it saw.
func cursorScript(t *testing.T, x *rawConn) []string {
	t.Helper()
	st := x.mustPrepare("SELECT id FROM cur ORDER BY id")
	rs, err := x.execute(st.id, 0x01, nil, true) // CURSOR_TYPE_READ_ONLY
	if err != nil || len(rs) != 1 || len(rs[0].cols) != 1 {
		t.Fatalf("execute with a cursor: %+v, %v", rs, err)
	}
	log := []string{fmt.Sprintf("execute: %d rows, cursor %v", len(rs[0].rows), rs[0].colStatus&stCursorExists != 0)}
	fetch := func() {
		rows, status, err := x.fetch(st.id, 2, st.cols)
		log = append(log, fmt.Sprintf("fetch: [%s] status %#x, error %d", colValues(rows, 0), status&(stCursorExists|stLastRowSent), errCode(err)))
	}
	for i := 0; i < 3; i++ {
		fetch()
	}
	ok := x.mustOK(stmtCmd(rcStmtReset, st.id))
	log = append(log, fmt.Sprintf("reset: status %#x", ok.status&stFlagsCompared))
	fetch() // the cursor is closed
	if err := x.stmtClose(st.id); err != nil {
		t.Fatal(err)
	}
	_, err = x.execute(st.id, 0, nil, true)
	return append(log, fmt.Sprintf("execute after close: error %d", errCode(err)))
}

func TestRawStmtCursorFetch(t *testing.T) {
	p := startProxy(t)
	dDB := grantedDatabase(t, p)
	c, d := p.raw(t, rawOpts{}), p.rawDirect(t, rawOpts{db: dDB})
	for _, x := range []*rawConn{c, d} {
		x.mustQuery("CREATE TABLE cur (id INT PRIMARY KEY)")
		x.mustQuery("INSERT INTO cur VALUES (1), (2), (3), (4), (5)")
	}
	got, want := cursorScript(t, c), cursorScript(t, d)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("through holdfast:\n%s\nstraight from MariaDB:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := p.srv.Stats().Pins["cursor"]; n != 1 {
		t.Fatalf("cursor pins %d, want 1", n)
	}
	if v := c.value("SELECT 'after the cursor'"); v != "after the cursor" {
		t.Fatal(v)
	}
}

// lastStmtScript uses MariaDB's "statement prepared last" id, 0xFFFFFFFF,
// as MariaDB Connector/C's mariadb_stmt_execute_direct does.
func lastStmtScript(t *testing.T, x *rawConn) []string {
	t.Helper()
	var log []string
	note := func(what string, rs []rawResult, err error) {
		v := "-"
		if len(rs) == 1 && rs[0].ok == nil {
			v = rs[0].cell(0, 0)
		}
		log = append(log, fmt.Sprintf("%s: %s, error %d", what, v, errCode(err)))
	}
	s1 := x.mustPrepare("SELECT 'first'")
	x.mustPrepare("SELECT CONCAT('second-', ?)")
	rs, err := x.execute(rawLastStmt, 0, []rawParam{pStr("a")}, true)
	note("execute -1", rs, err)
	// Prepare and execute -1 pipelined in one write.
	pipelined := append(frame(0, append([]byte{rcStmtPrepare}, "SELECT CONCAT('direct-', ?)"...)),
		frame(0, executePacket(rawLastStmt, 0, []rawParam{pStr("b")}, true))...)
	if _, err := x.nc.Write(pipelined); err != nil {
		t.Fatal(err)
	}
	x.seq = 1
	if _, err := x.readPrepareOK(); err != nil {
		t.Fatal(err)
	}
	x.seq = 1
	rs, err = x.readResults(true, false)
	note("pipelined prepare + execute -1", rs, err)
	ok := x.mustOK(stmtCmd(rcStmtReset, rawLastStmt))
	log = append(log, fmt.Sprintf("reset -1: status %#x", ok.status&stFlagsCompared))
	_, _, err = x.fetch(rawLastStmt, 1, nil)
	log = append(log, fmt.Sprintf("fetch -1 without a cursor: error %d", errCode(err)))
	rs, err = x.execute(s1.id, 0, nil, true)
	note("first statement", rs, err)
	return log
}

func TestRawStmtLastStatementID(t *testing.T) {
	p := startProxy(t)
	c, d := p.raw(t, rawOpts{}), p.rawDirect(t, rawOpts{})
	got, want := lastStmtScript(t, c), lastStmtScript(t, d)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("through holdfast:\n%s\nstraight from MariaDB:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// MariaDB resolves 0xFFFFFFFF for every statement command, including
// COM_STMT_SEND_LONG_DATA and COM_STMT_CLOSE, which have no reply.
func TestRawStmtLastStatementIDLongDataAndClose(t *testing.T) {
	p := startProxy(t)
	script := func(x *rawConn) []string {
		var log []string
		s := x.mustPrepare("SELECT CONCAT('long-', ?)")
		if err := x.sendLongData(rawLastStmt, 0, []byte("data")); err != nil {
			t.Fatal(err)
		}
		rs, err := x.execute(s.id, 0, []rawParam{pLong()}, true)
		v := "-"
		if len(rs) == 1 && rs[0].ok == nil {
			v = rs[0].cell(0, 0)
		}
		log = append(log, fmt.Sprintf("send long data -1, execute: %s, error %d", v, errCode(err)))
		if err := x.stmtClose(rawLastStmt); err != nil {
			t.Fatal(err)
		}
		_, err = x.execute(s.id, 0, []rawParam{pStr("x")}, true)
		return append(log, fmt.Sprintf("close -1, execute: error %d", errCode(err)))
	}
	got, want := script(p.raw(t, rawOpts{})), script(p.rawDirect(t, rawOpts{}))
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("through holdfast:\n%s\nstraight from MariaDB:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A prepared statement keeps the database it was prepared in, as MariaDB
// resolves its table names at prepare time; holdfast prepares it again on
// other backend connections, and must do so in that database.
func TestRawStmtKeepsPrepareDatabase(t *testing.T) {
	p := twoBackends(t)
	other := grantedDatabase(t, p)
	for db, v := range map[string]string{p.db: "first", other: "second"} {
		mustExec(t, dbtest.Root(t), "CREATE TABLE `"+db+"`.w (v VARCHAR(10))")
		mustExec(t, dbtest.Root(t), "INSERT INTO `"+db+"`.w VALUES ('"+v+"')")
	}
	d := p.rawDirect(t, rawOpts{})
	ds := d.mustPrepare("SELECT v FROM w")
	d.mustQuery("USE " + other)
	want := d.mustExecute(ds, nil, true).cell(0, 0)

	c := p.raw(t, rawOpts{})
	tid := rawThread(c)
	st := c.mustPrepare("SELECT v FROM w")
	c.mustQuery("USE " + other)
	if got := c.mustExecute(st, nil, true).cell(0, 0); got != want {
		t.Fatalf("on the backend connection it was prepared on: %q, MariaDB gives %q", got, want)
	}
	done := stepTo(t, p, tid)
	defer done()
	if got := c.mustExecute(st, nil, true).cell(0, 0); got != want {
		t.Fatalf("on another backend connection: %q, MariaDB gives %q", got, want)
	}
}

// LAST_INSERT_ID() is the first id the session's last INSERT generated; an
// explicit value in an AUTO_INCREMENT column (reported in the OK packet)
// does not change it.
func TestRawLastInsertIDExplicitValue(t *testing.T) {
	// Outside a transaction holdfast answers SELECT LAST_INSERT_ID() from
	// the insert id of the client's last OK packet (what mysql_insert_id()
	// returns), because the backend connection that ran the INSERT may
	// serve someone else by now. That differs from MariaDB in one case,
	// documented in the README: after an INSERT that supplied an explicit
	// AUTO_INCREMENT value, MariaDB leaves LAST_INSERT_ID() unchanged while
	// the OK packet carries the explicit value. Inside a transaction the
	// backend itself answers, exactly.
	p := startProxy(t)
	dDB := grantedDatabase(t, p)
	script := func(x *rawConn, inTxn bool) string {
		x.mustQuery("CREATE TABLE IF NOT EXISTS ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
		x.mustQuery("DELETE FROM ai")
		if inTxn {
			x.mustQuery("BEGIN")
			defer x.mustQuery("COMMIT")
		}
		x.mustQuery("INSERT INTO ai (v) VALUES (1)")
		x.mustQuery("INSERT INTO ai (id, v) VALUES (100, 2)")
		return x.value("SELECT LAST_INSERT_ID()")
	}
	hf, direct := p.raw(t, rawOpts{}), p.rawDirect(t, rawOpts{db: dDB})
	if got, want := script(hf, true), script(direct, true); got != want {
		t.Fatalf("inside a transaction: %s through holdfast, %s from MariaDB", got, want)
	}
	if got := script(hf, false); got != "100" {
		t.Fatalf("outside a transaction: %s, want the OK packet's insert id 100", got)
	}
}

// SELECT LAST_INSERT_ID() prepared with the binary protocol after the
// client moved to another backend connection.
func TestRawPreparedLastInsertIDAfterMove(t *testing.T) {
	p := twoBackends(t)
	mustExec(t, p.direct(t), "CREATE TABLE ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	c := p.raw(t, rawOpts{})
	c.mustQuery("INSERT INTO ai (v) VALUES (0), (0)")
	c.mustQuery("INSERT INTO ai (v) VALUES (0)")
	tid := rawThread(c)
	done := stepTo(t, p, tid)
	defer done()
	st := c.mustPrepare("SELECT LAST_INSERT_ID()")
	if got := c.mustExecute(st, nil, true).cell(0, 0); got != "3" {
		t.Fatalf("prepared SELECT LAST_INSERT_ID() after moving: %s, want 3", got)
	}
}

// COM_STMT_RESET discards parameter data sent with COM_STMT_SEND_LONG_DATA.
func TestRawStmtResetDropsLongData(t *testing.T) {
	p := startProxy(t)
	script := func(x *rawConn) string {
		st := x.mustPrepare("SELECT CONCAT('[', ?, ']')")
		if err := x.sendLongData(st.id, 0, []byte("stale")); err != nil {
			t.Fatal(err)
		}
		x.mustOK(stmtCmd(rcStmtReset, st.id))
		if err := x.sendLongData(st.id, 0, []byte("fresh")); err != nil {
			t.Fatal(err)
		}
		return x.mustExecute(st, []rawParam{pLong()}, true).cell(0, 0)
	}
	got, want := script(p.raw(t, rawOpts{})), script(p.rawDirect(t, rawOpts{}))
	if got != want || want != "[fresh]" {
		t.Fatalf("after COM_STMT_RESET: %q through holdfast, %q from MariaDB", got, want)
	}
}
