package holdfastproc

import (
	"context"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// fakeMode, in the environment, makes the test binary a stand-in for
// holdfast serve: it listens on the configuration's listen address and
// exits 0 on SIGTERM ("serve"), exits 2 at once ("fail"), or exits 3 a
// moment after it listens ("crash").
const fakeMode = "FAKE_SERVE_MODE"

func TestMain(m *testing.M) {
	if mode := os.Getenv(fakeMode); mode != "" {
		os.Exit(fakeServe(mode))
	}
	os.Exit(m.Run())
}

func fakeServe(mode string) int {
	if mode == "fail" || len(os.Args) < 4 || os.Args[1] != "serve" {
		return 2
	}
	b, err := os.ReadFile(os.Args[3])
	if err != nil {
		return 2
	}
	var c struct{ Listen string }
	if yaml.Unmarshal(b, &c) != nil {
		return 2
	}
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return 2
	}
	defer ln.Close()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	crash := time.After(time.Hour)
	if mode == "crash" {
		crash = time.After(300 * time.Millisecond)
	}
	select {
	case <-term:
		return 0
	case <-crash:
		return 3
	}
}

// fake is a Process running the test binary as holdfast serve in mode.
func fake(t *testing.T, mode string) *Process {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir := t.TempDir()
	cfg := filepath.Join(dir, "holdfast.yaml")
	if err := (Config{Listen: addr}).Write(cfg, ""); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := New(Options{Bin: self, Config: cfg, Listen: addr, LogPath: filepath.Join(dir, "holdfast.log"),
		Env: []string{fakeMode + "=" + mode}})
	t.Cleanup(p.Kill)
	return p
}

// TestProcessLifecycle: start, kill -9, start again, stop with SIGTERM;
// none of it counts as an exit nobody asked for.
func TestProcessLifecycle(t *testing.T) {
	p := fake(t, "serve")
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !p.Alive() || p.Pid() == 0 {
		t.Fatal("not alive after Start")
	}
	p.Kill()
	if p.Alive() {
		t.Fatal("alive after Kill")
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if p.Starts() != 2 || len(p.UnexpectedExits()) != 0 {
		t.Fatalf("starts %d, unexpected exits %q", p.Starts(), p.UnexpectedExits())
	}
	if log := Tail(p.LogPath(), 10); strings.Count(log, "---- start ") != 2 {
		t.Fatalf("log:\n%s", log)
	}
}

// TestProcessExits: an incarnation that exits by itself is reported; one
// that exits while starting fails Start.
func TestProcessExits(t *testing.T) {
	p := fake(t, "crash")
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second): // a hang guard
		t.Fatal("the crashing stand-in did not exit")
	}
	if ex := p.UnexpectedExits(); len(ex) != 1 || !strings.Contains(ex[0], "exited by itself: exit status 3") {
		t.Fatalf("unexpected exits %q", ex)
	}
	f := fake(t, "fail")
	if err := f.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "exited while starting") {
		t.Fatalf("Start of a process that exits at once: %v", err)
	}
}
