package proxy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// Held, not failed. While there is no usable primary (a switchover or a
// failover under way, a split brain: topology.go), a statement that needs
// the primary and a connection the session does not hold yet waits,
// holding no backend connection, until the topology knows a primary, and
// then borrows one there; so does one whose borrow found only a retired
// server behind backend.address (pool.ErrRetired: the name or VIP has not
// moved yet), and one of a tag a pause control is in force for (any
// borrow, replica reads and pipelined ones included). A statement is held
// at most failover.hold in all, and at most failover.max_held at once on
// an instance; past either it is answered 9010, "the primary is
// switching", with nothing run.
//
// A statement answered 1290 ("read-only") by a server that is read-only
// now ran nowhere: one that policy.RetryReadOnly allows, with nothing of
// its answer sent to the client, is sent once more, through the hold, to
// the new primary (afterReadOnly). A transaction or pinned state on a
// former primary is lost: the transaction is rolled back and answered 9010
// at its next statement (or instead of the 1290), the session going on
// outside a transaction; a pinned session is answered 9010 and closed.
//
// The session's goroutine is the only caller of the session's methods
// here. When nothing is switching and no pause is in force, the cost on
// the statement path is two atomic loads (mustHold).

// codePrimarySwitching is error 9010: no usable primary within
// failover.hold (or failover.max_held statements held already), a pause
// that outlasted failover.hold, or a transaction or pinned state lost with
// a former primary. SQLSTATE 40001 (serialization failure: the
// transaction was rolled back), not 08xxx: nothing ran, the statement may
// be retried at once on the same client connection, and drivers and pools
// treat 08xxx as a broken connection to throw away, which it is not
// (but after a pinned session's 9010, which closes it).
const (
	codePrimarySwitching  = 9010
	statePrimarySwitching = "40001"
)

// failover is the server's counts of held statements (Server.fo).
type failover struct {
	heldNow atomic.Int64 // statements held now
	// Since start: statements held (each once, however long), retried
	// after a 1290, answered 9010, and held by a pause.
	held, retried, refused, pauseWaits atomic.Uint64
	// Transactions a switch met that were replayed on the new primary,
	// and whose replay failed (failover.transaction_replay).
	replayed, replayFailed atomic.Uint64
	heldTime               attribution.Histogram // how long each was held
}

// mustHold reports whether a new borrow for key waits first: while there
// is no usable primary (primary: the borrow is for the primary's work), or
// a pause is in force for key. Two atomic loads when neither.
func (s *Server) mustHold(key string, primary bool) bool {
	if primary && s.topo.badSince.Load() != 0 {
		return true
	}
	_, paused := s.ctrl.Paused(key)
	return paused
}

// hold is one statement's hold: zero until it first waits.
type hold struct {
	start  time.Time
	on     bool // counted in heldNow
	paused bool // counted in pauseWaits
}

// wait holds the statement h is of, holding no backend connection, while
// a borrow for key must not start (see mustHold; primary: the borrow is
// for the primary), within failover.hold from the hold's start. A nil
// answer: go on and borrow. h is ended by the caller (endHold) either way.
func (s *session) wait(h *hold, key string, primary bool) *mysqlwire.SQLError {
	srv := s.srv
	cfg := srv.config().Failover
	if !h.on {
		h.start = time.Now()
		if srv.fo.heldNow.Add(1) > int64(cfg.MaxHeld) {
			srv.fo.heldNow.Add(-1)
			srv.fo.refused.Add(1)
			return newErr(codePrimarySwitching, statePrimarySwitching,
				"holdfast: the primary is switching and %d statements are held already (failover.max_held); nothing ran, retry", cfg.MaxHeld)
		}
		h.on = true
		srv.fo.held.Add(1)
	}
	// A kill of the session, or its client hanging up, ends the hold as it
	// ends a CALL holdfast.* (interrupt, kill.go).
	s.interrupted.Store(false)
	killed, unregister := s.killable()
	defer unregister()
	ctx, cancel := context.WithDeadline(killed, h.start.Add(cfg.Hold))
	defer cancel()
	s.watch.arm()
	defer s.watch.disarm()
	waitedPrimary := false
	for {
		changes := srv.ctrl.Changes()
		if c, ok := srv.ctrl.Paused(key); ok {
			if !h.paused {
				h.paused = true
				srv.fo.pauseWaits.Add(1)
			}
			select {
			case <-changes:
				continue
			case <-ctx.Done():
				return s.holdOver(h, cfg.Hold, pausedBy(c, key))
			}
		}
		if primary && !waitedPrimary && srv.topo.badSince.Load() != 0 {
			waitedPrimary = true
			if srv.topo.waitPrimary(ctx) != nil {
				return s.holdOver(h, cfg.Hold, srv.noPrimaryWhy())
			}
			continue
		}
		return nil
	}
}

// noPrimaryWhy says why there is no usable primary now, for a 9010: no
// server reachable (a primary down), or none writable (a switchover under
// way), or a split brain.
func (s *Server) noPrimaryWhy() string {
	v := s.topo.view.Load()
	switch {
	case v == nil:
		return "no usable primary"
	case v.state == topoSplitBrain:
		return "no usable primary (a split brain: more than one server is writable and replicates from no one)"
	}
	var down []string
	for _, o := range v.obs {
		if o.reachable {
			return "no usable primary (no server is writable and replicates from no one)"
		}
		down = append(down, o.addr+": "+o.err)
	}
	return "no usable primary (the backend is unreachable: " + strings.Join(down, "; ") + ")"
}

// pausedBy says who paused key, for the 9010 of a pause that outlasted
// the hold.
func pausedBy(c controls.Control, key string) string {
	by := "tag '" + key + "' is paused by on-call"
	if c.Key != key {
		by += " under " + c.Key
	}
	switch {
	case c.Reason != "":
		by += " (" + c.Reason + ")"
	case c.SetBy != "":
		by += " (set by " + c.SetBy + ")"
	}
	return by
}

// holdOver is the answer of a hold that ran out: 9010 (the server closing:
// its shutdown error).
func (s *session) holdOver(h *hold, bound time.Duration, why string) *mysqlwire.SQLError {
	if s.srv.ctx.Err() != nil {
		return poolErr(pool.ErrClosed)
	}
	if s.interrupted.Load() {
		return newErr(codeQueryInterrupted, "70100", "Query execution was interrupted (holdfast: while it was held, %s; nothing ran)", why)
	}
	s.srv.fo.refused.Add(1)
	return newErr(codePrimarySwitching, statePrimarySwitching,
		"holdfast: the primary is switching: %s for %v (failover.hold); nothing ran, retry", why, bound.Round(time.Millisecond))
}

// endHold ends h's hold, if it waited.
func (s *session) endHold(h *hold) {
	if !h.on {
		return
	}
	h.on = false
	s.srv.fo.heldNow.Add(-1)
	s.srv.fo.heldTime.Observe(time.Since(h.start))
}

// takePrimary takes a lease of the primary for the session (see take),
// holding the statement while the address leads only to a retired server
// (the name or VIP has not moved yet), or when its wait for a connection
// timed out, or its dials kept failing, across a switchover (it queued
// before the flip, and the connections it waited for were the former
// primary's; the VIP moved under its dial), within
// failover.hold of h's start. A refusal by the hold is serr (9010); err
// is take's.
func (s *session) takePrimary(h *hold, tag *attribution.Tag, key string, cl class) (serr *mysqlwire.SQLError, err error) {
	for {
		began, gen := time.Now(), s.srv.topo.gen.Load()
		err := s.srv.take(s.srv.ctx, &s.lease, tag, key, cl, s.variant, leaseState{}, &s.srv.primary)
		// A wait that timed out, or dials that kept failing, across a
		// change of the topology (or while there is no primary): the
		// switch, not the pool, kept the borrow from a connection.
		failed := errors.Is(err, pool.ErrTimeout) || errors.Is(err, pool.ErrBackendDown)
		switched := failed && (s.srv.topo.gen.Load() != gen || s.srv.topo.badSince.Load() != 0)
		if err == nil || !errors.Is(err, pool.ErrRetired) && !switched {
			return nil, err
		}
		if !h.on {
			if serr := s.wait(h, key, true); serr != nil {
				return serr, nil
			}
			h.start = began // the pool's own wait counts in the hold
		}
		cfg := s.srv.config().Failover
		left := time.Until(h.start.Add(cfg.Hold))
		if left <= 0 {
			if switched {
				return s.holdOver(h, cfg.Hold, "no connection to the new primary"), nil
			}
			return s.holdOver(h, cfg.Hold, "backend.address leads only to a former primary"), nil
		}
		// The pool dialed again with a back-off until its acquire
		// timeout: wait a little and try again while the hold lasts.
		t := time.NewTimer(min(left, 50*time.Millisecond))
		select {
		case <-t.C:
		case <-s.srv.ctx.Done():
			t.Stop()
			return nil, pool.ErrClosed
		}
	}
}

// restartFresh ends the session's lease on a former primary when all it
// held was a transaction that had done nothing but begin (its BEGIN went
// out with a prepare): the connection is closed, which rolls the BEGIN
// back there, and the BEGIN is pending again, to go out on the session's
// next borrow (on the new primary). It reports false, changing nothing,
// for anything else the session keeps on the connection.
func (s *session) restartFresh() bool {
	begin := s.state.Txn.SentBegin
	if begin == nil || s.state.PinReason != "" || s.state.Txn.HoldNext {
		return false
	}
	server := s.lease.bc.server
	s.release(false)
	s.state.Txn.PendingBegin = begin
	s.srv.log.Info("a transaction that had only begun on a former primary begins again on the new one", "client", s.id, "server", server)
	return true
}

// onFormerPrimary reports whether bc, a connection of the session's, is
// to a server the primary's pool retired (a former primary).
func (s *session) onFormerPrimary(bc *backendConn) bool {
	return bc.be == &s.srv.primary && s.srv.pool.Retired(bc)
}

// errStateLost is the 9010 of a pinned session whose state was on a
// former primary; the session is closed after it (run, prepare).
var errStateLost = newErr(codePrimarySwitching, statePrimarySwitching,
	"holdfast: the primary switched: this session's state (temporary tables, locks, prepared transactions, or another reason it kept its backend connection) was on the former primary and is lost; the connection is closed, reconnect")

// lostToSwitch ends what the session kept on a former primary: its
// connection is closed (which rolls an open transaction back), and the
// answer is 9010: errStateLost for a pinned session (whose caller closes
// it), else a rolled-back transaction, the session outside one now.
func (s *session) lostToSwitch() *mysqlwire.SQLError {
	pinned := s.state.PinReason != ""
	inTxn := s.state.InTxn()
	s.srv.log.Warn("the primary switched while a session kept a connection to the former one: it is closed", "client", s.id,
		"transaction", inTxn, "pinned", s.state.PinReason)
	s.release(false)
	s.txlog.stop()
	s.srv.fo.refused.Add(1)
	if pinned {
		return errStateLost
	}
	s.state.Status &^= mysqlwire.StatusInTrans
	s.state.Txn.PendingBegin = nil
	s.state.Txn.HoldNext = false
	s.setTxnTag(nil)
	return newErr(codePrimarySwitching, statePrimarySwitching,
		"holdfast: the primary switched during this transaction: it was rolled back on the former primary, and the session is outside a transaction now; retry the transaction")
}

// confirmWait bounds how long confirmReadOnly waits for a topology check
// that began after the 1290.
const confirmWait = time.Second

// confirmReadOnly reports whether the server of bc, which answered the
// session's statement 1290, is read-only now (1290 also comes of other
// options, such as secure_file_priv). It asks the topology monitor for a
// check (the 1290 asked already; one that began before the answer may be
// under way) and reads that check's view of the server, so that nothing
// runs on the session's connection (whose diagnostics, SHOW WARNINGS,
// are the client's). When no such check comes within confirmWait, or it
// did not see that server (a name already moved away from it), it asks
// on bc itself. A failure to ask says no. A check that finds the server
// writable is followed by one more, which decides (see the loop).
func (s *session) confirmReadOnly(bc *backendConn) bool {
	since := time.Now()
	deadline := since.Add(confirmWait)
	for writable := 0; ; { // checks that found the server writable
		v := s.srv.checkAfter(since, deadline)
		if v == nil {
			break
		}
		i := slices.IndexFunc(v.obs, func(o serverObs) bool { return o.reachable && o.id == bc.server && bc.server != "" })
		if i < 0 {
			break
		}
		if v.obs[i].readOnly {
			return true
		}
		// MariaDB refuses writes a moment before @@read_only reads 1
		// (SET GLOBAL read_only shows the old value while it takes the
		// global read lock, then sets both): a check that began right
		// after the refusal may still read 0. The next one decides.
		if writable++; writable == 2 {
			return false
		}
		since = v.at
	}
	unbound := bc.bound(s.srv.exchangeTimeout())
	res, err := bc.queryLocked("SELECT @@global.read_only")
	unbound()
	if err != nil || len(res.rows) != 1 || len(res.rows[0]) != 1 {
		return false
	}
	return isOn(string(res.rows[0][0]))
}

// checkAfter asks the topology monitor for a check and returns the view
// of the first check that began after since, waiting for it until
// deadline (nil then, or when the server closes).
func (s *Server) checkAfter(since, deadline time.Time) *topoView {
	s.topo.checkNow()
	for ; time.Now().Before(deadline) && s.ctx.Err() == nil; time.Sleep(2 * time.Millisecond) {
		if v := s.topo.view.Load(); v != nil && v.at.After(since) {
			return v
		}
	}
	return nil
}

// awaitDemoted waits, within failover.hold of h's start, until the
// topology no longer takes server for the primary: a 1290 made the monitor
// check again at once (NoteReadOnly), and a retried statement must not be
// lent another connection to that same server meanwhile. A kill of the
// session's statement ends the wait: it reports false then.
func (s *session) awaitDemoted(h *hold, server serverID) bool {
	killed, unregister := s.killable()
	defer unregister()
	deadline := h.start.Add(s.srv.config().Failover.Hold)
	for time.Now().Before(deadline) && killed.Err() == nil {
		v := s.srv.topo.view.Load()
		if v == nil || v.state != topoPrimary || v.primary != server {
			break
		}
		t := time.NewTimer(5 * time.Millisecond)
		select {
		case <-t.C:
		case <-killed.Done():
			t.Stop()
		}
	}
	return !s.interrupted.Load()
}

// FailoverStats are the counts of held statements (the
// holdfast_failover_held* metrics), since start but HeldNow.
type FailoverStats struct {
	// HeldNow are the statements held now (no usable primary, a retired
	// address, or a pause).
	HeldNow int64 `json:"held_now"`
	// Held statements (each once), and the seconds they were held in all.
	Held        uint64  `json:"held"`
	HeldSeconds float64 `json:"held_seconds"`
	// Retried: statements answered 1290 by a read-only former primary and
	// run again on the new one. Refused: answered 9010. PauseWaits:
	// statements held by a pause control.
	Retried    uint64 `json:"retried"`
	Refused    uint64 `json:"refused"`
	PauseWaits uint64 `json:"pause_waits"`
	// Transactions a switch met, replayed on the new primary, and whose
	// replay failed (answered 9010 or 1317); failover.transaction_replay.
	TxnsReplayed     uint64 `json:"transactions_replayed"`
	TxnReplaysFailed uint64 `json:"transaction_replays_failed"`
}

// FailoverStats returns the counts of held statements.
func (s *Server) FailoverStats() FailoverStats {
	fo := &s.fo
	return FailoverStats{HeldNow: fo.heldNow.Load(), Held: fo.held.Load(), HeldSeconds: fo.heldTime.Snapshot().Sum,
		Retried: fo.retried.Load(), Refused: fo.refused.Load(), PauseWaits: fo.pauseWaits.Load(),
		TxnsReplayed: fo.replayed.Load(), TxnReplaysFailed: fo.replayFailed.Load()}
}

// afterReadOnly handles a statement c answered 1290 on bc, a connection
// of the primary's pool, with nothing of the answer sent to the client
// yet (seq: the client's sequence before it). Unless bc's server is
// read-only now (confirmReadOnly), it is not handled: the 1290 goes to
// the client as it is. Else the buffered answer is dropped, bc closed,
// and: a statement policy.RetryReadOnly allows (before: the session as c
// found it), not sent again already, runs again (again: the caller sends
// it, and the borrow holds it until a new primary is known); so does a
// transaction's first statement with the deferred BEGIN it carried
// (begin), which policy.ReplayBegin allows: the transaction had done
// nothing; other transactions and pinned state are lost (lostToSwitch:
// 9010; keep is false for a pinned session); anything else is answered
// 9010, nothing having run.
func (s *session) afterReadOnly(c command, bc *backendConn, before *plan.Session, begin []byte, reran bool, seq uint8) (handled, keep, again bool) {
	if !s.confirmReadOnly(bc) {
		return false, true, false
	}
	s.w.Drop()
	s.w.Seq = seq
	server := bc.server
	b := c.base()
	retry := !reran && plan.RetryReadOnly(b.kind, b.info, before)
	replay := !reran && begin != nil && plan.ReplayBegin(b.kind, b.info, before)
	if retry || replay {
		// Closed, not given back: the former primary rolls the BEGIN back.
		s.release(false)
		if replay {
			s.state.Txn.PendingBegin = begin
		}
		h := hold{start: time.Now()}
		if s.interrupted.Load() || !s.awaitDemoted(&h, server) {
			// Killed (KILL QUERY, KILL) as it was refused or while it
			// waited: it is not sent again. A transaction had still only
			// begun, and goes on so.
			s.writeErr(newErr(codeQueryInterrupted, "70100",
				"Query execution was interrupted (holdfast: after the former primary, now read-only, refused it; nothing ran)"))
			return true, true, false
		}
		s.srv.fo.retried.Add(1)
		s.srv.log.Info("statement refused by a read-only former primary: running it on the new one", "client", s.id, "server", server,
			"with_begin", replay)
		return true, true, true
	}
	if !reran && plan.ReplayTxn(b.kind, b.info, before) && s.replayLater() {
		// The transaction is replayed on the new primary's connection the
		// statement borrows when it is sent again (counted retried there).
		s.txlog.rerun = true
		h := hold{start: time.Now()}
		if s.interrupted.Load() || !s.awaitDemoted(&h, server) {
			s.writeErr(s.replayLost("its statement was killed", false))
			return true, true, false
		}
		return true, true, true
	}
	if s.state.KeepsConn() {
		serr := s.lostToSwitch()
		s.writeErr(serr)
		return true, serr != errStateLost, false
	}
	s.release(false)
	s.srv.fo.refused.Add(1)
	s.writeErr(newErr(codePrimarySwitching, statePrimarySwitching,
		"holdfast: the primary is switching: the statement was refused by the former primary, now read-only; nothing ran, retry"))
	return true, true, false
}
