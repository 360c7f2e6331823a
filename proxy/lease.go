package proxy

import (
	"context"
	"errors"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// A lease is one borrow of a backend connection, and the one way any
// borrower gets one: a client session (for a transaction or one autocommit
// statement, or for good when pinned), holdfast's own work (the
// reservation engine, its refiller and sweeper), and, for its accounting, a
// pipelined statement's turn on a shared connection. A lease is admitted by
// its tag's on-call controls (gate.go), acquired from the pool, brought to
// the session state its borrower asks for, and its hold is accounted to a
// tag: the wait before it, then the time held, split into statements
// executing, idle inside a transaction, and the rest (idle while pinned
// outside a transaction, holdfast's own restore round trips).
//
// A lease is a value its borrower owns (a session keeps one and reuses
// it, so a borrow allocates nothing); nothing in it is safe for
// concurrent use. The borrower's goroutine is the only one to call its
// methods.
type lease struct {
	bc    *backendConn     // the connection held; nil when none
	tag   *attribution.Tag // tag of the statement that started the borrow
	use   *tagUse          // tag's counters on a replica (nil on the primary)
	gated string           // tag counted under a connection limit ("" if none)
	// classGated: counted under the background class's cap.
	classGated bool
	start      time.Time // when the connection was acquired

	exec      time.Duration // statements executing
	idleInTxn time.Duration // between statements inside a transaction
	hadTxn    bool          // a transaction was open at some point
	lastEnd   time.Time     // end of the last statement
	endInTxn  bool          // a transaction was open at lastEnd
	longest   time.Duration // the longest idle gap inside a transaction
	longStmt  []byte        // the statement after which it began
	longMode  sqlscan.Mode  // ... and how it was lexed
}

// leaseState is the session state a lease's connection is brought to.
type leaseState struct {
	db         string
	vars       *varstate.State
	multiStmts bool
}

// admit passes a borrow for tag through the on-call controls of key (the
// tag the statement carries, which is tag's name unless accounting folded
// it: see policy.Key), waiting up to the pool's acquire timeout
// (within ctx) for a slot under a limit. It reports the key counted under
// a limit ("" if none), which the borrow must exit; a refusal wraps
// errTagDrained or errTagLimit, and is counted under tag.
func (s *Server) admit(ctx context.Context, tag *attribution.Tag, key string) (gated string, err error) {
	if s.gates.free(key) { // neither drained nor limited: nothing to enter
		return "", nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.pool.Limits().AcquireTimeout)
	counted, err := s.gates.enter(ctx, key)
	cancel()
	switch {
	case err == nil:
		if counted {
			return key, nil
		}
		return "", nil
	case errors.Is(err, errTagDrained):
		tag.Rejected("drained")
	default:
		tag.Rejected("limit")
	}
	return "", err
}

// take admits a borrow for tag under key (see admit), acquires a connection of variant v for it
// within ctx, and brings the connection to st (st.vars nil: leave its
// session state as it is). On success l holds the connection. A refusal
// by the controls or the pool comes back as their error (see leaseErr); a
// failed sync returns the connection (closed after an I/O error) and comes
// back as a syncFailed.
func (s *Server) take(ctx context.Context, l *lease, tag *attribution.Tag, key string, v variant, st leaseState) error {
	return s.takeAs(ctx, l, tag, key, s.classOf(key), v, st, &s.primary)
}

// takeAs is take for a borrow of class cl (see classes.go): its place in
// the pool's queue, the background cap, and shedding.
//
// be is the backend to borrow from: the primary, or a replica a read was
// routed to.
func (s *Server) takeAs(ctx context.Context, l *lease, tag *attribution.Tag, key string, cl class, v variant, st leaseState, be *backend) error {
	// The wait starts before the controls: time queued behind a tag's
	// limit is that tag's wait.
	start := time.Now()
	if cl == classBackground {
		cfg := s.config()
		budget := min(cfg.Overload.BackgroundWait, cfg.Pool.AcquireTimeout)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, budget, shedError{tag: key, wait: budget})
		defer cancel()
	}
	gated, err := s.admit(ctx, tag, key)
	if err != nil {
		return s.shedOr(ctx, tag, cl, err)
	}
	classGated, err := s.admitClass(ctx, cl)
	if err == nil {
		var bc *backendConn
		bc, err = be.pool.AcquireHandicap(ctx, v, s.handicap(cl))
		if err == nil {
			l.bc = bc
		} else if classGated {
			s.classes.gate.exit(backgroundGateKey)
		}
	}
	if err != nil {
		if gated != "" {
			s.gates.exit(gated)
		}
		return s.shedOr(ctx, tag, cl, err)
	}
	bc := l.bc
	now := time.Now() // the hold's start: the janitor's bounds need it, attribution or not
	if s.attr {
		tag.Borrowed(now.Sub(start))
	}
	s.classWaited(cl, now.Sub(start))
	be.borrows.Add(1)
	be.waitNs.Add(int64(now.Sub(start)))
	u := be.use(tag)
	if u != nil {
		u.borrows.Add(1)
		u.waitNs.Add(int64(now.Sub(start)))
	}
	*l = lease{bc: bc, tag: tag, use: u, gated: gated, classGated: classGated, start: now, longStmt: l.longStmt[:0]}
	if bc.vars == nil {
		bc.vars = s.baseVars()
	}
	if st.vars == nil {
		return nil
	}
	unbound := bc.bound(s.exchangeTimeout())
	err = syncConn(bc, st.db, st.vars, st.multiStmts)
	unbound()
	if s.attr {
		l.exec += time.Since(now)
	}
	if err != nil {
		s.give(l, !isIOError(err), nil, 0, nil, 0)
		return syncFailed{err}
	}
	return nil
}

// poolOf is the pool bc belongs to.
func poolOf(bc *backendConn, s *Server) *pool.Pool[variant, *backendConn] {
	if bc.be != nil && bc.be.pool != nil {
		return bc.be.pool
	}
	return s.pool
}

// shedOr returns err, or the shedding of a background borrow when its
// wait ended at its budget (counted under its tag and class).
func (s *Server) shedOr(ctx context.Context, tag *attribution.Tag, cl class, err error) error {
	var shed shedError
	if cl != classBackground || !errors.As(context.Cause(ctx), &shed) || ctx.Err() == nil {
		return err
	}
	s.classes.stats[cl].shed.Add(1)
	tag.Rejected(attribution.RejectShed)
	return shed
}

// syncFailed is take's error when the connection it acquired could not be
// brought to the state asked for (the server's *mysqlwire.SQLError, or an I/O error).
type syncFailed struct{ err error }

func (e syncFailed) Error() string { return e.err.Error() }
func (e syncFailed) Unwrap() error { return e.err }

// leaseErr is what a client is told of a borrow its on-call controls or
// the pool refused: 9001 (drained), 9002 (no slot under a limit), 9006
// (shed under overload), 1040
// (pool exhausted), 2003 (backend down), 1053 (shutting down).
func leaseErr(err error) *mysqlwire.SQLError {
	switch {
	case errors.Is(err, errTagDrained):
		return newErr(codeTagDrained, "HY000", "holdfast: %v", err)
	case errors.Is(err, errTagLimit):
		return newErr(codeTagLimit, "HY000", "holdfast: %v", err)
	case errors.Is(err, errShed):
		return newErr(codeShed, "40001", "holdfast: %v", err)
	}
	return poolErr(err)
}

// stmtStart notes that a statement begins on the lease's connection at
// now, lastSQL being the statement before it: the gap since that one
// counts as idle in a transaction when one was open.
func (l *lease) stmtStart(now time.Time, lastSQL []byte, lastMode sqlscan.Mode) {
	if l.lastEnd.IsZero() || !l.endInTxn {
		return
	}
	gap := now.Sub(l.lastEnd)
	l.idleInTxn += gap
	if gap > l.longest {
		l.longest = gap
		l.longStmt, l.longMode = append(l.longStmt[:0], lastSQL...), lastMode
	}
}

// stmtEnd notes a statement that ran for d and ended at now.
func (l *lease) stmtEnd(now time.Time, d time.Duration) {
	l.exec += d
	l.lastEnd = now
}

// txnState notes whether a transaction is open after a statement.
func (l *lease) txnState(inTxn bool) {
	l.endInTxn = inTxn
	l.hadTxn = l.hadTxn || inTxn
}

// give ends the lease: the hold is accounted to tag (the tag it started
// under when nil), the connection goes back to the pool (closed unless
// reusable), and a slot taken under a limit is freed. clientID names the
// borrower in the slow-transaction log (0: holdfast's own work), lastSQL
// its last statement (lexed under lastMode).
func (s *Server) give(l *lease, reusable bool, tag *attribution.Tag, clientID uint32, lastSQL []byte, lastMode sqlscan.Mode) {
	if l.bc == nil {
		return
	}
	if tag == nil {
		tag = l.tag
	}
	now := time.Now()
	if s.attr && tag != nil {
		s.account(l, tag, now, clientID, lastSQL, lastMode)
	}
	if be := l.bc.be; be != nil {
		be.holdNs.Add(int64(now.Sub(l.start)))
		u := l.use
		if tag != l.tag {
			u = be.use(tag)
		}
		if u != nil {
			u.holdNs.Add(int64(now.Sub(l.start)))
		}
	}
	if l.gated != "" {
		s.gates.exit(l.gated)
	}
	if l.classGated {
		s.classes.gate.exit(backgroundGateKey)
	}
	poolOf(l.bc, s).Release(l.bc, reusable)
	*l = lease{longStmt: l.longStmt[:0]}
}

// account records a hold that ends at now under tag.
func (s *Server) account(l *lease, tag *attribution.Tag, now time.Time, clientID uint32, lastSQL []byte, lastMode sqlscan.Mode) {
	held := now.Sub(l.start)
	if l.endInTxn && !l.lastEnd.IsZero() {
		// The hold ends inside a transaction (the client left, or was
		// killed): the time since its last statement was idle too.
		l.stmtStart(now, lastSQL, lastMode)
	}
	tag.Returned(held, l.exec, l.idleInTxn)
	if l.hadTxn && held >= s.slowTxn() && l.exec*10 < held {
		tag.SlowTransaction()
		s.logSlowTransaction(tag.Name(), clientID, held, l.exec, l.idleInTxn, l.longStmt, l.longMode)
	}
}
