package dbtest

import (
	"fmt"
	"os"
	"testing"
)

// HoldfastYAML is the configuration file a test runs cmd/holdfast with:
// its backend is the test server (Config) as the test's account.
type HoldfastYAML struct {
	Listen   string // listen
	Users    string // the items of users (YAML list items)
	Backend  string // backend.address; "" is the test server's
	Database string // backend.database
	// BackendMore is more of backend's body (indented YAML), such as
	// replicas.
	BackendMore string
	Pool        string // the body of pool (indented YAML); "" is min 0, max 4, max_idle 4
	Admin       string // the body of admin (indented YAML)
	Extra       string // further top-level YAML
}

// WriteHoldfastYAML writes y to path.
func WriteHoldfastYAML(t testing.TB, path string, y HoldfastYAML) {
	t.Helper()
	c := Config(t)
	if y.Backend == "" {
		y.Backend = c.Addr
	}
	if y.Pool == "" {
		y.Pool = "  min: 0\n  max: 4\n  max_idle: 4\n"
	}
	cfg := fmt.Sprintf(`listen: %s
users:
%s
backend:
  address: %s
  user: %s
  password: %q
  database: %s
%spool:
%sadmin:
%s%s`, y.Listen, y.Users, y.Backend, c.User, c.Passwd, y.Database, y.BackendMore, y.Pool, y.Admin, y.Extra)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
}
