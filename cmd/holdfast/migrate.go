package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/reservation"
)

// migrateOpts are the flags of `holdfast migrate`.
type migrateOpts struct {
	move    *bool
	grants  *bool
	dialect *string
	user    *string
}

// migratePasswordEnv holds the password of migrate's -user.
const migratePasswordEnv = "HOLDFAST_MIGRATE_PASSWORD"

func migrateFlags(fs *flag.FlagSet) migrateOpts {
	return migrateOpts{
		move:    fs.Bool("move-tables", false, "migrate: move holdfast's tables from backend.database into fleet.database (one atomic RENAME TABLE; running instances follow)"),
		grants:  fs.Bool("print-grants", false, "migrate: print the grants for holdfast's own account and the application accounts, and exit"),
		dialect: fs.String("dialect", "mariadb", "migrate -print-grants: mariadb (10.6+) or mysql (8.0)"),
		user:    fs.String("user", "", "migrate: connect as this account (its password in $"+migratePasswordEnv+") instead of fleet.user"),
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
	if err := migrateIn(ctx, cfg, user, password, schema, out); err != nil {
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

// migrateIn brings holdfast's schema in database schema up to date.
func migrateIn(ctx context.Context, cfg config.Config, user, password, schema string, out io.Writer) error {
	db, err := dbAs(cfg, user, password, schema, nil)
	if err != nil {
		return err
	}
	defer db.Close()
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
