package reservation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Where holdfast's tables live. Every statement of the engine, the fleet
// and the authority switch names its tables without a schema, so they are
// found in the current database of the connection that runs it: the
// caller opens its connections there. Since fleet.database, that is a
// schema of holdfast's own; installs made before it have the tables in
// the application's backend.database (the legacy location) until
// MoveTables moves them.

// Tables lists every table of holdfast's schema, as the migrations create
// them: what MoveTables moves and grants name.
var Tables = []string{
	TableMigrations,
	TableLedger, TableUnits, TableReserved, TableReservations, // version 1
	TableCounters, TableReturns, // 2
	TableAuthority, TableRedisState, // 4
	TableControls, TableMembers, TableGrants, TableDuties, // 5
}

// Numbers of the errors the probes act on.
const (
	errNumNoSuchTable = 1146 // ER_NO_SUCH_TABLE (also for a missing database)
	errNumTableAccess = 1142 // ER_TABLEACCESS_DENIED_ERROR: no privilege on the table, whether or not it exists
	errNumDBAccess    = 1044 // ER_DBACCESS_DENIED_ERROR
)

// ErrNoAccess is wrapped by HasTables' error when the account may not
// read the schema's tables: it cannot tell whether they are there.
var ErrNoAccess = errors.New("reservation: no privilege to read holdfast's tables there")

// HasTables reports whether schema holds holdfast's tables (its
// migrations table), probing with one statement on c. A schema that does
// not exist has none. An account without privileges there gets an error
// wrapping ErrNoAccess (MariaDB answers it whether or not the table
// exists).
func HasTables(ctx context.Context, c Conn, schema string) (bool, error) {
	_, err := c.Query(ctx, "SELECT 1 FROM "+QuoteName(schema)+"."+TableMigrations+" LIMIT 0")
	switch n, _ := dbErrorNumber(err); {
	case err == nil:
		return true, nil
	case n == errNumNoSuchTable:
		return false, nil
	case n == errNumTableAccess || n == errNumDBAccess:
		return false, fmt.Errorf("%w (%s): %w", ErrNoAccess, schema, err)
	}
	return false, fmt.Errorf("reservation: look for holdfast's tables in %s: %w", schema, err)
}

// IsMissingTable reports whether err is the database's "table doesn't
// exist" (1146): a statement of holdfast's ran where its tables are not
// (they moved, or were never created).
func IsMissingTable(err error) bool { return IsDBError(err, errNumNoSuchTable) }

// QuoteName quotes an identifier (a schema or table name) for MySQL.
func QuoteName(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// MoveTables renames every one of holdfast's tables that schema from
// holds into schema to (which must exist) in one RENAME TABLE: atomic, so
// every statement sees all of them in one place or all in the other, and
// quick (no row is copied). It fails, moving nothing, when to holds any of
// them already. The account needs ALTER and DROP on the tables in from,
// CREATE and INSERT in to. It returns the tables moved (none when from
// holds none).
func MoveTables(ctx context.Context, conns Conns, from, to string) (moved []string, err error) {
	if from == to {
		return nil, nil
	}
	c, err := conns.Borrow(ctx, TagMigrate)
	if err != nil {
		return nil, fmt.Errorf("reservation: move tables: borrow: %w", err)
	}
	broken := false
	defer func() { c.Release(broken) }()
	have := func(schema string) ([]string, error) {
		rows, err := c.Query(ctx, "SELECT table_name FROM information_schema.TABLES WHERE table_schema = ?", schema)
		if err != nil {
			broken = !isDB(err)
			return nil, fmt.Errorf("reservation: move tables: list %s: %w", schema, err)
		}
		var out []string
		for _, r := range rows {
			if name := string(r[0]); slices.Contains(Tables, name) {
				out = append(out, name)
			}
		}
		slices.Sort(out)
		return out, nil
	}
	src, err := have(from)
	if err != nil || len(src) == 0 {
		return nil, err
	}
	dst, err := have(to)
	if err != nil {
		return nil, err
	}
	if len(dst) > 0 {
		return nil, fmt.Errorf("reservation: move tables: %s already holds %s; nothing was moved (rename or drop them in one of the two schemas first)",
			to, strings.Join(dst, ", "))
	}
	var b strings.Builder
	b.WriteString("RENAME TABLE ")
	for i, t := range src {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s.%s TO %s.%s", QuoteName(from), QuoteName(t), QuoteName(to), QuoteName(t))
	}
	if _, err := c.Exec(ctx, b.String()); err != nil {
		broken = !isDB(err)
		return nil, fmt.Errorf("reservation: move tables from %s to %s: %w", from, to, err)
	}
	return src, nil
}
