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
// borrower gets one, in one of three kinds:
//
//   - a connection of its own (take): a client session's, for a
//     transaction or one autocommit statement, or for good when pinned;
//     holdfast's own work's (the reservation engine, its refiller and
//     sweeper, lend.go). Admitted by its tag's on-call controls (gate.go)
//     and its class's (classes.go), acquired from the backend's pool,
//     brought to the session state its borrower asks for;
//   - a turn on a shared pipe (takeTurn): a pipelined statement's, on a
//     connection other statements share (pipeline.go, whose connection is
//     taken idle with takeIdle). It passes no control: policy pipelines
//     only statements under none;
//   - an admission (admitOnly): a CALL holdfast.*'s, which holds no
//     connection (the engine borrows its own) but passes its tag's
//     controls, and holds a slot under a limit while it runs.
//
// Each is accounted here, once: the wait before it (per tag, per backend,
// per class), its statements (statementDone: per tag), and its hold (give:
// per tag and per backend), split into statements executing, idle inside a
// transaction, and the rest (idle while pinned outside a transaction,
// holdfast's own restore round trips). give ends every kind.
//
// A lease is a value its borrower owns (a session keeps one and reuses
// it, so a borrow allocates nothing); nothing in it is safe for
// concurrent use. The borrower's goroutine is the only one to call its
// methods.
type lease struct {
	bc *backendConn // the connection held; nil when none
	// turn is the backend whose shared pipe a turn is on (nil: no turn);
	// admitted: an admission that holds no connection.
	turn     *backend
	admitted bool

	tag   *attribution.Tag // tag of the statement that started the borrow
	use   *tagUse          // tag's counters on a replica (nil on the primary)
	gated string           // tag counted under a connection limit ("" if none)
	// classGated: counted under the background class's cap.
	classGated bool
	start      time.Time // when the connection was acquired (the turn began, the admission passed)

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

// take admits a borrow for tag under key (see admit) in class cl (see
// classes.go: its place in the pool's queue, the background cap, and
// shedding), acquires a connection of variant v from backend be (the
// primary, or a replica a read was routed to) for it within ctx, and
// brings the connection to st (st.vars nil: leave its session state as it
// is). On success l holds the connection. A refusal by the controls or
// the pool comes back as their error (see leaseErr); a failed sync
// returns the connection (closed after an I/O error) and comes back as a
// syncFailed.
func (s *Server) take(ctx context.Context, l *lease, tag *attribution.Tag, key string, cl class, v variant, st leaseState, be *backend) error {
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
	*l = lease{bc: bc, tag: tag, gated: gated, classGated: classGated, start: now, longStmt: l.longStmt[:0]}
	s.waited(l, be, now.Sub(start))
	s.classWaited(cl, now.Sub(start))
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

// waited accounts the wait of a lease l of backend be that began after
// wait: to its tag and to the backend (and the tag's use of a replica).
func (s *Server) waited(l *lease, be *backend, wait time.Duration) {
	if s.attr {
		l.tag.Borrowed(wait)
	}
	be.borrows.Add(1)
	be.waitNs.Add(int64(wait))
	if l.use = be.use(l.tag); l.use != nil {
		l.use.borrows.Add(1)
		l.use.waitNs.Add(int64(wait))
	}
}

// takeIdle lends a pipe an idle connection of the primary of variant v
// that fit accepts, without waiting, dialing or passing any control: a
// pipe's connection is accounted by its statements' turns (takeTurn), and
// goes back with givePipe when the last of them leaves. unfit: an idle
// connection exists, but fit refused it.
func (s *Server) takeIdle(v variant, fit func(*backendConn) bool) (bc *backendConn, ok, unfit bool) {
	bc, ok, unfit = s.pool.TryAcquire(v, fit)
	if ok && bc.vars == nil {
		bc.vars = s.baseVars()
	}
	return bc, ok, unfit
}

// givePipe gives a pipe's connection back to the pool (closed unless
// reusable).
func (s *Server) givePipe(bc *backendConn, reusable bool) { s.pool.Release(bc, reusable) }

// takeTurn begins l, a statement's turn on a pipe of backend be, for tag:
// queued since start, it may read its response now. The time queued
// behind the pipe's statements is its wait; its turn, the time the
// connection works for it, its hold, so that per-tag hold time still adds
// up to connections busy.
func (s *Server) takeTurn(l *lease, tag *attribution.Tag, start time.Time, be *backend) {
	now := time.Now()
	*l = lease{turn: be, tag: tag, start: now, longStmt: l.longStmt[:0]}
	s.waited(l, be, now.Sub(start))
}

// admitOnly passes a borrow that takes no connection (a CALL holdfast.*,
// whose engine borrows its own) for tag through key's controls within
// ctx, as take would; l then holds the slot taken under a limit, until
// give.
func (s *Server) admitOnly(ctx context.Context, l *lease, tag *attribution.Tag, key string) error {
	gated, err := s.admit(ctx, tag, key)
	if err != nil {
		return err
	}
	*l = lease{admitted: true, tag: tag, gated: gated, start: time.Now(), longStmt: l.longStmt[:0]}
	return nil
}

// statementDone accounts a statement on lease l under tag, which ran from
// start to end (failed: an error ended it): every statement holdfast
// runs or answers for a client or for itself is accounted here.
func (s *Server) statementDone(l *lease, tag *attribution.Tag, start, end time.Time, failed bool) {
	d := end.Sub(start)
	if s.attr {
		tag.Statement(d, failed)
	}
	l.stmtEnd(end, d)
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

// give ends the lease (of any kind; none held: nothing): the hold is
// accounted to tag (the tag it started under when nil), the connection
// goes back to the pool (closed unless reusable), and a slot taken under a
// limit is freed. An admission has no hold to account; a turn gives no
// connection back (its pipe does, givePipe). clientID names the borrower
// in the slow-transaction log (0: holdfast's own work), lastSQL its last
// statement (lexed under lastMode).
func (s *Server) give(l *lease, reusable bool, tag *attribution.Tag, clientID uint32, lastSQL []byte, lastMode sqlscan.Mode) {
	switch {
	case l.admitted:
		if l.gated != "" {
			s.gates.exit(l.gated)
		}
		*l = lease{longStmt: l.longStmt[:0]}
		return
	case l.bc == nil && l.turn == nil:
		return
	}
	if tag == nil {
		tag = l.tag
	}
	now := time.Now()
	if s.attr && tag != nil {
		s.account(l, tag, now, clientID, lastSQL, lastMode)
	}
	if l.turn != nil {
		l.turn.holdNs.Add(int64(now.Sub(l.start)))
		*l = lease{longStmt: l.longStmt[:0]}
		return
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
