package restest

import (
	"database/sql"
	"testing"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// OpenVia opens a pool of at most maxConns connections to database name
// through addr (a relay's, see dbtest.StartRelay), closed when t ends.
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
