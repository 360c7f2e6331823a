package bench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/holdfast-db/holdfast/fleet"
)

// The three targets every workload runs against, in the order each round
// runs them, and the extra ones: Options.Settings, Options.BackendTLS and
// Options.BaselineRepo.
const (
	TargetDirect      = "direct"
	TargetRelay       = "relay"
	TargetHoldfast    = "holdfast"
	TargetSet         = "holdfast+set"
	TargetHoldfastTLS = "holdfast+tls"
	TargetBaseline    = "holdfast@base"
)

// Targets is the order of targets within a round.
var Targets = []string{TargetDirect, TargetRelay, TargetHoldfast}

// Sample is one sysbench run of one workload against one target.
type Sample struct {
	Round    int
	Workload Workload
	Target   string
	Result   SysbenchResult
	Wall     time.Duration // of the sysbench process
	// SysbenchCPU is the CPU time the sysbench process used.
	SysbenchCPU time.Duration
	// HopCPU is the CPU time of the hop between sysbench and MariaDB over
	// the run: this process for the relay, holdfast's process for holdfast;
	// zero for direct.
	HopCPU time.Duration
	// BackendConns is the most connections the backend account held in
	// MariaDB's process list during the run; -1 when not sampled.
	BackendConns int
	Err          error
}

// Summary is the medians of one workload against one target.
type Summary struct {
	Workload Workload
	Target   string
	Runs     int // successful runs
	Failed   int
	TPS      float64 // medians over successful runs
	QPS      float64
	P95      float64
	PerRound []float64 // tps of each successful run, in round order
	// Errors and Reconnects are totals over all runs.
	Errors, Reconnects int64
	HopCores           float64       // median CPU cores the hop used
	HopPerTxn          time.Duration // median hop CPU per transaction
	SysbenchCores      float64       // median CPU cores sysbench used
	BackendConns       int           // max over runs; -1 when not sampled
}

// Summarize groups samples by workload and target, in the order given.
func Summarize(samples []Sample, workloads []Workload, targets []string) []Summary {
	var out []Summary
	for _, w := range workloads {
		for _, t := range targets {
			s := Summary{Workload: w, Target: t, BackendConns: -1}
			var tps, qps, p95, hop, perTxn, sb []float64
			for _, x := range samples {
				if x.Workload != w || x.Target != t {
					continue
				}
				s.Errors += x.Result.Errors
				s.Reconnects += x.Result.Reconnects
				s.BackendConns = max(s.BackendConns, x.BackendConns)
				if x.Err != nil {
					s.Failed++
					continue
				}
				s.Runs++
				tps = append(tps, x.Result.TPS)
				qps = append(qps, x.Result.QPS)
				p95 = append(p95, x.Result.P95)
				if x.Wall > 0 {
					sb = append(sb, x.SysbenchCPU.Seconds()/x.Wall.Seconds())
					if x.HopCPU > 0 {
						hop = append(hop, x.HopCPU.Seconds()/x.Wall.Seconds())
					}
				}
				if x.HopCPU > 0 && x.Result.Transactions > 0 {
					perTxn = append(perTxn, float64(x.HopCPU)/float64(x.Result.Transactions))
				}
			}
			s.PerRound = slices.Clone(tps)
			s.TPS, s.QPS, s.P95 = Median(tps), Median(qps), Median(p95)
			s.HopCores, s.SysbenchCores = Median(hop), Median(sb)
			s.HopPerTxn = time.Duration(Median(perTxn))
			out = append(out, s)
		}
	}
	return out
}

// Median of xs (0 for none); xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Verdict compares holdfast with the relay and direct on one workload.
type Verdict struct {
	Workload       Workload
	HoldfastRelay  float64 // median holdfast tps / median relay tps; 0 when either is missing
	HoldfastDirect float64
	RelayDirect    float64
	Pass           bool // HoldfastRelay ≥ Workload.Target
}

// summaryTPS is the median tps of w against target t in sums (0: none).
func summaryTPS(sums []Summary, w Workload, t string) float64 {
	for _, s := range sums {
		if s.Workload == w && s.Target == t {
			return s.TPS
		}
	}
	return 0
}

// Verdicts computes a Verdict per workload from Summarize's output.
func Verdicts(sums []Summary, workloads []Workload) []Verdict {
	tps := func(w Workload, t string) float64 { return summaryTPS(sums, w, t) }
	var out []Verdict
	for _, w := range workloads {
		d, r, h := tps(w, TargetDirect), tps(w, TargetRelay), tps(w, TargetHoldfast)
		v := Verdict{Workload: w, HoldfastRelay: ratio(h, r), HoldfastDirect: ratio(h, d), RelayDirect: ratio(r, d)}
		v.Pass = v.HoldfastRelay > 0 && v.HoldfastRelay >= w.Target
		out = append(out, v)
	}
	return out
}

// String is the one-line verdict: "PASS holdfast/relay 1.23 (target ≥ 1.10) ...".
func (v Verdict) String() string {
	word := "PASS"
	by := ""
	if !v.Pass {
		word = "MISS"
		if v.HoldfastRelay > 0 {
			by = fmt.Sprintf(", short by %.1f%%", 100*(v.Workload.Target-v.HoldfastRelay)/v.Workload.Target)
		}
	}
	return fmt.Sprintf("%s %-16s holdfast/relay %s (target ≥ %.2f%s)   holdfast/direct %s   relay/direct %s",
		word, v.Workload, fmtRatio(v.HoldfastRelay), v.Workload.Target, by,
		fmtRatio(v.HoldfastDirect), fmtRatio(v.RelayDirect))
}

// ratio is a/b, or 0 when either is missing.
func ratio(a, b float64) float64 {
	if a == 0 || b == 0 {
		return 0
	}
	return a / b
}

func fmtRatio(r float64) string {
	if r == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", r)
}

// PrintSummaries writes the results table. A row marked "!" had sysbench
// errors, reconnects or failed runs.
func PrintSummaries(w io.Writer, sums []Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "workload\ttarget\ttps\tqps\tp95 ms\terrors\treconn\tfailed\thop cores\thop µs/txn\tsysbench cores\tbackend conns\t tps per round\t")
	for _, s := range sums {
		hop, perTxn, conns := "-", "-", "-"
		if s.HopCores > 0 {
			hop = fmt.Sprintf("%.2f", s.HopCores)
			perTxn = fmt.Sprintf("%.0f", float64(s.HopPerTxn)/float64(time.Microsecond))
		}
		if s.BackendConns >= 0 {
			conns = fmt.Sprint(s.BackendConns)
		}
		rounds := make([]string, len(s.PerRound))
		for i, x := range s.PerRound {
			rounds[i] = fmt.Sprintf("%.0f", x)
		}
		flag := "" // marks a row with errors, reconnects or failed runs
		if s.Errors > 0 || s.Reconnects > 0 || s.Failed > 0 {
			flag = "!"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%.1f\t%.1f\t%.2f\t%d\t%d\t%d\t%s\t%s\t%.2f\t%s\t %s\t\n",
			flag, s.Workload, s.Target, s.TPS, s.QPS, s.P95, s.Errors, s.Reconnects, s.Failed,
			hop, perTxn, s.SysbenchCores, conns, strings.Join(rounds, " "))
	}
	tw.Flush()
}

// ScaleReport is the connection-scale run as printed.
type ScaleReport struct {
	Result       ScaleResult
	Conns        int
	PoolMax      int   // holdfast's pool.max in effect
	BackendMax   int   // the target: at most this many backend connections
	PeakRSS      int64 // VmHWM at the end of the run
	EndRSS       int64 // VmRSS with every connection still open
	MaxSampled   int64 // largest VmRSS seen by the sampler
	BackendConns int   // most backend connections seen; -1 unknown
	HoldfastCPU  time.Duration
	RSSTarget    int64
	P99Target    time.Duration
	// BaseRSS is VmRSS before any client connected, IdleRSS once every
	// connection had logged in (idle, before the statement phase).
	BaseRSS, IdleRSS int64
	// Direct is the baseline: the same run straight to MariaDB, right
	// after holdfast's; nil when it did not run.
	Direct *ScaleResult
}

// PerIdleConn is the resident memory each idle client connection costs.
func (r ScaleReport) PerIdleConn() int64 {
	if r.Result.Opened == 0 || r.IdleRSS == 0 || r.BaseRSS == 0 {
		return 0
	}
	return (r.IdleRSS - r.BaseRSS) / int64(r.Result.Opened)
}

// Print writes the scale section.
func (r ScaleReport) Print(w io.Writer) {
	res := r.Result
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	verdict := func(ok bool) string {
		if ok {
			return "PASS"
		}
		return "MISS"
	}
	fmt.Fprintf(w, "  connections: %d of %d opened in %v (%d failed)\n",
		res.Opened, r.Conns, res.ConnectTime.Round(time.Millisecond), res.ConnectErrs)
	fmt.Fprintf(w, "  statements:  %d ok, %d errors, %d sent late (>10%% of the interval) over %v\n",
		res.Statements, res.Errors, res.Late, res.Wall.Round(time.Millisecond))
	fmt.Fprintf(w, "  %s latency:   p50 %v  p99 %v (target ≤ %v)  max %v\n", verdict(res.Statements > 0 && res.P99 <= r.P99Target),
		roundDur(res.P50), roundDur(res.P99), r.P99Target, roundDur(res.Max))
	if d := r.Direct; d != nil {
		fmt.Fprintf(w, "  baseline:    direct to MariaDB, right after: p50 %v  p99 %v  max %v (%d of %d logged in, %d statements ok, %d errors, %d late)",
			roundDur(d.P50), roundDur(d.P99), roundDur(d.Max), d.Opened, r.Conns, d.Statements, d.Errors, d.Late)
		if d.Opened == res.Opened && d.Statements > 0 && res.Statements > 0 {
			fmt.Fprintf(w, "; holdfast adds p50 %v, p99 %v", roundDur(res.P50-d.P50), roundDur(res.P99-d.P99))
		}
		fmt.Fprintln(w)
		if d.FirstErr != "" {
			fmt.Fprintf(w, "  ! baseline's first error: %s\n", d.FirstErr)
		}
	}
	fmt.Fprintf(w, "  %s holdfast peak RSS (VmHWM) %s vs target ≤ %s; VmRSS with all connections open %s\n",
		verdict(r.PeakRSS > 0 && r.PeakRSS <= r.RSSTarget), mib(r.PeakRSS), mib(r.RSSTarget), mib(r.EndRSS))
	if per := r.PerIdleConn(); per > 0 {
		fmt.Fprintf(w, "  memory per idle client connection: %.1f KiB (VmRSS %s before the first login, %s with %d idle)\n",
			float64(per)/1024, mib(r.BaseRSS), mib(r.IdleRSS), res.Opened)
	}
	if r.BackendConns >= 0 {
		// Beside its pool, holdfast keeps up to fleet.MaxConns connections of
		// its own for the fleet's tables (controls, membership, leases).
		fmt.Fprintf(w, "  %s backend connections: at most %d seen in MariaDB's process list (target ≤ %d; pool.max %d, and %d for the fleet's tables)\n",
			verdict(r.BackendConns <= r.BackendMax && r.BackendConns <= r.PoolMax+fleet.MaxConns), r.BackendConns, r.BackendMax, r.PoolMax, fleet.MaxConns)
	}
	secs := res.Wall.Seconds()
	if secs > 0 {
		gen, hf := res.CPU.Seconds()/secs, r.HoldfastCPU.Seconds()/secs
		note := ""
		if gen > hf && gen >= 0.1 {
			note = " — the load generator used more CPU than holdfast: on 2 shared cores it is part of what holdfast's latency measures"
		}
		fmt.Fprintf(w, "  cpu:         holdfast %.2f cores, load generator %.2f cores%s\n", hf, gen, note)
	}
	if res.FirstErr != "" {
		fmt.Fprintf(w, "  ! first error: %s\n", res.FirstErr)
	}
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
