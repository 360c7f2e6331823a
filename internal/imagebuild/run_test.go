package imagebuild

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// TestImageRun runs `make image-run` as the README says, on the test's
// MariaDB and private listeners (HOLDFAST_* variables, which it passes
// into the container as docker run -e would), and checks that the
// image's entrypoint serves make run's example: a client logs in as app
// through it, and the process runs as the image's user (65532, no
// supplementary groups) inside the unpacked root, with /proc mounted
// (its process_* metrics come from there). SIGTERM drains and stops it.
func TestImageRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("make image-run needs root (chroot, the image's user, a mount namespace), as a container runtime does: run this test as root")
	}
	c := dbtest.Config(t)
	db := dbtest.NewDatabase(t)
	listen, admin := dbtest.FreeAddr(t), dbtest.FreeAddr(t)
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	cmd := makeCmd(t, "image-run", "IMAGE="+filepath.Join(tmp, "holdfast.tar"), "IMAGE_ROOT="+root)
	env := cmd.Env[:0:0]
	for _, kv := range cmd.Env {
		if !strings.HasPrefix(kv, "HOLDFAST_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"HOLDFAST_LISTEN="+listen,
		"HOLDFAST_ADMIN_LISTEN="+admin,
		"HOLDFAST_BACKEND_ADDRESS="+c.Addr,
		"HOLDFAST_BACKEND_USER="+c.User,
		"HOLDFAST_BACKEND_PASSWORD="+c.Passwd,
		"HOLDFAST_BACKEND_DATABASE="+db,
	)
	out := &dbtest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
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
		// The runner is make's child (the script execs it): it passes
		// SIGTERM on to holdfast, which drains and exits 0, and so do
		// the runner and make.
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

	// The build comes first; the bound is a hang guard, not a timing.
	connect := regexp.MustCompile(`(?m)^\s+mariadb -c -h (\S+) -P (\d+) -u app -papp test$`)
	deadline := time.Now().Add(8 * time.Minute)
	for !connect.MatchString(out.String()) || !strings.Contains(out.String(), "holdfast listening") {
		select {
		case err := <-exited:
			t.Fatalf("make image-run exited (%v) before serving:\n%s", err, out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("make image-run did not serve:\n%s", out.String())
		}
	}
	m := connect.FindStringSubmatch(out.String())
	if got := m[1] + ":" + m[2]; got != listen {
		t.Errorf("the connect line names %s, want %s", got, listen)
	}
	client, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s", listen, db))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var got string
	if err := client.QueryRow("/* conn_tag:image_run */ SELECT 'through the image'").Scan(&got); err != nil || got != "through the image" {
		t.Fatalf("a client through the image: %q, %v\n%s", got, err, out.String())
	}

	// The process: the image's entrypoint, as its user, in its root.
	pid := findEntrypoint(t, root)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for _, l := range strings.Split(string(status), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			fields[k] = strings.Join(strings.Fields(v), " ")
		}
	}
	for k, want := range map[string]string{"Uid": "65532 65532 65532 65532", "Gid": "65532 65532 65532 65532", "Groups": ""} {
		if fields[k] != want {
			t.Errorf("the entrypoint's %s: %q, want %q", k, fields[k], want)
		}
	}
	metrics, err := holdfastproc.Scrape(context.Background(), admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"process_resident_memory_bytes", "process_open_fds", "go_goroutines"} {
		if metrics[name] <= 0 {
			t.Errorf("%s = %v in the image's /metrics", name, metrics[name])
		}
	}
	if v := metrics.ByLabel("holdfast_build_info", "version"); len(v) != 1 || v["devel"] == 1 {
		t.Errorf("holdfast_build_info: %v, want the stamped version", v)
	}
	if err := stop(); err != nil {
		t.Errorf("make image-run did not stop cleanly on SIGTERM: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), `msg=stopped`) {
		t.Errorf("holdfast did not drain and stop:\n%s", out.String())
	}
}

// findEntrypoint is the pid of the process running the image's
// entrypoint with root as its root directory.
func findEntrypoint(t *testing.T, root string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		r, err := os.Readlink(fmt.Sprintf("/proc/%d/root", pid))
		if err != nil || r != root {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if argv := strings.Split(string(cmdline), "\x00"); argv[0] == BinaryPath {
			return pid
		}
	}
	t.Fatalf("no process runs %s in %s", BinaryPath, root)
	return 0
}
