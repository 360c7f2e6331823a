package restest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// Pair is a private primary and its replica (dbtest.StartReplicaPair)
// reached through a relay standing in for the VIP an HA tool moves, with
// database DB and an ordinary account (User, no SUPER: read_only refuses
// its writes with 1290) that may do anything in it. Its pools (Open)
// follow the switchovers it performs as holdfast's own pools do: a
// connection opened before the VIP moved, or answered 1290, is not used
// again.
type Pair struct {
	Primary, Replica *dbtest.Private
	VIP              *netrelay.Relay
	DB, User         string
	gen              atomic.Uint64 // bumped each time the VIP moves
}

// StartPair starts the servers, creates the database and the account on
// the primary (replicated to the replica) and the relay.
func StartPair(t testing.TB) *Pair {
	t.Helper()
	primary, replica := dbtest.StartReplicaPair(t)
	p := &Pair{Primary: primary, Replica: replica, DB: "sw", User: "eng"}
	root := primary.Open("")
	defer root.Close()
	for _, q := range []string{
		"CREATE DATABASE sw",
		"CREATE USER eng IDENTIFIED BY 'eng'", "GRANT ALL ON sw.* TO eng",
	} {
		if _, err := root.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	p.VIP = dbtest.StartRelay(t, primary.Addr, 0)
	return p
}

// Open returns a pool of at most maxConns connections to DB through the
// VIP as User (several statements per round trip allowed), closed when t
// ends. opts change the driver's configuration (say, ParseTime).
func (p *Pair) Open(t testing.TB, maxConns int, opts ...func(*mysql.Config)) *sql.DB {
	t.Helper()
	c := mysql.NewConfig()
	c.Net, c.Addr, c.User, c.Passwd, c.DBName = "tcp", p.VIP.Addr().String(), p.User, "eng", p.DB
	c.MultiStatements = true
	c.Timeout = 2 * time.Second
	for _, o := range opts {
		o(c)
	}
	conn, err := mysql.NewConnector(c)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(followConnector{Connector: conn, gen: &p.gen})
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	return db
}

// Move points the VIP at addr; pools' connections opened before are not
// used again.
func (p *Pair) Move(addr string) {
	p.VIP.Retarget(addr)
	p.gen.Add(1)
}

// Switchover switches the primary over to the replica as an HA tool does
// (dbtest.Switchover) and moves the VIP; the roles swap in p.
func (p *Pair) Switchover(ctx context.Context) (dbtest.SwitchoverSteps, error) {
	return p.SwitchoverAfter(ctx, 0)
}

// SwitchoverAfter is Switchover with the old primary read-only for
// readOnly before the rest begins (an HA tool waiting for a slow
// replica): a switch that takes at least that long.
func (p *Pair) SwitchoverAfter(ctx context.Context, readOnly time.Duration) (dbtest.SwitchoverSteps, error) {
	if readOnly > 0 {
		if err := p.Primary.SetReadOnly(ctx, true); err != nil {
			return dbtest.SwitchoverSteps{}, err
		}
		time.Sleep(readOnly)
	}
	st, err := dbtest.Switchover(ctx, p.Primary, p.Replica, func() { p.Move(p.Replica.Addr) })
	if err == nil {
		p.Primary, p.Replica = p.Replica, p.Primary
	}
	return st, err
}

// SemiSync turns on semi-synchronous replication from the primary to the
// replica (MariaDB's built-in): a COMMIT is acknowledged only once the
// replica has received it, so a killed primary's acknowledged writes are
// on its promoted replica (KillAndPromote's wait lets the replica apply
// them), as with an HA setup that promises no acknowledged write is lost.
func (p *Pair) SemiSync(t testing.TB) {
	t.Helper()
	SemiSync(t, p.Primary, p.Replica)
}

// SemiSync is Pair.SemiSync for any private primary and its replica.
func SemiSync(t testing.TB, primary, replica *dbtest.Private) {
	t.Helper()
	for _, step := range []struct {
		on *dbtest.Private
		qs []string
	}{
		{primary, []string{"SET GLOBAL rpl_semi_sync_master_enabled = 1", "SET GLOBAL rpl_semi_sync_master_timeout = 30000"}},
		{replica, []string{"SET GLOBAL rpl_semi_sync_slave_enabled = 1", "STOP SLAVE IO_THREAD", "START SLAVE IO_THREAD"}},
	} {
		db := step.on.Open("")
		for _, q := range step.qs {
			if _, err := db.Exec(q); err != nil {
				db.Close()
				t.Fatalf("restest: semi-sync on %s: %s: %v", step.on.Addr, q, err)
			}
		}
		db.Close()
	}
	root := primary.Open("")
	defer root.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var name, v string
		if err := root.QueryRow("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'").Scan(&name, &v); err == nil && v == "1" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("restest: the replica did not connect as a semi-synchronous replica")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// KillAndPromote kills the primary (SIGKILL), and after wait promotes the
// replica and moves the VIP to it; the promoted replica becomes p.Primary
// and p.Replica is nil.
func (p *Pair) KillAndPromote(ctx context.Context, wait time.Duration) error {
	p.Primary.Kill()
	time.Sleep(wait)
	if err := p.Replica.Promote(ctx); err != nil {
		return fmt.Errorf("restest: promote: %w", err)
	}
	p.Move(p.Replica.Addr)
	p.Primary, p.Replica = p.Replica, nil
	return nil
}

// followConnector dials through the VIP; its connections are retired
// (driver.ErrBadConn at reuse) once gen moved or a statement was answered
// 1290, as holdfast's own pools retire theirs.
type followConnector struct {
	driver.Connector
	gen *atomic.Uint64
}

func (f followConnector) Connect(ctx context.Context) (driver.Conn, error) {
	at := f.gen.Load()
	c, err := f.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &followConn{Conn: c, gen: f.gen, at: at}, nil
}

type followConn struct {
	driver.Conn
	gen      *atomic.Uint64
	at       uint64
	readOnly bool
}

func (c *followConn) stale() bool { return c.readOnly || c.gen.Load() != c.at }

func (c *followConn) note(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1290 {
		c.readOnly = true
	}
	return err
}

func (c *followConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	r, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
	return r, c.note(err)
}

func (c *followConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	r, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
	return r, c.note(err)
}

func (c *followConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	s, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
	return s, c.note(err)
}

func (c *followConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, o)
	return tx, c.note(err)
}

func (c *followConn) Ping(ctx context.Context) error {
	return c.note(c.Conn.(driver.Pinger).Ping(ctx))
}

func (c *followConn) CheckNamedValue(nv *driver.NamedValue) error {
	if ch, ok := c.Conn.(driver.NamedValueChecker); ok {
		return ch.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *followConn) ResetSession(ctx context.Context) error {
	if c.stale() {
		return driver.ErrBadConn
	}
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *followConn) IsValid() bool {
	if c.stale() {
		return false
	}
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}
