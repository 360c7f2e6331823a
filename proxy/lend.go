package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
)

// EngineConn is a backend connection lent to holdfast's own work (the
// reservation engine, its refiller and sweeper). It comes from the same
// pool as client sessions, passes the same on-call controls, and its hold
// time is attributed to its tag (e.g. "holdfast:reserve") like any other
// flow. Not safe for concurrent use.
type EngineConn struct {
	srv   *Server
	bc    *backendConn
	tag   *attribution.Tag
	gated bool
	start time.Time

	mu       sync.Mutex // guards the fields below (read by Holders)
	inTxn    bool
	lastSQL  string
	exec     time.Duration
	idle     time.Duration
	lastEnd  time.Time
	released bool
}

// engineRegistry tracks lent EngineConns for Holders.
type engineRegistry struct {
	mu    sync.Mutex // guards conns
	conns map[*EngineConn]struct{}
}

// BorrowEngine lends a backend connection for holdfast's own work under
// tag. Its session is reset to a fresh connection's state (the server's
// defaults and the configured database), whatever clients did to it.
func (s *Server) BorrowEngine(ctx context.Context, tag string) (*EngineConn, error) {
	t := s.rec.TagString(tag)
	lim := s.pool.Limits()
	gctx, cancel := context.WithTimeout(ctx, lim.AcquireTimeout)
	counted, err := s.gates.enter(gctx, tag)
	cancel()
	if err != nil {
		if errors.Is(err, errTagDrained) {
			t.Rejected("drained")
		} else {
			t.Rejected("limit")
		}
		return nil, err
	}
	start := time.Now()
	bc, err := s.pool.Acquire(ctx, 0)
	if err != nil {
		if counted {
			s.gates.exit(tag)
		}
		return nil, err
	}
	if s.attr {
		t.Borrowed(time.Since(start))
	}
	c := &EngineConn{srv: s, bc: bc, tag: t, gated: counted, start: time.Now()}
	if bc.vars == nil {
		bc.vars = s.baseVars()
	}
	unbound := bc.bound(s.exchangeTimeout())
	err = syncConn(bc, s.config().Backend.Database, s.baseVars(), true)
	unbound()
	if err != nil {
		c.Release(isIOError(err))
		return nil, fmt.Errorf("proxy: prepare a connection for %s: %w", tag, err)
	}
	s.engine.mu.Lock()
	if s.engine.conns == nil {
		s.engine.conns = map[*EngineConn]struct{}{}
	}
	s.engine.conns[c] = struct{}{}
	s.engine.mu.Unlock()
	return c, nil
}

// Exec runs one statement. A MySQL error comes back as an error with
// Number() (the connection stays usable); any other error means the
// connection is broken.
func (c *EngineConn) Exec(ctx context.Context, sql string) (affected, insertID uint64, err error) {
	res, err := c.run(ctx, sql)
	if err != nil {
		return 0, 0, err
	}
	return res.affectedRows, res.insertID, nil
}

// Query runs one statement and returns all rows; NULL is a nil []byte.
func (c *EngineConn) Query(ctx context.Context, sql string) ([][][]byte, error) {
	res, err := c.run(ctx, sql)
	if err != nil {
		return nil, err
	}
	return res.rows, nil
}

func (c *EngineConn) run(ctx context.Context, sql string) (*textResult, error) {
	now := time.Now()
	c.mu.Lock()
	if c.inTxn && !c.lastEnd.IsZero() {
		c.idle += now.Sub(c.lastEnd)
	}
	c.lastSQL = sql[:min(len(sql), maxStmtCopy)]
	c.mu.Unlock()
	res, err := c.bc.query(ctx, sql)
	end := time.Now()
	if c.srv.attr {
		c.tag.Statement(end.Sub(now), err != nil)
	}
	c.mu.Lock()
	c.exec += end.Sub(now)
	c.lastEnd = end
	if err == nil {
		c.inTxn = res.status&statusInTrans != 0
	}
	c.mu.Unlock()
	return res, err
}

// Release returns the connection; broken closes it (after an I/O error or
// when its state is unknown, e.g. a transaction that could not be ended).
// A connection still inside a transaction is closed too. Idempotent.
func (c *EngineConn) Release(broken bool) {
	c.mu.Lock()
	if c.released {
		c.mu.Unlock()
		return
	}
	c.released = true
	inTxn, exec, idle := c.inTxn, c.exec, c.idle
	c.mu.Unlock()
	c.srv.engine.mu.Lock()
	delete(c.srv.engine.conns, c)
	c.srv.engine.mu.Unlock()
	if c.srv.attr {
		c.tag.Returned(time.Since(c.start), exec, idle)
	}
	if c.gated {
		c.srv.gates.exit(c.tag.Name())
	}
	c.srv.pool.Release(c.bc, !broken && !inTxn)
}

func (s *Server) engineHolders(now time.Time) []HolderInfo {
	s.engine.mu.Lock()
	defer s.engine.mu.Unlock()
	out := make([]HolderInfo, 0, len(s.engine.conns))
	for c := range s.engine.conns {
		c.mu.Lock()
		out = append(out, HolderInfo{User: "holdfast", Tag: c.tag.Name(), HeldFor: now.Sub(c.start).Seconds(),
			InTransaction: c.inTxn, Statement: c.lastSQL})
		c.mu.Unlock()
	}
	return out
}
