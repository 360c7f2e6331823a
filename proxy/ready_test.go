package proxy

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// TestHoldLogins: while the hold is on, a client that connects is not
// served: past pool.acquire_timeout it is refused with 9013 (SQLSTATE
// 08004), before its handshake, and nothing it sent ran. Once the hold
// lifts, clients log in and are served.
func TestHoldLogins(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.AcquireTimeout = 300 * time.Millisecond })
	open := make(chan struct{})
	p.srv.HoldLogins(open, "the test holds them")
	db := p.open(t)
	if _, err := p.direct(t).Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	_, err := db.Exec("INSERT INTO t VALUES (1)")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9013 || string(me.SQLState[:]) != "08004" {
		t.Fatalf("a login while held: %v, want error 9013 (08004)", err)
	}
	t.Logf("refused: %v", err)
	close(open)
	if _, err := db.Exec("INSERT INTO t VALUES (2)"); err != nil {
		t.Fatalf("after the hold lifted: %v", err)
	}
	var ids []string
	rows, err := p.direct(t).Query("SELECT id FROM t")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if len(ids) != 1 || ids[0] != "2" {
		t.Fatalf("rows %v, want [2]: the refused login's statement must not run", ids)
	}
}

// TestReadinessBackendDownAtStart: a backend that does not answer at
// start is tried again without waiting for a client, and the front end
// reports it answered once it did; Drain makes it stop listening.
func TestReadinessBackendDownAtStart(t *testing.T) {
	relay := dbtest.StartRelay(t, dbtest.Config(t).Addr, 0)
	relay.Cut()
	p := startProxy(t, func(c *config.Config) {
		c.Backend.Address = relay.Addr().String()
		c.Backend.DialTimeout = time.Second
	})
	dbtest.Eventually(t, "the client listener accepts", func() bool { return p.srv.Readiness().Listening })
	if r := p.srv.Readiness(); r.BackendAnswered {
		t.Fatalf("readiness %+v with the backend cut", r)
	}
	relay.Up()
	dbtest.Eventually(t, "the backend answered, with no client asking", func() bool { return p.srv.Readiness().BackendAnswered })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if r := p.srv.Readiness(); r.Listening || !r.BackendAnswered {
		t.Fatalf("readiness after Drain: %+v, want not listening, backend answered", r)
	}
}
