package bench

import (
	"github.com/holdfast-db/holdfast/internal/holdfastproc"

	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
)

// TestHoldfastConfigIsTheDefaults: the bench runs holdfast on its
// defaults (config.yaml as shipped), changing only addresses and accounts;
// the generated file is checked with holdfast's own parser.
func TestHoldfastConfigIsTheDefaults(t *testing.T) {
	hc := HoldfastConfig{
		Listen:   "127.0.0.1:16033",
		Users:    []string{"sbtest", "other"},
		Backend:  Endpoint{Addr: "127.0.0.1:3307", User: "holdfast_bench_pool", Password: "p#w: x"},
		Database: "holdfast_bench",
	}
	c, err := hc.Effective()
	if err != nil {
		t.Fatalf("%v\n%s", err, hc.YAML())
	}
	if len(c.Users) != 2 || c.Users[1].Name != "other" || c.Users[1].Password != "other" {
		t.Fatalf("users %+v", c.Users)
	}
	if c.Admin.Listen != "" {
		t.Fatalf("admin listener %q: the harness must not take a fixed port", c.Admin.Listen)
	}
	want := config.Default()
	want.Listen, want.Users, want.Admin.Listen = hc.Listen, c.Users, ""
	want.Backend.Address, want.Backend.User, want.Backend.Password, want.Backend.Database =
		"127.0.0.1:3307", "holdfast_bench_pool", "p#w: x", "holdfast_bench"
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("the bench's holdfast differs from the defaults beyond addresses and accounts:\n%+v\nwant\n%+v\n%s", c, want, hc.YAML())
	}
	if d := hc.Describe(); !strings.Contains(d, "pool min 2 max 16") || !strings.Contains(d, "config.yaml as shipped") {
		t.Fatalf("Describe() = %q", d)
	}
}

func TestHoldfastConfigSettings(t *testing.T) {
	hc := HoldfastConfig{Listen: "127.0.0.1:16033", Users: []string{"u"}, Backend: Endpoint{Addr: "127.0.0.1:3306", User: "p"},
		Settings: []string{"pool.max=8", "max_procs=2", "pool.pipeline_depth=0", "sessions.client_write_timeout=5s", "log.level=warn"}}
	c, err := hc.Effective()
	if err != nil {
		t.Fatalf("%v\n%s", err, hc.YAML())
	}
	if c.Pool.Max != 8 || c.MaxProcs != 2 || c.Pool.PipelineDepth != 0 || c.Sessions.ClientWriteTimeout != 5*time.Second ||
		c.Log.Level != "warn" || c.Pool.Min != config.Default().Pool.Min {
		t.Fatalf("parsed %+v %+v", c.Pool, c.Sessions)
	}
	if d := hc.Describe(); !strings.Contains(d, "bench settings pool.max=8 max_procs=2") {
		t.Fatalf("Describe() = %q", d)
	}
	for _, bad := range []string{"pool.max", "=3", "pool.max=[", ""} {
		if _, _, err := holdfastproc.ParseSetting(bad); err == nil {
			t.Errorf("ParseSetting(%q) accepted", bad)
		}
	}
	hc.Settings = []string{"pool.maxx=8"}
	if _, err := hc.Effective(); err == nil || !strings.Contains(err.Error(), "maxx") {
		t.Fatalf("an unknown setting: %v", err)
	}
}

func TestProcReaders(t *testing.T) {
	m, err := ReadProcMem(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS <= 0 || m.HWM < m.RSS {
		t.Fatalf("mem %+v", m)
	}
	if _, err := ProcCPU(os.Getpid()); err != nil {
		t.Fatal(err)
	}
	got, err := parseProcStat("1234 (a (weird) name) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 1")
	if err != nil || got != 3*time.Second {
		t.Fatalf("parseProcStat: %v, %v; want 3s", got, err)
	}
	if _, err := parseProcStatus(strings.NewReader("Name:\tx\nVmRSS:\t12 MB\n")); err == nil {
		t.Fatal("unexpected unit accepted")
	}
	pm, err := parseProcStatus(strings.NewReader("VmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\n"))
	if err != nil || pm.RSS != 1<<20 || pm.HWM != 2<<20 {
		t.Fatalf("parseProcStatus: %+v, %v", pm, err)
	}
	lim, err := ProcNoFile(os.Getpid())
	if err != nil || lim == "" {
		t.Fatalf("ProcNoFile: %q, %v", lim, err)
	}
}

func TestRaiseNoFile(t *testing.T) {
	before, err := RaiseNoFile(0)
	if err != nil {
		t.Fatal(err)
	}
	after, err := RaiseNoFile(before) // never lowers
	if err != nil || after != before {
		t.Fatalf("RaiseNoFile(%d) = %d, %v", before, after, err)
	}
}

// The holdfast+tls target: the defaults but for backend.tls, as asked.
func TestHoldfastConfigBackendTLS(t *testing.T) {
	o := DefaultOptions()
	if got := o.targets(); len(got) != 3 {
		t.Fatalf("targets %v", got)
	}
	o.BackendTLS, o.BackendTLSCA = config.TLSVerifyCA, "/etc/ssl/db ca.pem"
	if got := o.targets(); len(got) != 4 || got[3] != TargetHoldfastTLS || len(Targets) != 3 {
		t.Fatalf("targets %v (Targets %v)", got, Targets)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	x := o.extras()[0]
	hc := o.holdfastConfig("127.0.0.1:16033", x.poolUser)
	hc.Settings = x.settings
	c, err := hc.Effective()
	if err != nil {
		t.Fatalf("%v\n%s", err, hc.YAML())
	}
	if c.Backend.TLS != (config.BackendTLS{Mode: config.TLSVerifyCA, CAFile: "/etc/ssl/db ca.pem"}) {
		t.Fatalf("backend.tls %+v", c.Backend.TLS)
	}
	for _, bad := range []Options{{BackendTLS: "on"}, {BackendTLS: config.TLSRequired, Mode: ModeAttribution}} {
		x := DefaultOptions()
		x.BackendTLS = bad.BackendTLS
		if bad.Mode != "" {
			x.Mode = bad.Mode
		}
		if err := x.validate(); err == nil {
			t.Errorf("validate accepted -backend-tls %q in mode %s", x.BackendTLS, x.Mode)
		}
	}
}

// The holdfast@base target: another checkout, its own pool account, no
// settings; refused when the directory is not a holdfast checkout.
func TestBaselineTarget(t *testing.T) {
	o := DefaultOptions()
	o.BaselineRepo = "../.."
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	got := o.targets()
	if len(got) != 4 || got[3] != TargetBaseline {
		t.Fatalf("targets %v", got)
	}
	x := o.extras()[0]
	if !x.baseline || x.settings != nil || x.poolUser == o.poolUser() {
		t.Fatalf("baseline target %+v", x)
	}
	o.BaselineRepo = t.TempDir()
	if err := o.validate(); err == nil {
		t.Fatal("validate accepted a baseline repo without cmd/holdfast")
	}
	o.BaselineRepo, o.Mode = "../..", ModeAttribution
	if err := o.validate(); err == nil {
		t.Fatal("validate accepted -baseline-repo in mode attribution")
	}
}

// No target always runs after another in the proxy comparison: the order
// of a round is reversed in the next, so holdfast and an extra column
// (here holdfast@base) each run first in one of two rounds.
func TestSysbenchRunsAlternateOrder(t *testing.T) {
	o := DefaultOptions()
	o.BaselineRepo = "../.."
	o.Rounds = 2
	o.Workloads = o.Workloads[:1]
	var order [][]string
	for _, r := range o.sysbenchRuns() {
		for len(order) < r.round {
			order = append(order, nil)
		}
		order[r.round-1] = append(order[r.round-1], r.target)
	}
	pos := func(round int, target string) int { return slices.Index(order[round], target) }
	if len(order) != 2 || len(order[0]) != 4 || len(order[1]) != 4 {
		t.Fatalf("runs by round: %v", order)
	}
	if (pos(0, TargetHoldfast) < pos(0, TargetBaseline)) == (pos(1, TargetHoldfast) < pos(1, TargetBaseline)) {
		t.Fatalf("holdfast and holdfast@base run in the same order in both rounds: %v", order)
	}
	if (pos(0, TargetRelay) < pos(0, TargetHoldfast)) == (pos(1, TargetRelay) < pos(1, TargetHoldfast)) {
		t.Fatalf("the relay and holdfast run in the same order in both rounds: %v", order)
	}
}
