package holdfastproc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
)

// TestConfigRender: the fields, the YAML merged over them key by key, and
// the settings applied last reach holdfast's own parser.
func TestConfigRender(t *testing.T) {
	c := Config{
		Listen: "127.0.0.1:16033",
		Admin:  "127.0.0.1:19090",
		Users:  []User{{Name: "app", Password: "app", AuthPlugin: "mysql_native_password", DefaultTag: "web"}},
		Backend: Backend{Address: "127.0.0.1:3306", User: "hf", Password: "p: w", Database: "shop",
			Instances: 3, Replicas: []string{"127.0.0.1:3307"}},
		Fleet: Fleet{Database: "shop_hf", User: "own", Password: "o: pw"},
		YAML:  "admin:\n  token: t0ken\npool:\n  max: 24\n  max_idle: 8\nlog:\n  level: warn\nfleet:\n  ttl: 9s\n",
		Set:   []string{"pool.max=30", "max_procs=2"},
	}
	b, err := c.Render()
	if err != nil {
		t.Fatal(err)
	}
	got, err := config.Parse(b)
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if got.Listen != c.Listen || got.Admin.Listen != c.Admin || got.Admin.Token != "t0ken" ||
		got.Backend.Address != "127.0.0.1:3306" || got.Backend.Password != "p: w" || got.Backend.Database != "shop" ||
		got.Backend.Instances != 3 || len(got.Backend.Replicas) != 1 || got.Backend.Replicas[0].Address != "127.0.0.1:3307" ||
		got.Pool.Max != 30 || got.Pool.MaxIdle != 8 || got.MaxProcs != 2 || got.Log.Level != "warn" ||
		got.Fleet.Database != "shop_hf" || got.Fleet.User != "own" || got.Fleet.Password != "o: pw" || got.Fleet.TTL != 9*time.Second {
		t.Fatalf("parsed back:\n%+v\nfrom\n%s", got, b)
	}
	if cs := got.Admin.AllCredentials(); len(cs) != 2 || cs[0] != (config.AdminCredential{Name: AdminCredential, Scope: "write", Token: AdminToken}) ||
		got.Admin.LocalTokenPath != "" {
		t.Fatalf("admin credentials %+v, local token %q\n%s", cs, got.Admin.LocalTokenPath, b)
	}
	if len(got.Users) != 1 || got.Users[0].Name != "app" || got.Users[0].DefaultTag != "web" {
		t.Fatalf("users %+v\n%s", got.Users, b)
	}
	for _, bad := range []Config{{YAML: "- a list"}, {Set: []string{"pool.max"}}} {
		if _, err := bad.Render(); err == nil {
			t.Errorf("%+v rendered", bad)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	page := `# HELP holdfast_reservation_recoveries_total Times a CALL lost ...
# TYPE holdfast_reservation_recoveries_total counter
holdfast_reservation_recoveries_total{procedure="claim"} 3
holdfast_reservation_recoveries_total{procedure="reserve"} 1.2e+01
holdfast_reservation_reserves_total{outcome="ok"} 99
holdfast_up 1
holdfast_info{version="a b"} 1
`
	m, err := ParseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	if m["holdfast_up"] != 1 || m[`holdfast_info{version="a b"}`] != 1 || m[`holdfast_reservation_reserves_total{outcome="ok"}`] != 99 {
		t.Fatalf("ParseMetrics = %v", m)
	}
	got := m.ByLabel("holdfast_reservation_recoveries_total", "procedure")
	if len(got) != 2 || got["claim"] != 3 || got["reserve"] != 12 {
		t.Fatalf("ByLabel = %v", got)
	}
}

func TestLogProblems(t *testing.T) {
	path := filepath.Join(t.TempDir(), "holdfast.log")
	log := `time=2026-12-01T09:54:41.000Z level=WARN msg="backend connection lost"
time=2026-12-01T09:54:41.580Z level=ERROR msg="panic in client session" remote=127.0.0.1:48276 panic="runtime error: index out of range [1] with length 1" stack="goroutine 43 [running]:\nruntime/debug.Stack()\n\t/usr/local/go/src/runtime/debug/stack.go:26 +0x68\npanic({0xf63780?, 0xc0004fd548?})\n\t/usr/local/go/src/runtime/panic.go:860 +0x13a\ngithub.com/holdfast-db/holdfast/reservation.(*Engine).reserve(0xc000094708, {0x1014048, 0xc000499420}, 0xc0003cf480)\n\t/work/main/reservation/reserve.go:186 +0x21ca\n"
WARNING: DATA RACE
`
	if err := os.WriteFile(path, []byte(log), 0o600); err != nil {
		t.Fatal(err)
	}
	got := LogProblems(path)
	if len(got) != 2 || !strings.HasSuffix(got[0], `panic="runtime error: index out of range [1] with length 1" in github.com/holdfast-db/holdfast/reservation.(*Engine).reserve at /work/main/reservation/reserve.go:186`) ||
		got[1] != "WARNING: DATA RACE" {
		t.Fatalf("LogProblems = %q", got)
	}
}

func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "go.mod")); err != nil || !declares(b, Module) {
		t.Fatalf("RepoRoot = %s: %v", root, err)
	}
	if !declares([]byte("// x\nmodule \"github.com/holdfast-db/holdfast\"\n"), Module) ||
		declares([]byte("module github.com/holdfast-db/holdfast/internal/browsertest\n"), Module) {
		t.Fatal("declares")
	}
}
