package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/reservation"
)

// migrateOpts are the flags of `holdfast migrate`.
type migrateOpts struct {
	move    *bool
	grants  *bool
	dialect *string
	user    *string
	force   *bool
}

// migratePasswordEnv holds the password of migrate's -user.
const migratePasswordEnv = "HOLDFAST_MIGRATE_PASSWORD"

// migrateFlags defines migrate's flags on fs; force is -force, which
// resync-redis defines too (one flag set serves every command).
func migrateFlags(fs *flag.FlagSet, force *bool) migrateOpts {
	return migrateOpts{
		move:    fs.Bool("move-tables", false, "migrate: move holdfast's tables from backend.database into fleet.database (one atomic RENAME TABLE; running instances follow)"),
		grants:  fs.Bool("print-grants", false, "migrate: print the grants for holdfast's own account and the application accounts, and exit"),
		dialect: fs.String("dialect", "mariadb", "migrate -print-grants: mariadb (10.6+) or mysql (8.0)"),
		user:    fs.String("user", "", "migrate: connect as this account (its password in $"+migratePasswordEnv+") instead of fleet.user"),
		force:   force,
	}
}

// migrate is `holdfast migrate`: it creates or upgrades holdfast's schema
// where its tables are (tables.go), creating fleet.database for a new
// install; with -move-tables it then moves the tables of an install made
// before fleet.database out of backend.database into it.
func migrate(ctx context.Context, cfg config.Config, o migrateOpts, out io.Writer) error {
	if *o.grants {
		return printGrants(out, cfg, *o.dialect)
	}
	user, password := cfg.Own()
	if *o.user != "" {
		user, password = *o.user, os.Getenv(migratePasswordEnv)
	}
	t, err := newTables(cfg, user, password, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer t.close()
	loc, err := t.locate(ctx)
	if err != nil {
		return fmt.Errorf("migrate: as %s: %w", user, err)
	}
	schema, legacy := loc.schema, loc.legacy
	if !legacy {
		if err := createSchema(ctx, cfg, user, password, schema); err != nil {
			return err
		}
	}
	if err := migrateIn(ctx, cfg, user, password, schema, *o.force, out); err != nil {
		return err
	}
	switch {
	case legacy && !*o.move:
		fmt.Fprintf(out, "holdfast's tables are in backend.database (%s), where the application's grants reach them: once every instance runs this version, move them to fleet.database (%s) with holdfast migrate -move-tables\n",
			cfg.Backend.Database, cfg.Fleet.Database)
	case *o.move && !legacy:
		fmt.Fprintf(out, "holdfast's tables are in fleet.database (%s): nothing to move\n", schema)
	case *o.move:
		if err := createSchema(ctx, cfg, user, password, cfg.Fleet.Database); err != nil {
			return err
		}
		db, err := dbAs(cfg, user, password, "", nil)
		if err != nil {
			return err
		}
		defer db.Close()
		moved, err := reservation.MoveTables(ctx, reservation.SQLConns(db), cfg.Backend.Database, cfg.Fleet.Database)
		if err != nil {
			return fmt.Errorf("migrate: as %s: %w", user, err)
		}
		fmt.Fprintf(out, "moved %d tables of holdfast's from %s to %s in one RENAME TABLE; running instances follow them\n",
			len(moved), cfg.Backend.Database, cfg.Fleet.Database)
	}
	return nil
}

// createSchema creates the database schema, unless it exists.
func createSchema(ctx context.Context, cfg config.Config, user, password, schema string) error {
	db, err := dbAs(cfg, user, password, "", nil)
	if err != nil {
		return err
	}
	defer db.Close()
	var name string
	switch err := db.QueryRowContext(ctx, "SELECT schema_name FROM information_schema.SCHEMATA WHERE schema_name = ?", schema).Scan(&name); err {
	case nil:
		return nil
	case sql.ErrNoRows:
	default:
		return fmt.Errorf("migrate: as %s: %w", user, err)
	}
	if _, err := db.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS "+reservation.QuoteName(schema)+" CHARACTER SET utf8mb4"); err != nil {
		return fmt.Errorf("migrate: as %s: create fleet.database: %w", user, err)
	}
	return nil
}

// migrateIn brings holdfast's schema in database schema up to date,
// unless live instances are too old to run against it (checkLive) and
// not force.
func migrateIn(ctx context.Context, cfg config.Config, user, password, schema string, force bool, out io.Writer) error {
	db, err := dbAs(cfg, user, password, schema, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	if err := checkLive(ctx, db, cfg.Fleet.TTL); err != nil {
		if !force {
			return fmt.Errorf("migrate: as %s: %w", user, err)
		}
		fmt.Fprintf(out, "migrate -force: %v\n", err)
	}
	applied, err := reservation.Migrate(ctx, reservation.SQLConns(db))
	if err != nil {
		return fmt.Errorf("migrate: as %s: %w", user, err)
	}
	if len(applied) == 0 {
		fmt.Fprintf(out, "reservation schema is up to date (version %d) in %s/%s\n", reservation.SchemaVersion(), cfg.Backend.Address, schema)
	} else {
		fmt.Fprintf(out, "applied reservation schema migrations %v in %s/%s\n", applied, cfg.Backend.Address, schema)
	}
	return nil
}

// errTooOld is checkLive's error.
var errTooOld = errors.New("live instances of a version of holdfast too old for this version's schema")

// checkLive is migrate's check of the fleet before it applies a step: a
// live instance (seen within ttl) whose newest schema version is below
// reservation.SchemaMin (an instance of a version two or more releases
// older: only a version and the one before it are promised to share a
// database) would run against a schema it is not known to work with, and
// checkLive names it. An instance that records no schema range is of a
// version before schema version 6, which knew reservation.SchemaUnrecorded
// at most. Nothing to apply, or no fleet's tables yet: nil.
func checkLive(ctx context.Context, db *sql.DB, ttl time.Duration) error {
	var have int
	err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+reservation.TableMigrations).Scan(&have)
	switch {
	case sqlErrNumber(err) == 1146: // no schema yet
		return nil
	case err != nil:
		return err
	case have >= reservation.SchemaVersion():
		return nil
	}
	if ttl <= 0 {
		ttl = fleet.DefaultTTL
	}
	q := `SELECT instance_id, version, schema_max FROM ` + reservation.TableMembers + ` WHERE last_seen >= NOW(6) - INTERVAL ? MICROSECOND ORDER BY instance_id`
	rows, err := db.QueryContext(ctx, q, ttl.Microseconds())
	if sqlErrNumber(err) == 1054 { // before schema version 6: no instance records its range
		rows, err = db.QueryContext(ctx, strings.Replace(q, "schema_max", "NULL", 1), ttl.Microseconds())
	}
	switch {
	case sqlErrNumber(err) == 1146: // before schema version 5: no fleet
		return nil
	case err != nil:
		return err
	}
	defer rows.Close()
	var old []string
	for rows.Next() {
		var id, version string
		var newest sql.NullInt64
		if err := rows.Scan(&id, &version, &newest); err != nil {
			return err
		}
		n := int(newest.Int64)
		if !newest.Valid {
			n = reservation.SchemaUnrecorded
		}
		if n < reservation.SchemaMin {
			old = append(old, fmt.Sprintf("%s (version %s, schema up to %d)", id, version, n))
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(old) > 0 {
		return fmt.Errorf("%w: bringing the schema from version %d to %d while %s run(s), whose newest schema is older than %d "+
			"(only a version of holdfast and the one before it may share a database): upgrade or stop them first, or run holdfast migrate -force",
			errTooOld, have, reservation.SchemaVersion(), strings.Join(old, ", "), reservation.SchemaMin)
	}
	return nil
}

// sqlErrNumber is the MySQL error number of err from database/sql (0:
// none).
func sqlErrNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
