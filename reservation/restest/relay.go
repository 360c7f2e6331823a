package restest

import (
	"database/sql"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// Relay is a netrelay.Relay on 127.0.0.1 that delays every chunk of bytes
// by a fixed time in each direction, standing in for network latency on
// machines without netem.
type Relay struct {
	*netrelay.Relay
	Addr string // host:port to dial instead of the target
}

// NewRelay starts a relay to target adding delay each way; it stops when t
// ends.
func NewRelay(t testing.TB, target string, delay time.Duration) *Relay {
	t.Helper()
	r := dbtest.StartRelay(t, target, delay)
	return &Relay{Relay: r, Addr: r.Addr().String()}
}

// OpenVia opens a pool of at most maxConns connections to database name
// through addr (a Relay's), closed when t ends.
func OpenVia(t testing.TB, name, addr string, maxConns int) *sql.DB {
	t.Helper()
	cfg := dbtest.Config(t)
	cfg.Addr, cfg.Net, cfg.DBName = addr, "tcp", name
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	return db
}

// Target returns the server address of the test DSN.
func Target(t testing.TB) string { return dbtest.Config(t).Addr }
