package bench

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
)

// TestHoldfastConfigParses checks the generated file against holdfast's own
// parser, so a config change in holdfast breaks this test, not the bench run.
func TestHoldfastConfigParses(t *testing.T) {
	hc := HoldfastConfig{
		Listen:   "127.0.0.1:16033",
		Users:    []string{"sbtest", "other"},
		Backend:  Endpoint{Addr: "127.0.0.1:3306", User: "holdfast_bench_pool", Password: "p#w: x"},
		Database: "holdfast_bench",
		PoolMin:  2,
		PoolMax:  32,
	}
	c, err := config.Parse(hc.YAML())
	if err != nil {
		t.Fatalf("%v\n%s", err, hc.YAML())
	}
	if c.Listen != hc.Listen || c.Backend.Address != "127.0.0.1:3306" || c.Backend.User != "holdfast_bench_pool" ||
		c.Backend.Password != "p#w: x" || c.Backend.Database != "holdfast_bench" {
		t.Fatalf("parsed %+v", c)
	}
	if c.Pool.Min != 2 || c.Pool.Max != 32 || c.Pool.MaxIdle != 32 || c.Pool.AcquireTimeout != 30*time.Second {
		t.Fatalf("pool %+v", c.Pool)
	}
	if len(c.Users) != 2 || c.Users[1].Name != "other" || c.Users[1].Password != "other" {
		t.Fatalf("users %+v", c.Users)
	}
	if c.Admin.Listen != "" {
		t.Fatalf("admin listener %q: the harness must not take a fixed port", c.Admin.Listen)
	}
}

func TestHoldfastConfigPipelineAndProcs(t *testing.T) {
	base := HoldfastConfig{Listen: "127.0.0.1:16033", Users: []string{"u"}, Backend: Endpoint{Addr: "127.0.0.1:3306", User: "p"}, PoolMax: 8}
	for _, tc := range []struct {
		pipeline, procs   int
		wantDepth, wantMP int
	}{
		{0, 0, config.Default().Pool.PipelineDepth, 0},
		{32, 1, 32, 1},
		{-1, 2, 0, 2},
	} {
		hc := base
		hc.Pipeline, hc.MaxProcs = tc.pipeline, tc.procs
		c, err := config.Parse(hc.YAML())
		if err != nil {
			t.Fatalf("%v\n%s", err, hc.YAML())
		}
		if c.Pool.PipelineDepth != tc.wantDepth || c.MaxProcs != tc.wantMP {
			t.Errorf("Pipeline %d, MaxProcs %d: parsed pipeline_depth %d, max_procs %d; want %d, %d",
				tc.pipeline, tc.procs, c.Pool.PipelineDepth, c.MaxProcs, tc.wantDepth, tc.wantMP)
		}
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

// The holdfast+tls target's configuration: backend.tls as asked.
func TestHoldfastConfigBackendTLS(t *testing.T) {
	hc := HoldfastConfig{Listen: "127.0.0.1:16033", Users: []string{"u"}, Backend: Endpoint{Addr: "127.0.0.1:3306", User: "p"}, PoolMax: 8,
		BackendTLSMode: config.TLSVerifyCA, BackendTLSCA: "/etc/ssl/db ca.pem"}
	c, err := config.Parse(hc.YAML())
	if err != nil {
		t.Fatalf("%v\n%s", err, hc.YAML())
	}
	if c.Backend.TLS != (config.BackendTLS{Mode: config.TLSVerifyCA, CAFile: "/etc/ssl/db ca.pem"}) {
		t.Fatalf("backend.tls %+v", c.Backend.TLS)
	}
	hc.BackendTLSMode, hc.BackendTLSCA = "", ""
	if c, err := config.Parse(hc.YAML()); err != nil || c.Backend.TLS.Mode != config.TLSDisabled {
		t.Fatalf("without the option: %+v, %v", c.Backend.TLS, err)
	}
	o := DefaultOptions()
	if got := o.targets(); len(got) != 3 {
		t.Fatalf("targets %v", got)
	}
	o.BackendTLS = config.TLSRequired
	if got := o.targets(); len(got) != 4 || got[3] != TargetHoldfastTLS || len(Targets) != 3 {
		t.Fatalf("targets %v (Targets %v)", got, Targets)
	}
	if err := o.validate(); err != nil {
		t.Fatal(err)
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
