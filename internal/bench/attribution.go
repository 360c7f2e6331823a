package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ModeAttribution (`make bench-attribution`) measures what per-tag
// accounting costs: sysbench oltp_point_select through two holdfast
// processes built from the same binary, in front of the same MariaDB, whose
// configurations differ only in attribution.disabled.
//
// sysbench cannot put a /* conn_tag:... */ comment on its statements, and
// untagged statements are attributed to "untagged", which skips the tag
// parser's hit path. So the attribution-on process has two client accounts:
// sysbench logs in as holdfastUser for the "on" target (its statements stay
// untagged) and as taggedUser, whose default_tag is benchTag, for the
// "on-tagged" target: holdfast gives a connection the tag of its conn_tag
// connection attribute, else its user's default_tag, so every statement of
// those runs is accounted to a real tag, as an application's would be. The
// attribution-off process has the same accounts; with attribution disabled
// the tag is never used. After the rounds the harness reads GET /api/tags
// from both processes to show the tags really were (and were not) recorded.
//
// Every round runs each workload against the three targets back to back,
// the order reversed each round (roundOrder), so the off runs alternate with
// on runs throughout and which variant goes first alternates.
//
// On a shared machine, back-to-back runs differ by far more than 3% (tens
// of percent from one run to the next), so the sequential rounds cannot
// decide the target. The concurrent pairs that follow can: each runs two
// sysbench processes at the same moment, one against an attribution-on
// target and one against the off process, each with half the workload's
// threads, so both see the same machine, the same MariaDB and the same
// noise. The median over 2×Rounds pairs of the on/off tps ratio within a
// pair is the verdict; holdfast CPU per transaction is printed beside it.

// ModeAttribution's targets.
const (
	TargetAttrOn     = "on"        // attribution on; sysbench's statements untagged
	TargetAttrTagged = "on-tagged" // attribution on; every statement tagged by the user's default_tag
	TargetAttrOff    = "off"       // attribution.disabled: true
)

// AttributionTargets is the order of targets in odd rounds; even rounds
// run them reversed.
var AttributionTargets = []string{TargetAttrTagged, TargetAttrOff, TargetAttrOn}

// AttributionWorkloads are the workloads of ModeAttribution. Target is the
// least on/off tps ratio that passes: the issue allows attribution to cost
// at most 3%.
var AttributionWorkloads = []Workload{
	{Test: "oltp_point_select", Threads: 16, Target: 0.97},
	{Test: "oltp_point_select", Threads: 64, Target: 0.97},
}

const (
	// taggedUser is the holdfast account whose default_tag is benchTag
	// (password the same as the name).
	taggedUser = "sbtest_tagged"
	benchTag   = "sysbench"
	// engineTagPrefix starts the tags of holdfast's own work (reservation
	// engine, refiller, sweeper).
	engineTagPrefix = "holdfast:"
)

// attrProc is one of ModeAttribution's two holdfast processes.
type attrProc struct {
	name  string // "on" or "off"
	h     *Holdfast
	admin string // its admin listener, for GET /api/tags
}

func (b *runner) runAttribution(ctx context.Context) error {
	o := b.o
	if err := b.startAttributionHoldfasts(ctx); err != nil {
		return err
	}
	b.printf("commands (each round runs every workload against %s in turn, reversed in even rounds):\n",
		strings.Join(AttributionTargets, ", "))
	for _, w := range AttributionWorkloads {
		for _, t := range AttributionTargets {
			b.printf("  %-9s %s\n", t, b.sysb.CommandLine(b.sysb.RunArgs(w, b.endpoint(t), o.Time)))
		}
	}
	runs := len(AttributionWorkloads) * len(AttributionTargets)
	total := time.Duration(o.Rounds*runs) * (o.Time + 2*time.Second)
	b.printf("%d rounds × %d runs of %v: about %v\n", o.Rounds, runs, o.Time, total.Round(time.Second))

	var samples []Sample
	for round := 1; round <= o.Rounds; round++ {
		b.printf("\nround %d/%d: load average %s\n", round, o.Rounds, loadAvg())
		for _, w := range AttributionWorkloads {
			for _, t := range roundOrder(AttributionTargets, round) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s := b.runOne(ctx, round, w, t)
				samples = append(samples, s)
				b.printSample(s)
			}
		}
	}

	sums := Summarize(samples, AttributionWorkloads, AttributionTargets)
	verdicts := AttrVerdicts(samples, sums, AttributionWorkloads, []string{TargetAttrTagged, TargetAttrOn}, TargetAttrOff)
	printResults := func() {
		PrintSummaries(b.w, sums)
		b.printf("(hop = the holdfast process serving the target; on and on-tagged are the same process)\n")
		for _, v := range verdicts {
			b.printf("%s\n", v)
		}
	}
	b.printf("\n== sequential runs: medians of %d rounds (informational: see the concurrent pairs) ==\n", o.Rounds)
	printResults()

	pairSamples, pairSums, pairVerdicts, err := b.runAttributionPairs(ctx)
	if err != nil {
		return err
	}
	samples = append(samples, pairSamples...)
	var failed []string
	for _, s := range samples {
		if s.Err != nil {
			failed = append(failed, fmt.Sprintf("round %d %s %s: %v", s.Round, s.Workload, s.Target, s.Err))
		}
	}
	printPairs := func() {
		PrintSummaries(b.w, pairSums)
		for _, v := range pairVerdicts {
			b.printf("%s\n", v)
		}
	}
	if err := b.checkAttribution(ctx, samples); err != nil {
		failed = append(failed, "attribution check: "+err.Error())
	}
	b.maybeProfileAttribution(ctx, pairVerdicts)
	b.stopAttributionHoldfasts()

	b.printf("\n== summary (load average at start %s, now %s) ==\n", b.load0, loadAvg())
	b.printf("sequential runs (informational; round-to-round spread on this machine exceeds the 3%% margin):\n")
	printResults()
	b.printf("\nconcurrent pairs (the verdict): each on target and the off process served the same workload at the same moment\n")
	printPairs()
	return b.outcome(ctx, failed)
}

// pairSep joins the two targets of a concurrent pair in a sample's name.
const pairSep = "∥"

// pairedTarget names the samples of target t run concurrently with
// partner.
func pairedTarget(t, partner string) string { return t + pairSep + partner }

// pairTargets lists the sample targets of the concurrent pairs.
func pairTargets() []string {
	var out []string
	for _, on := range []string{TargetAttrTagged, TargetAttrOn} {
		out = append(out, pairedTarget(on, TargetAttrOff), pairedTarget(TargetAttrOff, on))
	}
	return out
}

// runAttributionPairs runs, Rounds times, each workload as two sysbench
// processes at once: one against an attribution-on target and one against
// the off process. It returns the samples (targets named by pairedTarget)
// with their summaries, and a verdict per workload and on target.
func (b *runner) runAttributionPairs(ctx context.Context) ([]Sample, []Summary, []AttrVerdict, error) {
	rounds := 2 * b.o.Rounds
	b.printf("\n== concurrent pairs: %d rounds; in each, every workload runs against an on target and the off process at the same time, half its threads each ==\n", rounds)
	var samples []Sample
	for round := 1; round <= rounds; round++ {
		b.printf("\npair round %d/%d: load average %s\n", round, rounds, loadAvg())
		for _, w := range AttributionWorkloads {
			half := w
			half.Threads = max(1, w.Threads/2)
			for _, on := range []string{TargetAttrTagged, TargetAttrOn} {
				if ctx.Err() != nil {
					return nil, nil, nil, ctx.Err()
				}
				var off Sample
				done := make(chan struct{})
				go func() {
					defer close(done)
					off = b.runOne(ctx, round, half, TargetAttrOff)
				}()
				a := b.runOne(ctx, round, half, on)
				<-done
				a.Workload, off.Workload = w, w
				a.Target, off.Target = pairedTarget(on, TargetAttrOff), pairedTarget(TargetAttrOff, on)
				b.printSample(a)
				b.printSample(off)
				samples = append(samples, a, off)
			}
		}
	}
	sums := Summarize(samples, AttributionWorkloads, pairTargets())
	var verdicts []AttrVerdict // by workload, as the sequential verdicts are
	for _, w := range AttributionWorkloads {
		for _, on := range []string{TargetAttrTagged, TargetAttrOn} {
			verdicts = append(verdicts, AttrVerdicts(samples, sums, []Workload{w},
				[]string{pairedTarget(on, TargetAttrOff)}, pairedTarget(TargetAttrOff, on))...)
		}
	}
	// Within a pair both sides saw the same moment of the machine: the
	// median of the pairs' ratios is the verdict, not the ratio of medians
	// taken at different moments.
	for i := range verdicts {
		v := &verdicts[i]
		v.Ratio, v.PairedMedian = Median(v.Paired), true
		v.Pass = v.Ratio > 0 && v.Ratio >= v.Workload.Target
	}
	return samples, sums, verdicts, nil
}

// startAttributionHoldfasts starts the attribution-on and -off processes
// from the one binary built by setup and points the targets at them.
func (b *runner) startAttributionHoldfasts(ctx context.Context) error {
	o := b.o
	b.hfs, b.eps = map[string]*Holdfast{}, map[string]Endpoint{}
	for _, off := range []bool{false, true} {
		name := "on"
		if off {
			name = "off"
		}
		hc := o.holdfastConfig("", o.poolUser())
		if err := hc.freeListen(); err != nil {
			return err
		}
		addr, admin := hc.Listen, hc.AdminListen
		hc.Users = append(hc.Users, taggedUser)
		hc.DefaultTags = map[string]string{taggedUser: benchTag}
		hc.AttributionDisabled = off
		h, err := StartHoldfast(ctx, b.bin, b.dir, "holdfast-attribution-"+name, hc)
		if err != nil {
			return err
		}
		b.attrProcs = append(b.attrProcs, attrProc{name: name, h: h, admin: admin})
		b.printf("holdfast %s: %s (pid %d; %s; %s; admin %s; log %s)\n",
			name, h.Cmdline, h.Pid(), hc.Describe(), h.Chosen(), admin, h.LogPath)
		if off {
			b.hfs[TargetAttrOff] = h
			b.eps[TargetAttrOff] = Endpoint{Name: TargetAttrOff, Addr: addr, User: holdfastUser, Password: holdfastUser}
			continue
		}
		b.hfs[TargetAttrOn], b.hfs[TargetAttrTagged] = h, h
		b.eps[TargetAttrOn] = Endpoint{Name: TargetAttrOn, Addr: addr, User: holdfastUser, Password: holdfastUser}
		b.eps[TargetAttrTagged] = Endpoint{Name: TargetAttrTagged, Addr: addr, User: taggedUser, Password: taggedUser}
	}
	b.printf("configs: identical but for attribution.disabled; client accounts %s (no default_tag: target %s, and %s on the off process)\n"+
		"  and %s (default_tag: %s: target %s, every statement accounted to tag %q)\n",
		holdfastUser, TargetAttrOn, TargetAttrOff, taggedUser, benchTag, TargetAttrTagged, benchTag)
	return nil
}

// stopAttributionHoldfasts stops both processes; it may be called more than once.
func (b *runner) stopAttributionHoldfasts() {
	for _, p := range b.attrProcs {
		if err := p.h.Stop(); err != nil {
			b.printf("holdfast %s (pid %d) stopped uncleanly: %v\n", p.name, p.h.Pid(), err)
		}
	}
	b.attrProcs = nil
}

// checkAttribution reads per-tag statement counts from both processes and
// compares them with the queries sysbench ran: the on process must have
// accounted the on-tagged runs to benchTag, the off process no client
// statement. holdfast's own background work (tags "holdfast:...", e.g. the
// reservation sweeper) is printed but not judged: holdfast accounts it even
// with attribution disabled.
func (b *runner) checkAttribution(ctx context.Context, samples []Sample) error {
	queries := map[string]int64{}
	for _, s := range samples {
		if s.Err == nil {
			queries[s.Target] += s.Result.Queries
		}
	}
	b.printf("\n== attribution check: GET /api/tags of each process after the rounds ==\n")
	var problems []string
	for _, p := range b.attrProcs {
		tags, err := fetchTagStatements(ctx, p.admin)
		if err != nil {
			return err
		}
		var clients uint64 // statements under tags other than holdfast's own
		var parts []string
		for _, t := range tags {
			if !strings.HasPrefix(t.Tag, engineTagPrefix) {
				clients += t.Statements
			}
			if t.Statements > 0 {
				parts = append(parts, fmt.Sprintf("%s %d statements (%.1f s held)", t.Tag, t.Statements, t.HoldSeconds))
			}
		}
		if len(parts) == 0 {
			parts = []string{"no statements recorded under any tag"}
		}
		b.printf("  %-3s %s\n", p.name+":", strings.Join(parts, "; "))
		if p.name == "off" {
			if clients > 0 {
				problems = append(problems, fmt.Sprintf("the off process recorded %d client statements", clients))
			}
			continue
		}
		b.printf("      sysbench ran %d queries in the %s runs and %d in the %s runs\n",
			queries[TargetAttrTagged], TargetAttrTagged, queries[TargetAttrOn], TargetAttrOn)
		var tagged uint64
		for _, t := range tags {
			if t.Tag == benchTag {
				tagged = t.Statements
			}
		}
		if queries[TargetAttrTagged] > 0 && tagged < uint64(queries[TargetAttrTagged]) {
			problems = append(problems, fmt.Sprintf("tag %q has %d statements, fewer than the %d queries of the %s runs",
				benchTag, tagged, queries[TargetAttrTagged], TargetAttrTagged))
		}
	}
	if len(problems) > 0 {
		b.printf("  ! %s\n", strings.Join(problems, "; "))
		return fmt.Errorf("bench: %s", strings.Join(problems, "; "))
	}
	return nil
}

// tagStatements is the part of one GET /api/tags row the check reads.
type tagStatements struct {
	Tag         string  `json:"tag"`
	Statements  uint64  `json:"statements"`
	HoldSeconds float64 `json:"hold_seconds"`
}

// fetchTagStatements reads GET /api/tags from the admin listener at addr.
func fetchTagStatements(ctx context.Context, addr string) ([]tagStatements, error) {
	var body struct {
		Tags []tagStatements `json:"tags"`
	}
	err := httpGet(ctx, "http://"+addr+"/api/tags", 10*time.Second, func(r io.Reader) error {
		return json.NewDecoder(r).Decode(&body)
	})
	return body.Tags, err
}

// maybeProfileAttribution samples the attribution-on process with perf
// during one extra, uncounted run of the first workload and target that
// missed (point_select@16 on-tagged with Profile "always" and no miss).
func (b *runner) maybeProfileAttribution(ctx context.Context, verdicts []AttrVerdict) {
	o := b.o
	w, target, missed := AttributionWorkloads[0], TargetAttrTagged, false
	for _, v := range verdicts {
		if !v.Pass {
			// A paired target's process is the on target's.
			target, _, _ = strings.Cut(v.On, pairSep)
			w, missed = v.Workload, true
			break
		}
	}
	if o.Profile == "never" || (o.Profile == "on-miss" && !missed) {
		return
	}
	path := o.CPUProfile
	if path == "" {
		path = b.dir + "/holdfast-attribution-on.cpu"
	}
	b.printf("\n== profile of holdfast with attribution on: one extra %s run against %s, not counted ==\n", w, target)
	perf, err := exec.LookPath("perf")
	if err != nil {
		b.printf("perf is not installed: no profile taken\n")
		return
	}
	if h := b.holdfastOf(target); h == nil || h.Exited() {
		b.printf("the attribution-on holdfast is not running: no profile taken\n")
		return
	}
	b.profilePerf(ctx, perf, w, target, path)
	data := path + ".perf.data"
	out, err := exec.CommandContext(ctx, perf, "report", "-i", data, "--stdio", "--no-children",
		"-g", "none", "--sort", "sym").CombinedOutput()
	if err != nil {
		return // profilePerf has said why
	}
	share, fns := perfShare(string(out), "/attribution.")
	b.printf("self time in package attribution: %.1f%% of holdfast's samples (%d functions)\n", share, fns)
}

// perfShare sums the self-time percentages of the `perf report --sort sym`
// lines whose symbol contains sub, and counts them.
func perfShare(report, sub string) (pct float64, n int) {
	for _, l := range strings.Split(report, "\n") {
		f := strings.Fields(l)
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || !strings.Contains(l, sub) {
			continue
		}
		p, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		pct += p
		n++
	}
	return pct, n
}
