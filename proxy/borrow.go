package proxy

import (
	"errors"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// A session's borrow is a lease (lease.go). Its hold and wait are
// attributed to the transaction's tag (its first tagged statement) or,
// failing that, to the tag of the statement that started the borrow.

// maxStmtCopy bounds the statement text kept for holders and logs.
const maxStmtCopy = 512

// setTxnTag makes tag the open transaction's (nil: none), with the name
// the statement carried when accounting folded it (see policy.Key).
func (s *session) setTxnTag(tag *attribution.Tag) {
	s.state.Txn.Tag, s.state.Txn.Raw = tag, ""
	if tag != nil && tag.Name() == attribution.Other && len(s.tagRaw) > 0 && string(s.tagRaw) != attribution.Other {
		s.state.Txn.Raw = string(s.tagRaw)
	}
}

// defaultTag is the tag of a statement without its own.
func (s *session) defaultTag() *attribution.Tag {
	if s.state.Txn.Tag != nil {
		return s.state.Txn.Tag
	}
	return s.connTag
}

// noteTag records an explicit tag as the transaction's when it is the first
// inside one.
func (s *session) noteTag(tag *attribution.Tag, tagged bool) {
	if tagged && s.state.Txn.Tag == nil && (s.state.Status&mysqlwire.StatusInTrans != 0 || s.state.Txn.PendingBegin != nil) {
		s.setTxnTag(tag)
	}
}

// borrow returns the held backend connection, or takes a lease for tag
// (admitted through the on-call controls of key, in class cl, acquired,
// brought to the session's state) and starts a deferred BEGIN on it (with
// ahead, in the same write as the statement the caller sends next, see
// startDeferredBegin).
//
// A new borrow waits first, holding no connection, while there is no
// usable primary or a pause is in force for key (failover.go); a
// connection the session keeps on a former primary is closed, and the
// answer is 9010 (errStateLost: the caller closes the session), unless
// it held only a transaction that had done nothing yet, which starts
// again on a new borrow (restartFresh).
func (s *session) borrow(tag *attribution.Tag, key string, cl class, ahead bool) (*backendConn, *mysqlwire.SQLError) {
	if bc := s.lease.bc; bc != nil {
		if !s.onFormerPrimary(bc) {
			s.waitKills()
			return bc, nil
		}
		if !s.restartFresh() {
			// No statement runs yet: a kill of an earlier one is not
			// this one's (replayLost reads the mark).
			s.interrupted.Store(false)
			if !s.replayLater() {
				return nil, s.lostToSwitch()
			}
		}
	}
	var h hold
	defer s.endHold(&h)
	if s.srv.mustHold(key, s.route == nil) {
		if serr := s.wait(&h, key, s.route == nil); serr != nil {
			return nil, s.borrowRefused(serr)
		}
	}
	// The session's state is restored once the hold is visible to the
	// janitor and to kills: take without sync, then sync below.
	if r := s.route; r != nil {
		// A read routed to a replica: a replica that cannot lend a
		// connection sends it to the primary instead (replicas.go).
		err := s.srv.take(s.srv.ctx, &s.lease, tag, key, cl, s.variant, leaseState{}, &r.be)
		switch {
		case err == nil:
		case errors.Is(err, errTagDrained), errors.Is(err, errTagLimit), errors.Is(err, errShed):
			return nil, leaseErr(err)
		case errors.Is(err, pool.ErrBackendDown):
			s.srv.replicaDown(r, err)
			r.fellBack.Add(1)
			s.route = nil
		default:
			// Busy (no connection within its budget), or a sync that
			// failed: the primary serves this read; the replica stays in
			// service.
			r.fellBack.Add(1)
			s.route = nil
		}
	}
	if s.lease.bc == nil {
		if !h.on && s.srv.mustHold(key, true) { // a read that fell back to the primary
			if serr := s.wait(&h, key, true); serr != nil {
				return nil, s.borrowRefused(serr)
			}
		}
		if serr, err := s.takePrimary(&h, tag, key, cl); serr != nil {
			return nil, s.borrowRefused(serr)
		} else if err != nil {
			if errors.Is(err, errShed) {
				s.endDeferredBegin()
			}
			if s.txlog.pending {
				closing := s.srv.ctx.Err() != nil
				lost := s.replayLost("no connection to the new primary: "+err.Error(), closing)
				if !closing {
					return nil, lost
				}
			}
			return nil, leaseErr(err)
		}
	}
	bc := s.lease.bc
	now := s.lease.start
	s.holding.Store(true)
	s.mu.Lock()
	s.holdSince, s.holdTag, s.holdKey = now, tag.Name(), key
	s.gatedKey = s.lease.gated
	// A deferred BEGIN starts below: the transaction runs from its first
	// statement on, and the bounds on transactions apply to that statement
	// too (a failed start releases, which clears it).
	s.inTxn = s.state.Txn.PendingBegin != nil || s.txlog.pending
	s.mu.Unlock()
	if s.state.Vars == nil {
		s.state.Vars = s.initialVars()
	}
	err := s.sync(bc)
	began := false
	if err == nil && s.state.Txn.PendingBegin != nil {
		began = true
		err = s.startDeferredBegin(bc, ahead)
	}
	if s.srv.attr {
		s.lease.exec += time.Since(now)
	}
	if err != nil {
		s.release(!isIOError(err))
		if began {
			return nil, s.beginLost(err)
		}
		if s.txlog.pending {
			return nil, s.replayLost("restoring the session's state failed: "+err.Error(), false)
		}
		var se *mysqlwire.SQLError
		if errors.As(err, &se) {
			return nil, se
		}
		return nil, newErr(codeServerLost, "HY000", "holdfast: lost the backend connection while restoring session state: %v", err)
	}
	if s.txlog.pending {
		s.endHold(&h) // the hold ends here: the replay is the statement's work
		if serr := s.replayOn(bc); serr != nil {
			return nil, serr
		}
	}
	return bc, nil
}

// borrowRefused ends a deferred BEGIN that a borrow refused with a
// 9010 left unsent (like shedding's, it answers "transaction rolled
// back", 40001), and returns serr.
func (s *session) borrowRefused(serr *mysqlwire.SQLError) *mysqlwire.SQLError {
	if s.txlog.pending {
		// 9010 (counted already), 1317 (a kill while held), or the
		// server shutting down (its own answer).
		lost := s.replayLost("no usable primary within failover.hold, or failover.max_held statements held already", true)
		if serr.Code != codePrimarySwitching && !s.interrupted.Load() {
			return serr
		}
		return lost
	}
	if serr.Code == codePrimarySwitching {
		s.endDeferredBegin()
	}
	return serr
}

// endDeferredBegin ends a deferred BEGIN that never reached the backend
// (a borrow refused): the transaction ends here.
func (s *session) endDeferredBegin() {
	if s.state.Txn.PendingBegin == nil {
		return
	}
	s.state.Txn.PendingBegin = nil
	s.state.Status &^= mysqlwire.StatusInTrans
	s.setTxnTag(nil)
}

// keepsBackend reports whether the session keeps its backend connection
// between statements: inside a transaction, pinned by session state, or
// through the next statement after SET TRANSACTION.
func (s *session) keepsBackend() bool {
	return s.state.Status&mysqlwire.StatusInTrans != 0 || s.state.PinReason != "" || s.state.Txn.HoldNext
}

// release gives the held backend connection back to the pool and records
// the hold, under the transaction's tag when it had one.
func (s *session) release(reusable bool) {
	if s.lease.bc == nil {
		return
	}
	s.srv.give(&s.lease, reusable, s.state.Txn.Tag, s.id, s.lastSQL, s.lastMode)
	s.state.Txn.BeginInFlight = false // a BEGIN sent ahead belongs to that connection
	s.state.Txn.SentBegin = nil
	if s.txlog.on && !s.txlog.pending { // a transaction's record ends with its lease
		s.txlog.stop()
	}
	s.holding.Store(false)
	s.endHoldMirror(true)
}

// endHoldMirror clears what the janitor, kills and the controls see of
// the session's hold (and inTxn with txn), and gives back the slot of a
// limit that counted the hold in when it came into force (markHolders).
func (s *session) endHoldMirror(txn bool) {
	s.mu.Lock()
	s.holdSince, s.holdTag, s.holdKey, s.gatedKey = time.Time{}, "", "", ""
	if txn {
		s.inTxn = false
	}
	pre, epoch := s.preGated, s.preEpoch
	s.preGated = ""
	s.mu.Unlock()
	if pre != "" {
		s.srv.gates.exitPre(pre, epoch)
	}
}

// controlsByTag reports whether some on-call control (of any kind and
// source) is in force, so that the tag a statement carries matters (see
// policy.Key).
func (s *Server) controlsByTag() bool { return s.ctrl.Load() != nil }

// stmtStart begins timing a statement on the held connection: the gap since
// the previous one counts as idle in a transaction when one was open.
func (s *session) stmtStart(tag *attribution.Tag, sql []byte) time.Time {
	if !s.srv.attr {
		return time.Time{}
	}
	now := time.Now()
	s.lease.stmtStart(now, s.lastSQL, s.lastMode)
	s.lastSQL, s.lastMode = append(s.lastSQL[:0], sql[:min(len(sql), maxStmtCopy)]...), s.mode
	t := s.defaultTagFor(tag)
	key := s.keyOf(t)
	s.mu.Lock()
	s.holdTag, s.holdKey = t.Name(), key
	s.stmtText, s.stmtShape, s.stmtMode = append(s.stmtText[:0], s.lastSQL...), s.shape, s.mode
	s.mu.Unlock()
	return now
}

func (s *session) defaultTagFor(tag *attribution.Tag) *attribution.Tag {
	if s.state.Txn.Tag != nil {
		return s.state.Txn.Tag
	}
	return tag
}

// stmtEnd records a statement's execution.
func (s *session) stmtEnd(tag *attribution.Tag, start time.Time, failed bool) {
	if !s.srv.attr {
		return
	}
	s.srv.statementDone(&s.lease, tag, start, time.Now(), failed)
}

// afterTxnState updates transaction accounting once a statement's final
// status is known; it returns the connection unless the session keeps it.
func (s *session) afterTxnState(prev uint16, tag *attribution.Tag) {
	inTxn := s.state.Status&mysqlwire.StatusInTrans != 0
	s.lease.txnState(inTxn)
	if prev&mysqlwire.StatusInTrans != 0 && !inTxn && s.srv.attr {
		s.defaultTagFor(tag).Transaction()
	}
	s.mu.Lock()
	s.inTxn = inTxn
	s.mu.Unlock()
	s.maybeRelease()
	if !inTxn && s.state.Txn.PendingBegin == nil {
		s.setTxnTag(nil)
	}
}

func (s *Server) slowTxn() time.Duration { return s.config().Attribution.SlowTransaction }

// slowLog rate-limits the slow-transaction log line: one per tag per
// slowLogEvery.
type slowLog struct {
	mu   sync.Mutex // guards last
	last map[string]time.Time
}

const slowLogEvery = 10 * time.Second

func (s *Server) logSlowTransaction(tag string, client uint32, held, exec, idle time.Duration, stmt []byte, mode sqlscan.Mode) {
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
		"idle_after", string(mode.AppendDigest(nil, stmt, 200)))
}
