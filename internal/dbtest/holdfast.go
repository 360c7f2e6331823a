package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// HoldfastConfig is c as a test runs cmd/holdfast with it: where c leaves
// them empty, the backend is the test server (Config) and its account the
// test's, holdfast's tables are in TablesDB(c.Backend.Database) (dropped
// at cleanup; never the shared default `holdfast`, which would join the
// tests of every package into one fleet), and the pool, when c.YAML has
// none, is min 0, max 4, max_idle 4.
func HoldfastConfig(t testing.TB, c holdfastproc.Config) holdfastproc.Config {
	t.Helper()
	dsn := Config(t)
	if c.Backend.Address == "" {
		c.Backend.Address = dsn.Addr
	}
	if c.Backend.User == "" {
		c.Backend.User, c.Backend.Password = dsn.User, dsn.Passwd
	}
	if c.Fleet.Database == "" {
		c.Fleet.Database = NewTablesDB(t, c.Backend.Database)
	}
	var more map[string]any
	if err := yaml.Unmarshal([]byte(c.YAML), &more); err != nil {
		t.Fatalf("dbtest: holdfast configuration: %v\n%s", err, c.YAML)
	}
	if _, ok := more["pool"]; !ok {
		c.Set = append([]string{"pool.min=0", "pool.max=4", "pool.max_idle=4"}, c.Set...)
	}
	return c
}

// TablesDB is the schema of holdfast's tables (fleet.database) that
// HoldfastConfig gives a holdfast whose backend.database is db.
func TablesDB(db string) string { return db + "_hf" }

// NewTablesDB is TablesDB(db) (a fresh name when db is ""), not created
// (`holdfast migrate` creates it) but dropped at cleanup.
func NewTablesDB(t testing.TB, db string) string {
	t.Helper()
	name := TablesDB(db)
	if db == "" {
		var rb [4]byte
		_, _ = rand.Read(rb[:])
		name = "hf_tables_" + hex.EncodeToString(rb[:])
	}
	t.Cleanup(func() {
		if _, err := Root(t).Exec("DROP DATABASE IF EXISTS `" + name + "`"); err != nil {
			t.Logf("dbtest: drop database %s: %v", name, err)
		}
	})
	return name
}

// WriteHoldfastConfig writes HoldfastConfig(t, c) to path.
func WriteHoldfastConfig(t testing.TB, path string, c holdfastproc.Config) {
	t.Helper()
	if err := HoldfastConfig(t, c).Write(path, ""); err != nil {
		t.Fatal(err)
	}
}

// Holdfast is a holdfast process a test runs (StartHoldfast).
type Holdfast struct {
	*holdfastproc.Process
	Out *SyncBuffer // its output, when Options had no LogPath or Output
}

// NewHoldfast is a holdfast process for o, not started yet, killed at the
// test's cleanup; when the test failed, the end of its output is logged.
// With neither o.LogPath nor o.Output set, its output goes to Out.
func NewHoldfast(t testing.TB, o holdfastproc.Options) *Holdfast {
	t.Helper()
	h := &Holdfast{}
	if o.LogPath == "" && o.Output == nil {
		h.Out = &SyncBuffer{}
		o.Output = h.Out
	}
	h.Process = holdfastproc.New(o)
	t.Cleanup(func() {
		h.Kill()
		if !t.Failed() {
			return
		}
		out := ""
		switch {
		case h.Out != nil:
			out = h.Out.String()
			if len(out) > 16<<10 {
				out = "...\n" + out[len(out)-16<<10:]
			}
		case o.LogPath != "":
			out = holdfastproc.Tail(o.LogPath, 200)
		}
		t.Logf("holdfast output:\n%s", out)
	})
	return h
}

// StartHoldfast is NewHoldfast and Start: it returns once the process is
// ready (Options.Ready), after `holdfast migrate` when migrate is set.
func StartHoldfast(t testing.TB, o holdfastproc.Options, migrate bool) *Holdfast {
	t.Helper()
	h := NewHoldfast(t, o)
	if migrate {
		h.MigrateOrFail(t)
	}
	h.StartOrFail(t)
	return h
}

// MigrateOrFail runs `holdfast migrate` (bounded by a minute, a hang
// guard), failing t on an error.
func (h *Holdfast) MigrateOrFail(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := h.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
}

// StartOrFail starts an incarnation, failing t when it does not become
// ready.
func (h *Holdfast) StartOrFail(t testing.TB) {
	t.Helper()
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
}
