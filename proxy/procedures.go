package proxy

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// CALL holdfast.<name>(...) is answered by the Procedures (the reservation
// engine), in the text protocol and as a prepared statement, never by the
// backend. A procedure runs in its own transactions on connections it
// borrows from the pool under its own tags, so it cannot join a
// transaction the client has open, and a session that keeps a backend
// connection (pinned, or after SET TRANSACTION) would hold a second one
// while it runs: such calls are refused. The engine bounds each call by
// its own deadline (reservation.call_timeout).

const (
	codeProcInTxn  = 9003 // CALL holdfast.* inside the caller's transaction
	codeProcHeld   = 9004 // CALL holdfast.* from a session that keeps a backend connection
	codeParseError = 1064
)

// maybeProcedure answers a text-protocol CALL holdfast.* (policy decided
// it is one).
func (s *session) maybeProcedure(sql []byte, info *sqlscan.Info, tag *attribution.Tag) {
	call, err := s.scanMode().ParseCall(sql)
	if err != nil {
		s.writeErr(newErr(codeParseError, "42000", "holdfast: %v", err))
		return
	}
	args := make([]any, len(call.Args))
	for i, a := range call.Args {
		v, err := textArg(a)
		if err != nil {
			s.writeErr(newErr(codeWrongArguments, "HY000", "holdfast.%s: argument %d: %v", call.Name, i+1, err))
			return
		}
		args[i] = v
	}
	s.runProcedure(call.Name, args, false, tag)
}

func textArg(a sqlscan.Arg) (any, error) {
	switch a.Kind {
	case sqlscan.ArgNull:
		return nil, nil
	case sqlscan.ArgInt:
		if v, err := strconv.ParseInt(a.Text, 10, 64); err == nil {
			return v, nil
		}
		if v, err := strconv.ParseUint(a.Text, 10, 64); err == nil {
			return v, nil
		}
		return a.Text, nil
	case sqlscan.ArgDecimal:
		if v, err := strconv.ParseFloat(a.Text, 64); err == nil {
			return v, nil
		}
		return a.Text, nil
	case sqlscan.ArgString:
		return a.Text, nil
	}
	return nil, errors.New("a '?' placeholder outside a prepared statement")
}

// runProcedure calls the engine for tag, the statement's tag, and answers
// with its result set followed by the OK that ends every CALL, or with its
// error. The call passes tag's controls like any statement of the tag: a
// drain refuses it (9001), and under a cap it takes one of the tag's
// slots while it runs (the engine's own borrows are counted under its
// holdfast:* tags, not under the cap); the engine's backend time on it is
// the tag's engine time.
func (s *session) runProcedure(name string, args []any, binaryRows bool, tag *attribution.Tag) {
	name = strings.ToLower(name)
	if e := s.procRefused(name); e != nil {
		s.writeErr(e)
		return
	}
	if s.caps&mysql.CLIENT_MULTI_RESULTS == 0 {
		s.writeErr(newErr(1312, "0A000", "PROCEDURE holdfast.%s can't return a result set in the given context", name))
		return
	}
	start := time.Now()
	cols, rows, err := s.callProcedure(name, args, tag)
	end := time.Now()
	if s.srv.routing != nil {
		// The engine committed on connections of its own: no GTID of
		// them reaches this session (see routeRead).
		s.state.RYWAfter = end
	}
	s.srv.statementDone(&s.callLease, tag, start, end, err != nil)
	s.srv.give(&s.callLease, true, nil, s.id, nil, 0) // the admission's slot, if it took one
	if err != nil {
		s.writeErr(procErr(name, err))
		return
	}
	if len(cols) > 0 {
		rs := resultSet{cols: make([]mysqlwire.Column, len(cols)), rows: rows, more: true}
		for i, c := range cols {
			rs.cols[i] = mysqlwire.Column{Name: c, Type: columnType(rows, i)}
		}
		s.writeResultSet(&rs, binaryRows)
	}
	s.writeOK(0, 0)
}

// errCallInterrupted is the cause a call's context ends with when the
// call is interrupted: KILL QUERY or KILL of its session, or its client
// hanging up (every kill takes interrupt, see kill.go).
var errCallInterrupted = errors.New("KILL QUERY, KILL, or the client hanging up")

// callProcedure runs one engine call under a context of its own, which
// interrupt cancels, once its tag's controls admitted it (its admission,
// callLease, is the caller's to give back), so that a kill or the client's disconnect ends it as
// they end a statement on the backend; the engine answers such a call
// with what it did (nothing, or an outcome it cannot know).
func (s *session) callProcedure(name string, args []any, tag *attribution.Tag) ([]string, [][]any, error) {
	ctx, unregister := s.killable()
	defer unregister()
	s.interrupted.Store(false)
	s.watch.arm()
	defer s.watch.disarm()
	if err := s.srv.admitOnly(ctx, &s.callLease, tag, s.keyOf(tag)); err != nil {
		if context.Cause(ctx) == errCallInterrupted {
			return nil, nil, newErr(codeQueryInterrupted, "70100", "holdfast.%s: interrupted while queued under its tag's connection limit; nothing was done", name)
		}
		return nil, nil, callRefused{err}
	}
	return s.srv.procs.Call(attribution.WithCallers(ctx, tag), name, args)
}

// killable registers what the session's goroutine waits on now (a CALL
// holdfast.*, a statement held for the primary) as its running statement:
// a KILL QUERY, a KILL or its client hanging up (interrupt, kill.go)
// cancels the context returned, with errCallInterrupted. unregister ends
// that, and must be called before the session runs anything else.
func (s *session) killable() (ctx context.Context, unregister func()) {
	ctx, cancel := context.WithCancelCause(s.srv.ctx)
	s.mu.Lock()
	s.execCall = cancel
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		s.execCall = nil
		s.mu.Unlock()
		cancel(nil)
	}
}

// procRefused returns the error for a CALL holdfast.* this session may not
// make now, or nil: inside a transaction (9003), or while the session keeps
// a backend connection for itself, which the call would hold on to while
// the engine borrows another one (9004).
func (s *session) procRefused(name string) *mysqlwire.SQLError {
	const keeps = "holdfast: CALL holdfast.%s borrows a backend connection of its own, and this session keeps one "
	switch {
	case s.state.Status&mysqlwire.StatusInTrans != 0:
		return newErr(codeProcInTxn, "HY000", "holdfast: CALL holdfast.%s runs in its own transaction and cannot join yours; call it outside BEGIN ... COMMIT", name)
	case s.state.PinReason != "":
		return newErr(codeProcHeld, "HY000", keeps+"for its session state (pinned by %s); call it from a connection without such state (user variables, temporary tables, GET_LOCK, ...)",
			name, s.state.PinReason)
	case s.state.Txn.HoldNext:
		return newErr(codeProcHeld, "HY000", keeps+"for the transaction SET TRANSACTION prepared; call it before SET TRANSACTION or after that transaction", name)
	case s.lease.bc != nil:
		return newErr(codeProcHeld, "HY000", "holdfast: CALL holdfast.%s borrows a backend connection of its own, and this session still holds one; call it after COMMIT or ROLLBACK, or from another connection", name)
	}
	return nil
}

// callRefused is a call the controls of its tag refused: nothing was
// done.
type callRefused struct{ err error }

func (c callRefused) Error() string    { return c.err.Error() }
func (c callRefused) BorrowErr() error { return c.err }

// borrowFailure is implemented by the engine's error for a call that did
// nothing because it could not get a backend connection: BorrowErr is the
// pool's error (nil when the call failed otherwise).
type borrowFailure interface{ BorrowErr() error }

// procErr turns an engine error into the client's ERR packet: a call that
// got no connection is answered like any statement that gets none (1040,
// 2003, 9001, 9002, 1053); an error with a MySQL code keeps it, but for a
// read-only refusal (1290), answered 2003: nothing was done. Anything
// else is a bug or a statement of the engine that the database refused:
// 1105 with the engine's text, which names the procedure. The engine never
// returns a lost backend connection as such (see reservation.Engine.Call).
func procErr(name string, err error) *mysqlwire.SQLError {
	var se *mysqlwire.SQLError
	if errors.As(err, &se) && se.Code == codeReadOnly {
		// Never a former primary's read-only refusal (the engine holds a
		// call through a switchover and answers what it did): nothing
		// was done.
		return newErr(2003, "HY000", "holdfast.%s: the primary is read-only (a switchover of the primary); nothing was done, retry", name)
	}
	if se != nil {
		return se
	}
	var bf borrowFailure
	if errors.As(err, &bf) {
		if cause := bf.BorrowErr(); cause != nil {
			e := leaseErr(cause)
			e.Msg = "holdfast." + name + ": nothing was done: " + strings.TrimPrefix(e.Msg, "holdfast: ")
			return e
		}
	}
	var me interface {
		MySQLError() (uint16, string, string)
	}
	if errors.As(err, &me) {
		code, state, msg := me.MySQLError()
		return newErr(code, state, "%s", msg)
	}
	return newErr(codeUnknownError, "HY000", "holdfast.%s failed: %v", name, err)
}

// columnType picks a column's wire type from its first non-NULL value.
func columnType(rows [][]any, i int) byte {
	for _, r := range rows {
		if i >= len(r) || r[i] == nil {
			continue
		}
		switch r[i].(type) {
		case int64, uint64, int:
			return mysql.MYSQL_TYPE_LONGLONG
		case float64:
			return mysql.MYSQL_TYPE_DOUBLE
		case time.Time:
			return mysql.MYSQL_TYPE_DATETIME
		}
		return mysql.MYSQL_TYPE_VAR_STRING
	}
	return mysql.MYSQL_TYPE_VAR_STRING
}

// prepareProcedure answers COM_STMT_PREPARE of a CALL holdfast.* locally;
// it reports whether the statement was one.
func (s *session) prepareProcedure(p []byte, info *sqlscan.Info) bool {
	if s.srv.procs == nil || !plan.HoldfastCall(p[1:], info) {
		return false
	}
	call, err := s.scanMode().ParseCall(p[1:])
	if err != nil {
		s.writeErr(newErr(codeParseError, "42000", "holdfast: %v", err))
		return true
	}
	params := 0
	for _, a := range call.Args {
		if a.Kind == sqlscan.ArgParam {
			params++
		}
	}
	s.ps.nextStmt++
	cs := &clientStmt{id: s.ps.nextStmt, query: string(p[1:]), params: params, call: &call, info: *info, mode: s.scanMode(), prot: s.srv.protected.Load()}
	cs.text = []byte(cs.query)
	cs.sql = append([]byte(nil), p[1:min(len(p), 1+maxStmtCopy)]...)
	tag, tagged, serr := s.statementTag(p[1:], info)
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	if tagged {
		cs.tag = tag // each execute is a statement of the tag its text carries
	}
	cs.tagName = string(s.tagRaw)
	s.ps.stmts[cs.id] = cs
	s.ps.lastStmt = cs.id
	// Columns: known only when it runs.
	s.out = mysqlwire.AppendPrepareOK(s.out[:0], mysqlwire.PrepareOK{ID: cs.id, Params: uint16(params)})
	s.writePacket(s.out)
	if params > 0 {
		for i := 0; i < params; i++ {
			s.out = mysqlwire.AppendColumnDef(s.out[:0], mysqlwire.Column{Name: "?", Type: mysql.MYSQL_TYPE_VAR_STRING}, s.variant&varTypeInfo != 0)
			s.writePacket(s.out)
		}
		s.out = mysqlwire.AppendEOF(s.out[:0], 0, s.state.Status&^mysqlwire.StatusSessionChanged)
		s.writePacket(s.out)
	}
	return true
}

// executeProcedure runs a prepared CALL holdfast.* with its bound
// parameters, under tag.
func (s *session) executeProcedure(cs *clientStmt, nullMap, values []byte, tag *attribution.Tag) {
	params, err := mysqlwire.DecodeParams(cs.params, nullMap, cs.types, values, cs.longData)
	if err != nil {
		s.writeErr(errMalformedPacket(err.Error()))
		return
	}
	args := make([]any, len(cs.call.Args))
	for i, a := range cs.call.Args {
		if a.Kind == sqlscan.ArgParam {
			args[i] = params[a.Index]
			continue
		}
		v, err := textArg(a)
		if err != nil {
			s.writeErr(newErr(codeWrongArguments, "HY000", "holdfast.%s: argument %d: %v", cs.call.Name, i+1, err))
			return
		}
		args[i] = v
	}
	s.runProcedure(cs.call.Name, args, true, tag)
}

// SetProcedures installs what answers CALL holdfast.* (call before Serve).
func (s *Server) SetProcedures(p Procedures) { s.procs = p }
