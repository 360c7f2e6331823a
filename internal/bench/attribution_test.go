package bench

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
)

func TestRoundOrder(t *testing.T) {
	ts := []string{"a", "b", "c"}
	if got := roundOrder(ts, 1); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("round 1: %v", got)
	}
	if got := roundOrder(ts, 2); !slices.Equal(got, []string{"c", "b", "a"}) {
		t.Fatalf("round 2: %v", got)
	}
	if got := roundOrder(ts, 3); !slices.Equal(got, ts) {
		t.Fatalf("round 3: %v", got)
	}
	if !slices.Equal(ts, []string{"a", "b", "c"}) {
		t.Fatalf("roundOrder modified its input: %v", ts)
	}
	// The brief's interleaving: off always between two on runs, and the
	// first run of a round alternates between the on variants.
	for r := 1; r <= 4; r++ {
		if got := roundOrder(AttributionTargets, r); got[1] != TargetAttrOff || got[0] == roundOrder(AttributionTargets, r+1)[0] {
			t.Fatalf("round %d order %v", r, got)
		}
	}
}

func TestAttrVerdicts(t *testing.T) {
	w16, w64 := AttributionWorkloads[0], AttributionWorkloads[1]
	var samples []Sample
	add := func(w Workload, target string, tps ...float64) {
		for i, x := range tps {
			samples = append(samples, Sample{Round: i + 1, Workload: w, Target: target, BackendConns: -1,
				Result: SysbenchResult{TPS: x, Transactions: int64(10 * x), Queries: int64(10 * x)},
				Wall:   10 * time.Second, SysbenchCPU: 5 * time.Second, HopCPU: time.Duration(x) * time.Millisecond})
		}
	}
	add(w16, TargetAttrTagged, 990, 1000, 980)
	add(w16, TargetAttrOff, 1000, 1010, 1000)
	add(w16, TargetAttrOn, 1000, 1000, 1000)
	add(w64, TargetAttrTagged, 900, 950, 940)
	add(w64, TargetAttrOff, 1000, 1000, 2000)
	add(w64, TargetAttrOn, 1100, 1100, 1100)
	samples[9].Err = errors.New("boom") // w64 on-tagged round 1: not counted, not paired

	sums := Summarize(samples, AttributionWorkloads, AttributionTargets)
	vs := AttrVerdicts(samples, sums, AttributionWorkloads, []string{TargetAttrTagged, TargetAttrOn}, TargetAttrOff)
	if len(vs) != 4 {
		t.Fatalf("%d verdicts", len(vs))
	}
	v := vs[0]
	if v.On != TargetAttrTagged || v.OnTPS != 990 || v.OffTPS != 1000 || v.Ratio != 0.99 || !v.Pass {
		t.Fatalf("w16 on-tagged verdict %+v", v)
	}
	if !slices.Equal(v.Paired, []float64{0.99, 1000.0 / 1010, 0.98}) {
		t.Fatalf("paired %v", v.Paired)
	}
	if v.OnCPU != 100*time.Microsecond || v.OffCPU != 100*time.Microsecond {
		t.Fatalf("cpu per txn %v %v", v.OnCPU, v.OffCPU)
	}
	if s := v.String(); !strings.HasPrefix(s, "PASS point_select@16") || !strings.Contains(s, "0.990× = -1.0%") ||
		!strings.Contains(s, "at most 3.0% slower") || !strings.Contains(s, "0.990 0.990 0.980") {
		t.Fatalf("verdict:\n%s", s)
	}
	v = vs[2] // w64 on-tagged: 945 vs 1000, round 1 failed
	if v.Pass || v.OnTPS != 945 || len(v.Paired) != 2 || v.Paired[0] != 0.95 {
		t.Fatalf("w64 on-tagged verdict %+v", v)
	}
	if s := v.String(); !strings.HasPrefix(s, "MISS point_select@64") || !strings.Contains(s, "missed by 2.5 points") {
		t.Fatalf("verdict:\n%s", s)
	}
	v = vs[3] // w64 on: 10% faster than off
	if !v.Pass || !strings.Contains(v.String(), "noise exceeds the margin") || v.OffSpread != 1 {
		t.Fatalf("w64 on verdict %+v\n%s", v, v)
	}
	if v := AttrVerdicts(nil, nil, AttributionWorkloads[:1], []string{TargetAttrOn}, TargetAttrOff)[0]; v.Pass ||
		!strings.Contains(v.String(), "MISS") || !strings.Contains(v.String(), "n/a") {
		t.Fatalf("verdict without data: %s", v)
	}
}

func TestPerfShare(t *testing.T) {
	report := `# Samples: 4K of event 'cpu-clock'
#
# Overhead  Symbol
# ........  ......
#
    12.50%  [k] __x64_sys_write
     2.00%  [.] github.com/holdfast-db/holdfast/attribution.(*Tag).Statement
     0.75%  [.] github.com/holdfast-db/holdfast/attribution.AppendTag
     1.00%  [.] github.com/holdfast-db/holdfast/proxy.(*session).stmtEnd
`
	pct, n := perfShare(report, "/attribution.")
	if n != 2 || pct != 2.75 {
		t.Fatalf("perfShare = %v, %d", pct, n)
	}
}

// TestAttributionConfigs checks the two generated configurations against
// holdfast's own parser: they differ only in attribution.disabled, and the
// tagged account has its default_tag.
func TestAttributionConfigs(t *testing.T) {
	hc := HoldfastConfig{
		Listen:      "127.0.0.1:16033",
		Users:       []string{holdfastUser, taggedUser},
		DefaultTags: map[string]string{taggedUser: benchTag},
		Backend:     Endpoint{Addr: "127.0.0.1:3306", User: "holdfast_bench_pool", Password: "holdfast_bench_pool"},
		Database:    "holdfast_bench",
		AdminListen: "127.0.0.1:16034",
	}
	on := hc.YAML()
	hc.AttributionDisabled = true
	off := hc.YAML()
	con, err1 := config.Parse(on)
	coff, err2 := config.Parse(off)
	if err1 != nil || err2 != nil {
		t.Fatalf("%v %v\n%s\n%s", err1, err2, on, off)
	}
	coff.Attribution.Disabled = false
	if !reflect.DeepEqual(con, coff) {
		t.Fatalf("the on and off configurations differ in more than attribution.disabled:\n%s\n%s", on, off)
	}
	for _, tc := range []struct {
		yaml     []byte
		disabled bool
	}{{on, false}, {off, true}} {
		c, err := config.Parse(tc.yaml)
		if err != nil {
			t.Fatalf("%v\n%s", err, tc.yaml)
		}
		if c.Attribution.Disabled != tc.disabled || c.Admin.Listen != "127.0.0.1:16034" {
			t.Fatalf("attribution %+v admin %+v", c.Attribution, c.Admin)
		}
		if len(c.Users) != 2 || c.Users[0].DefaultTag != "" || c.Users[1].Name != taggedUser || c.Users[1].DefaultTag != benchTag {
			t.Fatalf("users %+v", c.Users)
		}
	}
}
