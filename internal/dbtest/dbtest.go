// Package dbtest gives tests a real MariaDB: the server named by
// HOLDFAST_TEST_DSN (a go-sql-driver DSN for an account that may create
// databases and users; default root@tcp(127.0.0.1:3306)/), and a fresh
// database per test, dropped when the test ends. `make test` starts a
// server when none answers; tests fail, never skip, when it is missing.
package dbtest

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// DSN returns the test server's DSN.
func DSN() string {
	if v := os.Getenv("HOLDFAST_TEST_DSN"); v != "" {
		return v
	}
	return "root@tcp(127.0.0.1:3306)/"
}

// Config returns the parsed DSN.
func Config(t testing.TB) *mysql.Config {
	t.Helper()
	c, err := mysql.ParseDSN(DSN())
	if err != nil {
		t.Fatalf("dbtest: HOLDFAST_TEST_DSN: %v", err)
	}
	return c
}

var (
	rootOnce sync.Once
	rootDB   *sql.DB
	rootErr  error
)

// Root returns a shared pool to the test server with no default database.
func Root(t testing.TB) *sql.DB {
	t.Helper()
	rootOnce.Do(func() {
		c, err := mysql.ParseDSN(DSN())
		if err != nil {
			rootErr = err
			return
		}
		c.DBName = ""
		c.MultiStatements = true
		rootDB, rootErr = sql.Open("mysql", c.FormatDSN())
		if rootErr == nil {
			rootDB.SetMaxIdleConns(4)
			deadline := time.Now().Add(10 * time.Second)
			for {
				if rootErr = rootDB.Ping(); rootErr == nil || time.Now().After(deadline) {
					break
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
	})
	if rootErr != nil {
		t.Fatalf("dbtest: MariaDB not reachable at %s: %v (run `make test`, which starts one, or set HOLDFAST_TEST_DSN)", DSN(), rootErr)
	}
	return rootDB
}

var nonWord = regexp.MustCompile(`[^a-z0-9]+`)

// NewDatabase creates a database for this test and drops it at cleanup.
func NewDatabase(t testing.TB) string {
	t.Helper()
	db := Root(t)
	var rb [4]byte
	_, _ = rand.Read(rb[:])
	base := nonWord.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 40 {
		base = base[:40]
	}
	name := fmt.Sprintf("hf_%s_%s", base, hex.EncodeToString(rb[:]))
	if _, err := db.Exec("CREATE DATABASE `" + name + "`"); err != nil {
		t.Fatalf("dbtest: create database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Logf("dbtest: drop database %s: %v", name, err)
		}
	})
	return name
}

// Open returns a pool to database name on the test server, closed at
// cleanup. params are DSN parameters such as "multiStatements=true".
func Open(t testing.TB, name string, params ...string) *sql.DB {
	t.Helper()
	c := Config(t)
	c.DBName = name
	dsn := c.FormatDSN()
	if len(params) > 0 {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + strings.Join(params, "&")
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// OpenAs returns a pool to database name (may be "") on the test server
// as user with password, closed at cleanup.
func OpenAs(t testing.TB, user, password, name string, params ...string) *sql.DB {
	t.Helper()
	c := Config(t)
	c.User, c.Passwd, c.DBName = user, password, name
	dsn := c.FormatDSN()
	if len(params) > 0 {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + strings.Join(params, "&")
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// NewUser creates a backend account with all privileges on database name
// (so a test can count its connections in the process list) and drops it
// at cleanup. It returns the user name; the password is the same.
func NewUser(t testing.TB, name string) string {
	t.Helper()
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	u := "hfu_" + hex.EncodeToString(rb[:])
	db := Root(t)
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", u, u),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", name, u),
		fmt.Sprintf("GRANT PROCESS ON *.* TO '%s'@'%%'", u),
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("dbtest: %s: %v", q, err)
		}
	}
	t.Cleanup(func() { _, _ = db.Exec(fmt.Sprintf("DROP USER IF EXISTS '%s'@'%%'", u)) })
	return u
}

// NewAccount returns the test server's address, a fresh database and an
// account (password = name) that may use it, for clients that dial the
// server themselves.
func NewAccount(t testing.TB) (addr, db, user string) {
	t.Helper()
	db = NewDatabase(t)
	user = NewUser(t, db)
	return Config(t).Addr, db, user
}

// Connections counts the server's connections for user (from the process
// list, which is MariaDB's own view).
func Connections(t testing.TB, user string) int {
	t.Helper()
	var n int
	if err := Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", user).Scan(&n); err != nil {
		t.Fatalf("dbtest: count connections: %v", err)
	}
	return n
}

// StartRelay starts a netrelay.Relay on 127.0.0.1 to target (usually
// Config(t).Addr), adding delay each way, and closes it at cleanup. Tests
// cut, stall or slow the server with it.
func StartRelay(t testing.TB, target string, delay time.Duration) *netrelay.Relay {
	t.Helper()
	r, err := netrelay.Start("127.0.0.1:0", target, delay)
	if err != nil {
		t.Fatalf("dbtest: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// ScanStrings scans the current row of rows as text: one string a column,
// NULL as "".
func ScanStrings(rows *sql.Rows) ([]string, error) {
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return nil, err
	}
	out := make([]string, len(cols))
	for i, v := range vals {
		out[i] = v.String
	}
	return out, nil
}
