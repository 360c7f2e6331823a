package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// TestVersionStamped: a build stamped as the Makefile stamps it (the flags
// of scripts/ldflags.sh) reports the stamp, and `holdfast version` needs
// no configuration.
func TestVersionStamped(t *testing.T) {
	root, err := holdfastproc.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	flags := guarded(t, filepath.Join(root, "scripts", "ldflags.sh"))
	flags.Env = append(flags.Environ(), "VERSION=v9.8.7-test", "COMMIT=0123456789abcdef", "BUILD_DATE=2026-12-06T13:02:11Z")
	ld, err := flags.Output()
	if err != nil {
		t.Fatalf("scripts/ldflags.sh: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "holdfast")
	build := guarded(t, "go", "build", "-ldflags", strings.TrimSpace(string(ld)), "-o", bin, "./cmd/holdfast")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// A configuration that does not load must not matter to `version`.
	cmd := guarded(t, bin, "version")
	cmd.Env = append(cmd.Environ(), "HOLDFAST_LISTEN=not an address")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("holdfast version: %v\n%s", err, out)
	}
	for _, want := range []string{"holdfast v9.8.7-test\n", "commit  0123456789abcdef\n", "built   2026-12-06T13:02:11Z\n", "go      go1."} {
		if !strings.Contains(string(out), want) {
			t.Errorf("holdfast version does not say %q:\n%s", want, out)
		}
	}
}

// TestVersionUnstamped: a build without the Makefile's stamp and without
// VCS information (the tests' own builds: -buildvcs=false) still names a
// version, never Go's "(devel)".
func TestVersionUnstamped(t *testing.T) {
	out, err := guarded(t, binary(t), "version").CombinedOutput()
	if err != nil {
		t.Fatalf("holdfast version: %v\n%s", err, out)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	if strings.Contains(first, "(devel)") || strings.TrimSpace(strings.TrimPrefix(first, "holdfast")) == "" {
		t.Errorf("holdfast version: %q", first)
	}
}

// TestProcessMetrics: /metrics of a running holdfast has the standard
// process and Go runtime metrics, and holdfast_build_info naming the
// version `holdfast version` prints.
func TestProcessMetrics(t *testing.T) {
	p := newProcess(t)
	admin := dbtest.FreeAddr(t)
	writeConfigAdmin(t, p.config, p.addr, p.db, appUser, admin, "")
	p.serve(t)
	// CPU time is counted in clock ticks: a process just started may not
	// have one yet. Scrape again until it has (the other metrics are
	// checked on that scrape).
	m, err := holdfastproc.Scrape(context.Background(), admin)
	for give := time.Now().Add(10 * time.Second); err == nil && m["process_cpu_seconds_total"] <= 0 && time.Now().Before(give); {
		time.Sleep(50 * time.Millisecond)
		m, err = holdfastproc.Scrape(context.Background(), admin)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"process_resident_memory_bytes", "process_open_fds", "process_max_fds",
		"process_cpu_seconds_total", "go_goroutines", "go_threads", "go_memstats_heap_inuse_bytes",
		"go_sched_gomaxprocs_threads", "go_gc_gomemlimit_bytes"} {
		if v, ok := m[name]; !ok || v <= 0 {
			t.Errorf("%s = %v (present: %v), want > 0", name, v, ok)
		}
	}
	out, err := exec.Command(binary(t), "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	want := strings.TrimPrefix(first, "holdfast ")
	info := m.ByLabel("holdfast_build_info", "version")
	if len(info) != 1 || info[want] != 1 {
		t.Errorf("holdfast_build_info by version: %v, want {%q: 1}", info, want)
	}
	if g := m.ByLabel("holdfast_build_info", "goversion"); len(g) != 1 {
		t.Errorf("holdfast_build_info by goversion: %v", g)
	}
}

// TestProcessCollectorsLint: the build-info metric keeps the naming rules,
// and the collectors register together on one registry.
func TestProcessCollectorsLint(t *testing.T) {
	cs := processCollectors()
	problems, err := testutil.CollectAndLint(cs[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := registerAll(reg, cs); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "holdfast_build_info", "go_goroutines", "process_open_fds"); err != nil || n != 3 {
		t.Errorf("%d series (%v), want 3", n, err)
	}
}

func registerAll(reg *prometheus.Registry, cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
