package main

import (
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
)

// holdfast migrate applies a step while the live instances are of this
// version or the one before it (which records no schema range: a version
// before schema 6), and refuses, naming them, while a live instance's
// newest schema is older than reservation.SchemaMin; -force applies it
// anyway. Instances not seen within fleet.ttl do not count.
func TestMigrateRefusesTooOldInstances(t *testing.T) {
	p := newProcess(t)
	writeConfig(t, p.config, p.addr, p.db, appUser)
	p.migrate(t)
	tables := dbtest.Open(t, dbtest.TablesDB(p.db), "")
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := tables.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	migrate := func(args ...string) (string, error) {
		out, err := guarded(t, binary(t), append([]string{"migrate", "-config", p.config}, args...)...).CombinedOutput()
		return string(out), err
	}
	pending := func() {
		exec("DELETE FROM "+reservation.TableMigrations+" WHERE version = ?", reservation.SchemaVersion())
	}

	// An instance of the version before this one, beating as it does.
	pending()
	exec(`INSERT INTO holdfast_members (instance_id, address, version, pool_max, stmt_budget, started_at, last_seen)
VALUES ('previous', 'h:1', 'v-prev', 4, 0, NOW(6), NOW(6))`)
	if out, err := migrate(); err != nil || !strings.Contains(out, "applied reservation schema migrations") {
		t.Fatalf("migrate beside an instance of the version before: %v\n%s", err, out)
	}

	// An instance whose newest schema is older than this version's oldest.
	pending()
	exec(`INSERT INTO holdfast_members (instance_id, address, version, pool_max, stmt_budget, started_at, last_seen, schema_min, schema_max, control_kinds)
VALUES ('ancient', 'h:2', 'v-old', 4, 0, NOW(6), NOW(6), ?, ?, 'drain')`, reservation.SchemaMin-2, reservation.SchemaMin-1)
	out, err := migrate()
	if err == nil || !strings.Contains(out, "ancient (version v-old") || !strings.Contains(out, "-force") {
		t.Fatalf("migrate beside an instance too old: %v\n%s", err, out)
	}
	var have int
	if err := tables.QueryRow("SELECT COUNT(*) FROM "+reservation.TableMigrations+" WHERE version = ?", reservation.SchemaVersion()).Scan(&have); err != nil || have != 0 {
		t.Fatalf("the refused step was recorded as applied (%d, %v)", have, err)
	}
	if out, err := migrate("-force"); err != nil || !strings.Contains(out, "applied reservation schema migrations") {
		t.Fatalf("migrate -force: %v\n%s", err, out)
	}

	// Gone (not seen within fleet.ttl): it does not hold a step back.
	pending()
	exec("UPDATE holdfast_members SET last_seen = NOW(6) - INTERVAL 1 HOUR WHERE instance_id = 'ancient'")
	if out, err := migrate(); err != nil {
		t.Fatalf("migrate with the old instance gone: %v\n%s", err, out)
	}
}
