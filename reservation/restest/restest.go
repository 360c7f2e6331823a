// Package restest gives tests of the reservation engine a real, private
// MariaDB (or MySQL) database: NewDB creates a uniquely named database,
// migrates the engine's schema into it and drops it when the test ends. Like
// net/http/httptest it exists only for tests; it must not be imported by
// production code.
//
// The server is taken from HOLDFAST_TEST_DSN (default
// root@tcp(127.0.0.1:3306)/). When it is unreachable the test FAILS with a
// message saying so: the engine's semantics (SKIP LOCKED, gap locks,
// isolation) cannot be checked against anything else, so skipping would
// hide that nothing was tested.
package restest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/reservation"
)

// DefaultDSN is used when HOLDFAST_TEST_DSN is unset.
const DefaultDSN = "root@tcp(127.0.0.1:3306)/"

// DSN returns the server DSN tests use.
func DSN() string {
	if d := os.Getenv("HOLDFAST_TEST_DSN"); d != "" {
		return d
	}
	return DefaultDSN
}

// Soak reports whether long soak runs were asked for (HOLDFAST_SOAK=1).
func Soak() bool { return os.Getenv("HOLDFAST_SOAK") == "1" }

// NewDB creates a database named hf_res_<random>, migrates the reservation
// schema into it and returns a pool of at most maxConns connections to it
// (zero means 32) and the database's name. Both are cleaned up when t ends.
func NewDB(t testing.TB, maxConns int) (*sql.DB, string) {
	t.Helper()
	if maxConns == 0 {
		maxConns = 32
	}
	cfg, err := mysql.ParseDSN(DSN())
	if err != nil {
		t.Fatalf("restest: bad HOLDFAST_TEST_DSN %q: %v", DSN(), err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("restest: open %s: %v", DSN(), err)
	}
	defer admin.Close()
	if err := admin.PingContext(ctx); err != nil {
		t.Fatalf("restest: MariaDB/MySQL at %s is unreachable (these tests need a real server; set HOLDFAST_TEST_DSN): %v", cfg.Addr, err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "hf_res_" + hex.EncodeToString(b[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("restest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		a, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Errorf("restest: drop %s: %v", name, err)
			return
		}
		defer a.Close()
		if _, err := a.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name); err != nil {
			t.Errorf("restest: drop %s: %v", name, err)
		}
	})
	cfg.DBName = name
	cfg.MultiStatements = true // the engine sends several statements per round trip
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatalf("restest: open %s: %v", name, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	db.SetConnMaxLifetime(10 * time.Minute)
	t.Cleanup(func() { db.Close() })
	if _, err := reservation.Migrate(ctx, reservation.SQLConns(db)); err != nil {
		t.Fatalf("restest: migrate: %v", err)
	}
	return db, name
}

// Admin opens a connection pool to the server without a default database,
// closed when t ends, for reading global status and information_schema.
func Admin(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", DSN())
	if err != nil {
		t.Fatalf("restest: open %s: %v", DSN(), err)
	}
	db.SetMaxOpenConns(4)
	t.Cleanup(func() { db.Close() })
	return db
}

// Snapshot returns every row of the engine's tables in key order, as text,
// so a test can check that a failed call changed nothing.
func Snapshot(t testing.TB, db *sql.DB) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for table, order := range map[string]string{
		reservation.TableLedger:       "shop_id, inventory_item_id, inventory_group_id",
		reservation.TableUnits:        "shop_id, inventory_item_id, inventory_group_id, id",
		reservation.TableReserved:     "reservation_id, line_no",
		reservation.TableReservations: "reservation_id",
		reservation.TableCounters:     "shop_id, inventory_item_id, inventory_group_id",
		reservation.TableReturns:      "shop_id, inventory_item_id, inventory_group_id, reservation_id, line_no",
	} {
		rows, err := db.Query("SELECT * FROM " + table + " ORDER BY " + order)
		if err != nil {
			t.Fatalf("restest: snapshot %s: %v", table, err)
		}
		cols, _ := rows.Columns()
		raw := make([]sql.RawBytes, len(cols))
		dest := make([]any, len(cols))
		for i := range raw {
			dest[i] = &raw[i]
		}
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				t.Fatalf("restest: snapshot %s: %v", table, err)
			}
			line := ""
			for i, c := range raw {
				if i > 0 {
					line += "|"
				}
				line += string(c)
			}
			out[table] = append(out[table], line)
		}
		rows.Close()
	}
	return out
}
