package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// binary builds holdfast once per test binary run.
func binary(t *testing.T) string { return dbtest.Command(t, "./cmd/holdfast") }

// guarded is exec.Command for a short-lived child of a test, killed after
// a minute: a hang guard, not a timing assertion.
func guarded(t *testing.T, name string, args ...string) *exec.Cmd {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return exec.CommandContext(ctx, name, args...)
}

// holdfastctl is guarded for the holdfastctl binary bin, with the write
// credential of the holdfast processes tests run in its environment.
func holdfastctl(t *testing.T, bin string, args ...string) *exec.Cmd {
	cmd := guarded(t, bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOLDFAST_ADMIN_TOKEN="+holdfastproc.AdminToken)
	return cmd
}

// process is a holdfast process of a test: its client address, its
// database and its configuration file.
type process struct {
	*dbtest.Holdfast
	addr   string
	db     string
	config string
}

// appUser is the client account of most tests.
var appUser = []holdfastproc.User{{Name: "app", Password: "app"}}

func writeConfig(t *testing.T, path, addr, db string, users []holdfastproc.User) {
	writeConfigAdmin(t, path, addr, db, users, "", "")
}

// writeConfigAdmin is writeConfig with admin.listen admin and more YAML.
func writeConfigAdmin(t *testing.T, path, addr, db string, users []holdfastproc.User, admin, more string) {
	dbtest.WriteHoldfastConfig(t, path, holdfastproc.Config{Listen: addr, Users: users, Admin: admin,
		Backend: holdfastproc.Backend{Database: db}, YAML: "shutdown_grace: 20s\nlog:\n  level: debug\n" + more})
}

// newProcess is a holdfast process not started yet: a free address, a
// fresh database and a place for its configuration.
func newProcess(t *testing.T) *process {
	return newProcessOn(t, dbtest.NewDatabase(t))
}

// newProcessOn is newProcess on the database db.
func newProcessOn(t *testing.T, db string) *process {
	p := &process{addr: dbtest.FreeAddr(t), db: db, config: filepath.Join(t.TempDir(), "holdfast.yaml")}
	p.Holdfast = dbtest.NewHoldfast(t, holdfastproc.Options{Bin: binary(t), Config: p.config, Listen: p.addr})
	return p
}

func start(t *testing.T, users []holdfastproc.User) *process {
	t.Helper()
	p := newProcess(t)
	writeConfig(t, p.config, p.addr, p.db, users)
	return p.serve(t)
}

// migrate applies the schema with holdfast migrate on p's configuration.
func (p *process) migrate(t *testing.T) { t.Helper(); p.MigrateOrFail(t) }

// serve starts holdfast serve on p's configuration and waits until it
// listens.
func (p *process) serve(t *testing.T) *process {
	t.Helper()
	p.StartOrFail(t)
	return p
}

func (p *process) open(t *testing.T, user, pass string) *sql.DB {
	db, err := sql.Open("mysql", fmt.Sprintf("%s:%s@tcp(%s)/%s", user, pass, p.addr, p.db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSIGHUPReloadsUsers(t *testing.T) {
	p := start(t, appUser)
	app := p.open(t, "app", "app")
	conn, err := app.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(context.Background(), "SET @kept = 'yes'"); err != nil {
		t.Fatal(err)
	}
	late := p.open(t, "late", "late-pw")
	if err := late.Ping(); err == nil {
		t.Fatal("user late logged in before it was configured")
	}
	writeConfig(t, p.config, p.addr, p.db, []holdfastproc.User{{Name: "late", Password: "late-pw"}})
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for late.Ping() != nil {
		if time.Now().After(deadline) {
			t.Fatal("user late still refused after SIGHUP")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The connected client keeps its session (and its pinned state).
	var kept string
	if err := conn.QueryRowContext(context.Background(), "SELECT @kept").Scan(&kept); err != nil || kept != "yes" {
		t.Fatalf("existing session after reload: %q, %v", kept, err)
	}
	// The removed user can no longer log in.
	fresh := p.open(t, "app", "app")
	if err := fresh.Ping(); err == nil {
		t.Fatal("removed user app still logs in")
	}
}

func TestSIGTERMDrains(t *testing.T) {
	p := start(t, appUser)
	db := p.open(t, "app", "app")
	if _, err := db.Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	inTxn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idle, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := idle.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := inTxn.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New connections are refused once the listener closes.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", p.addr)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("still accepting connections after SIGTERM")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The idle client is closed; the one inside a transaction finishes it.
	if _, err := idle.ExecContext(ctx, "SELECT 1"); err == nil {
		t.Fatal("idle client still served during drain")
	}
	if _, err := tx.Exec("INSERT INTO t VALUES (2)"); err != nil {
		t.Fatalf("statement inside the open transaction during drain: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit during drain: %v", err)
	}
	select {
	case <-p.Done():
		if err := p.ExitErr(); err != nil {
			t.Fatalf("holdfast exited with %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("holdfast did not exit after its last transaction ended")
	}
	var n int
	if err := dbtest.Open(t, p.db).QueryRow("SELECT COUNT(*) FROM t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d rows committed (%v), want 2", n, err)
	}
	if !strings.Contains(p.Out.String(), "shutting down") {
		t.Fatalf("no shutdown log:\n%s", p.Out.String())
	}
}

func TestCheckConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("pool:\n  max: 0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := guarded(t, binary(t), "check-config", "-config", bad).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pool.max") {
		t.Fatalf("check-config on a bad file: %v\n%s", err, out)
	}
}

func TestChooseProcs(t *testing.T) {
	for _, tc := range []struct {
		maxProcs, available int
		fromEnv             bool
		want                int
	}{
		{0, 1, false, 1},
		{0, 2, false, 1},
		{0, 4, false, 2},
		{0, 8, false, 4},
		{0, 64, false, 4},
		{0, 6, true, 6}, // GOMAXPROCS=6 in the environment
		{3, 64, true, 3},
		{16, 2, false, 16},
	} {
		if got, why := chooseProcs(tc.maxProcs, tc.available, tc.fromEnv); got != tc.want || why == "" {
			t.Errorf("chooseProcs(%d, %d, %v) = %d, %q; want %d", tc.maxProcs, tc.available, tc.fromEnv, got, why, tc.want)
		}
	}
}
