package reservation_test

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestTablesListsEveryMigratedTable: Tables, what a move renames and
// grants name, is every table the migrations create.
func TestTablesListsEveryMigratedTable(t *testing.T) {
	re := regexp.MustCompile(`CREATE TABLE IF NOT EXISTS (\w+)`)
	want := []string{reservation.TableMigrations}
	for _, m := range reservation.Migrations {
		for _, s := range m.Statements {
			for _, g := range re.FindAllStringSubmatch(s, -1) {
				want = append(want, g[1])
			}
		}
	}
	got := slices.Clone(reservation.Tables)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("reservation.Tables %v, the migrations create %v", got, want)
	}
}

// TestMoveTables: a migrated schema's tables move to another in one
// rename, rows and all; the probe finds them there and no longer in the
// first; a second move finds nothing to move; a move into a schema that
// holds some of them already moves nothing.
func TestMoveTables(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, from := restest.NewDB(t, 4)
	to := dbtest.NewDatabase(t)
	conns := reservation.SQLConns(db)
	if _, err := db.Exec("INSERT INTO holdfast_duties (duty, holder, expires_at) VALUES ('sweeper', 'x', NOW(6))"); err != nil {
		t.Fatal(err)
	}
	probe := func(schema string) bool {
		t.Helper()
		c, err := conns.Borrow(ctx, "test")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Release(false)
		ok, err := reservation.HasTables(ctx, c, schema)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !probe(from) || probe(to) || probe("hf_no_such_schema") {
		t.Fatalf("before the move: tables in %s %v, in %s %v", from, probe(from), to, probe(to))
	}
	moved, err := reservation.MoveTables(ctx, conns, from, to)
	if err != nil {
		t.Fatal(err)
	}
	if len(moved) != len(reservation.Tables) {
		t.Fatalf("moved %v, want all of %v", moved, reservation.Tables)
	}
	if probe(from) || !probe(to) {
		t.Fatalf("after the move: tables in %s %v, in %s %v", from, probe(from), to, probe(to))
	}
	var holder string
	if err := db.QueryRow("SELECT holder FROM " + reservation.QuoteName(to) + ".holdfast_duties").Scan(&holder); err != nil || holder != "x" {
		t.Fatalf("the moved table's row: %q, %v", holder, err)
	}
	if again, err := reservation.MoveTables(ctx, conns, from, to); err != nil || len(again) != 0 {
		t.Fatalf("a second move: %v, %v; want nothing to move", again, err)
	}

	// Both schemas holding some: nothing moves.
	third := dbtest.NewDatabase(t)
	if _, err := db.Exec("CREATE TABLE " + reservation.QuoteName(third) + ".holdfast_controls (x INT)"); err != nil {
		t.Fatal(err)
	}
	_, err = reservation.MoveTables(ctx, conns, to, third)
	if err == nil || !strings.Contains(err.Error(), "already holds holdfast_controls; nothing was moved") {
		t.Fatalf("a move into a schema holding one of the tables: %v", err)
	}
	if !probe(to) {
		t.Fatal("the refused move moved something")
	}
}

// TestHasTablesWithoutPrivilege: an account with no privilege on a schema
// cannot tell whether holdfast's tables are there, and says so.
func TestHasTablesWithoutPrivilege(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, name := restest.NewDB(t, 4)
	user := dbtest.NewUser(t, name+"_other") // all privileges on another database
	other := dbtest.OpenAs(t, user, user, "")
	conn, err := reservation.SQLConns(other).Borrow(ctx, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release(false)
	if _, err := reservation.HasTables(ctx, conn, name); !errors.Is(err, reservation.ErrNoAccess) {
		t.Fatalf("probe without privileges: %v, want ErrNoAccess", err)
	}
}
