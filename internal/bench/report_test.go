package bench

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		in := append([]float64(nil), tc.in...)
		if got := Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !equal(in, tc.in) {
			t.Errorf("Median modified its input: %v", in)
		}
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestSummarizeAndVerdicts(t *testing.T) {
	ps := Workload{Test: "oltp_point_select", Threads: 16, Target: 1.1}
	rw := Workload{Test: "oltp_read_write", Threads: 16, Target: 1.1}
	var samples []Sample
	add := func(w Workload, target string, tps ...float64) {
		for i, x := range tps {
			samples = append(samples, Sample{Round: i + 1, Workload: w, Target: target, BackendConns: -1,
				Result: SysbenchResult{TPS: x, QPS: 2 * x, P95: 1, Transactions: int64(10 * x)},
				Wall:   10 * time.Second, SysbenchCPU: 5 * time.Second, HopCPU: 2 * time.Second})
		}
	}
	add(ps, TargetDirect, 1000, 1100, 900)
	add(ps, TargetRelay, 500, 520, 480)
	add(ps, TargetHoldfast, 600, 590, 10)
	add(rw, TargetDirect, 100, 100, 100)
	add(rw, TargetRelay, 60, 60, 60)
	add(rw, TargetHoldfast, 61, 62, 60)
	samples[len(samples)-1].Err = errors.New("boom") // the 60 is not counted
	samples[len(samples)-1].Result.Errors = 4
	samples[len(samples)-2].BackendConns = 8

	sums := Summarize(samples, []Workload{ps, rw}, Targets)
	if len(sums) != 6 {
		t.Fatalf("%d summaries", len(sums))
	}
	hf := sums[2]
	if hf.TPS != 590 || hf.QPS != 1180 || hf.Runs != 3 || hf.HopCores != 0.2 || hf.SysbenchCores != 0.5 {
		t.Fatalf("point_select holdfast summary %+v", hf)
	}
	if got := hf.PerRound; !equal(got, []float64{600, 590, 10}) {
		t.Fatalf("per round %v", got)
	}
	rwh := sums[5]
	if rwh.Runs != 2 || rwh.Failed != 1 || rwh.TPS != 61.5 || rwh.Errors != 4 || rwh.BackendConns != 8 {
		t.Fatalf("read_write holdfast summary %+v", rwh)
	}

	vs := Verdicts(sums, []Workload{ps, rw})
	if v := vs[0]; !v.Pass || v.HoldfastRelay != 590.0/500 || v.RelayDirect != 0.5 {
		t.Fatalf("point_select verdict %+v", v)
	}
	if v := vs[1]; v.Pass || v.HoldfastRelay != 61.5/60 {
		t.Fatalf("read_write verdict %+v", v)
	}
	if s := vs[1].String(); !strings.HasPrefix(s, "MISS read_write@16") || !strings.Contains(s, "short by 6.8%") {
		t.Fatalf("verdict line %q", s)
	}
	if s := vs[0].String(); !strings.HasPrefix(s, "PASS point_select@16") || !strings.Contains(s, "1.18×") {
		t.Fatalf("verdict line %q", s)
	}

	var out bytes.Buffer
	PrintSummaries(&out, sums)
	if !strings.Contains(out.String(), "600 590 10") || strings.Count(out.String(), "\n") != 7 {
		t.Fatalf("table:\n%s", out.String())
	}
}

func TestVerdictMissingData(t *testing.T) {
	w := Workload{Test: "oltp_point_select", Threads: 256, Target: 1.3}
	vs := Verdicts(nil, []Workload{w})
	if vs[0].Pass || !strings.Contains(vs[0].String(), "n/a") {
		t.Fatalf("verdict without data: %s", vs[0])
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 100; i++ {
		d = append(d, time.Duration(i))
	}
	if p := percentile(d, 0.5); p != 50 {
		t.Fatalf("p50 %v", p)
	}
	if p := percentile(d, 0.99); p != 99 {
		t.Fatalf("p99 %v", p)
	}
	if p := percentile(d[:1], 0.99); p != 1 {
		t.Fatalf("p99 of one %v", p)
	}
	if p := percentile(nil, 0.5); p != 0 {
		t.Fatalf("p50 of none %v", p)
	}
}

func TestScaleReportBaseline(t *testing.T) {
	r := ScaleReport{Conns: 10, P99Target: 2 * time.Millisecond,
		Result: ScaleResult{Opened: 10, Statements: 100, P50: 400 * time.Microsecond, P99: 9 * time.Millisecond}}
	var b strings.Builder
	r.Print(&b)
	if strings.Contains(b.String(), "baseline") {
		t.Fatalf("a baseline printed without one:\n%s", b.String())
	}
	r.Direct = &ScaleResult{Opened: 10, Statements: 100, P50: 300 * time.Microsecond, P99: 5 * time.Millisecond}
	b.Reset()
	r.Print(&b)
	if want := "direct to MariaDB, right after: p50 300µs  p99 5ms  max 0s (10 of 10 logged in, 100 statements ok, 0 errors, 0 late); holdfast adds p50 100µs, p99 4ms\n"; !strings.Contains(b.String(), want) {
		t.Fatalf("baseline line missing; want %q in:\n%s", want, b.String())
	}
	r.Direct.Opened = 4 // not the same clients: no difference printed
	b.Reset()
	r.Print(&b)
	if strings.Contains(b.String(), "holdfast adds") {
		t.Fatalf("a difference printed against a baseline of fewer clients:\n%s", b.String())
	}
}
