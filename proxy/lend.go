package proxy

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// EngineConn is a backend connection lent to holdfast's own work (the
// reservation engine, its refiller and sweeper). It comes from the same
// pool as client sessions, passes the same on-call controls, and its hold
// time is attributed to its tag (e.g. "holdfast:reserve") like any other
// flow. Not safe for concurrent use.
type EngineConn struct {
	srv   *Server
	lease lease // lease.bc is the connection; nil once released

	last []byte // the last statement, for the slow-transaction log

	mu       sync.Mutex // guards the fields below (read by Holders)
	inTxn    bool
	lastSQL  string
	released bool
}

// engineRegistry tracks lent EngineConns for Holders.
type engineRegistry struct {
	mu    sync.Mutex // guards conns
	conns map[*EngineConn]struct{}
}

// BorrowEngine lends a backend connection for holdfast's own work under
// tag: a lease like any client's, admitted by the tag's on-call controls,
// logged in as holdfast's own account (fleet.user). Its session is reset
// to a fresh connection's state (the server's defaults), with the schema
// of holdfast's tables (SetTablesSchema) as its current database.
func (s *Server) BorrowEngine(ctx context.Context, tag string) (*EngineConn, error) {
	c := &EngineConn{srv: s}
	st := leaseState{db: s.TablesSchema(), vars: s.baseVars(), multiStmts: true}
	// Critical whatever its tag: the engine's borrows are few and short,
	// and every CALL holdfast.* of every class waits on them.
	if err := s.take(ctx, &c.lease, s.rec.TagString(tag), tag, classCritical, variant(0).withAccount(s.accts.own), st, &s.primary); err != nil {
		var sf syncFailed
		if errors.As(err, &sf) {
			return nil, fmt.Errorf("proxy: prepare a connection for %s: %w", tag, sf.err)
		}
		return nil, err // refused: the controls' or the pool's error
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
	c.lease.stmtStart(now, c.last, 0) // holdfast's own statements: the default sql_mode
	c.last = append(c.last[:0], sql[:min(len(sql), maxStmtCopy)]...)
	c.mu.Lock()
	c.lastSQL = sql[:min(len(sql), maxStmtCopy)]
	c.mu.Unlock()
	res, err := c.lease.bc.query(ctx, sql)
	end := time.Now()
	c.srv.statementDone(&c.lease, c.lease.tag, now, end, err != nil)
	if c.srv.attr {
		// The statement ran for the callers of the CALLs it serves: each
		// gets an even share of its time.
		if callers := attribution.Callers(ctx); len(callers) > 0 {
			share := end.Sub(now) / time.Duration(len(callers))
			for _, t := range callers {
				t.EngineTime(share)
			}
		}
	}
	if err == nil {
		inTxn := res.status&mysqlwire.StatusInTrans != 0
		c.lease.txnState(inTxn)
		c.mu.Lock()
		c.inTxn = inTxn
		c.mu.Unlock()
	}
	return res, err
}

// Database is the connection's current database.
func (c *EngineConn) Database() string { return c.lease.bc.db }

// UseDatabase makes db the connection's current database (COM_INIT_DB;
// an open transaction stays open): for holdfast's tables, moved to
// another schema while the connection was lent. A MySQL error comes back
// with Number() (the connection stays usable); any other error means the
// connection is broken.
func (c *EngineConn) UseDatabase(ctx context.Context, db string) error {
	bc := c.lease.bc
	d := c.srv.exchangeTimeout()
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	unbound := bc.bound(d)
	defer unbound()
	if err := bc.writeCommandString(comInitDB, db); err != nil {
		return err
	}
	if _, err := bc.readOK(); err != nil {
		return err
	}
	bc.db, bc.dbKnown = db, true
	return nil
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
	inTxn := c.inTxn
	c.mu.Unlock()
	c.srv.engine.mu.Lock()
	delete(c.srv.engine.conns, c)
	c.srv.engine.mu.Unlock()
	c.srv.give(&c.lease, !broken && !inTxn, nil, 0, c.last, 0)
}

func (s *Server) engineHolders(now time.Time) []HolderInfo {
	s.engine.mu.Lock()
	defer s.engine.mu.Unlock()
	out := make([]HolderInfo, 0, len(s.engine.conns))
	for c := range s.engine.conns {
		c.mu.Lock()
		out = append(out, HolderInfo{User: "holdfast", Tag: c.lease.tag.Name(), HeldFor: now.Sub(c.lease.start).Seconds(),
			InTransaction: c.inTxn, Statement: c.lastSQL})
		c.mu.Unlock()
	}
	return out
}
