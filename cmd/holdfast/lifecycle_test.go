package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// probed is a holdfast process with an admin listener whose start is
// awaited on /livez (and, when asked, its client listener): it may be
// unready, its backend down.
type probed struct {
	*process
	admin string // the admin listener's URL
}

// newProbed is a probed holdfast not started yet, on database db, with
// its configuration written from c (Listen, Admin and Backend.Database
// filled in); listening: its start also waits for the client listener.
func newProbed(t *testing.T, db string, listening bool, c holdfastproc.Config) *probed {
	t.Helper()
	addr, adminAddr := dbtest.FreeAddr(t), dbtest.FreeAddr(t)
	p := &process{addr: addr, db: db, config: filepath.Join(t.TempDir(), "holdfast.yaml")}
	url := "http://" + adminAddr
	p.Holdfast = dbtest.NewHoldfast(t, holdfastproc.Options{Bin: binary(t), Config: p.config, Listen: addr,
		Ready: func(ctx context.Context) error {
			if code, body := askProbe(ctx, url+admin.LivePath); code != http.StatusOK {
				return fmt.Errorf("%s: %d %s", admin.LivePath, code, body)
			}
			if listening {
				return holdfastproc.DialReady(addr)(ctx)
			}
			return nil
		}})
	c.Listen, c.Admin, c.Backend.Database = addr, adminAddr, db
	dbtest.WriteHoldfastConfig(t, p.config, c)
	return &probed{process: p, admin: url}
}

// askProbe asks url with no credential, as a kubelet does; 0 when nothing
// answered.
func askProbe(ctx context.Context, url string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// readyz is /readyz's status and the conditions it says are unmet.
func (p *probed) readyz(t *testing.T) (int, []string) {
	t.Helper()
	code, body := askProbe(context.Background(), p.admin+admin.ReadyPath)
	var ans struct{ Unmet []string }
	if code != 0 {
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatalf("%s: %d %v: %s", admin.ReadyPath, code, err, body)
		}
	}
	return code, ans.Unmet
}

// unmetSay reports whether one of unmet starts with each of words.
func unmetSay(unmet []string, words ...string) bool {
	for _, w := range words {
		if !slices.ContainsFunc(unmet, func(u string) bool { return strings.HasPrefix(u, w+":") }) {
			return false
		}
	}
	return true
}

// The life of a sidecar whose backend is down at start: /livez answers
// at once (no credential) while the backend is down, /readyz is 503
// naming the backend and the fleet until the backend is back and the
// controls are read, then 200; /api/status and the fleet's members table
// carry the build's version; from SIGTERM on /readyz is 503 while
// shutdown_delay keeps the client listener open and clients served; a
// second signal ends the delay.
func TestProbesBackendDownAtStart(t *testing.T) {
	relay := dbtest.StartRelay(t, dbtest.Config(t).Addr, 0)
	p := newProbed(t, dbtest.NewDatabase(t), false, holdfastproc.Config{Users: appUser,
		Backend: holdfastproc.Backend{Address: relay.Addr().String()},
		YAML:    "backend:\n  dial_timeout: 1s\nfleet:\n  poll_interval: 200ms\n  ttl: 1s\nshutdown_delay: 5m\nlog:\n  level: debug\n"})
	p.migrate(t)
	relay.Cut()
	p.serve(t) // returns once /livez answers 200

	if code, unmet := p.readyz(t); code != http.StatusServiceUnavailable || !unmetSay(unmet, "backend", "fleet") {
		t.Fatalf("%s with the backend down: %d %q, want 503 naming the backend and the fleet", admin.ReadyPath, code, unmet)
	}
	if code, body := askProbe(context.Background(), p.admin+admin.LivePath); code != http.StatusOK {
		t.Fatalf("%s with the backend down: %d %s", admin.LivePath, code, body)
	}
	relay.Up()
	within(t, 30*time.Second, "ready once the backend is back", func() bool {
		code, _ := p.readyz(t)
		return code == http.StatusOK
	})

	// The version: the build's, in /api/status and the members table.
	out, err := exec.Command(binary(t), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	want := strings.TrimPrefix(first, "holdfast ")
	var st struct {
		Version string `json:"version"`
		Fleet   struct {
			Instance string `json:"instance_id"`
		} `json:"fleet"`
	}
	dbtest.FetchJSON(t, p.admin+"/api/status", &st)
	if st.Version != want {
		t.Errorf("/api/status version %q, want %q", st.Version, want)
	}
	var fs struct {
		Status fleet.Status `json:"status"`
	}
	dbtest.FetchJSON(t, p.admin+"/api/fleet", &fs)
	if i := slices.IndexFunc(fs.Status.Members, func(m fleet.Member) bool { return m.ID == st.Fleet.Instance }); i < 0 ||
		fs.Status.Members[i].Version != want {
		t.Errorf("members %+v: want %s with version %q", fs.Status.Members, st.Fleet.Instance, want)
	}

	// SIGTERM: unready at once, but served on for shutdown_delay.
	app := p.open(t, "app", "app")
	if _, err := app.Exec("SELECT 1"); err != nil {
		t.Fatal(err)
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	within(t, 10*time.Second, "unready from SIGTERM on", func() bool {
		code, unmet := p.readyz(t)
		return code == http.StatusServiceUnavailable && unmetSay(unmet, "stopping")
	})
	if code, _ := p.readyz(t); code != http.StatusServiceUnavailable {
		t.Fatalf("%s after SIGTERM: %d", admin.ReadyPath, code)
	}
	fresh := p.open(t, "app", "app") // new connections too
	for i, db := range []*sql.DB{app, fresh} {
		if _, err := db.Exec("SELECT 1"); err != nil {
			t.Fatalf("client %d during shutdown_delay: %v", i, err)
		}
	}
	if code, body := askProbe(context.Background(), p.admin+admin.LivePath); code != http.StatusOK {
		t.Fatalf("%s during shutdown_delay: %d %s", admin.LivePath, code, body)
	}
	if err := p.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
		if err := p.ExitErr(); err != nil {
			t.Fatalf("holdfast exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a second signal did not end shutdown_delay")
	}
	if log := p.Out.String(); !strings.Contains(log, "shutdown_delay cut short") {
		t.Errorf("no log of the delay cut short:\n%s", log)
	}
}

// A drain in force before an instance starts applies from its first
// statement, even when the instance cannot read the fleet's controls at
// start (here its account may not, yet): logins wait, /readyz names the
// fleet, and once the controls are read the waiting statement is refused
// as drained; it never ran.
func TestDrainInForceBeforeStart(t *testing.T) {
	db := dbtest.NewDatabase(t)
	tables := dbtest.NewTablesDB(t, db)
	c := holdfastproc.Config{Users: appUser, Fleet: holdfastproc.Fleet{Database: tables},
		YAML: "fleet:\n  poll_interval: 200ms\n  ttl: 1s\nlog:\n  level: debug\n", Set: []string{"pool.acquire_timeout=60s"}}
	p := newProbed(t, db, false, c)
	p.migrate(t)
	if _, err := dbtest.Open(t, db).Exec("CREATE TABLE t (id INT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err := fleet.NewStore(dbtest.Open(t, tables, "parseTime=true")).SetControl(ctx,
		fleet.Control{Tag: "checkout", Kind: fleet.KindDrain, SetBy: "test", Reason: "drained before start"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	// holdfast's own account, with no grant yet.
	own := newAccount(t, "hffleet_")
	c.Fleet.User, c.Fleet.Password = own, own
	c.Listen, c.Admin, c.Backend.Database = p.addr, strings.TrimPrefix(p.admin, "http://"), db
	dbtest.WriteHoldfastConfig(t, p.config, c)
	p.serve(t)
	if code, unmet := p.readyz(t); code != http.StatusServiceUnavailable || !unmetSay(unmet, "fleet") {
		t.Fatalf("%s before the controls were read: %d %q", admin.ReadyPath, code, unmet)
	}
	// The client listener opens after the fleet's first read was tried
	// for fleet.ttl.
	within(t, 30*time.Second, "the client listener accepts", func() bool {
		return holdfastproc.DialReady(p.addr)(context.Background()) == nil
	})

	app := p.open(t, "app", "app")
	first := make(chan error, 1)
	go func() {
		_, err := app.Exec("/* conn_tag:checkout */ INSERT INTO t VALUES (1)")
		first <- err
	}()
	// Whether or not it has reached holdfast yet, it must not have run.
	select {
	case err := <-first:
		t.Fatalf("the first statement was answered before the fleet's controls were read: %v", err)
	default:
	}
	applyGrants(t, []string{fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", tables, own)})
	select {
	case err = <-first:
	case <-time.After(45 * time.Second):
		t.Fatal("the first statement is still waiting after the controls became readable")
	}
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9001 {
		t.Fatalf("the first statement of the drained tag: %v, want error 9001 (drained)", err)
	}
	if !refuses(app, "checkout") || !serves(app, "other") {
		t.Fatal("after the first: the drained tag is not refused, or another is not served")
	}
	var n int
	if err := dbtest.Open(t, db).QueryRow("SELECT COUNT(*) FROM t").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows (%v): the drained statement ran", n, err)
	}
	within(t, 10*time.Second, "ready once the controls are read", func() bool {
		code, _ := p.readyz(t)
		return code == http.StatusOK
	})
}

// reloadAnswer is POST /api/reload's answer.
type reloadAnswer struct {
	Reloaded        bool     `json:"reloaded"`
	Changed         []string `json:"changed"`
	RestartRequired []string `json:"restart_required"`
	Refused         []string `json:"refused"`
	Error           string   `json:"error"`
}

func (p *probed) reload(t *testing.T, token string) (int, reloadAnswer) {
	t.Helper()
	code, body := request(t, http.MethodPost, p.admin+"/api/reload", token)
	var ans reloadAnswer
	if code == http.StatusOK || code == http.StatusUnprocessableEntity {
		if err := json.Unmarshal([]byte(body), &ans); err != nil {
			t.Fatalf("POST /api/reload: %d %v: %s", code, err, body)
		}
	}
	return code, ans
}

// logsIn reports whether user logs in through p.
func logsIn(t *testing.T, p *process, user, password string) bool {
	db := p.open(t, user, password)
	defer db.Close()
	return db.Ping() == nil
}

// POST /api/reload reloads as SIGHUP does, behind a write credential, and
// answers what changed, what needs a restart, or why it was refused
// (then nothing changed).
func TestReloadThroughAPI(t *testing.T) {
	db := dbtest.NewDatabase(t)
	c := holdfastproc.Config{Users: appUser}
	p := newProbed(t, db, true, c)
	p.serve(t)
	if !logsIn(t, p.process, "app", "app") || logsIn(t, p.process, "late", "late-pw") {
		t.Fatal("users before the reload")
	}
	c.Users = append(c.Users, holdfastproc.User{Name: "late", Password: "late-pw"})
	c.Listen, c.Admin, c.Backend.Database = p.addr, strings.TrimPrefix(p.admin, "http://"), db
	dbtest.WriteHoldfastConfig(t, p.config, c)
	if code, _ := p.reload(t, ""); code != http.StatusUnauthorized {
		t.Fatalf("POST /api/reload without a credential: %d", code)
	}
	if logsIn(t, p.process, "late", "late-pw") {
		t.Fatal("a refused reload applied the file")
	}
	code, ans := p.reload(t, holdfastproc.AdminToken)
	if code != http.StatusOK || !ans.Reloaded || !slices.Equal(ans.Changed, []string{"users"}) || len(ans.RestartRequired) != 0 {
		t.Fatalf("POST /api/reload: %d %+v, want users changed", code, ans)
	}
	if !logsIn(t, p.process, "late", "late-pw") {
		t.Fatal("user late refused after the reload")
	}

	// A file that does not load: refused, nothing changes.
	c.YAML = "pool:\n  max: 0\n"
	dbtest.WriteHoldfastConfig(t, p.config, c)
	code, ans = p.reload(t, holdfastproc.AdminToken)
	if code != http.StatusUnprocessableEntity || ans.Reloaded || !strings.Contains(ans.Error, "pool.max") {
		t.Fatalf("POST /api/reload of a bad file: %d %+v", code, ans)
	}
	if !logsIn(t, p.process, "late", "late-pw") {
		t.Fatal("user late refused after a refused reload")
	}

	// What only a restart applies is said, and not counted as changed.
	c.YAML = "shutdown_grace: 25s\nbackend:\n  dial_timeout: 7s\n"
	dbtest.WriteHoldfastConfig(t, p.config, c)
	code, ans = p.reload(t, holdfastproc.AdminToken)
	if code != http.StatusOK || !slices.Equal(ans.Changed, []string{"shutdown_grace"}) || !slices.Equal(ans.RestartRequired, []string{"backend.dial_timeout"}) {
		t.Fatalf("POST /api/reload: %d %+v, want shutdown_grace changed and backend.dial_timeout waiting for a restart", code, ans)
	}
	if !strings.Contains(p.Out.String(), `by=harness`) {
		t.Errorf("the reload's log line does not name the credential:\n%s", p.Out.String())
	}

	// holdfastctl reload and status.
	ctlBin := dbtest.Command(t, "./cmd/holdfastctl")
	c.YAML = "shutdown_grace: 21s\n"
	dbtest.WriteHoldfastConfig(t, p.config, c)
	out, err := holdfastctl(t, ctlBin, "-addr", p.admin, "reload").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "changed: shutdown_grace\nwaiting for a restart: none\n") {
		t.Fatalf("holdfastctl reload: %v\n%s", err, out)
	}
	out, err = holdfastctl(t, ctlBin, "-addr", p.admin, "status").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nready\n") || !strings.Contains(string(out), "holdfast ") {
		t.Fatalf("holdfastctl status: %v\n%s", err, out)
	}
	t.Logf("holdfastctl status:\n%s", out)
}

// reload_watch applies a change of the configuration, and of a file it
// names, made the way a Kubernetes ConfigMap or Secret volume makes it:
// the files are reached through a symlink (..data) that is swapped to a
// new directory, the file itself never written.
func TestReloadWatch(t *testing.T) {
	db := dbtest.NewDatabase(t)
	dir := t.TempDir()
	// version writes a new directory of the volume: config.yaml and the
	// password of user late, then points ..data at it.
	n := 0
	var c holdfastproc.Config
	version := func(late string) {
		t.Helper()
		n++
		d := filepath.Join(dir, fmt.Sprintf("..2026_%02d", n))
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "late"), []byte(late+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := dbtest.HoldfastConfig(t, c).Write(filepath.Join(d, "config.yaml"), ""); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(d), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	p := newProbed(t, db, true, holdfastproc.Config{Users: appUser})
	c = holdfastproc.Config{Listen: p.addr, Admin: strings.TrimPrefix(p.admin, "http://"), Users: appUser,
		Backend: holdfastproc.Backend{Database: db}, YAML: "reload_watch: 1s\nlog:\n  level: debug\n"}
	c = dbtest.HoldfastConfig(t, c) // the tables' schema fixed now, for every version
	version("late-1")
	for _, f := range []string{"config.yaml", "late"} {
		if err := os.Symlink(filepath.Join("..data", f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	p.config = filepath.Join(dir, "config.yaml")
	p.Holdfast = dbtest.NewHoldfast(t, holdfastproc.Options{Bin: binary(t), Config: p.config, Listen: p.addr})
	p.serve(t)
	if logsIn(t, p.process, "late", "late-1") {
		t.Fatal("user late logs in before it is configured")
	}

	// A new version of the volume adds user late, its password a file.
	c.YAML += "users:\n  - {name: app, password: app}\n  - {name: late, password_file: " + filepath.Join(dir, "late") + "}\n"
	version("late-1")
	within(t, 20*time.Second, "user late logs in after the volume's swap", func() bool { return logsIn(t, p.process, "late", "late-1") })
	// The next rotates the password alone: config.yaml is the same.
	version("late-2")
	within(t, 20*time.Second, "the rotated password in force", func() bool {
		return logsIn(t, p.process, "late", "late-2") && !logsIn(t, p.process, "late", "late-1")
	})
	if log := p.Out.String(); !strings.Contains(log, "by=reload_watch") {
		t.Errorf("no reload by reload_watch logged:\n%s", log)
	}
}
