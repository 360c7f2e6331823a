package proxy

import (
	"encoding/binary"
	"errors"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// The one execute path. Every client command that runs a statement, or
// acts like one, on a backend connection (COM_QUERY, COM_STMT_EXECUTE,
// COM_INIT_DB, COM_FIELD_LIST and COM_STATISTICS) arrives here as a
// command: its kind's entry (comQuery, stmtExecute, dispatch) resolves
// its tag, policy decides what happens to it (decide: plan.Decide over
// the session's view), and execute does it: answers it, refuses it, calls
// the engine, defers a BEGIN, translates a KILL, or runs it on a replica,
// a pipe, or a connection of the session's own (run), with the kept
// variables put in place around it and its answer's effects on the
// session read after it (afterStatement). A prepared statement's execute
// takes the same path as its text would.

// command is one client command on its way to a backend. Each kind is a
// type the session keeps one of and reuses, so passing one allocates
// nothing. All calls are the session goroutine's.
type command interface {
	// base is what every kind has: its statement's scan, tag, kind.
	base() *cmdBase
	// code is the command byte its response is relayed as.
	code() byte
	// text is the statement as holders and logs show it (perhaps cut
	// short); statement the whole text (for Execute, the prepare's).
	text() []byte
	statement() []byte
	// fits reports whether bc has what the command needs to be sent as
	// it is, with no other exchange first (what a pipe asks).
	fits(s *session, bc *backendConn) bool
	// wire returns the command's bytes for bc, which fits it (a pipe's).
	wire(s *session, bc *backendConn) []byte
	// send writes the command on bc, first preparing there what it
	// needs. errPkt is a backend ERR that answers instead (a prepare that
	// failed there), sent to the client as the answer.
	send(s *session, bc *backendConn) (errPkt []byte, err error)
	// ended notes the end of the response relayed for it.
	ended(s *session, rr *relayResult)
	// procedure answers the command as a CALL holdfast.*.
	procedure(s *session)
}

// cmdBase is what every command has.
type cmdBase struct {
	kind plan.Command
	// info is the statement's scan (nil: a command without one).
	info *sqlscan.Info
	// tag is the tag it runs under; tagged: its own, not its
	// transaction's or connection's.
	tag    *attribution.Tag
	tagged bool
	// binary: rows are answered in the binary protocol.
	binary bool
}

func (b *cmdBase) base() *cmdBase { return b }

// packetCmd is a command sent as the client sent it: COM_QUERY (its text
// perhaps rewritten), COM_INIT_DB, COM_FIELD_LIST and COM_STATISTICS.
type packetCmd struct {
	cmdBase
	p    []byte
	scan sqlscan.Info // info's storage for a text
}

func (c *packetCmd) code() byte                         { return c.p[0] }
func (c *packetCmd) text() []byte                       { return c.p[1:] }
func (c *packetCmd) statement() []byte                  { return c.p[1:] }
func (c *packetCmd) fits(*session, *backendConn) bool   { return true }
func (c *packetCmd) wire(*session, *backendConn) []byte { return c.p }
func (c *packetCmd) ended(*session, *relayResult)       {}
func (c *packetCmd) procedure(s *session)               { s.maybeProcedure(c.p[1:], c.info, c.tag) }
func (c *packetCmd) send(_ *session, bc *backendConn) ([]byte, error) {
	return nil, bc.sendCommand(c.p)
}

// set makes c the command p, a COM_QUERY lexed as info, or another kind
// (info nil or a fixed one).
func (c *packetCmd) set(kind plan.Command, p []byte, info *sqlscan.Info, tag *attribution.Tag, tagged bool) {
	c.cmdBase = cmdBase{kind: kind, info: info, tag: tag, tagged: tagged}
	c.p = p
}

// executeCmd is COM_STMT_EXECUTE of a client statement (stmt.go).
type executeCmd struct {
	cmdBase
	size                  int // the packet's length
	cs                    *clientStmt
	flags                 byte
	iter, nullMap, values []byte
}

func (c *executeCmd) code() byte        { return comStmtExecute }
func (c *executeCmd) text() []byte      { return c.cs.sql }
func (c *executeCmd) statement() []byte { return c.cs.text }

// fits: bc has the statement prepared as the client's, in the session's
// database (one prepared in another database switches there and back for
// its run, which the server reports as a change of session state).
func (c *executeCmd) fits(s *session, bc *backendConn) bool {
	return c.cs.db == s.state.DB && fitsExecute(bc, c.cs)
}

func (c *executeCmd) wire(s *session, bc *backendConn) []byte {
	bs, _ := bc.stmts.lru.Peek(c.cs.key)
	s.ps.pipeBuf = appendExecute(s.ps.pipeBuf[:0], bs.id, c.flags, c.iter, c.cs, c.nullMap, c.values)
	return s.ps.pipeBuf
}

func (c *executeCmd) ended(s *session, rr *relayResult) {
	if rr.cursor {
		if s.ps.cursors == nil {
			s.ps.cursors = map[uint32]bool{}
		}
		s.ps.cursors[c.cs.id] = true
	} else {
		delete(s.ps.cursors, c.cs.id) // a new execute closes the statement's cursor
	}
}

func (c *executeCmd) procedure(s *session) { s.executeProcedure(c.cs, c.nullMap, c.values, c.tag) }

// send prepares the statement on bc if needed, replays buffered long
// data, and sends the execute with holdfast's view of the parameter
// types.
func (c *executeCmd) send(s *session, bc *backendConn) ([]byte, error) {
	cs := c.cs
	fits := fitsExecute(bc, cs)
	if s.state.Txn.BeginInFlight && !(cs.longData == nil && fits) {
		// Preparing, sending long data or refusing the execute: BEGIN
		// cannot ride along with the execute.
		if err := s.settleBegin(bc); err != nil {
			return nil, err
		}
	}
	var bs *backendStmt
	var errPkt []byte
	var err error
	if !fits {
		unbound := bc.bound(s.srv.exchangeTimeout())
		bs, errPkt, err = bc.prepareOn(cs.db, cs.parse, cs.query, cs.key, s.srv.stmtConfig())
		unbound()
	} else {
		bs, errPkt, err = bc.prepareOn(cs.db, cs.parse, cs.query, cs.key, s.srv.stmtConfig())
	}
	if err != nil || errPkt != nil {
		return errPkt, err
	}
	if bs.params != cs.params {
		return mysqlwire.AppendErr(nil, newErr(1615, "HY000", "Prepared statement needs to be re-prepared")), nil
	}
	for param, data := range cs.longData {
		b := make([]byte, 0, 7+len(data))
		b = append(b, comStmtSendLong)
		b = binary.LittleEndian.AppendUint32(b, bs.id)
		b = binary.LittleEndian.AppendUint16(b, param)
		b = append(b, data...)
		if err := bc.writeCommand(b); err != nil {
			return nil, err
		}
	}
	out := appendExecute(bc.scratch[:0], bs.id, c.flags, c.iter, cs, c.nullMap, c.values)
	bc.scratch = out[:0]
	return nil, bc.sendCommand(out)
}

// decide is the plan for c, from policy over the session's view of
// itself and the controls in force. prot is the set of protected tables
// the text is checked against (nil: none, or checked already); split
// marks a run of statements of a text split around a KILL (kill.go).
func (s *session) decide(c command, prot *sqlscan.Protected, split bool) plan.Plan {
	b := c.base()
	s.ensureVars()
	in := plan.Input{
		Command:       b.kind,
		Info:          b.info,
		Mode:          s.mode,
		Tag:           s.tagView(b.tag),
		User:          s.user.Name,
		Session:       s.state.View(s.lease.bc != nil),
		Controls:      &s.srv.ctrl,
		Protected:     prot,
		DB:            s.state.DB,
		Procedures:    s.srv.procs != nil,
		Routing:       s.srv.routing != nil,
		PipelineDepth: s.srv.pipelineDepth(),
		ShapesInForce: s.srv.shapeGates.active.Load() != 0,
		Split:         split,
	}
	if b.info != nil {
		in.SQL = c.statement()
	}
	switch c := c.(type) {
	case *packetCmd:
		in.Size = len(c.p)
	case *executeCmd:
		in.Size, in.DB = c.size, c.cs.db
		in.Unbound = c.flags != 0 || c.cs.longData != nil
	}
	return plan.Decide(&in)
}

// tagView is tag as the controls see it (see plan.Key).
func (s *session) tagView(tag *attribution.Tag) plan.Tag {
	t := plan.Tag{Name: tag.Name(), Raw: s.tagRaw, Accounting: s.srv.attr, ByTag: s.srv.controlsByTag()}
	if tag == s.state.Txn.Tag {
		t.TxnRaw = s.state.Txn.Raw
	}
	return t
}

// keyOf is the name a borrow for tag passes the controls under (see
// plan.Key).
func (s *session) keyOf(tag *attribution.Tag) string {
	t := s.tagView(tag)
	return plan.Key(&t)
}

// execute does what plan p says of command c; it reports whether the
// session goes on.
func (s *session) execute(c command, p *plan.Plan) bool {
	b := c.base()
	if p.Action == plan.Refuse {
		if p.Refusal == plan.RefuseControl {
			b.tag.Rejected(attribution.RejectRefused)
		}
		s.writeErr(refusalErr(p))
		return true
	}
	if p.Shape {
		counted, serr := s.admitShape(b.info, b.tag)
		if serr != nil {
			s.writeErr(serr)
			return true
		}
		if counted != "" {
			defer s.srv.shapeGates.exit(counted)
		}
	}
	switch p.Action {
	case plan.DeferBegin:
		s.deferBegin(c.statement(), b.tag, b.tagged)
		return true
	case plan.EndDeferred:
		s.endDeferred()
		return true
	case plan.Kill:
		return s.killText(c.(*packetCmd))
	case plan.AnswerLocal:
		s.answerLocal(p.Local, b.info, b.binary)
		return true
	case plan.Procedure:
		c.procedure(s)
		return true
	}
	if p.RewriteConnectionID {
		pc := c.(*packetCmd)
		if q, ok := s.mode.AppendConnectionID(append(s.rewrite[:0], comQuery), pc.p[1:], uint64(s.id)); ok {
			s.rewrite = q
			pc.p = q
		}
	}
	if p.Route != controls.RoutePrimary {
		if r := s.routeRead(p.Route); r != nil {
			s.route = r
			keep := s.run(c, p)
			s.route = nil
			return keep
		}
	}
	reran := false
	if p.Pipe && !s.srv.mustHold(p.Key, true) { // a held statement borrows (run)
		var handled, keep bool
		if handled, keep, reran = s.runPipelined(c, p); handled {
			return keep
		}
	}
	return s.runStmt(c, p, reran)
}

// refusalErr is what a client is told of a command its plan refuses.
func refusalErr(p *plan.Plan) *mysqlwire.SQLError {
	if p.Refusal == plan.RefuseProtected {
		return protectedErr(p.Protected)
	}
	return controlErr(p.Err)
}

// run sends command c on a connection of the session's own (held, or
// borrowed for it: on the replica s.route names, else on the primary) and
// relays the response; then afterStatement records what it did to the
// session. A statement is sent again (a read after its replica failed, a
// pipelined read a kill hit, a write a former primary refused) once at
// most.
func (s *session) run(c command, p *plan.Plan) bool { return s.runStmt(c, p, false) }

// runStmt is run; reran: c is being sent again (see run).
func (s *session) runStmt(c command, p *plan.Plan, reran bool) bool {
	b := c.base()
	info, tag := b.info, b.tag
	before := s.state.View(s.lease.bc != nil) // the session as c found it (afterReadOnly)
	bc, serr := s.borrow(tag, p.Key, p.Class, p.Ahead)
	if serr != nil {
		s.writeErr(serr)
		return serr != errStateLost
	}
	begin := s.state.Txn.SentBegin // non-nil: c is its transaction's first statement (afterReadOnly)
	held := s.state.KeepsConn()
	var after string // holdfast's kept values to put back after the statement
	if p.PutKept {
		var err error
		unbound := bc.bound(s.srv.exchangeTimeout())
		after, err = s.putKept(bc)
		unbound()
		if err != nil {
			return s.relayFailed(err, &relayResult{}, held)
		}
	}
	start := s.stmtStart(tag, c.text())
	s.setExec(bc, nil)
	s.watch.arm()
	var rr relayResult
	s.reply.hideChange = s.hidesStatementChange(c)
	sent, seq := s.cw.n, s.w.Seq
	recording := s.txlog.on && s.beforeStmt(c)
	errPkt, err := c.send(s, bc)
	s.state.Txn.SentBegin = nil // the transaction has run c
	if err == nil && errPkt == nil {
		rr, err = s.relay(bc, c.code())
	}
	if recording {
		s.txlog.hashing = false
	}
	s.reply.hideChange = false
	if err == nil && errPkt == nil && after != "" {
		unbound := bc.bound(s.srv.exchangeTimeout())
		_, err = bc.queryLocked(after)
		unbound()
	}
	if err == nil && errPkt == nil && p.SyncKept {
		// The session tracker does not report every kept variable (not
		// session_track_system_variables itself): read them back.
		rr.sc.Vars, rr.sc.KeptSet = varstate.DropKept(rr.sc.Vars), true
		s.conn = stateConn{bc: bc, timeout: s.srv.exchangeTimeout()}
		err = s.state.SyncKept(&s.conn, s.srv.hfKept(), s.mode.SetVariables(c.statement()))
		s.conn = stateConn{}
	}
	s.watch.disarm()
	s.setExec(nil, nil)
	s.stmtEnd(tag, start, err != nil || errPkt != nil || rr.failed)
	if err != nil {
		if !reran && s.rerunOnPrimary(err, sent, seq) {
			return s.runStmt(c, p, true)
		}
		if s.beginFailed(err) {
			return true
		}
		return s.relayFailed(err, &rr, held)
	}
	if errPkt != nil {
		s.writePacket(errPkt)
		s.state.RowCount = -1
		s.maybeRelease()
		return true
	}
	if rr.failed && rr.errCode == codeReadOnly && !rr.started && s.cw.n == sent && bc.be == &s.srv.primary {
		// Refused by a server that may be a former primary: nothing of
		// the answer has left yet.
		if handled, keep, again := s.afterReadOnly(c, bc, &before, begin, reran, seq); handled {
			if again {
				return s.runStmt(c, p, true)
			}
			return keep
		}
	}
	if recording {
		s.recordStmt(c, &rr)
	}
	c.ended(s, &rr)
	s.afterStatement(bc, &rr, info, tag)
	if s.txlog.on && !s.state.InTxn() {
		s.txlog.stop() // the transaction ended on a connection the session keeps
	}
	return true
}

// controlErr is the client's error for a statement a control refused:
// the code, SQLSTATE and text the refusal carries (a *mysqlwire.SQLError,
// or any error with a MySQLError method, as the engine's errors have).
func controlErr(err error) *mysqlwire.SQLError {
	var se *mysqlwire.SQLError
	if errors.As(err, &se) {
		return se
	}
	var r *controls.Refusal
	if errors.As(err, &r) {
		return &mysqlwire.SQLError{Code: r.Code, State: r.State, Msg: r.Msg}
	}
	var me interface {
		MySQLError() (uint16, string, string)
	}
	if errors.As(err, &me) {
		code, state, msg := me.MySQLError()
		return newErr(code, state, "%s", msg)
	}
	return newErr(codeUnknownError, "HY000", "holdfast: %v", err)
}
