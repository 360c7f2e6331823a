// Package policy decides what happens to one client command before
// anything runs: holdfast answers it itself, refuses it, calls a
// procedure, defers a BEGIN, translates a KILL, or runs it on a backend
// connection, and then which one (the session's, a replica's, a place on
// a shared pipe), under which key and overload class, and what is put in
// place around it and read back after.
//
// It is one pure function of its Input (Decide) and a few pure helpers
// the session uses after a statement (PinReason, StatementScoped,
// MayChangeState): no I/O, no clock, no locks, no sessions and no
// connections. What it needs of the on-call controls it reads through
// Controls, which the caller implements. The session (proxy/execute.go)
// executes the Plan; explain shows it.
package policy

import (
	"bytes"

	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// Controls is what policy reads of the controls in force for a key. It is
// implemented by the proxy over its controls; every method is lock-free
// and cheap (an atomic load when nothing is in force).
type Controls interface {
	// Free reports that no admission control (drain, connection cap) is in force for key:
	// a borrow may skip admission and the statement may be pipelined. Lock-free; one atomic
	// load when no control is in force at all.
	Free(key string) bool
	// Class is key's overload class; BackgroundCapped reports that some rule names the
	// background class (background borrows then pass the background cap and are not pipelined).
	Class(key string) controls.Class
	BackgroundCapped() bool
	// Route is key's replica routing policy (RoutePrimary when none).
	Route(key string) controls.Route
	// Refuse returns the refusal of a statement by a statement-level control in force for key
	// (today none; CONTROLS adds `readonly`: error 9011), or nil. It must cost one atomic load
	// when no statement-level control is in force. The error's text reaches the client; its
	// code/SQLSTATE come from a type the proxy edge can read (CONTROLS defines it in
	// proxy/controls, e.g. `type Refusal struct{Code uint16; State, Msg string}`).
	Refuse(key string, info *sqlscan.Info) error
}

// Command is the kind of client command.
type Command uint8

const (
	// Query is COM_QUERY: statement text.
	Query Command = iota
	// Execute is COM_STMT_EXECUTE of a statement prepared through
	// holdfast: its text is the prepare's.
	Execute
	// InitDB is COM_INIT_DB (a USE).
	InitDB
	// FieldList is COM_FIELD_LIST (and COM_STATISTICS): no statement.
	FieldList
)

var commandNames = [...]string{"COM_QUERY", "COM_STMT_EXECUTE", "COM_INIT_DB", "COM_FIELD_LIST"}

func (c Command) String() string {
	if int(c) < len(commandNames) {
		return commandNames[c]
	}
	return "invalid"
}

// Session is what policy sees of the client's session when the command
// arrives. The zero Session is a fresh one that has not yet learned its
// variables (it runs nothing on a pipe or a replica).
type Session struct {
	// InTxn: a transaction is open as the client sees it (the status
	// flag, which a deferred BEGIN sets too).
	InTxn bool
	// PendingBegin: a BEGIN was answered and not yet sent.
	PendingBegin bool
	// FreshTxn: the deferred BEGIN went out, and nothing but prepares
	// has run in the transaction since.
	FreshTxn bool
	// Holding: the session holds a backend connection now.
	Holding bool
	// Pinned: session state ties it to its connection for good.
	Pinned bool
	// HoldNext: SET TRANSACTION keeps the connection through the next
	// statement.
	HoldNext bool
	// VarsKnown: the session's variables are known (the backend's
	// defaults were learned): it may run on a connection that is not
	// brought to its state first (a pipe) or on a replica.
	VarsKnown bool
	// Autocommit is the status flag.
	Autocommit bool
	// WritesUnplaced: a commit of the session's could not be placed (its
	// GTID unreadable): its reads under RouteReplica stay on the primary.
	WritesUnplaced bool
}

// Tag is the tag a command runs under, as the controls see it (see Key).
type Tag struct {
	// Name is the tag as accounted: attribution.Other when accounting
	// folded it (attribution.max_tags reached).
	Name string
	// Raw is the tag as the statement carried it (nil: it carried none).
	Raw []byte
	// TxnRaw is the open transaction's tag as its first tagged statement
	// carried it, when accounting folded it and Name is that
	// transaction's tag; "" otherwise.
	TxnRaw string
	// Accounting: attribution looks at tags (not attribution.disabled).
	Accounting bool
	// ByTag: some on-call control or overload class is in force, so the
	// tag a statement carries matters even when accounting folded it.
	ByTag bool
}

// Key is the name a command for t passes the on-call controls and gets
// its class and routing policy under: the tag the statement (or its
// transaction) carries, even when accounting folded it into other or does
// not look at tags, so that a drain, a limit, a class or a route of that
// tag applies to it. Without any control in force it is the name, and
// costs nothing.
func Key(t *Tag) string {
	const other = "other" // attribution.Other
	if !t.ByTag {
		return t.Name
	}
	if !t.Accounting && len(t.Raw) > 0 {
		return string(t.Raw) // attribution.disabled: tags are not accounted, but gated
	}
	if t.Name != other {
		return t.Name
	}
	if t.TxnRaw != "" {
		return t.TxnRaw
	}
	if len(t.Raw) > 0 && string(t.Raw) != other {
		return string(t.Raw)
	}
	return t.Name
}

// Input is everything Decide looks at. The caller may keep one and reuse
// it (Decide does not keep it).
type Input struct {
	Command Command
	// Info is the statement's scan (nil for FieldList); SQL its text
	// (for Execute, the prepare's), lexed under Mode.
	Info *sqlscan.Info
	SQL  []byte
	Mode sqlscan.Mode
	// Size is the command packet's length.
	Size int
	// Unbound: an Execute that needs the connection to itself beyond the
	// statement (a cursor, or parameters sent as long data): never on a
	// replica or a pipe.
	Unbound bool
	// Tag is the tag it runs under; User its user (for explain).
	Tag  Tag
	User string
	// Session is the session's state.
	Session Session
	// Controls are the controls in force (nil: none).
	Controls Controls
	// Protected is the set of holdfast's own tables the text is checked
	// against (nil: no check, as for an Execute checked at its prepare
	// against the same set); DB the session's database, where
	// unqualified names resolve.
	Protected *sqlscan.Protected
	DB        string
	// Procedures: CALL holdfast.* is answered by holdfast.
	Procedures bool
	// Routing: replicas are configured.
	Routing bool
	// PipelineDepth is pool.pipeline_depth (0: no pipelining).
	PipelineDepth int
	// ShapesInForce: some statement shape is blocked or capped.
	ShapesInForce bool
	// Split: the command is a run of statements of a text split around a
	// KILL (or a text the server is to refuse whole): it runs on the
	// session's or a borrowed connection of the primary as it is, its
	// text checked already.
	Split bool
}

// Action is what happens to a command.
type Action uint8

const (
	// Run: on a backend connection (Plan's other fields say how).
	Run Action = iota
	// Refuse: nothing runs; Plan.Refusal says why.
	Refuse
	// AnswerLocal: holdfast answers with the session's own value
	// (Plan.Local).
	AnswerLocal
	// Procedure: CALL holdfast.*, answered by the engine.
	Procedure
	// Kill: a KILL, or a text holding one, that holdfast translates and
	// runs in its place (its ids are holdfast's).
	Kill
	// DeferBegin: BEGIN is answered now and sent with the transaction's
	// first statement.
	DeferBegin
	// EndDeferred: COMMIT or ROLLBACK of a deferred BEGIN never sent:
	// answered, nothing sent.
	EndDeferred
)

var actionNames = [...]string{"run", "refuse", "answer locally", "call a procedure", "kill", "defer BEGIN", "end a deferred BEGIN"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "invalid"
}

// Local is a value of the session's own that holdfast answers with.
type Local uint8

const (
	NoLocal Local = iota
	// LastInsertID: SELECT LAST_INSERT_ID().
	LastInsertID
	// Identity: SELECT @@identity or @@last_insert_id (the same value, a
	// column that may be NULL).
	Identity
	// RowCount: SELECT ROW_COUNT().
	RowCount
	// ConnectionID: SELECT CONNECTION_ID(), holdfast's id of the client.
	ConnectionID
)

// Refusal says why a command is refused.
type Refusal uint8

const (
	NotRefused Refusal = iota
	// RefuseProtected: it writes, locks or alters one of holdfast's own
	// tables (error 9009); Plan.Protected says which.
	RefuseProtected
	// RefuseControl: a statement-level control in force for its key;
	// Plan.Err is the control's error.
	RefuseControl
)

// Plan is what happens to one command. It is a value: deciding allocates
// nothing (but the key of a folded tag under controls, and the second
// look at a text naming a protected table).
type Plan struct {
	Action Action
	// Local is AnswerLocal's value.
	Local Local
	// Refusal is Refuse's reason; Protected (RefuseProtected) or Err
	// (RefuseControl) the detail.
	Refusal   Refusal
	Protected sqlscan.Refusal
	Err       error

	// Key is the name the command passes the controls under, and Class
	// its overload class there (Run, Procedure).
	Key   string
	Class controls.Class
	// Shape: the statement passes its shape's controls first (some are
	// in force, and it is not exempt: see ShapeExempt).
	Shape bool
	// Admission: some admission control (drain, cap) is in force for Key:
	// a borrow passes it, and the statement is not pipelined.
	Admission bool

	// Route is where a read may go: RoutePrimary, or a replica under
	// that policy (the session picks one that has what the policy asks;
	// none: the primary, or a pipe when Pipe is set).
	Route controls.Route
	// Pipe: the statement may take a place on a shared pipe of the
	// primary (none free: a connection of its own).
	Pipe bool
	// Ahead: a deferred BEGIN may go out in the same write as the
	// statement (a plain SELECT: see PlainSelect).
	Ahead bool
	// PutKept: the client's kept variables are put in place on the
	// connection around the statement, which reads them.
	PutKept bool
	// SyncKept: the kept variables are read back after the statement,
	// which may set them.
	SyncKept bool
	// RewriteConnectionID: CONNECTION_ID() in the text is replaced by the
	// client's id before it is sent.
	RewriteConnectionID bool
}

// Decide returns the plan for in. The order of its checks is the order in
// which they apply: the protected tables, then statement-level controls,
// then what holdfast answers itself, then where the statement runs.
func Decide(in *Input) Plan {
	info := in.Info
	p := Plan{Key: Key(&in.Tag)}
	p.setAdmission(in)
	if info == nil {
		return p
	}
	if in.Split {
		p.setRun(in.Command, info)
		return p
	}
	if in.Protected != nil && MayWriteProtected(info) {
		if r, refused := in.Mode.CheckProtected(in.SQL, in.Protected, in.DB); refused {
			p.Action, p.Refusal, p.Protected = Refuse, RefuseProtected, r
			return p
		}
	}
	if in.Controls != nil {
		if err := in.Controls.Refuse(p.Key, info); err != nil {
			p.Action, p.Refusal, p.Err = Refuse, RefuseControl, err
			return p
		}
	}
	p.Shape = in.ShapesInForce && !ShapeExempt(info)
	st := &in.Session
	switch {
	case deferred(info, st):
		if info.Kind == sqlscan.KindBegin {
			p.Action = DeferBegin
		} else {
			p.Action = EndDeferred
		}
		return p
	case in.Command == Query && (info.Features&sqlscan.FeatKill != 0 || info.Features&DynamicSQL != 0 && SmuggledKill(in.Mode, in.SQL, 0)):
		p.Action = Kill
		return p
	case (info.LastInsertIDColumn != "" || info.RowCountColumn != "") && !st.Holding:
		// A pooled connection holds another client's value; the held one
		// ran the session's statements and answers for itself.
		p.Action = AnswerLocal
		switch {
		case info.LastInsertIDColumn != "" && info.LastInsertIDVar:
			p.Local = Identity
		case info.LastInsertIDColumn != "":
			p.Local = LastInsertID
		default:
			p.Local = RowCount
		}
		return p
	case info.ConnectionIDColumn != "":
		// The id clients KILL by is holdfast's, not a backend thread's.
		p.Action, p.Local = AnswerLocal, ConnectionID
		return p
	case in.Procedures && HoldfastCall(in.SQL, info):
		p.Action = Procedure
		return p
	}
	p.setRun(in.Command, info)
	if !UnboundRead(info, st) || in.Unbound || info.Vars != 0 {
		return p
	}
	if in.Routing && !info.PrimaryHint && info.Features&PrimaryOnly == 0 && in.Controls != nil {
		p.Route = in.Controls.Route(p.Key)
		if p.Route == controls.RouteReplica && st.WritesUnplaced {
			p.Route = controls.RoutePrimary // a write it cannot place: its reads stay on the primary
		}
	}
	// A pipelined statement takes no lease, so passes no control: a
	// drained or capped tag's statements borrow instead (and are refused
	// or counted there), as do background ones while the background cap
	// is in force.
	p.Pipe = in.PipelineDepth > 0 && in.Size < 1<<16 && !p.Admission &&
		(p.Class != controls.Background || in.Controls == nil || !in.Controls.BackgroundCapped())
	return p
}

// setRun fills in what running a statement of info on a connection of
// its own takes: the kept variables around it, BEGIN riding along, the
// rewrite of CONNECTION_ID().
func (p *Plan) setRun(cmd Command, info *sqlscan.Info) {
	p.RewriteConnectionID = cmd == Query && info.Features&sqlscan.FeatConnectionID != 0
	p.Ahead = PlainSelect(info)
	p.PutKept = ReadsKept(info)
	p.SyncKept = info.Features&sqlscan.FeatSetSession != 0 && info.Vars != 0
}

// setAdmission fills in the controls of p.Key: its class, and whether an
// admission control is in force.
func (p *Plan) setAdmission(in *Input) {
	p.Class = controls.Normal
	if in.Controls == nil {
		return
	}
	p.Class = in.Controls.Class(p.Key)
	p.Admission = !in.Controls.Free(p.Key)
}

// deferred reports whether a plain BEGIN, COMMIT or ROLLBACK is answered
// without the backend: a BEGIN outside a transaction while no connection
// is held, or the end of a transaction whose BEGIN was never sent.
func deferred(info *sqlscan.Info, st *Session) bool {
	if info.Statements != 1 || st.Holding || !info.Plain {
		return false
	}
	switch info.Kind {
	case sqlscan.KindBegin:
		return !st.InTxn
	case sqlscan.KindCommit, sqlscan.KindRollback:
		return st.PendingBegin
	}
	return false
}

// PlainSelect reports whether info describes a single SELECT that touches
// no variables and nothing else of the session: one that may be
// pipelined, routed to a replica, and that a deferred BEGIN may ride along
// with.
func PlainSelect(info *sqlscan.Info) bool {
	return info != nil && info.Kind == sqlscan.KindSelect && info.Statements == 1 && info.Features == 0 && info.LastInsertIDColumn == ""
}

// ReadsKept reports whether a statement reads the variables holdfast
// keeps for the client (varstate.KeptNames): a plain SELECT or a SHOW that
// names one, or lists variables. It runs with the client's values put in
// place on its connection.
func ReadsKept(info *sqlscan.Info) bool {
	return (PlainSelect(info) || info.Kind == sqlscan.KindShow) && info.Vars != 0
}

// UnboundRead reports whether a statement of info is a plain SELECT the
// session may run on any connection: it holds none and is in no
// transaction, pinned or pending state, and its variables are known.
func UnboundRead(info *sqlscan.Info, st *Session) bool {
	return !st.Holding && st.VarsKnown && !st.PendingBegin && !st.Pinned && !st.HoldNext &&
		!st.InTxn && st.Autocommit && PlainSelect(info)
}

// PrimaryOnly are the features of reads whose answer a replica does not
// have: user-level locks (IS_FREE_LOCK, IS_USED_LOCK: a lock taken with
// GET_LOCK exists on the primary only, so a replica finds every lock
// free) and the values of the session's last statement (LAST_INSERT_ID(),
// @@identity, ROW_COUNT(), FOUND_ROWS(), CONNECTION_ID()). PlainSelect
// rules them out today; routing must not depend on that.
const PrimaryOnly = sqlscan.FeatLockInfo | sqlscan.FeatLastInsertID | sqlscan.FeatRowCount |
	sqlscan.FeatFoundRowsFunc | sqlscan.FeatConnectionID

// DynamicSQL are the features of texts that run statement text Scan does
// not read.
const DynamicSQL = sqlscan.FeatExecImmediate | sqlscan.FeatSQLPrepare

// MayWriteProtected reports whether a text scanned with the protected
// tables may write, lock or alter one: it names one (or drops a
// database), or runs statement text of its own, and it is not one plain
// read.
func MayWriteProtected(info *sqlscan.Info) bool {
	if !info.NamesProtected && info.Features&DynamicSQL == 0 {
		return false
	}
	plainRead := info.Statements == 1 && (info.Kind == sqlscan.KindSelect || info.Kind == sqlscan.KindShow) &&
		info.Features&(sqlscan.FeatLocking|DynamicSQL) == 0
	return !plainRead
}

// ShapeExempt reports whether a statement passes the shape controls
// whatever its shape: it ends a transaction or kills.
func ShapeExempt(info *sqlscan.Info) bool {
	switch info.Kind {
	case sqlscan.KindKill, sqlscan.KindCommit, sqlscan.KindRollback:
		return true
	}
	return info.Features&sqlscan.FeatKill != 0
}

var holdfastSchema = []byte("holdfast")

// HoldfastCall reports whether a CALL statement, as the lexing pass saw
// it, names a routine of the holdfast schema (in any letter case, quoted
// or not).
func HoldfastCall(sql []byte, info *sqlscan.Info) bool {
	sch := info.CallSchema
	return info.Kind == sqlscan.KindCall && sch.End <= len(sql) && bytes.EqualFold(sql[sch.Start:sch.End], holdfastSchema)
}

// MaxKillDepth bounds the nesting of EXECUTE IMMEDIATE text searched for a
// KILL (here, and where the proxy looks for the KILL to run in its place).
const MaxKillDepth = 4

// SmuggledKill reports whether a text with DynamicSQL may have the server
// run a KILL: the literal text of an EXECUTE IMMEDIATE or PREPARE ...
// FROM in it is or holds one (at any depth), or an expression's literal
// parts, joined as they are or with spaces (where values come between
// them), read as one (CONCAT('KILL ', @id)).
func SmuggledKill(mode sqlscan.Mode, sql []byte, depth int) bool {
	for _, d := range mode.AppendDynamic(nil, sql) {
		if !d.Literal {
			for _, sep := range []string{"", " "} {
				if mode.Scan(bytes.Join(d.Parts, []byte(sep))).Features&sqlscan.FeatKill != 0 {
					return true
				}
			}
			continue
		}
		inner := mode.Scan(d.Text)
		if inner.Features&sqlscan.FeatKill != 0 {
			return true
		}
		if inner.Features&DynamicSQL != 0 && (depth >= MaxKillDepth || SmuggledKill(mode, d.Text, depth+1)) {
			return true
		}
	}
	return false
}
