package proxy

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// killBackend kills a backend thread from outside and waits until the
// server has dropped it.
func killBackend(t *testing.T, tid string) {
	t.Helper()
	mustExec(t, dbtest.Root(t), "KILL CONNECTION "+tid)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if queryString(t, dbtest.Root(t), "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = "+tid) == "0" {
			time.Sleep(20 * time.Millisecond) // let the FIN reach holdfast
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("backend thread %s did not go away", tid)
}

func TestBackendKilledBetweenTransactions(t *testing.T) {
	p := twoBackends(t)
	a := p.conn(t)
	mustExec(t, a, "CREATE TABLE t (id INT PRIMARY KEY)")
	for i := 0; i < 3; i++ {
		tid := backendThread(t, a)
		killBackend(t, tid)
		// The client never notices: its next statement runs on a healthy
		// backend connection.
		mustExec(t, a, "INSERT INTO t VALUES (?)", i)
		if got := backendThread(t, a); got == tid {
			t.Fatalf("still on killed thread %s", tid)
		}
	}
	if got := queryString(t, a, "SELECT COUNT(*) FROM t"); got != "3" {
		t.Fatalf("%s rows", got)
	}
	if st := p.srv.Stats().Pool; st.Closed[pool.CloseUnhealthy] < 3 {
		t.Fatalf("pool closed %d unhealthy connections, want at least 3", st.Closed[pool.CloseUnhealthy])
	}
}

func TestBackendKilledMidTransaction(t *testing.T) {
	p := twoBackends(t)
	a := p.conn(t)
	mustExec(t, a, "CREATE TABLE t (id INT PRIMARY KEY)")
	mustExec(t, a, "BEGIN")
	mustExec(t, a, "INSERT INTO t VALUES (1)")
	killBackend(t, backendThread(t, a))
	_, err := a.ExecContext(context.Background(), "INSERT INTO t VALUES (2)")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 2013 || !strings.Contains(me.Message, "rolled back") {
		t.Fatalf("statement after the backend died mid-transaction: %v, want error 2013 saying the transaction was rolled back", err)
	}
	// The client connection is closed: nothing may run outside the
	// transaction the application thinks it is in.
	if _, err := a.ExecContext(context.Background(), "INSERT INTO t VALUES (3)"); !errors.Is(err, driver.ErrBadConn) && !errors.Is(err, mysql.ErrInvalidConn) {
		t.Fatalf("next statement on the same connection: %v, want a bad connection", err)
	}
	if got := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t"); got != "0" {
		t.Fatalf("%s rows survived the lost transaction", got)
	}
	// Other clients are fine.
	if got := queryString(t, p.open(t), "SELECT 'ok'"); got != "ok" {
		t.Fatal(got)
	}
}

func TestBackendRestart(t *testing.T) {
	// The relay stands for the backend: Cut takes it down (every
	// connection dropped, new ones refused), Up back up, as a restart does.
	relay := dbtest.StartRelay(t, dbtest.Config(t).Addr, 0)
	p := startProxy(t, func(c *config.Config) {
		c.Backend.Address = relay.Addr().String()
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 2, 4, 4
		c.Pool.AcquireTimeout = time.Second
		// A statement is held this long while there is no primary (the
		// backend down), then answered 9010.
		c.Failover.Hold = 2 * time.Second
	})
	db := p.open(t)
	db.SetMaxOpenConns(3)
	mustExec(t, db, "CREATE TABLE t (id INT PRIMARY KEY)")
	var sessions []*sql.Conn
	for i := 0; i < 3; i++ {
		c, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sessions = append(sessions, c)
		queryString(t, c, "SELECT 1")
	}

	relay.Cut()
	// While the backend is down a statement fails with an error that says
	// so: 9010 (nothing ran, retry) once holdfast's check has seen it,
	// 2003 when the pool's dials failed first.
	_, err := sessions[0].ExecContext(context.Background(), "INSERT INTO t VALUES (100)")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 2003 && me.Number != codePrimarySwitching || !strings.Contains(me.Message, "unreachable") {
		t.Fatalf("statement while the backend is down: %v, want error 9010 or 2003 naming the unreachable backend", err)
	}
	relay.Up()
	// Clients that were idle between transactions carry on as if nothing
	// happened: their first statement after the restart just works.
	for i, s := range sessions {
		mustExec(t, s, "INSERT INTO t VALUES (?)", i)
	}
	if got := queryString(t, sessions[0], "SELECT COUNT(*) FROM t"); got != "3" {
		t.Fatalf("%s rows after restart", got)
	}
}
