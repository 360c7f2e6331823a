package proxy

import (
	"context"
	"errors"
	"strings"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/sessionstate"
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
	if s.state.Status&mysqlwire.StatusNoBackslash != 0 {
		m |= sqlscan.NoBackslashEscapes
	}
	if s.state.Vars != nil {
		if mode := s.state.Vars.Get("sql_mode"); strings.Contains(mode, "ANSI_QUOTES") {
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
// statement again (it only reads; a write is sent again only when it is
// certain it did not run: see failover.go).
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

// afterStatement records what the statement did to the session (its
// state's After, over the connection bc it ran on) and returns the
// backend connection unless the session must keep it.
func (s *session) afterStatement(bc *backendConn, rr *relayResult, info *sqlscan.Info, tag *attribution.Tag) {
	prev := s.state.Status
	a := sessionstate.Answer{Info: info, Status: rr.status, InsertID: rr.insertID, Failed: rr.failed, Cursor: rr.cursor, Report: &rr.sc}
	s.conn = stateConn{bc: bc, timeout: s.srv.exchangeTimeout()}
	eff, err := s.state.After(&s.conn, s.srv.primary.base.Load(), &a)
	s.conn = stateConn{}
	if eff.LastGTID != "" && s.srv.routing != nil {
		s.noteWrite(eff.LastGTID)
	}
	if eff.Warning != nil {
		s.srv.log.Warn("session state after a statement", "client", s.id, "err", eff.Warning)
	}
	if err != nil {
		s.srv.log.Warn("backend connection given up after a statement", "client", s.id, "err", err)
		s.release(false)
		return
	}
	if eff.Vars {
		bc.vars = s.state.Vars
	}
	if eff.Schema {
		bc.db, bc.dbKnown = s.state.DB, true
	}
	if r := eff.Pinned; r != "" {
		s.pinned.Store(true)
		s.srv.countPin(r)
		tag.Pinned(r)
	}
	s.afterTxnState(prev, tag)
}

func (s *session) maybeRelease() {
	if s.lease.bc == nil || s.state.KeepsConn() {
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
	if !plan.StatementScoped(c.base().info) || s.state.Kept == nil {
		return false
	}
	f := &s.state.Kept.Track
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
	s.state.Txn.HoldNext = false
	if rr.started || held || s.state.PinReason != "" {
		what := "the transaction was rolled back"
		if s.state.PinReason != "" {
			what = "session state (" + s.state.PinReason + ") was lost"
		}
		s.writeErr(newErr(codeServerLost, "HY000", "holdfast: lost the backend connection during the statement; %s. Reconnect and retry.", what))
		return false
	}
	s.state.Status &^= mysqlwire.StatusInTrans
	s.writeErr(newErr(codeServerLost, "HY000", "holdfast: lost the backend connection during the statement; it may or may not have taken effect (holdfast does not run it again: it retries only a statement it knows did not run)"))
	return true
}
