package proxy

import (
	"context"
	"errors"
	"sync"
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
	now := time.Now() // the hold's start: the janitor's bounds need it, attribution or not
	if s.srv.attr {
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
	// A deferred BEGIN starts below: the transaction runs from its first
	// statement on, and the bounds on transactions apply to that statement
	// too (a failed start releases, which clears it).
	s.inTxn = s.pendingBegin != nil
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

// keepsBackend reports whether the session keeps its backend connection
// between statements: inside a transaction, pinned by session state, or
// through the next statement after SET TRANSACTION.
func (s *session) keepsBackend() bool {
	return s.status&statusInTrans != 0 || s.pinReason != "" || s.holdNext
}

// release gives the held backend connection back to the pool and records
// the hold.
func (s *session) release(reusable bool) {
	if s.bc == nil {
		return
	}
	if s.srv.attr {
		now := time.Now()
		held := now.Sub(s.h.start)
		if s.h.endInTxn && !s.h.lastEnd.IsZero() {
			// The hold ends inside a transaction (the client left, or was
			// killed): the time since its last statement was idle too.
			gap := now.Sub(s.h.lastEnd)
			s.h.idleInTxn += gap
			if gap > s.h.longest {
				s.h.longest = gap
				s.h.longStmt = append(s.h.longStmt[:0], s.lastSQL...)
			}
		}
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

// connTag is a new session's fallback tag: the conn_tag connection
// attribute, else the user's default tag, else untagged.
func (s *Server) connTag(u User, attrs map[string]string) *attribution.Tag {
	var buf [attribution.MaxTagLen]byte
	if v := attrs["conn_tag"]; v != "" {
		if b, ok := attribution.AppendSanitized(buf[:0], []byte(v)); ok {
			return s.rec.Tag(b)
		}
	}
	if u.DefaultTag != "" {
		if b, ok := attribution.AppendSanitized(buf[:0], []byte(u.DefaultTag)); ok {
			return s.rec.Tag(b)
		}
	}
	return s.rec.TagString(attribution.Untagged)
}

func (s *Server) slowTxn() time.Duration { return s.config().Attribution.SlowTransaction }

// slowLog rate-limits the slow-transaction log line: one per tag per
// slowLogEvery.
type slowLog struct {
	mu   sync.Mutex // guards last
	last map[string]time.Time
}

const slowLogEvery = 10 * time.Second

func (s *Server) logSlowTransaction(tag string, client uint32, held, exec, idle time.Duration, stmt []byte) {
	now := time.Now()
	s.slow.mu.Lock()
	if s.slow.last == nil {
		s.slow.last = map[string]time.Time{}
	}
	if now.Sub(s.slow.last[tag]) < slowLogEvery {
		s.slow.mu.Unlock()
		return
	}
	if len(s.slow.last) > 10000 {
		clear(s.slow.last)
	}
	s.slow.last[tag] = now
	s.slow.mu.Unlock()
	s.log.Warn("transaction held its connection far longer than it executed",
		"tag", tag, "client", client, "held", held.Round(time.Millisecond), "executing", exec.Round(time.Millisecond),
		"idle_in_transaction", idle.Round(time.Millisecond),
		"idle_after", string(sqlscan.AppendDigest(nil, stmt, 200)))
}
