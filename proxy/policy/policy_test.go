package policy

import (
	"errors"
	"testing"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// fakeControls is Controls from maps: keys not listed are free, normal,
// routed to the primary and refused nothing.
type fakeControls struct {
	stopped    map[string]bool
	classes    map[string]controls.Class
	background bool
	routes     map[string]controls.Route
	refuse     map[string]error
}

func (f *fakeControls) Free(key string) bool { return !f.stopped[key] }
func (f *fakeControls) Class(key string) controls.Class {
	if c, ok := f.classes[key]; ok {
		return c
	}
	return controls.Normal
}
func (f *fakeControls) BackgroundCapped() bool { return f.background }
func (f *fakeControls) Route(key string) controls.Route {
	return f.routes[key]
}
func (f *fakeControls) Refuse(key string, info *sqlscan.Info) error { return f.refuse[key] }

// idle is a session that holds nothing and knows its variables: its
// plain reads may go anywhere.
var idle = Session{VarsKnown: true, Autocommit: true}

func input(sql string, mut ...func(*Input)) *Input {
	in := &Input{Command: Query, SQL: []byte(sql), Size: len(sql) + 1, Tag: Tag{Name: "t", Accounting: true},
		Session: idle, Controls: &fakeControls{}, PipelineDepth: 16, Procedures: true}
	info := in.Mode.ScanProtected(in.SQL, in.Protected)
	in.Info = &info
	for _, m := range mut {
		m(in)
	}
	if in.Protected != nil {
		info := in.Mode.ScanProtected(in.SQL, in.Protected)
		in.Info = &info
	}
	return in
}

func TestDecide(t *testing.T) {
	readonly := errors.New("tag t is read-only")
	for _, tc := range []struct {
		name string
		in   *Input
		want Plan
	}{
		{"plain read on a pipe", input("SELECT a FROM t WHERE id = 1"),
			Plan{Key: "t", Class: controls.Normal, Pipe: true, Ahead: true}},
		{"prepared plain read on a pipe", input("SELECT a FROM t WHERE id = ?", func(in *Input) { in.Command = Execute }),
			Plan{Key: "t", Class: controls.Normal, Pipe: true, Ahead: true}},
		{"a cursor is not pipelined", input("SELECT a FROM t", func(in *Input) { in.Command, in.Unbound = Execute, true }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"pipelining off", input("SELECT 1", func(in *Input) { in.PipelineDepth = 0 }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"a long text is not pipelined", input("SELECT 1", func(in *Input) { in.Size = 1 << 16 }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"variables unknown", input("SELECT 1", func(in *Input) { in.Session.VarsKnown = false }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"inside a transaction", input("SELECT 1", func(in *Input) { in.Session.InTxn, in.Session.Holding = true, true }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"a deferred BEGIN pending", input("SELECT 1", func(in *Input) { in.Session.InTxn, in.Session.PendingBegin = true, true }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"pinned", input("SELECT 1", func(in *Input) { in.Session.Pinned = true }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"after SET TRANSACTION", input("SELECT 1", func(in *Input) { in.Session.HoldNext = true }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"autocommit off", input("SELECT 1", func(in *Input) { in.Session.Autocommit = false }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true}},
		{"a locking read", input("SELECT a FROM t FOR UPDATE"), Plan{Key: "t", Class: controls.Normal}},
		{"a kept variable: put in place, borrowed", input("SELECT @@wait_timeout"),
			Plan{Key: "t", Class: controls.Normal, Ahead: true, PutKept: true}},
		{"a prepared read of a kept variable too", input("SELECT @@wait_timeout, ?", func(in *Input) { in.Command = Execute }),
			Plan{Key: "t", Class: controls.Normal, Ahead: true, PutKept: true}},
		{"SHOW VARIABLES", input("SHOW VARIABLES LIKE 'wait%'"), Plan{Key: "t", Class: controls.Normal, PutKept: true}},
		{"SET of a kept variable: read back", input("SET SESSION wait_timeout = 5"), Plan{Key: "t", Class: controls.Normal, SyncKept: true}},
		{"a restored variable is read on a pipe", input("SELECT @@time_zone"),
			Plan{Key: "t", Class: controls.Normal, Pipe: true, Ahead: true}},
		{"drained tag: no pipe", input("SELECT 1", func(in *Input) { in.Controls = &fakeControls{stopped: map[string]bool{"t": true}} }),
			Plan{Key: "t", Class: controls.Normal, Admission: true, Ahead: true}},
		{"background, capped: no pipe", input("SELECT 1", func(in *Input) {
			in.Controls = &fakeControls{classes: map[string]controls.Class{"t": controls.Background}, background: true}
		}), Plan{Key: "t", Class: controls.Background, Ahead: true}},
		{"critical: a pipe of its class", input("SELECT 1", func(in *Input) {
			in.Controls = &fakeControls{classes: map[string]controls.Class{"t": controls.Critical}, background: true}
		}), Plan{Key: "t", Class: controls.Critical, Pipe: true, Ahead: true}},
		{"routed to a replica", input("SELECT 1", func(in *Input) {
			in.Routing = true
			in.Controls = &fakeControls{routes: map[string]controls.Route{"t": controls.RouteReplica}}
		}), Plan{Key: "t", Class: controls.Normal, Route: controls.RouteReplica, Pipe: true, Ahead: true}},
		{"stale reads allowed", input("SELECT 1", func(in *Input) {
			in.Routing, in.Session.WritesUnplaced = true, true
			in.Controls = &fakeControls{routes: map[string]controls.Route{"t": controls.RouteReplicaStaleOK}}
		}), Plan{Key: "t", Class: controls.Normal, Route: controls.RouteReplicaStaleOK, Pipe: true, Ahead: true}},
		{"a write it cannot place keeps reads on the primary", input("SELECT 1", func(in *Input) {
			in.Routing, in.Session.WritesUnplaced = true, true
			in.Controls = &fakeControls{routes: map[string]controls.Route{"t": controls.RouteReplica}}
		}), Plan{Key: "t", Class: controls.Normal, Pipe: true, Ahead: true}},
		{"holdfast:primary hint", input("SELECT /* holdfast:primary */ 1", func(in *Input) {
			in.Routing = true
			in.Controls = &fakeControls{routes: map[string]controls.Route{"t": controls.RouteReplica}}
		}), Plan{Key: "t", Class: controls.Normal, Pipe: true, Ahead: true}},
		{"routing off", input("SELECT 1", func(in *Input) {
			in.Controls = &fakeControls{routes: map[string]controls.Route{"t": controls.RouteReplica}}
		}), Plan{Key: "t", Class: controls.Normal, Pipe: true, Ahead: true}},
		{"an insert", input("INSERT INTO t VALUES (1)"), Plan{Key: "t", Class: controls.Normal}},
		{"CONNECTION_ID() rewritten", input("SELECT CONNECTION_ID() + 1"), Plan{Key: "t", Class: controls.Normal, RewriteConnectionID: true}},
		{"CONNECTION_ID() of a prepared statement was rewritten at its prepare", input("SELECT CONNECTION_ID() + ?",
			func(in *Input) { in.Command = Execute }), Plan{Key: "t", Class: controls.Normal}},
		{"BEGIN deferred", input("BEGIN"), Plan{Key: "t", Class: controls.Normal, Action: DeferBegin}},
		{"START TRANSACTION READ ONLY is sent", input("START TRANSACTION READ ONLY"), Plan{Key: "t", Class: controls.Normal}},
		{"BEGIN while holding is sent", input("BEGIN", func(in *Input) { in.Session.Holding = true }), Plan{Key: "t", Class: controls.Normal}},
		{"BEGIN inside a transaction is sent", input("BEGIN", func(in *Input) { in.Session.InTxn = true }), Plan{Key: "t", Class: controls.Normal}},
		{"COMMIT of a deferred BEGIN", input("COMMIT", func(in *Input) { in.Session.InTxn, in.Session.PendingBegin = true, true }),
			Plan{Key: "t", Class: controls.Normal, Action: EndDeferred}},
		{"ROLLBACK of a deferred BEGIN", input("ROLLBACK", func(in *Input) { in.Session.InTxn, in.Session.PendingBegin = true, true }),
			Plan{Key: "t", Class: controls.Normal, Action: EndDeferred}},
		{"COMMIT of a transaction begun", input("COMMIT", func(in *Input) { in.Session.InTxn, in.Session.Holding = true, true }),
			Plan{Key: "t", Class: controls.Normal}},
		{"KILL", input("KILL QUERY 5"), Plan{Key: "t", Class: controls.Normal, Action: Kill}},
		{"KILL among statements", input("SELECT 1; KILL 5"), Plan{Key: "t", Class: controls.Normal, Action: Kill}},
		{"KILL in EXECUTE IMMEDIATE", input("EXECUTE IMMEDIATE 'KILL 5'"), Plan{Key: "t", Class: controls.Normal, Action: Kill}},
		{"KILL built by an expression", input("EXECUTE IMMEDIATE CONCAT('KILL ', @id)"), Plan{Key: "t", Class: controls.Normal, Action: Kill}},
		{"EXECUTE IMMEDIATE of no KILL", input("EXECUTE IMMEDIATE 'SELECT 1'"), Plan{Key: "t", Class: controls.Normal}},
		{"LAST_INSERT_ID()", input("SELECT LAST_INSERT_ID()"), Plan{Key: "t", Class: controls.Normal, Action: AnswerLocal, Local: LastInsertID}},
		{"@@identity", input("SELECT @@identity"), Plan{Key: "t", Class: controls.Normal, Action: AnswerLocal, Local: Identity}},
		{"ROW_COUNT()", input("SELECT ROW_COUNT()"), Plan{Key: "t", Class: controls.Normal, Action: AnswerLocal, Local: RowCount}},
		{"LAST_INSERT_ID() on the held connection", input("SELECT LAST_INSERT_ID()", func(in *Input) { in.Session.Holding = true }),
			Plan{Key: "t", Class: controls.Normal}},
		{"CONNECTION_ID()", input("SELECT CONNECTION_ID()"), Plan{Key: "t", Class: controls.Normal, Action: AnswerLocal, Local: ConnectionID}},
		{"CONNECTION_ID() while holding, prepared", input("SELECT CONNECTION_ID()", func(in *Input) {
			in.Command, in.Session.Holding = Execute, true
		}), Plan{Key: "t", Class: controls.Normal, Action: AnswerLocal, Local: ConnectionID}},
		{"CALL holdfast.*", input("CALL holdfast.reserve(1, 2)"), Plan{Key: "t", Class: controls.Normal, Action: Procedure}},
		{"CALL `HOLDFAST`.*", input("CALL `HOLDFAST`.reserve(1, 2)"), Plan{Key: "t", Class: controls.Normal, Action: Procedure}},
		{"CALL holdfast.* without the engine", input("CALL holdfast.reserve(1)", func(in *Input) { in.Procedures = false }),
			Plan{Key: "t", Class: controls.Normal}},
		{"CALL of another procedure", input("CALL app.p()"), Plan{Key: "t", Class: controls.Normal}},
		{"refused by a control", input("INSERT INTO t VALUES (1)", func(in *Input) {
			in.Controls = &fakeControls{refuse: map[string]error{"t": readonly}}
		}), Plan{Key: "t", Class: controls.Normal, Action: Refuse, Refusal: RefuseControl, Err: readonly}},
		{"a write of a protected table", input("DELETE FROM hf.ledger", func(in *Input) {
			in.Protected = sqlscan.NewProtected("hf", []string{"ledger"})
		}), Plan{Key: "t", Class: controls.Normal, Action: Refuse, Refusal: RefuseProtected, Protected: sqlscan.Refusal{Schema: "hf", Table: "ledger"}}},
		{"a read of a protected table", input("SELECT * FROM hf.ledger", func(in *Input) {
			in.Protected = sqlscan.NewProtected("hf", []string{"ledger"})
		}), Plan{Key: "t", Class: controls.Normal, Pipe: true, Ahead: true}},
		{"shape controls", input("UPDATE t SET a = 1", func(in *Input) { in.ShapesInForce = true }), Plan{Key: "t", Class: controls.Normal, Shape: true}},
		{"COMMIT passes the shape controls", input("COMMIT", func(in *Input) { in.ShapesInForce, in.Session.Holding = true, true }),
			Plan{Key: "t", Class: controls.Normal}},
		{"COM_INIT_DB", &Input{Command: InitDB, Info: &sqlscan.Info{Kind: sqlscan.KindUse, Statements: 1}, Tag: Tag{Name: "t"}, Session: idle, PipelineDepth: 16},
			Plan{Key: "t", Class: controls.Normal}},
		{"COM_FIELD_LIST", &Input{Command: FieldList, Tag: Tag{Name: "t"}, Session: idle, PipelineDepth: 16, Controls: &fakeControls{}},
			Plan{Key: "t", Class: controls.Normal}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.in); got != tc.want {
				t.Errorf("Decide(%q):\n got %+v\nwant %+v", tc.in.SQL, got, tc.want)
			}
		})
	}
}

func TestKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		tag  Tag
		want string
	}{
		{"no controls: the name", Tag{Name: "other", Raw: []byte("checkout"), Accounting: true}, "other"},
		{"a tag accounted as itself", Tag{Name: "checkout", Raw: []byte("checkout"), Accounting: true, ByTag: true}, "checkout"},
		{"folded into other: the tag carried", Tag{Name: "other", Raw: []byte("checkout"), Accounting: true, ByTag: true}, "checkout"},
		{"folded, the transaction's", Tag{Name: "other", Raw: []byte("late"), TxnRaw: "first", Accounting: true, ByTag: true}, "first"},
		{"untagged statement of other", Tag{Name: "other", Accounting: true, ByTag: true}, "other"},
		{"a statement tagged other", Tag{Name: "other", Raw: []byte("other"), Accounting: true, ByTag: true}, "other"},
		{"accounting off: the tag carried", Tag{Name: "untagged", Raw: []byte("checkout"), ByTag: true}, "checkout"},
		{"accounting off, untagged", Tag{Name: "untagged", ByTag: true}, "untagged"},
	} {
		if got := Key(&tc.tag); got != tc.want {
			t.Errorf("%s: Key = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestUnboundReadAndPlainSelect(t *testing.T) {
	for sql, want := range map[string]bool{
		"SELECT 1": true, "SELECT a FROM t": true, "SELECT @@time_zone": true,
		"SELECT 1; SELECT 2": false, "SELECT LAST_INSERT_ID()": false, "SELECT a FROM t FOR UPDATE": false,
		"SELECT f(1)": false, "SELECT @x": false, "INSERT INTO t VALUES (1)": false, "SHOW TABLES": false,
	} {
		info := sqlscan.Scan([]byte(sql))
		if got := PlainSelect(&info); got != want {
			t.Errorf("PlainSelect(%q) = %v", sql, got)
		}
		if got := UnboundRead(&info, &idle); got != want {
			t.Errorf("UnboundRead(%q) = %v", sql, got)
		}
	}
	if PlainSelect(nil) {
		t.Error("PlainSelect(nil)")
	}
}

func TestPins(t *testing.T) {
	scan := func(sql string) *sqlscan.Info { i := sqlscan.Scan([]byte(sql)); return &i }
	for _, tc := range []struct {
		name   string
		info   *sqlscan.Info
		cursor bool
		sc     varstate.Report
		want   string
	}{
		{"a cursor", scan("SELECT 1"), true, varstate.Report{}, attribution.PinCursor},
		{"a variable that pins", scan("SET insert_id = 5"), false, varstate.Report{Pin: attribution.PinSessionState, Changed: true}, attribution.PinSessionState},
		{"temporary table", scan("CREATE TEMPORARY TABLE x (a INT)"), false, varstate.Report{Changed: true}, attribution.PinTemporaryTable},
		{"user variable", scan("SET @a = 1"), false, varstate.Report{Changed: true}, attribution.PinUserVariable},
		{"GET_LOCK", scan("SELECT GET_LOCK('a', 0)"), false, varstate.Report{}, attribution.PinGetLock},
		{"LOCK TABLES", scan("LOCK TABLES t READ"), false, varstate.Report{}, attribution.PinLockTables},
		{"PREPARE", scan("PREPARE s FROM 'SELECT 1'"), false, varstate.Report{Changed: true}, attribution.PinSQLPrepare},
		{"SQL_CALC_FOUND_ROWS", scan("SELECT SQL_CALC_FOUND_ROWS a FROM t"), false, varstate.Report{}, attribution.PinFoundRows},
		{"HANDLER", scan("HANDLER t OPEN"), false, varstate.Report{}, attribution.PinHandler},
		{"XA", scan("XA START 'x'"), false, varstate.Report{}, attribution.PinXA},
		{"a SET the tracker explained", scan("SET time_zone = '+01:00'"), false,
			varstate.Report{Changed: true, Vars: []varstate.Change{{Name: "time_zone", Value: "+01:00"}}}, ""},
		{"a SET of a kept variable", scan("SET wait_timeout = 5"), false, varstate.Report{Changed: true, KeptSet: true}, ""},
		{"a USE", scan("USE db"), false, varstate.Report{Changed: true, SchemaSet: true}, ""},
		{"a SET the tracker did not explain", scan("SET time_zone = '+01:00'"), false, varstate.Report{Changed: true}, attribution.PinSessionState},
		{"a change reported by a SELECT's EOF", scan("SELECT f()"), false, varstate.Report{Changed: true, EOFChanged: true}, attribution.PinSessionState},
		{"SET STATEMENT ... FOR SELECT", scan("SET STATEMENT time_zone = '+01:00' FOR SELECT 1"), false, varstate.Report{Changed: true, EOFChanged: true}, ""},
		{"an EOF change of a plain SELECT (a statement prepared in another database)", scan("SELECT a FROM t"), false,
			varstate.Report{Changed: true, EOFChanged: true}, ""},
		{"a command without a statement", nil, false, varstate.Report{Changed: true}, attribution.PinSessionState},
		{"nothing", scan("SELECT 1"), false, varstate.Report{}, ""},
	} {
		if got := PinReason(tc.info, tc.cursor, &tc.sc); got != tc.want {
			t.Errorf("%s: PinReason = %q, want %q", tc.name, got, tc.want)
		}
	}
	for sql, want := range map[string]bool{
		"SET STATEMENT time_zone = '+01:00' FOR SELECT 1":   true,
		"SET STATEMENT time_zone = '+01:00' FOR SET a = 1":  false,
		"SET STATEMENT time_zone = '+01:00' FOR SELECT f()": false,
		"SET STATEMENT time_zone = '+01:00' FOR CALL p()":   false,
		"SELECT 1": false,
	} {
		if got := StatementScoped(scan(sql)); got != want {
			t.Errorf("StatementScoped(%q) = %v", sql, got)
		}
	}
	for sql, want := range map[string]bool{
		"SELECT f()": true, "CALL p()": true, "EXECUTE s": true, "BEGIN NOT ATOMIC SELECT 1; END": true,
		"SELECT 1": false, "SET a = 1": false,
	} {
		if got := MayChangeState(scan(sql)); got != want {
			t.Errorf("MayChangeState(%q) = %v", sql, got)
		}
	}
	if !MayChangeState(nil) || StatementScoped(nil) {
		t.Error("a command without a statement")
	}
}

func TestMayWriteProtected(t *testing.T) {
	prot := sqlscan.NewProtected("hf", []string{"ledger"})
	for sql, want := range map[string]bool{
		"SELECT * FROM hf.ledger": false, "SHOW CREATE TABLE hf.ledger": false, "UPDATE t SET a = 1": false,
		"SELECT * FROM hf.ledger FOR UPDATE": true, "DELETE FROM hf.ledger": true, "EXECUTE IMMEDIATE 'SELECT 1'": true,
	} {
		info := sqlscan.Mode(0).ScanProtected([]byte(sql), prot)
		if got := MayWriteProtected(&info); got != want {
			t.Errorf("MayWriteProtected(%q) = %v", sql, got)
		}
	}
}

// TestDecideAllocs: deciding a statement's plan allocates nothing.
func TestDecideAllocs(t *testing.T) {
	in := input("SELECT a FROM t WHERE id = 1", func(in *Input) { in.Routing = true })
	var p Plan
	if n := testing.AllocsPerRun(100, func() { p = Decide(in) }); n != 0 {
		t.Fatalf("Decide allocates %.0f times", n)
	}
	if !p.Pipe {
		t.Fatalf("plan %+v", p)
	}
}
