package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// ReserveSample is one run of one workload at one client count.
type ReserveSample struct {
	Round    int
	Workload string
	Clients  int
	Load     LoadResult
	// CPU used over the operations phase by holdfast's process, by
	// MariaDB's (zero when it is not a process on this machine), and by
	// this process (the load generator and the relay).
	HoldfastCPU, MariaDBCPU, SelfCPU time.Duration
	// RelayChunks and RelayLate are the relay's delayed chunks over the run
	// and how late they went out in total (netrelay.Stats).
	RelayChunks int64
	RelayLate   time.Duration
	LoadAvg     string // at the end of the run
	// Deadlocks, LockWaits, Statements, Commits and Fsyncs are the changes
	// of MariaDB's Innodb_deadlocks, Innodb_row_lock_waits, Questions,
	// Com_commit (COMMIT statements) and Innodb_data_fsyncs over the run:
	// server-wide, so they include anything else the server ran meanwhile.
	Deadlocks, LockWaits        int64
	Statements, Commits, Fsyncs int64
	// Checked is set when the consistency check ran; Problems are what it
	// found: oversell, lost or unknown reservations, counts that do not
	// match.
	Checked   bool
	Problems  []string
	CheckNote string // what the check read, for the report
	// Metrics is a digest of holdfast's /metrics over the run.
	Metrics string
	// Err is set when the run could not be made or measured completely
	// (connections lost, unexpected errors, a check that could not run).
	Err error
}

// MeanLate is how far past its due time the relay wrote a chunk, on
// average over the run.
func (s ReserveSample) MeanLate() time.Duration {
	if s.RelayChunks == 0 {
		return 0
	}
	return s.RelayLate / time.Duration(s.RelayChunks)
}

// ReserveSummary is the medians of one workload at one client count.
type ReserveSummary struct {
	Workload string
	Clients  int
	Runs     int // runs with a result (errored runs with a result count too)
	Rate     float64
	PerRound []float64 // reservations/s of each run, in round order
	P50, P99 time.Duration
	WorstP99 time.Duration
	// Totals over the runs.
	SoldOut, Busy, Failed int64
}

// SummarizeReserve groups samples by workload and client count, in the
// order given. A run that errored before measuring anything is left out.
func SummarizeReserve(samples []ReserveSample, workloads []string, clients []int) []ReserveSummary {
	var out []ReserveSummary
	for _, w := range workloads {
		for _, n := range clients {
			s := ReserveSummary{Workload: w, Clients: n}
			var p50, p99 []float64
			for _, x := range samples {
				if x.Workload != w || x.Clients != n || x.Load.Wall == 0 {
					continue
				}
				s.Runs++
				s.PerRound = append(s.PerRound, x.Load.Rate())
				p50 = append(p50, float64(x.Load.P50))
				p99 = append(p99, float64(x.Load.P99))
				s.WorstP99 = max(s.WorstP99, x.Load.P99)
				s.SoldOut += x.Load.SoldOut
				s.Busy += x.Load.Busy
				s.Failed += x.Load.Failed
			}
			s.Rate = Median(s.PerRound)
			s.P50, s.P99 = time.Duration(Median(p50)), time.Duration(Median(p99))
			out = append(out, s)
		}
	}
	return out
}

func findSummary(sums []ReserveSummary, w string, n int) (ReserveSummary, bool) {
	for _, s := range sums {
		if s.Workload == w && s.Clients == n && s.Runs > 0 {
			return s, true
		}
	}
	return ReserveSummary{}, false
}

// The targets of `make bench-reserve`: the engine's own, and the stricter
// ones of the performance work (marked so in the verdict).
const (
	targetOverTxn    = 10.0 // (c) ≥ 10× (a) at 64 clients
	targetOverUpdate = 1.0  // (c) ≥ 1.0× (b) at 64 clients
	targetScale      = 0.8  // (c)@256 ≥ 0.8× (c)@64
	targetP99        = 50 * time.Millisecond

	perfOverUpdate = 2.0                   // (c) ≥ 2.0× (b) at 64 clients
	perfP99At256   = 30 * time.Millisecond // (c) p99 at 256 clients
)

// ReserveVerdict is one target, met or missed.
type ReserveVerdict struct {
	What   string
	Value  float64 // the ratio, or the p99 in ms
	Target float64
	AtMost bool   // Target is an upper bound
	Unit   string // "×" or " ms"
	Have   bool   // the runs it needs were made
	Pass   bool
}

func (v ReserveVerdict) String() string {
	op := "≥"
	if v.AtMost {
		op = "≤"
	}
	if !v.Have {
		return fmt.Sprintf("n/a   %s (target %s %g%s): not measured", v.What, op, v.Target, v.Unit)
	}
	res := "MISS"
	if v.Pass {
		res = "PASS"
	}
	return fmt.Sprintf("%s  %s = %.2f%s (target %s %g%s)", res, v.What, v.Value, v.Unit, op, v.Target, v.Unit)
}

// ReserveVerdicts judges the summaries against the targets.
func ReserveVerdicts(sums []ReserveSummary) []ReserveVerdict {
	ratio := func(what string, a, b ReserveSummary, okA, okB bool, target float64) ReserveVerdict {
		v := ReserveVerdict{What: what, Target: target, Unit: "×", Have: okA && okB && b.Rate > 0}
		if v.Have {
			v.Value = a.Rate / b.Rate
			v.Pass = v.Value >= target
		}
		return v
	}
	c64, okC64 := findSummary(sums, WorkloadCall, 64)
	c256, okC256 := findSummary(sums, WorkloadCall, 256)
	a64, okA64 := findSummary(sums, WorkloadTxn, 64)
	b64, okB64 := findSummary(sums, WorkloadUpdate, 64)
	out := []ReserveVerdict{
		ratio("(c)/(a) reservations/s at 64 clients", c64, a64, okC64, okA64, targetOverTxn),
		ratio("(c)/(b) reservations/s at 64 clients", c64, b64, okC64, okB64, targetOverUpdate),
		ratio("(c)@256 / (c)@64 reservations/s", c256, c64, okC256, okC64, targetScale),
	}
	p99 := func(what string, s ReserveSummary, ok bool, target time.Duration) ReserveVerdict {
		v := ReserveVerdict{What: what, Target: ms(target), AtMost: true, Unit: " ms", Have: ok}
		if ok {
			v.Value = ms(s.P99)
			v.Pass = s.P99 <= target
		}
		return v
	}
	return append(out,
		p99("(c) p99 at 64 clients (median of rounds)", c64, okC64, targetP99),
		p99("(c) p99 at 256 clients (median of rounds)", c256, okC256, targetP99),
		ratio("(c)/(b) reservations/s at 64 clients, performance target", c64, b64, okC64, okB64, perfOverUpdate),
		p99("(c) p99 at 256 clients, performance target", c256, okC256, perfP99At256),
	)
}

// PrintClosedLoop writes, for each client count of (c), the mean time a
// reservation took as the load itself dictates: a client sends its next
// call as soon as one is answered, so n clients at r reservations/s wait
// n/r on average (Little's law), whatever the engine does. A p99 below
// that mean cannot be had without a higher rate.
func PrintClosedLoop(w io.Writer, sums []ReserveSummary, clients []int) {
	for _, n := range clients {
		c, ok := findSummary(sums, WorkloadCall, n)
		if !ok || c.Rate <= 0 {
			continue
		}
		mean := time.Duration(float64(n) / c.Rate * float64(time.Second))
		fmt.Fprintf(w, "closed loop: (c) at %d clients, %.1f reservations/s: mean %.2f ms per reservation (= %d / rate); p99 %.2f ms\n",
			n, c.Rate, ms(mean), n, ms(c.P99))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// PrintReserveSummaries writes the table of medians.
func PrintReserveSummaries(w io.Writer, sums []ReserveSummary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\tclients\treservations/s\tper round\tp50 ms\tp99 ms\tworst p99 ms\tsold out\tbusy\tfailed\t")
	for _, s := range sums {
		if s.Runs == 0 {
			fmt.Fprintf(tw, "%s\t%d\tn/a\t\t\t\t\t\t\t\t\n", workloadName(s.Workload), s.Clients)
			continue
		}
		per := make([]string, len(s.PerRound))
		for i, r := range s.PerRound {
			per[i] = strconv.FormatFloat(r, 'f', 0, 64)
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%.2f\t%.2f\t%.2f\t%d\t%d\t%d\t\n",
			workloadName(s.Workload), s.Clients, s.Rate, strings.Join(per, " "),
			ms(s.P50), ms(s.P99), ms(s.WorstP99), s.SoldOut, s.Busy, s.Failed)
	}
	tw.Flush()
}

// parseMetrics reads Prometheus text exposition into a map from series
// ("name" or "name{labels}", as written) to value. Comments, blank lines
// and timestamps are skipped; a line it cannot read is an error.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := make(map[string]float64)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, " {")
		if end > 0 && line[end] == '{' {
			// Label values may hold spaces, braces and escaped quotes.
			inQuote := false
			end = -1
			for i := strings.IndexByte(line, '{'); i < len(line); i++ {
				switch c := line[i]; {
				case inQuote && c == '\\':
					i++
				case c == '"':
					inQuote = !inQuote
				case !inQuote && c == '}':
					end = i + 1
				}
				if end > 0 {
					break
				}
			}
		}
		if end <= 0 || end >= len(line) {
			return nil, fmt.Errorf("bench: metrics line %q", line)
		}
		f := strings.Fields(line[end:])
		if len(f) < 1 {
			return nil, fmt.Errorf("bench: metrics line %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("bench: metrics line %q: %w", line, err)
		}
		out[line[:end]] = v
	}
	return out, sc.Err()
}

// metricsDigest summarises what changed in holdfast's metrics between two
// scrapes: the pool's waits and, with reservations, every
// holdfast_reservation_*_total series that moved and the mean reserve
// batch size, reserve duration and refill duration.
func metricsDigest(before, after map[string]float64, reservations bool) string {
	d := func(k string) float64 { return after[k] - before[k] }
	mean := func(base string) (float64, bool) {
		n := d(base + "_count")
		if n <= 0 {
			return 0, false
		}
		return d(base+"_sum") / n, true
	}
	var parts []string
	acq, waits := d("holdfast_pool_acquires_total"), d("holdfast_pool_waits_total")
	p := fmt.Sprintf("pool acquires %.0f, waits %.0f", acq, waits)
	if waits > 0 {
		p += fmt.Sprintf(" (mean wait %.2f ms)", 1000*d("holdfast_pool_wait_seconds_total")/waits)
	}
	if t := d("holdfast_pool_timeouts_total") + d("holdfast_pool_rejected_total"); t > 0 {
		p += fmt.Sprintf(", timeouts+rejected %.0f", t)
	}
	parts = append(parts, p)
	if !reservations {
		return strings.Join(parts, "; ")
	}
	if m, ok := mean("holdfast_reservation_reserve_batch_size"); ok {
		parts = append(parts, fmt.Sprintf("mean batch %.1f reserves", m))
	}
	if m, ok := mean("holdfast_reservation_reserve_duration_seconds"); ok {
		parts = append(parts, fmt.Sprintf("mean reserve %.2f ms in holdfast", 1000*m))
	}
	if m, ok := mean("holdfast_reservation_refill_duration_seconds"); ok {
		parts = append(parts, fmt.Sprintf("mean refill %.2f ms", 1000*m))
	}
	var moved []string
	for k := range after {
		name, _, _ := strings.Cut(k, "{")
		if !strings.HasPrefix(name, "holdfast_reservation_") || !strings.HasSuffix(name, "_total") {
			continue
		}
		if v := d(k); v != 0 && !math.IsNaN(v) {
			short := strings.TrimPrefix(strings.Replace(k, "_total", "", 1), "holdfast_reservation_")
			moved = append(moved, fmt.Sprintf("%s %.0f", short, v))
		}
	}
	slices.Sort(moved)
	if len(moved) > 0 {
		parts = append(parts, strings.Join(moved, ", "))
	}
	return strings.Join(parts, "; ")
}

// serverDigest is the report line of what MariaDB did over a run: its
// server-wide counters and, when its CPU was measured, that CPU per
// reservation made and per COMMIT statement (an autocommit statement
// commits without one). The database's CPU per reservation is the cost a
// change to the reserve path must lower to raise the reserve rate where
// MariaDB shares the machine's cores.
func serverDigest(s ReserveSample, cpuMeasured bool) string {
	out := fmt.Sprintf("deadlocks +%d, row lock waits +%d, statements +%d (COMMIT +%d), data fsyncs +%d",
		s.Deadlocks, s.LockWaits, s.Statements, s.Commits, s.Fsyncs)
	if !cpuMeasured {
		return out
	}
	var per []string
	if s.Load.Reserved > 0 {
		per = append(per, fmt.Sprintf("%.0f µs per reservation", float64(s.MariaDBCPU.Microseconds())/float64(s.Load.Reserved)))
	}
	if s.Commits > 0 {
		per = append(per, fmt.Sprintf("%.2f ms per COMMIT", float64(s.MariaDBCPU.Microseconds())/1000/float64(s.Commits)))
	}
	if len(per) > 0 {
		out += ";  MariaDB CPU " + strings.Join(per, ", ")
	}
	return out
}

func (b *reserveRunner) printSample(s ReserveSample) {
	label := fmt.Sprintf("round %d/%d %3d clients %-22s", s.Round, b.o.Rounds, s.Clients, workloadName(s.Workload))
	r := s.Load
	if r.Wall == 0 {
		b.printf("%s ERROR %v\n", label, s.Err)
		return
	}
	cores := func(d time.Duration) float64 { return d.Seconds() / r.Wall.Seconds() }
	b.printf("%s %8.1f res/s  p50 %6.2f ms  p99 %6.2f ms  max %7.2f ms  reserved %d  sold out %d  busy %d  failed %d\n",
		label, r.Rate(), ms(r.P50), ms(r.P99), ms(r.Max), r.Reserved, r.SoldOut, r.Busy, r.Failed)
	db := "n/a"
	if b.dbPid != 0 {
		db = fmt.Sprintf("%.2f", cores(s.MariaDBCPU))
	}
	b.printf("    cores: holdfast %.2f, MariaDB %s, bench+relay %.2f;  relay one way %v + %v late = %v;  load %s\n",
		cores(s.HoldfastCPU), db, cores(s.SelfCPU), b.o.RelayDelay, roundDur(s.MeanLate()), roundDur(b.o.RelayDelay+s.MeanLate()), s.LoadAvg)
	b.printf("    MariaDB (server-wide): %s\n", serverDigest(s, b.dbPid != 0))
	if s.Metrics != "" {
		b.printf("    holdfast: %s\n", s.Metrics)
	}
	switch {
	case !s.Checked:
		b.printf("    NOT CHECKED (see the error)\n")
	case len(s.Problems) > 0:
		b.printf("    CHECK FAILED: %s\n      (%s)\n", strings.Join(s.Problems, "; "), s.CheckNote)
	default:
		b.printf("    check OK: %s\n", s.CheckNote)
	}
	if r.SoldOut > 0 {
		b.printf("    ! sold out %d times: raise -on-hand; this run's rate is not comparable\n", r.SoldOut)
	}
	if s.Err != nil {
		b.printf("    ERROR %v\n", s.Err)
	}
}

// printRelay reports the delay the relay really applied, per workload:
// it differs between them (the more chunks in flight, the busier the
// relay's goroutines and the closer Go's timers fire to their due time), so
// one mean over all chunks would be dominated by the busiest workload.
func (b *reserveRunner) printRelay(samples []ReserveSample) {
	b.printf("relay: configured %v each way; applied on average (configured + how late chunks went out):\n", b.o.RelayDelay)
	for _, w := range b.o.Workloads {
		var chunks int64
		var late time.Duration
		for _, s := range samples {
			if s.Workload == w {
				chunks += s.RelayChunks
				late += s.RelayLate
			}
		}
		if chunks == 0 {
			continue
		}
		mean := late / time.Duration(chunks)
		b.printf("  %-22s %v each way, ≈ %v per round trip (%d chunks)\n",
			workloadName(w), roundDur(b.o.RelayDelay+mean), roundDur(2*(b.o.RelayDelay+mean)), chunks)
	}
}
