package sessionstate

import (
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// fakeConn answers each exchange from a script: the first answer whose
// prefix the statement has, in order, each used once.
type fakeConn struct {
	t       *testing.T
	answers []fakeAnswer
	sent    []string
	status  uint16 // what PingStatus answers
	pingErr error
	pings   int
}

type fakeAnswer struct {
	prefix string
	rows   [][][]byte
	err    error
}

func (c *fakeConn) Exchange(sql string) ([][][]byte, error) {
	c.sent = append(c.sent, sql)
	for i, a := range c.answers {
		if strings.HasPrefix(sql, a.prefix) {
			c.answers = append(c.answers[:i], c.answers[i+1:]...)
			return a.rows, a.err
		}
	}
	c.t.Fatalf("unexpected exchange %q", sql)
	return nil, nil
}

func (c *fakeConn) PingStatus() (uint16, error) {
	c.pings++
	return c.status, c.pingErr
}

func row(vals ...string) [][][]byte {
	r := make([][]byte, len(vals))
	for i, v := range vals {
		r[i] = []byte(v)
	}
	return [][][]byte{r}
}

// testBase is a backend whose fresh sessions are utf8mb4, with a 28800
// wait_timeout.
func testBase() *varstate.Base {
	fresh := map[string]string{"character_set_client": "utf8mb4", "character_set_connection": "utf8mb4",
		"character_set_results": "utf8mb4", "collation_connection": "utf8mb4_general_ci", "sql_mode": "STRICT_TRANS_TABLES"}
	globals := map[string]string{"wait_timeout": "28800", "interactive_timeout": "28800", "session_track_system_variables": "autocommit",
		"session_track_schema": "ON", "session_track_state_change": "OFF"}
	return varstate.NewBase(fresh, globals, []varstate.Collation{
		{ID: 45, Charset: "utf8mb4", Name: "utf8mb4_general_ci", DefaultOfCharset: true},
		{ID: 8, Charset: "latin1", Name: "latin1_swedish_ci", DefaultOfCharset: true},
	})
}

func fresh(base *varstate.Base, kept *[]*varstate.KeptVars) State {
	st := New("app", false, false, base.Kept, func(k *varstate.KeptVars) { *kept = append(*kept, k) })
	st.Vars = base.Vars
	return st
}

func scan(sql string) *sqlscan.Info { i := sqlscan.Scan([]byte(sql)); return &i }

func TestAfterReadsBackWhatTheTrackerReported(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	st := fresh(base, &kept)
	// MariaDB can report a stale time_zone: the value read back wins.
	c := &fakeConn{t: t, answers: []fakeAnswer{{prefix: "SELECT @@session.`time_zone` LIMIT 1", rows: row("+02:00")}}}
	sc := varstate.Report{Changed: true, Vars: []varstate.Change{{Name: "time_zone", Value: "+01:00"}}}
	eff, err := st.After(c, base, &Answer{Info: scan("SET time_zone = '+02:00'"), Status: mysqlwire.StatusAutocommit, Report: &sc})
	if err != nil || !eff.Vars || eff.Pinned != "" || eff.Broken {
		t.Fatalf("After: %+v, %v", eff, err)
	}
	if st.Vars.Get("time_zone") != "+02:00" || st.PinReason != "" {
		t.Fatalf("time_zone %q, pin %q", st.Vars.Get("time_zone"), st.PinReason)
	}
}

func TestAfterKeptVariable(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	st := fresh(base, &kept)
	c := &fakeConn{t: t, answers: []fakeAnswer{
		{prefix: "SELECT @@session.`wait_timeout` LIMIT 1", rows: row("5")},
		{prefix: "SET SESSION wait_timeout = 28800"},
	}}
	sc := varstate.Report{Changed: true, Vars: []varstate.Change{{Name: "wait_timeout", Value: "5"}}}
	eff, err := st.After(c, base, &Answer{Info: scan("SET wait_timeout = 5"), Status: mysqlwire.StatusAutocommit, Report: &sc})
	if err != nil || eff.Vars || eff.Pinned != "" {
		t.Fatalf("After: %+v, %v", eff, err)
	}
	if st.Kept.Get("wait_timeout") != "5" || len(kept) != 1 || kept[0] != st.Kept {
		t.Fatalf("kept wait_timeout %q, told %d times", st.Kept.Get("wait_timeout"), len(kept))
	}
	if len(c.answers) != 0 {
		t.Fatalf("not sent: %v", c.answers)
	}
}

func TestAfterEOFChangeOfAPlainSelect(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	st := fresh(base, &kept)
	c := &fakeConn{t: t, answers: []fakeAnswer{{prefix: FlushTrackerSQL}}}
	sc := varstate.Report{Changed: true, EOFChanged: true}
	eff, err := st.After(c, base, &Answer{Info: scan("SELECT a FROM t"), Status: mysqlwire.StatusAutocommit, Report: &sc})
	if err != nil || eff.Pinned != "" || len(c.sent) != 1 {
		t.Fatalf("After: %+v, %v, sent %v", eff, err, c.sent)
	}
	// A stored function's EOF change pins, and nothing is flushed.
	c = &fakeConn{t: t}
	sc = varstate.Report{Changed: true, EOFChanged: true}
	eff, err = st.After(c, base, &Answer{Info: scan("SELECT f()"), Status: mysqlwire.StatusAutocommit, Report: &sc})
	if err != nil || eff.Pinned != attribution.PinSessionState || st.PinReason != attribution.PinSessionState {
		t.Fatalf("After: %+v, %v", eff, err)
	}
}

func TestAfterFailedExchanges(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	refused := &mysqlwire.SQLError{Code: 1193, State: "HY000", Msg: "Unknown system variable"}
	// A read-back the server refuses pins the session, and After goes on.
	st := fresh(base, &kept)
	c := &fakeConn{t: t, answers: []fakeAnswer{{prefix: "SELECT", err: refused}}}
	sc := varstate.Report{Changed: true, Vars: []varstate.Change{{Name: "x", Value: "1"}}}
	eff, err := st.After(c, base, &Answer{Info: scan("SET x = 1"), Status: mysqlwire.StatusAutocommit, Report: &sc})
	if err != nil || eff.Broken || eff.Warning == nil || eff.Pinned != attribution.PinSessionState {
		t.Fatalf("refused read-back: %+v, %v", eff, err)
	}
	// A broken connection stops it.
	st = fresh(base, &kept)
	c = &fakeConn{t: t, answers: []fakeAnswer{{prefix: "SELECT", err: io.EOF}}}
	sc = varstate.Report{Changed: true, Vars: []varstate.Change{{Name: "time_zone", Value: "+01:00"}}}
	eff, err = st.After(c, base, &Answer{Info: scan("SET time_zone = '+01:00'"), Status: mysqlwire.StatusAutocommit, Report: &sc})
	if !errors.Is(err, io.EOF) || !eff.Broken || st.Vars.Get("time_zone") != "" {
		t.Fatalf("broken read-back: %+v, %v", eff, err)
	}
	c = &fakeConn{t: t, answers: []fakeAnswer{{prefix: FlushTrackerSQL, err: io.EOF}}}
	sc = varstate.Report{Changed: true, EOFChanged: true}
	if eff, err = st.After(c, base, &Answer{Info: scan("SELECT 1"), Report: &sc}); !eff.Broken || err == nil {
		t.Fatalf("broken flush: %+v, %v", eff, err)
	}
}

func TestAfterAsksTheTransactionStateAnErrorHid(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	st := fresh(base, &kept)
	c := &fakeConn{t: t, status: mysqlwire.StatusInTrans}
	sc := varstate.Report{}
	// Autocommit off (status 0 reported), and the statement failed.
	if _, err := st.After(c, base, &Answer{Info: scan("INSERT INTO t VALUES (1)"), Failed: true, Report: &sc}); err != nil {
		t.Fatal(err)
	}
	if c.pings != 1 || !st.InTxn() || !st.KeepsConn() {
		t.Fatalf("pings %d, status %#x", c.pings, st.Status)
	}
	// Autocommit on: no need to ask.
	c = &fakeConn{t: t}
	if _, err := st.After(c, base, &Answer{Info: scan("INSERT INTO t VALUES (1)"), Failed: true, Status: mysqlwire.StatusAutocommit, Report: &sc}); err != nil || c.pings != 0 {
		t.Fatalf("pings %d, %v", c.pings, err)
	}
	c = &fakeConn{t: t, pingErr: io.EOF}
	if eff, _ := st.After(c, base, &Answer{Info: scan("INSERT INTO t VALUES (1)"), Failed: true, Report: &sc}); !eff.Broken {
		t.Fatalf("a failed ping: %+v", eff)
	}
}

func TestAfterRecords(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	st := fresh(base, &kept)
	c := &fakeConn{t: t, answers: []fakeAnswer{{prefix: "SELECT @@session.`character_set_client`, @@session.`character_set_connection`, @@session.`character_set_results`, @@session.`collation_connection` LIMIT 1",
		rows: row("latin1", "latin1", "latin1", "latin1_swedish_ci")}}}
	sc := varstate.Report{Changed: true, Vars: []varstate.Change{{Name: "character_set_client", Value: "latin1"},
		{Name: "character_set_connection", Value: "latin1"}, {Name: "character_set_results", Value: "latin1"}}}
	eff, err := st.After(c, base, &Answer{Info: scan("SET NAMES latin1"), Status: mysqlwire.StatusAutocommit, InsertID: 7, Report: &sc})
	if err != nil || !eff.Vars {
		t.Fatalf("SET NAMES: %+v, %v", eff, err)
	}
	if got := st.Vars.Get(varstate.ResultsCollation); got != "latin1_swedish_ci" || st.LastInsertID != 7 {
		t.Fatalf("results collation %q, last insert id %d", got, st.LastInsertID)
	}
	// USE: the database; SET TRANSACTION: the next statement's too; a
	// cursor pins; a commit's GTID is handed on.
	sc = varstate.Report{Changed: true, SchemaSet: true, Schema: "other"}
	if eff, _ = st.After(c, base, &Answer{Info: scan("USE other"), Status: mysqlwire.StatusAutocommit, Report: &sc}); !eff.Schema || st.DB != "other" {
		t.Fatalf("USE: %+v, db %q", eff, st.DB)
	}
	sc = varstate.Report{}
	st.After(c, base, &Answer{Info: scan("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"), Status: mysqlwire.StatusAutocommit, Report: &sc})
	if !st.Txn.HoldNext || !st.KeepsConn() {
		t.Fatal("SET TRANSACTION holds the connection through the next statement")
	}
	sc = varstate.Report{LastGTID: "0-1-7"}
	if eff, _ = st.After(c, base, &Answer{Info: scan("SELECT a FROM t"), Status: mysqlwire.StatusAutocommit, Cursor: true, Report: &sc}); eff.Pinned != attribution.PinCursor || eff.LastGTID != "0-1-7" || st.Txn.HoldNext {
		t.Fatalf("cursor: %+v", eff)
	}
	// Pinned once: later pins are not counted again.
	sc = varstate.Report{}
	if eff, _ = st.After(c, base, &Answer{Info: scan("SET @a = 1"), Status: mysqlwire.StatusAutocommit, Report: &sc}); eff.Pinned != "" || st.PinReason != attribution.PinCursor {
		t.Fatalf("second pin: %+v, %q", eff, st.PinReason)
	}
	// SET STATEMENT's variables are over with it.
	st = fresh(base, &kept)
	sc = varstate.Report{Changed: true, Vars: []varstate.Change{{Name: "time_zone", Value: "+08:00"}}}
	if eff, err = st.After(&fakeConn{t: t}, base, &Answer{Info: scan("SET STATEMENT time_zone = '+08:00' FOR SELECT 1"), Status: mysqlwire.StatusAutocommit, Report: &sc}); err != nil || eff.Vars || eff.Pinned != "" {
		t.Fatalf("SET STATEMENT: %+v, %v", eff, err)
	}
}

func TestKeptRoundTrips(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	st := fresh(base, &kept)
	if before, after := st.KeptSQL(base.Holdfast); before != "SET SESSION session_track_system_variables = 'autocommit', session_track_state_change = 'OFF'" ||
		after != "SET SESSION session_track_system_variables = '*', session_track_state_change = 'ON'" {
		t.Fatalf("KeptSQL: %q, %q", before, after)
	}
	// A SET of session_track_system_variables, which the tracker does not
	// report: read back, the client's, and holdfast's put back.
	c := &fakeConn{t: t, answers: []fakeAnswer{
		{prefix: "SELECT @@session.wait_timeout", rows: row("28800", "28800", "time_zone", "ON", "ON")},
		{prefix: "SET SESSION session_track_system_variables = '*'"},
	}}
	if err := st.SyncKept(c, base.Holdfast, []string{"session_track_system_variables"}); err != nil {
		t.Fatal(err)
	}
	if got := st.Kept.Get("session_track_system_variables"); got != "time_zone" || !reflect.DeepEqual(st.Kept.Track.Vars, map[string]int{"time_zone": 0}) {
		t.Fatalf("kept %q, tracking %+v", got, st.Kept.Track)
	}
	if st.KeptKey("k") == st.KeptKey("k")+"x" || !strings.HasPrefix(st.KeptKey("k"), "k\x00") {
		t.Fatalf("KeptKey %q", st.KeptKey("k"))
	}
	var none State
	if b, a := none.KeptSQL(base.Holdfast); b != "" || a != "" || none.SyncKept(c, base.Holdfast, nil) != nil {
		t.Fatal("nothing known: nothing to do")
	}
}

func TestResetAndWrites(t *testing.T) {
	base := testBase()
	var kept []*varstate.KeptVars
	st := fresh(base, &kept)
	st.NoteWrite(0, 7, true)
	st.NoteWrite(0, 5, true)
	st.NoteWrite(1, 2, true)
	if !reflect.DeepEqual(st.Writes, map[uint32]uint64{0: 7, 1: 2}) || st.WritesUnplaced {
		t.Fatalf("writes %v", st.Writes)
	}
	st.NoteWrite(0, 0, false)
	st.PinReason, st.Txn.HoldNext, st.Txn.PendingBegin, st.LastInsertID = "x", true, []byte("BEGIN"), 5
	st.Reset(true, base.Kept)
	if st.PinReason != "" || st.Txn.HoldNext || st.Txn.PendingBegin != nil || st.LastInsertID != 0 || !st.MultiStmts ||
		st.DB != "app" || st.Vars != nil || st.Status != mysqlwire.StatusAutocommit || !st.WritesUnplaced {
		t.Fatalf("after Reset: %+v", st)
	}
	if v := st.View(false); !v.Autocommit || v.VarsKnown || v.InTxn || !v.WritesUnplaced {
		t.Fatalf("View: %+v", v)
	}
}
