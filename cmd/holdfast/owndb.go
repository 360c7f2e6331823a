package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/reservation"
)

// Connections of holdfast's own work that follow its tables (tables.go):
// database/sql handles for the fleet and the reconciler's replica, and the
// engine's borrows from the proxy's pool.

// followDB opens database/sql whose connections open with the tables'
// schema (t.Schema, when each connection opens) as their current database,
// and follow the tables when they move (followConn). base is the driver's
// configuration otherwise (its DBName is ignored). With topo (nil: none),
// they also follow the primary: a connection opened before the topology
// changed (a switchover, the primary turned read-only), or that was
// answered 1290 (read-only), is not used again, and a 1290 has the
// servers checked at once.
func followDB(base *mysql.Config, t *tables, topo topologyWatch) *sql.DB {
	return sql.OpenDB(&followConnector{base: base.Clone(), t: t, topo: topo})
}

// topologyWatch is what followDB needs of the proxy's topology check
// (*proxy.Server).
type topologyWatch interface {
	TopologyGeneration() uint64
	NoteReadOnly()
}

type followConnector struct {
	base *mysql.Config
	t    *tables
	topo topologyWatch // nil: none
}

// closeIdleOnChange closes db's idle connections whenever srv's topology
// changes (OnTopologyChange): go-sql-driver would otherwise keep lending
// them to a server that is no longer the primary. idle is db's
// SetMaxIdleConns, restored at once.
func closeIdleOnChange(srv *proxy.Server, db *sql.DB, idle int) {
	srv.OnTopologyChange(func() {
		db.SetMaxIdleConns(0)
		db.SetMaxIdleConns(idle)
	})
}

func (c *followConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cfg := c.base.Clone()
	cfg.DBName = c.t.Schema()
	var gen uint64
	if c.topo != nil {
		// Before the dial: a change while it is under way makes the
		// connection stale (it may have reached the former primary).
		gen = c.topo.TopologyGeneration()
	}
	dc, err := connect(ctx, cfg)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errUnknownDB {
		// Not created yet (holdfast migrate creates it): a connection
		// with no database, which looks for it at each statement.
		cfg.DBName = ""
		dc, err = connect(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	return &followConn{Conn: dc, db: cfg.DBName, t: c.t, topo: c.topo, gen: gen}, nil
}

func connect(ctx context.Context, cfg *mysql.Config) (driver.Conn, error) {
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return conn.Connect(ctx)
}

// errUnknownDB is ER_BAD_DB_ERROR.
const errUnknownDB = 1049

func (c *followConnector) Driver() driver.Driver { return mysql.MySQLDriver{} }

// followConn is a go-sql-driver connection whose statements, when one
// meets a missing table (1146) because the tables moved, switch it to
// their schema (USE) and run once more. That is safe: the statement did
// nothing, and a transaction around it had used none of the tables (it
// would have held the move back on its metadata locks).
type followConn struct {
	driver.Conn
	db string // its current database; "": none, the schema did not exist
	t  *tables
	// topo, when not nil, is the topology the connection follows: gen is
	// its generation when the connection opened, and readOnly is set once
	// a statement was answered 1290. Either retires the connection.
	topo     topologyWatch
	gen      uint64
	readOnly bool
}

// stale reports whether the connection must not be used again: the
// topology changed since it opened, or it was answered read-only.
func (c *followConn) stale() bool {
	return c.topo != nil && (c.readOnly || c.topo.TopologyGeneration() != c.gen)
}

// noteErr notes a 1290 (read-only) answer: the connection is retired, and
// the servers are checked at once.
func (c *followConn) noteErr(err error) {
	var me *mysql.MySQLError
	if c.topo != nil && errors.As(err, &me) && me.Number == codeReadOnly {
		c.readOnly = true
		c.topo.NoteReadOnly()
	}
}

// codeReadOnly is ER_OPTION_PREVENTS_STATEMENT (--read-only, among other
// options).
const codeReadOnly = 1290

// use makes schema c's current database.
func (c *followConn) use(ctx context.Context, schema string) error {
	if _, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, "USE "+reservation.QuoteName(schema), nil); err != nil {
		return err
	}
	c.db = schema
	return nil
}

// ready puts a connection opened before its schema existed in it, now
// that it may; while it still does not, a statement's answer is that
// holdfast's tables are missing (1146), which is what it means.
func (c *followConn) ready(ctx context.Context) error {
	if c.db != "" {
		return nil
	}
	schema := c.t.Schema()
	err := c.use(ctx, schema)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == errUnknownDB {
		return &mysql.MySQLError{Number: 1146, SQLState: [5]byte{'4', '2', 'S', '0', '2'},
			Message: "holdfast's tables are missing: database " + schema + " does not exist (holdfast migrate creates it)"}
	}
	return err
}

// follow switches c to the tables' schema when err says a table is
// missing and they are elsewhere now, and reports whether it did.
func (c *followConn) follow(ctx context.Context, err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1146 {
		return false
	}
	schema, moved := c.t.moved(ctx, c.db)
	return moved && c.use(ctx, schema) == nil
}

func (c *followConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	q := c.Conn.(driver.QueryerContext)
	rows, err := q.QueryContext(ctx, query, args)
	if c.follow(ctx, err) {
		rows, err = q.QueryContext(ctx, query, args)
	}
	c.noteErr(err)
	return rows, err
}

func (c *followConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	e := c.Conn.(driver.ExecerContext)
	res, err := e.ExecContext(ctx, query, args)
	if c.follow(ctx, err) {
		res, err = e.ExecContext(ctx, query, args)
	}
	c.noteErr(err)
	return res, err
}

func (c *followConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.ready(ctx); err != nil {
		return nil, err
	}
	p := c.Conn.(driver.ConnPrepareContext)
	st, err := p.PrepareContext(ctx, query)
	if c.follow(ctx, err) {
		st, err = p.PrepareContext(ctx, query)
	}
	c.noteErr(err)
	if err != nil {
		return nil, err
	}
	return &followStmt{Stmt: st, c: c}, nil
}

// followStmt is a prepared statement of a followConn: a 1290 it is
// answered retires the connection as one of a text statement does
// (noteErr). database/sql prepares every statement with arguments (the
// driver does not interpolate them here), so the fleet's writes meet a
// read-only primary through it.
type followStmt struct {
	driver.Stmt
	c *followConn
}

func (s *followStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	res, err := s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	s.c.noteErr(err)
	return res, err
}

func (s *followStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	s.c.noteErr(err)
	return rows, err
}

func (s *followStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if c, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return c.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

// The rest is go-sql-driver's own.

func (c *followConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *followConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

// ResetSession runs before database/sql lends the connection again, and
// IsValid as it comes back: a stale one (see stale) is closed instead.
func (c *followConn) ResetSession(ctx context.Context) error {
	if c.stale() {
		return driver.ErrBadConn
	}
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *followConn) IsValid() bool { return !c.stale() && c.Conn.(driver.Validator).IsValid() }

func (c *followConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// engineConns lends the engine connections from srv's pool (BorrowEngine:
// holdfast's own account, in the tables' schema) that follow the tables
// when they move under a statement (followEngine).
func engineConns(srv *proxy.Server, t *tables, log *slog.Logger) reservation.Conns {
	return reservation.TextConns(func(ctx context.Context, tag string) (reservation.TextConn, error) {
		c, err := srv.BorrowEngine(ctx, tag)
		if err != nil {
			return nil, err
		}
		return &followEngine{c: c, t: t, log: log, srv: srv}, nil
	})
}

// followEngine is an engine connection that, when a statement meets a
// missing table because the tables moved, switches to their schema and
// answers with a deadlock's code (1213, SQLSTATE 40001) instead: the
// engine rolls the transaction back and runs it again, as after a
// deadlock, now in the tables' schema. (Running the statement again here
// would not do: it may be the middle of a transaction's text.) A caller
// outside a transaction gets 1213 and nothing was done.
type followEngine struct {
	c   *proxy.EngineConn
	t   *tables
	log *slog.Logger
	srv *proxy.Server
}

func (f *followEngine) Exec(ctx context.Context, sql string) (uint64, uint64, error) {
	a, id, err := f.c.Exec(ctx, sql)
	return a, id, f.follow(ctx, err)
}

func (f *followEngine) Query(ctx context.Context, sql string) ([][][]byte, error) {
	rows, err := f.c.Query(ctx, sql)
	return rows, f.follow(ctx, err)
}

func (f *followEngine) Release(broken bool) { f.c.Release(broken) }

func (f *followEngine) follow(ctx context.Context, err error) error {
	var se *mysqlwire.SQLError
	if errors.As(err, &se) && se.Code == codeReadOnly {
		f.srv.NoteReadOnly() // the servers are checked at once
	}
	if !errors.As(err, &se) || se.Code != 1146 {
		return err
	}
	have := f.c.Database()
	schema, moved := f.t.moved(ctx, have)
	if !moved {
		return err
	}
	if uerr := f.c.UseDatabase(ctx, schema); uerr != nil {
		var ue *mysqlwire.SQLError
		if !errors.As(uerr, &ue) {
			return uerr // the connection is broken
		}
		f.log.Warn("holdfast's tables moved, but an engine connection could not follow them", "schema", schema, "err", uerr)
		return err
	}
	return &mysqlwire.SQLError{Code: codeDeadlock, State: "40001",
		Msg: fmt.Sprintf("holdfast's tables moved from %s to %s under this statement: nothing was done; try again", have, schema)}
}

// codeDeadlock is ER_LOCK_DEADLOCK: the engine retries the transaction.
const codeDeadlock = 1213
