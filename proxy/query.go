package proxy

import (
	"context"
	"errors"
	"strings"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// A COM_QUERY (its text lexed once, its tag resolved) on its way to the
// one execute path (execute.go), and what a statement's answer did to the
// session (afterStatement): pins, transaction state, session variables.

// initDBInfo classifies COM_INIT_DB like a USE statement.
var initDBInfo = sqlscan.Info{Kind: sqlscan.KindUse, Statements: 1}

func (s *session) comQuery(p []byte) bool {
	sql := p[1:]
	mode := s.scanMode()
	prot := s.srv.protected.Load()
	c := &s.query
	c.scan = mode.ScanProtected(sql, prot)
	tag, tagged, serr := s.statementTag(sql, &c.scan)
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	s.noteTag(tag, tagged)
	s.shape, s.mode = c.scan.Shape, mode
	c.set(plan.Query, p, &c.scan, tag, tagged)
	pl := s.decide(c, prot, false)
	return s.execute(c, &pl)
}

// comPacket runs COM_INIT_DB, COM_FIELD_LIST or COM_STATISTICS: a
// command without a statement text of its own, under the session's tag.
func (s *session) comPacket(p []byte) bool {
	c := &s.query
	kind, info := plan.FieldList, (*sqlscan.Info)(nil)
	if p[0] == comInitDB {
		kind, info = plan.InitDB, &initDBInfo
	}
	s.tagRaw = nil
	c.set(kind, p, info, s.defaultTag(), false)
	pl := s.decide(c, nil, false)
	return s.execute(c, &pl)
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
	if plan.StatementScoped(info) {
		// SET STATEMENT ... FOR: its variables are back to their values
		// now, whatever the tracker says.
		sc.Vars, sc.Pin, sc.PinVar = sc.Vars[:0], "", ""
	}
	if sc.EOFChanged && !plan.MayChangeState(info) {
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
		if reason := plan.PinReason(info, rr.cursor, &rr.sc); reason != "" {
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

// hidesStatementChange reports whether a SET STATEMENT text's changes,
// which end with it, are all of variables the client's session tracking
// does not follow. MariaDB then marks no state change on its result set
// for this client, while holdfast's backend connection, which tracks every
// variable, does.
func (s *session) hidesStatementChange(c command) bool {
	if !plan.StatementScoped(c.base().info) || s.state.kept == nil {
		return false
	}
	f := &s.state.kept.Track
	if f.AllVars || f.StateChange {
		return false
	}
	for _, n := range s.scanMode().StatementVariables(c.statement()) {
		if _, ok := f.Vars[n]; ok {
			return false
		}
	}
	return true
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
