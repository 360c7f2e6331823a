package main

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/reservation"
)

// suggestedFleetUser names holdfast's own account in the grants printed
// while fleet.user is empty.
const suggestedFleetUser = "holdfast_fleet"

// printGrants writes the grants that keep applications off holdfast's
// tables and connections (`holdfast migrate -print-grants`), for dialect
// "mariadb" (10.6+) or "mysql" (8.0). It reads no database. '%' stands for
// the hosts the accounts connect from.
func printGrants(w io.Writer, cfg config.Config, dialect string) error {
	var connAdmin, monitor string
	switch dialect {
	case "mariadb", "":
		connAdmin, monitor = "CONNECTION ADMIN", "SLAVE MONITOR"
	case "mysql":
		connAdmin, monitor = "CONNECTION_ADMIN", "REPLICATION CLIENT"
	default:
		return fmt.Errorf("migrate: -dialect %q: want mariadb or mysql", dialect)
	}
	fleetDB, appDB := reservation.QuoteName(cfg.Fleet.Database), reservation.QuoteName(cfg.Backend.Database)
	own := cfg.Fleet.User
	fmt.Fprintf(w, "-- holdfast's grants (holdfast migrate -print-grants -dialect %s). '%%' stands for the\n", cmp.Or(dialect, "mariadb"))
	fmt.Fprintln(w, "-- hosts holdfast connects from.")
	if own == "" {
		own = suggestedFleetUser
		fmt.Fprintf(w, "--\n-- fleet.user is empty: holdfast's own work connects as backend.user (%s), so the\n", cfg.Backend.User)
		fmt.Fprintf(w, "-- application can change holdfast's tables and end its connections. Create an account\n")
		fmt.Fprintf(w, "-- for it, e.g. %s, and set fleet.user and fleet.password (read at start-up).\n", own)
	}
	acct := accountLiteral(own)
	fmt.Fprintf(w, "\n-- holdfast's own account (fleet.user): the fleet, the engine, kills, the replica checks,\n")
	fmt.Fprintf(w, "-- the reconciler, the authority switch, migrate. Create it first, with fleet.password:\n")
	fmt.Fprintf(w, "--   CREATE USER %s IDENTIFIED BY '<fleet.password>';\n", acct)
	fmt.Fprintf(w, "-- Everything on holdfast's schema, fleet.database (migrate creates it and its tables):\n")
	fmt.Fprintf(w, "GRANT ALL PRIVILEGES ON %s.* TO %s;\n", fleetDB, acct)
	fmt.Fprintf(w, "-- Kills: a client's KILL QUERY ends its statement on a connection of the application's account.\n")
	fmt.Fprintf(w, "GRANT %s ON *.* TO %s;\n", connAdmin, acct)
	fmt.Fprintf(w, "-- The topology and replica checks: which server is the primary, whom each replicates from.\n")
	fmt.Fprintf(w, "GRANT %s ON *.* TO %s;\n", monitor, acct)

	apps := appAccounts(cfg)
	fmt.Fprintf(w, "\n-- Application accounts (backend.user and users[].backend_user): what the application needs\n")
	fmt.Fprintf(w, "-- on backend.database, and nothing on %s: no grant on *.* (it reaches every schema),\n", fleetDB)
	fmt.Fprintf(w, "-- no SUPER or %s (they end any connection, holdfast's included).\n", connAdmin)
	for _, a := range apps {
		if a == "root" {
			fmt.Fprintf(w, "-- The application's account is root, which may do anything, holdfast's tables and\n")
			fmt.Fprintf(w, "-- connections included: give it an account of its own (backend.user, users[].backend_user).\n")
			continue
		}
		fmt.Fprintf(w, "GRANT SELECT, INSERT, UPDATE, DELETE ON %s.* TO %s;\n", appDB, accountLiteral(a))
	}
	fmt.Fprintf(w, "-- To let an application read (only read) the engine's tables; mind that reservations.reservation_id\n")
	fmt.Fprintf(w, "-- is every reservation's token (rsv_ and its hex digits), which alone authorises claim and release:\n")
	for _, a := range apps {
		if a != "root" {
			fmt.Fprintf(w, "--   GRANT SELECT ON %s.* TO %s;\n", fleetDB, accountLiteral(a))
		}
	}

	if cfg.Fleet.Database != cfg.Backend.Database {
		fmt.Fprintf(w, "\n-- Only for an install made before fleet.database, whose tables are still in %s: until\n", appDB)
		fmt.Fprintf(w, "-- `holdfast migrate -move-tables` moves them, %s uses them there, and moves them\n", own)
		fmt.Fprintf(w, "-- (ALTER, DROP). Remove the leading -- to apply; revoke them after the move.\n")
		for _, tb := range reservation.Tables {
			fmt.Fprintf(w, "-- GRANT SELECT, INSERT, UPDATE, DELETE, ALTER, DROP ON %s.%s TO %s;\n", appDB, reservation.QuoteName(tb), acct)
		}
	}
	return nil
}

// appAccounts are the backend accounts of applications: backend.user and
// every users[].backend_user, holdfast's own (fleet.user) left out.
func appAccounts(cfg config.Config) []string {
	var out []string
	for _, a := range append([]string{cfg.Backend.User}, backendUsers(cfg)...) {
		if a != "" && a != cfg.Fleet.User && !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

func backendUsers(cfg config.Config) []string {
	var out []string
	for _, u := range cfg.Users {
		out = append(out, u.BackendUser)
	}
	return out
}

// accountLiteral is 'user'@'%'.
func accountLiteral(user string) string {
	return "'" + strings.ReplaceAll(user, "'", "''") + "'@'%'"
}
