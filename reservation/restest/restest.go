// Package restest gives tests of the reservation engine a real, private
// MariaDB (or MySQL) database: NewDB creates a uniquely named database,
// migrates the engine's schema into it and drops it when the test ends. It
// also holds what the engine's tests and the legacy router's tests both
// use (helpers.go): a test config, a logger, scalar queries, reserve's
// lines_json, error codes. Like net/http/httptest it exists only
// for tests; it must not be imported by production code.
//
// The server is internal/dbtest's (HOLDFAST_TEST_DSN, default
// root@tcp(127.0.0.1:3306)/). When it is unreachable the test FAILS with a
// message saying so: the engine's semantics (SKIP LOCKED, gap locks,
// isolation) cannot be checked against anything else, so skipping would
// hide that nothing was tested.
package restest

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
)

// Soak reports whether long soak runs were asked for (HOLDFAST_SOAK=1).
func Soak() bool { return os.Getenv("HOLDFAST_SOAK") == "1" }

// NewDB creates a database (dbtest.NewDatabase), migrates the reservation
// schema into it and returns a pool of at most maxConns connections to it
// (zero means 32) and the database's name. Both are cleaned up when t ends.
func NewDB(t testing.TB, maxConns int) (*sql.DB, string) {
	t.Helper()
	if maxConns == 0 {
		maxConns = 32
	}
	name := dbtest.NewDatabase(t)
	// The engine sends several statements per round trip: OpenVia allows
	// that.
	db := OpenVia(t, name, Target(t), maxConns)
	db.SetConnMaxLifetime(10 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := reservation.Migrate(ctx, reservation.SQLConns(db)); err != nil {
		t.Fatalf("restest: migrate: %v", err)
	}
	return db, name
}

// Admin returns dbtest.Root: the shared pool to the server without a
// default database, for reading global status and information_schema. The
// caller must not close it.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	return dbtest.Root(t)
}

// Snapshot returns every row of the engine's tables in key order, as text,
// so a test can check that a failed call changed nothing.
func Snapshot(t testing.TB, db *sql.DB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	ctx := context.Background()
	c, err := reservation.SQLConns(db).Borrow(ctx, "restest:snapshot")
	if err != nil {
		t.Fatalf("restest: snapshot: %v", err)
	}
	defer c.Release(false)
	for table, order := range map[string]string{
		reservation.TableLedger:       "shop_id, inventory_item_id, inventory_group_id",
		reservation.TableUnits:        "shop_id, inventory_item_id, inventory_group_id, id",
		reservation.TableReserved:     "reservation_id, line_no",
		reservation.TableReservations: "reservation_id",
		reservation.TableCounters:     "shop_id, inventory_item_id, inventory_group_id",
		reservation.TableReturns:      "shop_id, inventory_item_id, inventory_group_id, reservation_id, line_no",
	} {
		rows, err := c.Query(ctx, "SELECT * FROM "+table+" ORDER BY "+order)
		if err != nil {
			t.Fatalf("restest: snapshot %s: %v", table, err)
		}
		for _, row := range rows {
			out[table] = append(out[table], string(bytes.Join(row, []byte("|"))))
		}
	}
	return out
}
