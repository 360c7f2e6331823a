package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// A hold is one borrow of a backend connection by a session, from acquire
// to release. Its time splits into statements executing, idle inside a
// transaction, and the rest (idle while pinned outside a transaction,
// holdfast's own restore round trips). Hold and wait are attributed to the
// transaction's tag (its first tagged statement) or, failing that, to the
// tag of the statement that started the borrow.

// hold is a session's accounting for its current borrow.
type hold struct {
	start     time.Time
	tag       *attribution.Tag // tag of the statement that started the borrow
	gated     string           // tag counted in a connection limit ("" if none)
	exec      time.Duration
	idleInTxn time.Duration
	hadTxn    bool
	lastEnd   time.Time // end of the last statement
	endInTxn  bool      // a transaction was open at lastEnd
	longest   time.Duration
	longStmt  []byte // the statement after which the longest idle gap began
}

// maxStmtCopy bounds the statement text kept for holders and logs.
const maxStmtCopy = 512

// statementTag resolves the tag a statement runs under: its own, else its
// transaction's, else the connection's. tagged reports an explicit tag.
func (s *session) statementTag(sql []byte) (tag *attribution.Tag, tagged bool) {
	if !s.srv.attr {
		return s.connTag, false
	}
	b, ok := attribution.AppendTag(s.tagBuf[:0], sql)
	s.tagBuf = b[:0]
	if ok {
		return s.srv.rec.Tag(b), true
	}
	return s.defaultTag(), false
}

// defaultTag is the tag of a statement without its own.
func (s *session) defaultTag() *attribution.Tag {
	if s.txnTag != nil {
		return s.txnTag
	}
	return s.connTag
}

// noteTag records an explicit tag as the transaction's when it is the first
// inside one.
func (s *session) noteTag(tag *attribution.Tag, tagged bool) {
	if tagged && s.txnTag == nil && (s.status&statusInTrans != 0 || s.pendingBegin != nil) {
		s.txnTag = tag
	}
}

// borrow returns the held backend connection, or admits the borrow through
// the tag's on-call controls, acquires a connection, and brings its session
// state in line with ours (starting a deferred BEGIN; with ahead, in the
// same write as the statement the caller sends next, see
// startDeferredBegin).
func (s *session) borrow(tag *attribution.Tag, ahead bool) (*backendConn, *sqlError) {
	if s.bc != nil {
		s.waitKills()
		return s.bc, nil
	}
	counted, err := false, error(nil)
	if s.srv.gates.active.Load() > 0 {
		ctx, cancel := context.WithTimeout(s.srv.ctx, s.srv.pool.Limits().AcquireTimeout)
		counted, err = s.srv.gates.enter(ctx, tag.Name())
		cancel()
	}
	if err != nil {
		if errors.Is(err, errTagDrained) {
			tag.Rejected("drained")
			return nil, newErr(codeTagDrained, "HY000", "holdfast: %v", err)
		}
		tag.Rejected("limit")
		return nil, newErr(codeTagLimit, "HY000", "holdfast: %v", err)
	}
	var start time.Time
	if s.srv.attr {
		start = time.Now()
	}
	bc, err := s.srv.pool.Acquire(s.srv.ctx, s.variant)
	if err != nil {
		if counted {
			s.srv.gates.exit(tag.Name())
		}
		return nil, poolErr(err)
	}
	var now time.Time
	if s.srv.attr {
		now = time.Now()
		tag.Borrowed(now.Sub(start))
	}
	s.bc = bc
	s.h = hold{start: now, tag: tag}
	if counted {
		s.h.gated = tag.Name()
	}
	s.holding.Store(true)
	s.mu.Lock()
	s.holdSince, s.holdTag = now, tag.Name()
	s.mu.Unlock()
	if bc.vars == nil {
		bc.vars = s.srv.baseVars()
	}
	if s.vars == nil {
		s.vars = s.initialVars()
	}
	err = s.sync(bc)
	began := false
	if err == nil && s.pendingBegin != nil {
		began = true
		err = s.startDeferredBegin(bc, ahead)
	}
	if s.srv.attr {
		s.h.exec += time.Since(now)
	}
	if err != nil {
		s.release(!isIOError(err))
		if began {
			return nil, s.beginLost(err)
		}
		var se *sqlError
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, newErr(codeServerLost, "HY000", "holdfast: lost the backend connection while restoring session state: %v", err)
	}
	return bc, nil
}

// release gives the held backend connection back to the pool and records
// the hold.
func (s *session) release(reusable bool) {
	if s.bc == nil {
		return
	}
	if s.srv.attr {
		held := time.Since(s.h.start)
		tag := s.h.tag
		if s.txnTag != nil {
			tag = s.txnTag
		}
		tag.Returned(held, s.h.exec, s.h.idleInTxn)
		if s.h.hadTxn && held >= s.srv.slowTxn() && s.h.exec*10 < held {
			tag.SlowTransaction()
			s.srv.logSlowTransaction(tag.Name(), s.id, held, s.h.exec, s.h.idleInTxn, s.h.longStmt)
		}
	}
	if s.h.gated != "" {
		s.srv.gates.exit(s.h.gated)
	}
	s.srv.pool.Release(s.bc, reusable)
	s.bc = nil
	s.beginInFlight = false // a BEGIN sent ahead belongs to that connection
	s.h = hold{longStmt: s.h.longStmt[:0]}
	s.holding.Store(false)
	s.mu.Lock()
	s.holdSince, s.holdTag, s.inTxn = time.Time{}, "", false
	s.mu.Unlock()
}

// stmtStart begins timing a statement on the held connection: the gap since
// the previous one counts as idle in a transaction when one was open.
func (s *session) stmtStart(tag *attribution.Tag, sql []byte) time.Time {
	if !s.srv.attr {
		return time.Time{}
	}
	now := time.Now()
	if !s.h.lastEnd.IsZero() && s.h.endInTxn {
		gap := now.Sub(s.h.lastEnd)
		s.h.idleInTxn += gap
		if gap > s.h.longest {
			s.h.longest = gap
			s.h.longStmt = append(s.h.longStmt[:0], s.lastSQL...)
		}
	}
	s.lastSQL = append(s.lastSQL[:0], sql[:min(len(sql), maxStmtCopy)]...)
	s.mu.Lock()
	s.holdTag = s.defaultTagFor(tag).Name()
	s.stmtText = append(s.stmtText[:0], s.lastSQL...)
	s.mu.Unlock()
	return now
}

func (s *session) defaultTagFor(tag *attribution.Tag) *attribution.Tag {
	if s.txnTag != nil {
		return s.txnTag
	}
	return tag
}

// stmtEnd records a statement's execution.
func (s *session) stmtEnd(tag *attribution.Tag, start time.Time, failed bool) {
	if !s.srv.attr {
		return
	}
	now := time.Now()
	d := now.Sub(start)
	tag.Statement(d, failed)
	s.h.exec += d
	s.h.lastEnd = now
}

// afterTxnState updates transaction accounting once a statement's final
// status is known; it returns the connection unless the session keeps it.
func (s *session) afterTxnState(prev uint16, tag *attribution.Tag) {
	inTxn := s.status&statusInTrans != 0
	s.h.endInTxn = inTxn
	if inTxn {
		s.h.hadTxn = true
	}
	if prev&statusInTrans != 0 && !inTxn && s.srv.attr {
		s.defaultTagFor(tag).Transaction()
	}
	s.mu.Lock()
	s.inTxn = inTxn
	s.mu.Unlock()
	s.maybeRelease()
	if !inTxn && s.pendingBegin == nil {
		s.txnTag = nil
	}
}

// Deferred BEGIN: a plain BEGIN outside a transaction (typed, or a prepared
// statement) is answered at once and sent to the backend when the
// transaction's first real statement borrows a connection: in the same
// write when that statement is a SELECT, else just before it. InnoDB takes
// its snapshot at the first read anyway, so nothing observable changes,
// while the transaction's first statement (usually tagged, unlike the BEGIN
// a driver sends) decides its tag before a connection is borrowed, and hold
// time starts when work does.

func isPlainBegin(digest []byte) bool {
	switch string(trimSemicolon(digest)) {
	case "BEGIN", "BEGIN WORK", "START TRANSACTION":
		return true
	}
	return false
}

func isPlainEnd(digest []byte) bool {
	switch string(trimSemicolon(digest)) {
	case "COMMIT", "COMMIT WORK", "ROLLBACK", "ROLLBACK WORK":
		return true
	}
	return false
}

func trimSemicolon(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == ';' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}

// deferTransaction answers a BEGIN / COMMIT / ROLLBACK (typed, or a
// prepared statement's text) locally when no backend work is involved; it
// reports whether it did. A deferred BEGIN is kept as the COM_QUERY to send.
func (s *session) deferTransaction(sql []byte, info *sqlscan.Info, tag *attribution.Tag, tagged bool) bool {
	if info.Statements != 1 || s.bc != nil {
		return false
	}
	switch {
	case info.Kind == sqlscan.KindBegin && s.status&statusInTrans == 0:
		s.digest = sqlscan.AppendDigest(s.digest[:0], sql, 64)
		if !isPlainBegin(s.digest) {
			return false
		}
		s.pendingBegin = append(append(s.pendingBegin[:0], comQuery), sql...)
		s.status |= statusInTrans
		if tagged {
			s.txnTag = tag
		}
		s.writeOK(0, 0)
		return true
	case (info.Kind == sqlscan.KindCommit || info.Kind == sqlscan.KindRollback) && s.pendingBegin != nil:
		s.digest = sqlscan.AppendDigest(s.digest[:0], sql, 64)
		if !isPlainEnd(s.digest) {
			return false
		}
		s.pendingBegin = nil
		s.status &^= statusInTrans
		s.txnTag = nil
		s.writeOK(0, 0)
		return true
	}
	return false
}

// startDeferredBegin sends the deferred BEGIN on a freshly borrowed
// connection. With ahead, it only buffers it: the statement written next
// goes out in the same write (one round trip for both), and readBeginAhead
// reads BEGIN's OK before that statement's response. Only a single SELECT
// may ride along so (see plainSelect): should BEGIN fail (a plain
// BEGIN practically never does), the SELECT has run on its own, which for
// a read changes nothing (a locking read's locks end with it), and the
// transaction is lost (see beginLost).
func (s *session) startDeferredBegin(bc *backendConn, ahead bool) error {
	begin := s.pendingBegin
	s.pendingBegin = nil
	if ahead {
		bc.w.seq = 0
		if err := bc.w.writePacket(begin); err != nil {
			return err
		}
		s.beginInFlight = true
		s.srv.beginsAhead.Add(1)
		return nil
	}
	if err := bc.writeCommand(begin); err != nil {
		return err
	}
	ok, err := bc.readOK()
	if err != nil {
		return err
	}
	s.status = ok.status & sessionStatus
	return nil
}

// beginLost ends a transaction whose deferred BEGIN the backend did not
// run. The client was told BEGIN succeeded, so its next statements would
// each commit on their own, outside the transaction it believes it has: it
// gets an error instead and the connection closes after it, as when a
// backend connection is lost inside a transaction.
func (s *session) beginLost(err error) *sqlError {
	s.status &^= statusInTrans
	s.pendingBegin, s.txnTag, s.closeAfter = nil, nil, true
	var se *sqlError
	if errors.As(err, &se) {
		return newErr(se.Code, se.State, "holdfast: the transaction could not start on the backend (BEGIN failed: %s); nothing in it took effect. The connection is closed; reconnect and retry.", se.Msg)
	}
	return newErr(codeServerLost, "HY000", "holdfast: lost the backend connection while starting the transaction; nothing in it took effect. The connection is closed; reconnect and retry.")
}

// plainSelect reports whether info describes a single SELECT that touches
// no variables and nothing else of the session: one that may be pipelined,
// and that a deferred BEGIN may ride along with.
func plainSelect(info *sqlscan.Info) bool {
	return info.Kind == sqlscan.KindSelect && info.Statements == 1 && info.Features == 0 && info.LastInsertIDColumn == ""
}

// readBeginAhead reads the OK of a BEGIN sent ahead of the statement just
// written; the statement's response follows it. A failed BEGIN comes back
// as *beginError.
func (s *session) readBeginAhead(bc *backendConn) error {
	s.beginInFlight = false
	// BEGIN's OK is packet 1 of its exchange; the statement's response
	// numbers on from the statement's last packet (more than one when it
	// is 16 MiB or longer).
	seq := bc.r.seq
	bc.r.seq = 1
	ok, err := bc.readOK()
	if err != nil {
		var se *sqlError
		if errors.As(err, &se) {
			return &beginError{se}
		}
		return err
	}
	bc.r.seq = seq
	s.status = ok.status & sessionStatus
	return nil
}

// settleBegin reads the OK of a BEGIN buffered ahead before some other
// exchange (preparing a statement) uses the connection.
func (s *session) settleBegin(bc *backendConn) error {
	if !s.beginInFlight {
		return nil
	}
	if err := bc.w.flush(); err != nil {
		return err
	}
	return s.readBeginAhead(bc)
}

// beginError is a deferred BEGIN that the backend refused.
type beginError struct{ *sqlError }

func (e *beginError) Unwrap() error { return e.sqlError }

// beginFailed handles err when it is a refused BEGIN sent ahead of a
// statement: the statement's response is still unread, so the backend
// connection is closed, and the transaction is lost (see beginLost; the
// SELECT, having run outside it, changed nothing).
func (s *session) beginFailed(err error) bool {
	var be *beginError
	if !errors.As(err, &be) {
		return false
	}
	s.release(false)
	s.writeErr(s.beginLost(be.sqlError))
	return true
}
