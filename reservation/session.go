package reservation

import (
	"context"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// A session is one borrowed connection a combiner keeps across consecutive
// batches of one pool, passed from leader to leader while reserves keep
// queuing, and released when the queue drains. A leader opens one only when
// its pool is busy (reserves queued behind its batch, or another batch of
// the pool running): putting it back costs a round trip, which a lone
// batch, run on a connection borrowed for its transaction, does not pay;
// the last leader puts the session back after its own answer. For its
// lifetime the connection runs at
//
//	SET SESSION <isolation> = 'READ-COMMITTED', autocommit = 0
//
// so each batch needs no SET TRANSACTION / START TRANSACTION in front of its
// first statement (the round trips are the same either way: one, or two
// when the pool is short; see runBatch), and the connection is not
// borrowed and returned for every batch; every transaction is still READ
// COMMITTED, and the server default is untouched.
//
// Before Release the session is put back to the server's defaults
// (isolation = @@GLOBAL value, autocommit = 1), the state a pooled backend
// connection has; if that fails, or any statement's outcome is unknown, the
// connection is released broken. The borrow is attributed to
// holdfast:reserve for as long as the batches run.
//
// The SET that puts the connection in session mode travels with the first
// batch's statements (setup), not in a round trip of its own; until a
// transaction carrying it has succeeded it is sent again with the next
// attempt (it is idempotent), since a failed round trip may have stopped
// before it.
type session struct {
	c      Conn
	setup  string // sent in front of the next transaction's first statement, until one succeeds
	dirty  bool   // setup was sent: the connection may be off the server's defaults
	broken bool   // the session state is unknown: release the connection broken
}

// isoVar learns, once per engine, the isolation variable's name: MySQL 8
// (and MariaDB 11.1+) call it transaction_isolation, MariaDB before that
// and MySQL 5.7 tx_isolation.
type isoVar struct {
	mu   sync.Mutex // guards name
	name string
}

func (v *isoVar) get(ctx context.Context, c Conn) (string, error) {
	if name := v.known(); name != "" {
		return name, nil
	}
	// Probe outside the lock; concurrent probes agree.
	name := "transaction_isolation"
	if _, err := c.Query(ctx, "SELECT @@SESSION.transaction_isolation"); err != nil {
		if !isDB(err) {
			return "", err
		}
		name = "tx_isolation"
	}
	v.mu.Lock()
	v.name = name
	v.mu.Unlock()
	return name, nil
}

// known returns the name once learned.
func (v *isoVar) known() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.name
}

// openSession borrows a connection and puts it in session mode. It returns
// nil, nil when MaxSessions are already open: the caller then runs its
// batch on a connection borrowed for that transaction alone.
func (e *Engine) openSession(ctx context.Context) (*session, error) {
	if e.cfg.DisableSessions {
		return nil, nil
	}
	select {
	case e.sessions <- struct{}{}:
	default:
		return nil, nil
	}
	c, err := e.conns.Borrow(ctx, TagReserve)
	if err != nil {
		<-e.sessions
		return nil, err
	}
	name, err := e.iso.get(ctx, c)
	if err != nil {
		c.Release(true)
		<-e.sessions
		return nil, err
	}
	return &session{c: c, setup: "SET SESSION " + name + " = 'READ-COMMITTED', autocommit = 0; "}, nil
}

// closeSession restores the connection's defaults and releases it. A
// closed session stays closed: closing it again does nothing.
func (e *Engine) closeSession(s *session) {
	if s == nil || s.c == nil {
		return
	}
	if !s.broken && s.dirty {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		name := e.iso.known() // set: the session was opened with it
		if _, err := s.c.Exec(ctx, "SET SESSION "+name+" = @@GLOBAL."+name+", autocommit = 1"); err != nil {
			s.broken = true
		}
	}
	s.c.Release(s.broken)
	s.c = nil
	<-e.sessions
}

// sessionTx runs fn as one transaction on the session (autocommit is off,
// so the first statement starts it) and commits, or rolls back on error,
// retrying deadlocks and lock-wait timeouts like TxRunner.
func (e *Engine) sessionTx(ctx context.Context, s *session, fn func(ctx context.Context, c Conn) error) error {
	for attempt := 0; ; attempt++ {
		// Autocommit is off (or set off by setup, in front of the first
		// statement): no START TRANSACTION.
		tc := &txConn{Conn: s.c, begin: s.setup}
		err := fn(ctx, tc)
		sent := s.setup == "" || tc.begin == ""
		if s.setup != "" && sent {
			s.dirty = true
		}
		if tc.unsure {
			s.broken = true
		}
		if err == nil {
			if !sent {
				return nil // no statement sent
			}
			s.setup = ""
			if tc.ended {
				return nil // CommitWith committed
			}
			_, err = s.c.Exec(ctx, "COMMIT")
			err = tc.note(err, true) // a lost COMMIT leaves the outcome unknown
			if tc.unsure {
				s.broken = true
			}
			return err
		}
		if !sent {
			return err // nothing was sent: nothing to roll back
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, rerr := s.c.Exec(rctx, "ROLLBACK"+tc.cleanup)
		cancel()
		if rerr != nil || readOnlyRefusal(err) {
			// A read-only server: the session must not stay on it.
			s.broken = true
			return err
		}
		n, ok := dbErrorNumber(err)
		if !ok || (n != errNumDeadlock && n != errNumLockWait) || attempt >= e.cfg.MaxTxRetries {
			return err
		}
		e.m.countRetry(n)
		if err := lifecycle.Sleep(ctx, jitter(e.cfg.BackoffMin, e.cfg.BackoffMax, attempt)); err != nil {
			return err
		}
	}
}
