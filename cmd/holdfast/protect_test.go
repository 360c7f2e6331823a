package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// Through holdfast, as the ordinary user app (backend.user: no grants keep
// it off holdfast's tables), statements that write or lock holdfast's own
// tables in fleet.database get error 9009 and change nothing, the issue's
// drain among them, named qualified or after USE; reads and CALL
// holdfast.* work. Every table the migrations create is protected.
func TestClientsCannotWriteHoldfastTables(t *testing.T) {
	p := newProcess(t)
	writeConfig(t, p.config, p.addr, p.db, appUser)
	p.migrate(t)
	p.serve(t)
	schema := dbtest.TablesDB(p.db)
	direct := dbtest.Open(t, schema)

	var tables []string
	rows, err := direct.Query("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = ? ORDER BY 1", schema)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		tables = append(tables, n)
	}
	rows.Close()
	for _, tb := range tables {
		if !slices.Contains(holdfastTables, tb) {
			t.Errorf("table %s, created by holdfast migrate, is not protected (holdfastTables)", tb)
		}
	}
	if len(tables) != len(holdfastTables) {
		t.Fatalf("holdfast migrate created %d tables %v; holdfastTables has %d", len(tables), tables, len(holdfastTables))
	}

	app := p.open(t, "app", "app")
	app.SetMaxOpenConns(1) // one session: USE holds for the statements after it
	ctx := context.Background()
	if _, err := app.ExecContext(ctx, "CALL holdfast.receive(7, 1001, 1, 10)"); err != nil {
		t.Fatal(err)
	}
	snapshot := func() string {
		var b strings.Builder
		for _, tb := range holdfastTables {
			var name, create string
			if err := direct.QueryRow("SHOW CREATE TABLE `"+tb+"`").Scan(&name, &create); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := direct.QueryRow("SELECT COUNT(*) FROM `" + tb + "`").Scan(&n); err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s\n%d rows\n", create, n)
		}
		var onHand int
		if err := direct.QueryRow("SELECT on_hand FROM inventory_ledger").Scan(&onHand); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "on_hand %d", onHand)
		return b.String()
	}
	before := snapshot()
	refused := func(q string, args ...any) {
		t.Helper()
		_, err := app.ExecContext(ctx, q, args...)
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 9009 || string(me.SQLState[:]) != "42000" {
			t.Errorf("%s: %v, want error 9009 (42000)", q, err)
		}
	}
	refused("INSERT INTO " + schema + ".holdfast_controls (tag, kind, value, set_by, reason, set_at, expires_at) VALUES ('checkout','drain',0,'oncall-lead','INC-1',NOW(6),NULL)")
	refused("UPDATE `" + schema + "`.inventory_ledger SET on_hand = 1000000")
	if _, err := app.ExecContext(ctx, "USE "+schema); err != nil {
		t.Fatal(err)
	}
	refused("INSERT INTO holdfast_controls (tag, kind, value, set_by, reason, set_at, expires_at) VALUES ('checkout','drain',0,'oncall-lead','INC-1',NOW(6),NULL)")
	for _, tb := range holdfastTables {
		for _, f := range []string{
			"INSERT INTO %[1]s () VALUES ()",
			"INSERT INTO %[1]s SELECT * FROM %[1]s",
			"REPLACE INTO %[2]s.%[1]s SELECT * FROM %[1]s",
			"UPDATE %[1]s SET x = 1",
			"DELETE FROM `%[1]s`",
			"TRUNCATE %[1]s",
			"ALTER TABLE %[1]s ENGINE = InnoDB",
			"DROP TABLE %[1]s",
			"LOCK TABLES %[1]s READ",
			"SELECT * FROM %[1]s FOR UPDATE",
			"EXECUTE IMMEDIATE 'DELETE FROM %[1]s'",
		} {
			refused(fmt.Sprintf(f, tb, schema))
		}
		refused("DELETE FROM "+strings.ToUpper(tb)+" WHERE 1 = ?", 1) // prepared
		var n int
		if err := app.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+tb).Scan(&n); err != nil {
			t.Errorf("reading %s: %v", tb, err)
		}
	}
	if after := snapshot(); after != before {
		t.Errorf("holdfast's tables changed:\nbefore %s\nafter %s", before, after)
	}
	// The application's own table of the same name, in backend.database,
	// is the application's.
	if _, err := dbtest.Root(t).Exec("CREATE TABLE `" + p.db + "`.reservations (id INT PRIMARY KEY, v INT)"); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"USE " + p.db, "INSERT INTO reservations VALUES (1, 1)", "UPDATE reservations SET v = 2", "DELETE FROM reservations"} {
		if _, err := app.ExecContext(ctx, q); err != nil {
			t.Errorf("%s in the application's database: %v", q, err)
		}
	}
	var onHand int
	if err := app.QueryRowContext(ctx, "SELECT on_hand FROM "+schema+".inventory_ledger WHERE inventory_item_id = ?", 1001).Scan(&onHand); err != nil || onHand != 10 {
		t.Fatalf("reading the ledger through holdfast: %d %v", onHand, err)
	}
}
