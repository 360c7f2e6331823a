package bench

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
)

func TestReserveOrder(t *testing.T) {
	ws := []string{"a", "b", "c"}
	for round, want := range map[int]string{1: "abc", 2: "bca", 3: "cab", 4: "abc"} {
		if got := strings.Join(reserveOrder(ws, round), ""); got != want {
			t.Errorf("round %d: %s, want %s", round, got, want)
		}
	}
	if got := reserveOrder(nil, 1); got != nil {
		t.Errorf("no workloads: %v", got)
	}
	if ws[0] != "a" {
		t.Error("reserveOrder modified its input")
	}
}

func reserveRow(token, item, group, state, replayed string) [][]byte {
	var out [][]byte
	for _, s := range []string{token, "2026-11-30 01:02:03.456789", "1", item, group, "1", state, replayed} {
		out = append(out, []byte(s))
	}
	return out
}

func TestParseReserveRow(t *testing.T) {
	k := PoolKey{Shop: 7, Item: 1001, Location: 3}
	id, err := parseReserveRow(reserveRow("rsv_00000000000000ff", "1001", "3", "active", "0"), k)
	if err != nil || id != 255 {
		t.Fatalf("good row: %d, %v", id, err)
	}
	for name, row := range map[string][][]byte{
		"short token":  reserveRow("rsv_ff", "1001", "3", "active", "0"),
		"no prefix":    reserveRow("xxx_00000000000000ff", "1001", "3", "active", "0"),
		"zero id":      reserveRow("rsv_0000000000000000", "1001", "3", "active", "0"),
		"not hex":      reserveRow("rsv_00000000000000zz", "1001", "3", "active", "0"),
		"other item":   reserveRow("rsv_00000000000000ff", "1002", "3", "active", "0"),
		"other group":  reserveRow("rsv_00000000000000ff", "1001", "4", "active", "0"),
		"replayed":     reserveRow("rsv_00000000000000ff", "1001", "3", "active", "1"),
		"claimed":      reserveRow("rsv_00000000000000ff", "1001", "3", "claimed", "0"),
		"seven colums": reserveRow("rsv_00000000000000ff", "1001", "3", "active", "0")[:7],
	} {
		if _, err := parseReserveRow(row, k); !errors.Is(err, errBadAnswer) {
			t.Errorf("%s: %v, want errBadAnswer", name, err)
		}
	}
}

func TestParseMetrics(t *testing.T) {
	text := `# HELP holdfast_pool_acquires_total Acquires.
# TYPE holdfast_pool_acquires_total counter
holdfast_pool_acquires_total 12345
holdfast_reservation_reserves_total{outcome="reserved"} 7 1700000000000
holdfast_odd{a="x y} z",b="q\"}"} 2.5e+03

holdfast_reservation_reserve_batch_size_sum 90
holdfast_reservation_reserve_batch_size_count 3
`
	m, err := parseMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"holdfast_pool_acquires_total":                            12345,
		`holdfast_reservation_reserves_total{outcome="reserved"}`: 7,
		`holdfast_odd{a="x y} z",b="q\"}"}`:                       2500,
		"holdfast_reservation_reserve_batch_size_sum":             90,
		"holdfast_reservation_reserve_batch_size_count":           3,
	}
	if len(m) != len(want) {
		t.Fatalf("got %v", m)
	}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	for _, bad := range []string{"no_value\n", `x{a="b" 1` + "\n", "x abc\n"} {
		if _, err := parseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestMetricsDigest(t *testing.T) {
	before := map[string]float64{
		"holdfast_pool_acquires_total": 10, "holdfast_pool_waits_total": 0,
		`holdfast_reservation_reserves_total{outcome="reserved"}`: 5,
	}
	after := map[string]float64{
		"holdfast_pool_acquires_total": 110, "holdfast_pool_waits_total": 4, "holdfast_pool_wait_seconds_total": 0.02,
		`holdfast_reservation_reserves_total{outcome="reserved"}`: 505,
		`holdfast_reservation_reserves_total{outcome="busy"}`:     0,
		"holdfast_reservation_backoffs_total":                     3,
		"holdfast_reservation_reserve_batch_size_sum":             500,
		"holdfast_reservation_reserve_batch_size_count":           20,
		"holdfast_reservation_pool_depth":                         700, // a gauge: not listed
	}
	got := metricsDigest(before, after, true)
	for _, want := range []string{"pool acquires 100, waits 4 (mean wait 5.00 ms)", "mean batch 25.0 reserves",
		"backoffs 3", `reserves{outcome="reserved"} 500`} {
		if !strings.Contains(got, want) {
			t.Errorf("digest %q lacks %q", got, want)
		}
	}
	if strings.Contains(got, "busy") || strings.Contains(got, "pool_depth") {
		t.Errorf("digest %q lists a series that did not move or is not a counter", got)
	}
	if got := metricsDigest(before, after, false); strings.Contains(got, "reserves") {
		t.Errorf("counter workload digest %q lists reservation metrics", got)
	}
}

func TestDiffSorted(t *testing.T) {
	for _, c := range []struct {
		want, got      []uint64
		missing, extra int
	}{
		{nil, nil, 0, 0},
		{[]uint64{1, 2, 3}, []uint64{1, 2, 3}, 0, 0},
		{[]uint64{1, 2, 3}, []uint64{2}, 2, 0},
		{[]uint64{2}, []uint64{1, 2, 3}, 0, 2},
		{[]uint64{1, 3, 5}, []uint64{2, 3, 4}, 2, 2},
		{[]uint64{1, 1}, []uint64{1}, 1, 0}, // a token given twice
	} {
		m, e := diffSorted(c.want, c.got)
		if m != c.missing || e != c.extra {
			t.Errorf("diffSorted(%v, %v) = %d, %d; want %d, %d", c.want, c.got, m, e, c.missing, c.extra)
		}
	}
}

func TestCheckProblems(t *testing.T) {
	if p := (CounterCheck{Available: 90, BaselineRows: 10}).Problems(100, 10, true); len(p) != 0 {
		t.Errorf("consistent counter: %v", p)
	}
	p := CounterCheck{Available: -1, BaselineRows: 3}.Problems(5, 5, true)
	if len(p) != 3 || !strings.HasPrefix(p[0], "OVERSOLD") {
		t.Errorf("oversold counter: %v", p)
	}
	if p := (CounterCheck{Available: 90}).Problems(100, 10, false); len(p) != 0 {
		t.Errorf("(b) keeps no records: %v", p)
	}

	ok := PoolCheck{PoolStock: reservation.PoolStock{OnHand: 1000, Pooled: 600, Lines: 400, Reserved: 400}, Found: true, Reservations: 400}
	if p := ok.Problems(1000, 400); len(p) != 0 {
		t.Errorf("consistent pool: %v", p)
	}
	over := ok
	over.Pooled = 601
	if p := over.Problems(1000, 400); len(p) != 1 || !strings.HasPrefix(p[0], "OVERSOLD") {
		t.Errorf("oversold pool: %v", p)
	}
	lost := ok
	lost.Missing, lost.Extra = 1, 1
	if p := lost.Problems(1000, 400); len(p) != 1 || !strings.Contains(p[0], "1 given to clients but not reserved") {
		t.Errorf("swapped token: %v", p)
	}
	if p := ok.Problems(1000, 401); len(p) != 2 {
		t.Errorf("a success with no rows: %v", p)
	}
}

func TestSummarizeAndJudgeReserve(t *testing.T) {
	run := func(round int, w string, n int, reserved int64, p99 time.Duration) ReserveSample {
		return ReserveSample{Round: round, Workload: w, Clients: n,
			Load: LoadResult{Reserved: reserved, Wall: time.Second, P50: p99 / 2, P99: p99}}
	}
	var samples []ReserveSample
	for r := 1; r <= 3; r++ {
		samples = append(samples,
			run(r, WorkloadTxn, 64, 200, 400*time.Millisecond),
			run(r, WorkloadUpdate, 64, 3000+int64(r)*500, 20*time.Millisecond),
			run(r, WorkloadCall, 64, 4000, time.Duration(20+r*20)*time.Millisecond),
			run(r, WorkloadCall, 256, 3000, 45*time.Millisecond))
	}
	samples = append(samples, ReserveSample{Round: 1, Workload: WorkloadCall, Clients: 8, Err: errors.New("x")})
	sums := SummarizeReserve(samples, ReserveWorkloads, []int{8, 64, 256})
	c64, ok := findSummary(sums, WorkloadCall, 64)
	if !ok || c64.Rate != 4000 || c64.P99 != 60*time.Millisecond || c64.WorstP99 != 80*time.Millisecond || c64.Runs != 3 {
		t.Fatalf("(c)@64 summary %+v", c64)
	}
	if b64, _ := findSummary(sums, WorkloadUpdate, 64); b64.Rate != 4000 || !slices.Equal(b64.PerRound, []float64{3500, 4000, 4500}) {
		t.Fatalf("(b)@64 summary %+v", b64)
	}
	if _, ok := findSummary(sums, WorkloadCall, 8); ok {
		t.Fatal("a run that measured nothing was summarised")
	}
	vs := ReserveVerdicts(sums)
	want := []struct {
		pass bool
		text string
	}{
		{true, "(c)/(a) reservations/s at 64 clients = 20.00×"},
		{true, "(c)/(b) reservations/s at 64 clients = 1.00×"},
		{false, "(c)@256 / (c)@64 reservations/s = 0.75×"},
		{false, "(c) p99 at 64 clients (median of rounds) = 60.00 ms (target ≤ 50 ms)"},
		{true, "(c) p99 at 256 clients (median of rounds) = 45.00 ms"},
		{false, "(c)/(b) reservations/s at 64 clients, performance target = 1.00× (target ≥ 2×)"},
		{false, "(c) p99 at 256 clients, performance target = 45.00 ms (target ≤ 30 ms)"},
	}
	if len(vs) != len(want) {
		t.Fatalf("%d verdicts", len(vs))
	}
	for i, w := range want {
		if vs[i].Pass != w.pass || !strings.Contains(vs[i].String(), w.text) {
			t.Errorf("verdict %d: %s (pass %v), want %q pass %v", i, vs[i], vs[i].Pass, w.text, w.pass)
		}
	}
	none := ReserveVerdicts(nil)
	if none[0].Pass || !strings.HasPrefix(none[0].String(), "n/a") {
		t.Errorf("verdict without data: %s", none[0])
	}
	e := append(slices.Clone(samples), run(1, WorkloadVariant, 64, 5000, 30*time.Millisecond))
	var eb strings.Builder
	PrintVariantEffect(&eb, SummarizeReserve(e, []string{WorkloadCall, WorkloadVariant}, []int{64, 256}), []int{64, 256}, "-set a.b=1")
	if want := "holdfast -set a.b=1 at 64 clients: (e) 5000.0 reservations/s = 1.25× (c) 4000.0; p99 30.00 ms vs 60.00 ms\n"; eb.String() != want {
		t.Errorf("(e) against (c): %q, want %q", eb.String(), want)
	}
	var b strings.Builder
	PrintReserveSummaries(&b, sums)
	if !strings.Contains(b.String(), "(c) holdfast.reserve") || !strings.Contains(b.String(), "3500 4000 4500") {
		t.Errorf("table:\n%s", b.String())
	}
	var cl strings.Builder
	PrintClosedLoop(&cl, sums, []int{8, 64})
	if want := "closed loop: (c) at 64 clients, 4000.0 reservations/s: mean 16.00 ms per reservation (= 64 / rate); p99 60.00 ms\n"; cl.String() != want {
		t.Errorf("closed loop: %q, want %q", cl.String(), want)
	}
}

func TestReserveOptions(t *testing.T) {
	if err := DefaultReserveOptions().validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*ReserveOptions){
		"rounds":         func(o *ReserveOptions) { o.Rounds = 0 },
		"time":           func(o *ReserveOptions) { o.Time = time.Millisecond },
		"clients":        func(o *ReserveOptions) { o.Clients = []int{8, 0} },
		"workload":       func(o *ReserveOptions) { o.Workloads = []string{"f"} },
		"e without -set": func(o *ReserveOptions) { o.Workloads = []string{WorkloadCall, WorkloadVariant} },
		"-set without e": func(o *ReserveOptions) { o.Settings = []string{"reservation.max_batch=64"} },
		"bad -set": func(o *ReserveOptions) {
			o.Workloads, o.Settings = []string{WorkloadVariant}, []string{"reservation.max_batch"}
		},
		"database": func(o *ReserveOptions) { o.Database = "x`; DROP" },
		"on hand":  func(o *ReserveOptions) { o.OnHand = 0 },
	} {
		o := DefaultReserveOptions()
		mod(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	o := DefaultReserveOptions()
	o.Workloads, o.Settings = []string{WorkloadCall, WorkloadVariant}, []string{"reservation.max_batch=64"}
	if err := o.validate(); err != nil {
		t.Errorf("workload e with -set: %v", err)
	}
	o.Settings, o.ERepo = nil, "../.."
	if err := o.validate(); err != nil || o.Variant() != "built from ../.." {
		t.Errorf("workload e with -e-repo: %v, %q", err, o.Variant())
	}
	if o.ERepo = t.TempDir(); o.validate() == nil {
		t.Error("-e-repo that is not a checkout: accepted")
	}
	if got, err := ParseClients(" 8,64 ,256"); err != nil || !slices.Equal(got, []int{8, 64, 256}) {
		t.Errorf("ParseClients: %v, %v", got, err)
	}
	for _, bad := range []string{"", "8,,64", "0", "x"} {
		if _, err := ParseClients(bad); err == nil {
			t.Errorf("ParseClients(%q) accepted", bad)
		}
	}
}

// FuzzParseMetrics: no input panics, and what parses has a series name.
func FuzzParseMetrics(f *testing.F) {
	f.Add("a 1\n")
	f.Add(`a{b="c d} \"e"} 2 123` + "\n# x\n")
	f.Add("a{b=\"\\\n")
	f.Fuzz(func(t *testing.T, s string) {
		m, err := parseMetrics(strings.NewReader(s))
		if err != nil {
			return
		}
		for k := range m {
			if k == "" || strings.ContainsAny(k[:1], " {") {
				t.Fatalf("series %q from %q", k, s)
			}
		}
	})
}

func TestServerDigest(t *testing.T) {
	s := ReserveSample{
		Load:       LoadResult{Reserved: 1000},
		MariaDBCPU: 120 * time.Millisecond,
		LockWaits:  7, Statements: 360, Commits: 40, Fsyncs: 41,
	}
	got := serverDigest(s, true)
	for _, want := range []string{"deadlocks +0, row lock waits +7, statements +360 (COMMIT +40), data fsyncs +41",
		"MariaDB CPU 120 µs per reservation, 3.00 ms per COMMIT"} {
		if !strings.Contains(got, want) {
			t.Errorf("digest %q lacks %q", got, want)
		}
	}
	if got := serverDigest(s, false); strings.Contains(got, "CPU") {
		t.Errorf("digest %q reports a CPU that was not measured", got)
	}
	s.Load.Reserved, s.Commits = 0, 0
	if got := serverDigest(s, true); strings.Contains(got, "CPU") {
		t.Errorf("digest %q divides by nothing", got)
	}
}
