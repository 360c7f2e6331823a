package proxy

import (
	"context"
	"errors"
	"strings"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// Statement routing: what a COM_QUERY is (a deferred BEGIN, a KILL, a CALL
// holdfast.*, a value holdfast knows, a pipelinable SELECT, or a statement
// for a borrowed backend connection), running it, and what its answer did
// to the session (pins, transaction state, session variables).

// initDBInfo classifies COM_INIT_DB like a USE statement.
var initDBInfo = sqlscan.Info{Kind: sqlscan.KindUse, Statements: 1}

func (s *session) comQuery(p []byte) bool {
	sql := p[1:]
	mode := s.scanMode()
	prot := s.srv.protected.Load()
	info := mode.ScanProtected(sql, prot)
	tag, tagged, serr := s.statementTag(sql, &info)
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	s.noteTag(tag, tagged)
	s.shape, s.mode = info.Shape, mode
	if s.refuseProtected(mode, sql, &info, prot, s.state.db) {
		return true
	}
	// Statement-level controls (controls.go); moves into the policy's
	// Decide (Controls.Refuse) once it decides every statement.
	if s.refuseByControl(&info, tag) {
		return true
	}
	if s.srv.shapeGates.active.Load() != 0 {
		counted, serr := s.admitShape(&info, tag)
		if serr != nil {
			s.writeErr(serr)
			return true
		}
		if counted != "" {
			defer s.srv.shapeGates.exit(counted)
		}
	}
	switch {
	case s.deferTransaction(sql, &info, tag, tagged):
		return true
	case info.Features&sqlscan.FeatKill != 0, info.Features&dynamicSQL != 0 && smuggledKill(mode, sql, 0):
		return s.killText(p, &info, tag)
	case (info.LastInsertIDColumn != "" || info.RowCountColumn != "") && s.answerSessionValue(&info, false):
		return true
	case info.ConnectionIDColumn != "":
		// The id clients KILL by is holdfast's, not a backend thread's.
		s.writeSingleValue(connectionIDCol(info.ConnectionIDColumn), uint64(s.id), false)
		return true
	case info.Kind == sqlscan.KindCall && s.srv.procs != nil && s.maybeProcedure(sql, &info, tag):
		return true
	case info.Features&sqlscan.FeatConnectionID != 0:
		if q, ok := s.scanMode().AppendConnectionID(append(s.rewrite[:0], comQuery), sql, uint64(s.id)); ok {
			s.rewrite = q
			p, sql = q, q[1:]
		}
	}
	if r := s.replicaFor(&info, tag); r != nil {
		s.route = r
		keep := s.run(p, comQuery, &info, tag)
		s.route = nil
		return keep
	}
	if cl, ok := s.pipelinable(&info, len(p), tag); ok && info.Vars == 0 {
		if handled, keep := s.runPipelined(func(*backendConn) []byte { return p }, tag, cl, nil, sql); handled {
			return keep
		}
	}
	return s.run(p, comQuery, &info, tag)
}

// scanMode is how the server lexes this session's statements: its
// sql_mode's ANSI_QUOTES and NO_BACKSLASH_ESCAPES (the latter also shown in
// the status flags).
func (s *session) scanMode() sqlscan.Mode {
	var m sqlscan.Mode
	if s.state.status&mysqlwire.StatusNoBackslash != 0 {
		m |= sqlscan.NoBackslashEscapes
	}
	if s.state.vars != nil {
		if mode := s.state.vars.Get("sql_mode"); strings.Contains(mode, "ANSI_QUOTES") {
			m |= sqlscan.ANSIQuotes
		}
	}
	return m
}

// run sends one command to a backend and relays the response.
func (s *session) run(p []byte, cmd byte, info *sqlscan.Info, tag *attribution.Tag) bool {
	bc, serr := s.borrow(tag, cmd == comQuery && plainSelect(info))
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	held := s.keepsBackend()
	var after string // holdfast's kept values to put back after the statement
	if cmd == comQuery && (plainSelect(info) || info.Kind == sqlscan.KindShow) && info.Vars != 0 {
		var err error
		unbound := bc.bound(s.srv.exchangeTimeout())
		after, err = s.putKept(bc)
		unbound()
		if err != nil {
			return s.relayFailed(err, &relayResult{}, held)
		}
	}
	start := s.stmtStart(tag, p[1:])
	s.setExec(bc, nil)
	s.watch.arm()
	var rr relayResult
	s.reply.hideChange = cmd == comQuery && s.hidesStatementChange(info, p[1:])
	sent, seq := s.cw.n, s.w.Seq
	err := bc.sendCommand(p)
	if err == nil {
		rr, err = s.relay(bc, cmd)
	}
	s.reply.hideChange = false
	if err == nil && after != "" {
		unbound := bc.bound(s.srv.exchangeTimeout())
		_, err = bc.queryLocked(after)
		unbound()
	}
	if err == nil && cmd == comQuery && info.Features&sqlscan.FeatSetSession != 0 && info.Vars != 0 {
		// The session tracker does not report every kept variable (not
		// session_track_system_variables itself): read them back.
		rr.sc.Vars, rr.sc.KeptSet = varstate.DropKept(rr.sc.Vars), true
		unbound := bc.bound(s.srv.exchangeTimeout())
		err = s.syncKept(bc, s.scanMode().SetVariables(p[1:]))
		unbound()
	}
	s.watch.disarm()
	s.setExec(nil, nil)
	s.stmtEnd(tag, start, err != nil || rr.failed)
	if err != nil {
		if s.rerunOnPrimary(err, sent, seq) {
			return s.run(p, cmd, info, tag)
		}
		if s.beginFailed(err) {
			return true
		}
		return s.relayFailed(err, &rr, held)
	}
	s.afterStatement(bc, &rr, info, tag)
	return true
}

// rerunOnPrimary decides, after a statement routed to a replica failed
// with err, whether it runs again on the primary: the replica's
// connection failed (I/O) before any byte of the answer reached the
// client. Then what was buffered of the answer is dropped (the client's
// sequence back to seq), the replica leaves service, its connection is
// closed, and the session routes to the primary; the caller sends the
// statement again (the one statement holdfast sends twice: it only reads).
func (s *session) rerunOnPrimary(err error, sent int64, seq uint8) bool {
	r := s.route
	if r == nil || !isIOError(err) || errors.Is(err, errClientGone) || s.cw.n != sent || s.interrupted.Load() {
		return false
	}
	s.w.Drop()
	s.w.Seq = seq
	s.srv.log.Warn("replica connection failed during a read; running it on the primary", "client", s.id, "replica", r.be.addr, "err", err)
	s.srv.replicaDown(r, err)
	r.fellBack.Add(1)
	s.release(false)
	s.route = nil
	return true
}

func poolErr(err error) *mysqlwire.SQLError {
	switch {
	case errors.Is(err, pool.ErrBackendDown):
		return newErr(codeConnectFailed, "HY000", "holdfast: %v", err)
	case errors.Is(err, pool.ErrTimeout), errors.Is(err, pool.ErrWaiterCap):
		return newErr(codeConCount, "08004", "holdfast: %v", err)
	case errors.Is(err, pool.ErrClosed), errors.Is(err, context.Canceled):
		return newErr(codeShutdown, "08S01", "holdfast: server shutdown in progress")
	}
	return newErr(codeConnectFailed, "HY000", "holdfast: %v", err)
}

// afterStatement records what the statement did to the session and returns
// the backend connection unless the session must keep it.
func (s *session) afterStatement(bc *backendConn, rr *relayResult, info *sqlscan.Info, tag *attribution.Tag) {
	prev := s.state.status
	s.state.status = rr.status & sessionStatus
	if rr.insertID != 0 {
		s.state.lastInsertID = rr.insertID
	}
	sc := &rr.sc
	if sc.LastGTID != "" {
		if s.srv.routing != nil {
			s.noteWrite(sc.LastGTID)
		}
	}
	if statementScoped(info) {
		// SET STATEMENT ... FOR: its variables are back to their values
		// now, whatever the tracker says.
		sc.Vars, sc.Pin, sc.PinVar = sc.Vars[:0], "", ""
	}
	if sc.EOFChanged && !mayChangeState(info) {
		// A result set's EOF said the state changed, but the statement
		// cannot have changed it for good: SET STATEMENT's variables are
		// back, and a prepared statement run in another database than it
		// was prepared in switches the database for its run only. The
		// tracker holds the report the EOF could not carry; take it off
		// the connection now, or the next statement to report a change
		// there (another client's, maybe) would be told of it.
		unbound := bc.bound(s.srv.exchangeTimeout())
		_, err := bc.queryLocked(flushTrackerSQL)
		unbound()
		if err != nil {
			s.srv.log.Warn("could not clear the session tracker after a result set", "client", s.id, "err", err)
			s.release(false)
			return
		}
	}
	if len(sc.Vars) > 0 {
		unbound := bc.bound(s.srv.exchangeTimeout())
		err := readBackVars(bc, sc)
		unbound()
		if err != nil {
			s.srv.log.Warn("could not read session variables back after a change", "client", s.id, "err", err)
			if isIOError(err) {
				s.release(false)
				return
			}
			sc.Pin, sc.PinVar = attribution.PinSessionState, "unreadable"
		}
	}
	if len(sc.Vars) > 0 {
		var err error
		unbound := bc.bound(s.srv.exchangeTimeout())
		n := len(sc.Vars)
		sc.Vars, err = s.keptChanged(bc, sc.Vars)
		sc.KeptSet = sc.KeptSet || len(sc.Vars) < n
		unbound()
		if err != nil {
			s.srv.log.Warn("could not set holdfast's session settings back after a client changed them", "client", s.id, "err", err)
			s.release(false)
			return
		}
	}
	if len(sc.Vars) > 0 {
		s.noteResultsCollation(sc, info)
		s.state.vars = s.state.vars.With(sc.Vars)
		bc.vars = s.state.vars
	}
	if sc.SchemaSet {
		s.state.db, bc.db, bc.dbKnown = sc.Schema, sc.Schema, true
	}
	if s.state.pinReason == "" {
		if reason := pinReason(info, rr); reason != "" {
			s.state.pinReason = reason
			s.pinned.Store(true)
			s.srv.countPin(reason)
			tag.Pinned(reason)
		}
	}
	s.tx.holdNext = info != nil && info.Kind == sqlscan.KindSetTransaction && !rr.failed
	if rr.failed && s.state.status&(mysqlwire.StatusInTrans|mysqlwire.StatusAutocommit) == 0 && s.state.pinReason == "" && !s.tx.holdNext {
		// With autocommit off, a failed statement may still have opened a
		// transaction, and its ERR packet does not say. Ask.
		unbound := bc.bound(s.srv.exchangeTimeout())
		st, err := bc.pingStatus()
		unbound()
		if err != nil {
			s.release(false)
			return
		}
		s.state.status = st & sessionStatus
	}
	s.afterTxnState(prev, tag)
}

func (s *session) maybeRelease() {
	if s.lease.bc == nil || s.keepsBackend() {
		return
	}
	s.release(true)
}

// featurePins are the statement features that pin a session, each with
// the reason it is counted under, in the order pinReason tries them.
var featurePins = [...]struct {
	feat   sqlscan.Feature
	reason string
}{
	{sqlscan.FeatTempTable, attribution.PinTemporaryTable},
	{sqlscan.FeatUserVarAssign, attribution.PinUserVariable},
	{sqlscan.FeatGetLock, attribution.PinGetLock},
	{sqlscan.FeatLockTables, attribution.PinLockTables},
	{sqlscan.FeatSQLPrepare, attribution.PinSQLPrepare},
	{sqlscan.FeatCalcFoundRows, attribution.PinFoundRows},
	{sqlscan.FeatHandler, attribution.PinHandler},
	{sqlscan.FeatXA, attribution.PinXA},
}

// pinReason names why a statement ties the session to its backend
// connection for good, or returns "".
func pinReason(info *sqlscan.Info, rr *relayResult) string {
	if rr.cursor {
		return attribution.PinCursor
	}
	if rr.sc.Pin != "" {
		return rr.sc.Pin
	}
	if info != nil {
		for _, p := range featurePins {
			if info.Features&p.feat != 0 {
				return p.reason
			}
		}
	}
	if rr.sc.Changed {
		// State changed: fine only when the tracker told us everything
		// (system variables, schema) and the statement is a SET or USE,
		// or when the change was SET STATEMENT's own and is over. A
		// change reported by an EOF packet (a stored function called in a
		// SELECT, a procedure's result set) is never explained: its
		// variables reach the next OK on this connection, which is then
		// the session's own.
		explained := info != nil && !rr.sc.EOFChanged && (info.Kind == sqlscan.KindSet || info.Kind == sqlscan.KindUse) &&
			(len(rr.sc.Vars) > 0 || rr.sc.SchemaSet || rr.sc.KeptSet) || statementScoped(info) || rr.sc.EOFChanged && !mayChangeState(info)
		if !explained {
			return attribution.PinSessionState
		}
	}
	return ""
}

// statementScoped reports whether a statement's session changes all end
// with it: SET STATEMENT ... FOR a statement that sets no variable itself
// and calls no stored function or procedure. (A trigger that changes
// session state is not seen.)
func statementScoped(info *sqlscan.Info) bool {
	if info == nil || info.Features&sqlscan.FeatSetStatement == 0 || info.Features&sqlscan.FeatFuncCall != 0 || info.Statements != 1 {
		return false
	}
	switch info.Kind {
	case sqlscan.KindCall, sqlscan.KindExecute, sqlscan.KindSet, sqlscan.KindSetTransaction:
		return false
	}
	return true
}

// hidesStatementChange reports whether a SET STATEMENT text's changes,
// which end with it, are all of variables the client's session tracking
// does not follow. MariaDB then marks no state change on its result set
// for this client, while holdfast's backend connection, which tracks every
// variable, does.
func (s *session) hidesStatementChange(info *sqlscan.Info, text []byte) bool {
	if !statementScoped(info) || s.state.kept == nil {
		return false
	}
	f := &s.state.kept.Track
	if f.AllVars || f.StateChange {
		return false
	}
	for _, n := range s.scanMode().StatementVariables(text) {
		if _, ok := f.Vars[n]; ok {
			return false
		}
	}
	return true
}

// mayChangeState reports whether a statement may change session state
// that a result set's EOF cannot report: it calls a stored function or
// procedure, runs an SQL-level prepared statement, or is of a kind
// holdfast does not classify (compound statements among them).
func mayChangeState(info *sqlscan.Info) bool {
	if info == nil || info.Features&sqlscan.FeatFuncCall != 0 {
		return true
	}
	switch info.Kind {
	case sqlscan.KindCall, sqlscan.KindExecute, sqlscan.KindOther:
		return true
	}
	return false
}

// flushTrackerSQL sets a variable to the value it has on every backend
// connection (holdfast tracks state changes there), so that its OK packet
// carries whatever the session tracker still holds.
const flushTrackerSQL = "SET SESSION session_track_state_change = ON"

// relayFailed handles an I/O error on either side during a statement.
// held says whether the session held the backend before the statement (a
// transaction or pinned state that is now lost).
func (s *session) relayFailed(err error, rr *relayResult, held bool) bool {
	if errors.Is(err, errClientGone) {
		// The response was read to its end: cleanup returns (or resets) the
		// backend connection as the session closes.
		return false
	}
	if errors.Is(err, errLocalInfileAborted) {
		// The backend holds part of a file: closing its connection aborts
		// the statement (see localinfile.go).
		s.srv.log.Info("LOAD DATA LOCAL ended while the client was sending its file; its backend connection is closed", "client", s.id, "err", err)
		if s.expire.Load() != 0 {
			s.expired() // while the hold names the transaction's tag
		}
		s.release(false)
		s.lingerOnClose = true
		return false
	}
	s.srv.log.Warn("backend connection lost during a statement", "client", s.id, "err", err)
	s.release(false)
	s.tx.holdNext = false
	if rr.started || held || s.state.pinReason != "" {
		what := "the transaction was rolled back"
		if s.state.pinReason != "" {
			what = "session state (" + s.state.pinReason + ") was lost"
		}
		s.writeErr(newErr(codeServerLost, "HY000", "holdfast: lost the backend connection during the statement; %s. Reconnect and retry.", what))
		return false
	}
	s.state.status &^= mysqlwire.StatusInTrans
	s.writeErr(newErr(codeServerLost, "HY000", "holdfast: lost the backend connection during the statement; it may or may not have taken effect (holdfast never retries a statement)"))
	return true
}
