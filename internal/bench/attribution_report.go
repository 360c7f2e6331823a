package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// AttrVerdict compares one attribution-on target with the attribution-off
// target on one workload. Its Workload.Target is the least on/off tps
// ratio that passes (0.97: on at most 3% slower).
type AttrVerdict struct {
	Workload Workload
	On, Off  string  // the targets compared
	OnTPS    float64 // medians over successful runs
	OffTPS   float64
	Ratio    float64 // OnTPS / OffTPS; 0 when either is missing
	// Paired is on/off tps of each round in which both runs succeeded, in
	// round order: the two ran back to back, so each pair shares the
	// machine's load of the moment.
	Paired []float64
	// OnCPU and OffCPU are the median CPU the holdfast process used per
	// sysbench transaction; 0 when not measured.
	OnCPU, OffCPU time.Duration
	// OnSpread and OffSpread are (max − min) / median of each target's
	// per-round tps: the run-to-run noise the Ratio has to be read against.
	OnSpread, OffSpread float64
	Pass                bool // Ratio > 0 and Ratio ≥ Workload.Target
	// PairedMedian: Ratio is the median of Paired, not OnTPS / OffTPS.
	PairedMedian bool
}

// Diff is the tps difference of on against off in percent; negative when
// on is slower.
func (v AttrVerdict) Diff() float64 {
	if v.Ratio == 0 {
		return 0
	}
	return 100 * (v.Ratio - 1)
}

// maxCost is the target as the largest slowdown allowed, in percent.
func (v AttrVerdict) maxCost() float64 { return 100 * (1 - v.Workload.Target) }

// AttrVerdicts computes, for each workload and each target in on, the
// verdict of on against off, from the samples of a run and Summarize's
// output for them.
func AttrVerdicts(samples []Sample, sums []Summary, workloads []Workload, on []string, off string) []AttrVerdict {
	sum := func(w Workload, t string) Summary {
		for _, s := range sums {
			if s.Workload == w && s.Target == t {
				return s
			}
		}
		return Summary{Workload: w, Target: t}
	}
	var out []AttrVerdict
	for _, w := range workloads {
		f := sum(w, off)
		for _, t := range on {
			n := sum(w, t)
			v := AttrVerdict{Workload: w, On: t, Off: off, OnTPS: n.TPS, OffTPS: f.TPS,
				Paired: pairedRatios(samples, w, t, off), OnCPU: n.HopPerTxn, OffCPU: f.HopPerTxn,
				OnSpread: spread(n.PerRound), OffSpread: spread(f.PerRound)}
			if n.TPS > 0 && f.TPS > 0 {
				v.Ratio = n.TPS / f.TPS
			}
			v.Pass = v.Ratio > 0 && v.Ratio >= w.Target
			out = append(out, v)
		}
	}
	return out
}

// pairedRatios is a/b tps per round for the rounds where both a and b
// succeeded on w, in round order.
func pairedRatios(samples []Sample, w Workload, a, b string) []float64 {
	ok := func(s Sample, t string) bool {
		return s.Workload == w && s.Target == t && s.Err == nil && s.Result.TPS > 0 && s.Round > 0
	}
	num, den := map[int]float64{}, map[int]float64{}
	var rounds []int
	for _, s := range samples {
		switch {
		case ok(s, a):
			num[s.Round] = s.Result.TPS
			rounds = append(rounds, s.Round)
		case ok(s, b):
			den[s.Round] = s.Result.TPS
		}
	}
	slices.Sort(rounds)
	var out []float64
	for _, r := range slices.Compact(rounds) {
		if d, found := den[r]; found {
			out = append(out, num[r]/d)
		}
	}
	return out
}

// spread is (max − min) / median of xs; 0 for fewer than two values.
func spread(xs []float64) float64 {
	m := Median(xs)
	if len(xs) < 2 || m == 0 {
		return 0
	}
	return (slices.Max(xs) - slices.Min(xs)) / m
}

// String is the verdict line and an indented line of evidence:
//
//	PASS point_select@16  on-tagged/off 0.985× = -1.5% (target: on at most 3.0% slower)
//	     medians on-tagged 5012.3 tps, off 5088.9 tps; per-round on-tagged/off 0.98 ...
func (v AttrVerdict) String() string {
	word, note := "PASS", ""
	switch {
	case v.Ratio == 0:
		word = "MISS"
	case !v.Pass:
		word = "MISS"
		note = fmt.Sprintf(", missed by %.1f points", -v.Diff()-v.maxCost())
	case v.Diff() > v.maxCost():
		note = "; on faster by more than that: noise exceeds the margin"
	}
	ratio := "n/a"
	if v.Ratio > 0 {
		ratio = fmt.Sprintf("%.3f× = %+.1f%%", v.Ratio, v.Diff())
		if v.PairedMedian {
			ratio = fmt.Sprintf("%.3f× = %+.1f%% (median of %d pairs)", v.Ratio, v.Diff(), len(v.Paired))
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-16s %s/%s %s (target: on at most %.1f%% slower%s)\n",
		word, v.Workload, v.On, v.Off, ratio, v.maxCost(), note)
	fmt.Fprintf(&b, "     medians %s %.1f tps, %s %.1f tps", v.On, v.OnTPS, v.Off, v.OffTPS)
	if len(v.Paired) > 0 {
		rs := make([]string, len(v.Paired))
		for i, r := range v.Paired {
			rs[i] = fmt.Sprintf("%.3f", r)
		}
		fmt.Fprintf(&b, "; per-round %s/%s %s (median %.3f)", v.On, v.Off, strings.Join(rs, " "), Median(v.Paired))
	}
	if v.OnSpread > 0 || v.OffSpread > 0 {
		fmt.Fprintf(&b, "; round-to-round spread %s %.1f%%, %s %.1f%%", v.On, 100*v.OnSpread, v.Off, 100*v.OffSpread)
	}
	if v.OnCPU > 0 && v.OffCPU > 0 {
		fmt.Fprintf(&b, "; holdfast CPU per txn %.1f µs vs %.1f µs (%+.1f%%)",
			micros(v.OnCPU), micros(v.OffCPU), 100*(float64(v.OnCPU)/float64(v.OffCPU)-1))
	}
	return b.String()
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
