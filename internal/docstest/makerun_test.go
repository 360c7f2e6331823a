package docstest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// TestMakeRun runs `make run` as the README's set-up says, on the test's
// MariaDB and private listeners (environment overrides, as an operator
// would use), and then what it prints: the connect line, whose `-c` must
// carry a tag comment through to holdfast's attribution, the holdfastctl
// line and the status page address. `make run` serves until stopped; the
// test stops it with SIGTERM.
func TestMakeRun(t *testing.T) {
	for _, tool := range []string{"make", "mariadb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is required (make test installs the mariadb client): %v", tool, err)
		}
	}
	c := dbtest.Config(t)
	db := dbtest.NewDatabase(t)
	// The connect line names the database `test`, as the README does.
	if _, err := dbtest.Root(t).Exec("CREATE DATABASE IF NOT EXISTS test"); err != nil {
		t.Fatal(err)
	}
	listen, admin := dbtest.FreeAddr(t), dbtest.FreeAddr(t)
	cmd := exec.Command("make", "--no-print-directory", "run")
	cmd.Dir = repo
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOLDFAST_") && !strings.HasPrefix(kv, "MAKE") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env,
		"HOLDFAST_LISTEN="+listen,
		"HOLDFAST_ADMIN_LISTEN="+admin,
		"HOLDFAST_BACKEND_ADDRESS="+c.Addr,
		"HOLDFAST_BACKEND_USER="+c.User,
		"HOLDFAST_BACKEND_PASSWORD="+c.Passwd,
		"HOLDFAST_BACKEND_DATABASE="+db,
		"HOLDFAST_FLEET_DATABASE="+dbtest.NewTablesDB(t, db),
	)
	out := &dbtest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // make, the script and holdfast
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		// holdfast (the script execs it) is make's child: it drains and
		// exits 0 on SIGTERM, and then make does too.
		kids, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%[1]d/children", cmd.Process.Pid))
		for _, k := range strings.Fields(string(kids)) {
			if pid, err := strconv.Atoi(k); err == nil {
				_ = syscall.Kill(pid, syscall.SIGTERM)
			}
		}
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
			return context.DeadlineExceeded
		}
	}
	t.Cleanup(func() { _ = stop() })

	// The build comes first; the guard is against a hang, not a timing.
	connect := regexp.MustCompile(`(?m)^\s+(mariadb .*)$`)
	watch := regexp.MustCompile(`(?m)^\s+(bin/holdfastctl .*top)$`)
	page := regexp.MustCompile(`status page at (http://\S+/) `)
	deadline := time.Now().Add(5 * time.Minute)
	for !connect.MatchString(out.String()) || !page.MatchString(out.String()) {
		select {
		case err := <-exited:
			t.Fatalf("make run exited (%v) before printing how to connect:\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("make run printed no connect line:\n%s", out.String())
		}
	}
	text := out.String()
	line := connect.FindStringSubmatch(text)[1]
	if !strings.Contains(line, "-P "+listen[strings.LastIndex(listen, ":")+1:]) {
		t.Errorf("the connect line %q does not name the listen port of %s", line, listen)
	}
	w := watch.FindStringSubmatch(text)
	if w == nil || !strings.Contains(w[1], admin) {
		t.Fatalf("no holdfastctl line naming %s:\n%s", admin, text)
	}
	if u := page.FindStringSubmatch(text)[1]; u != "http://"+admin+"/" {
		t.Errorf("status page %s, want http://%s/", u, admin)
	}

	// The connect line, as printed, with a tagged statement: -c keeps the
	// comment, so the tag is counted.
	args := append(strings.Fields(line)[1:], "-N", "-e", "/* conn_tag:make_run */ SELECT 'through holdfast'")
	var got []byte
	var err error
	for end := time.Now().Add(time.Minute); ; {
		actx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
		got, err = exec.CommandContext(actx, "mariadb", args...).CombinedOutput()
		cancel()
		if err == nil || time.Now().After(end) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil || strings.TrimSpace(string(got)) != "through holdfast" {
		t.Fatalf("%s: %v\n%s\nholdfast's output:\n%s", line, err, got, out.String())
	}
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctl := exec.CommandContext(cctx, repo+"/bin/holdfastctl", "-addr", admin, "tags")
	tags, err := ctl.CombinedOutput()
	if err != nil || !strings.Contains(string(tags), "make_run") {
		t.Errorf("holdfastctl tags after a tagged statement from the connect line: %v\n%s", err, tags)
	}
	// make run stamps its build (scripts/ldflags.sh): never "devel".
	v, err := exec.CommandContext(cctx, repo+"/bin/holdfast", "version").Output()
	if first, _, _ := strings.Cut(string(v), "\n"); err != nil || first == "" || strings.Contains(first, "devel") {
		t.Errorf("bin/holdfast version after make run: %q, %v", first, err)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + admin + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ToLower(string(body)), "<html") {
		t.Errorf("the status page: %s\n%.200s", resp.Status, body)
	}
	if err := stop(); err != nil {
		t.Errorf("make run did not stop cleanly on SIGTERM: %v\n%s", err, out.String())
	}
}
