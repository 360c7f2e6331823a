package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// scalePhase runs the connection-scale test against a fresh holdfast on
// the shipped defaults, sampling its memory and MariaDB's process list
// while the clients run.
func (b *runner) scalePhase(ctx context.Context) (*ScaleReport, error) {
	o := b.o
	b.printf("\n== connection scale: %d clients, one statement each per %v for %v ==\n", o.ScaleConns, o.ScaleInterval, o.ScaleTime)
	h, err := b.startHoldfast(ctx, "holdfast-scale")
	if err != nil {
		return nil, err
	}
	defer b.stopHoldfast()
	pid := h.Pid()
	if lim, err := ProcNoFile(pid); err == nil {
		b.printf("holdfast open-files limit: %s\n", lim)
	}
	query := PointSelect(o.TableSize)
	b.printf("load generator: %d raw MySQL-protocol connections (rawmysql.Conn, in this process) as %s to %s, database %s,\n"+
		"  each sending e.g. %q once per %v, slots spread evenly over the interval\n",
		o.ScaleConns, b.viaHF.User, b.viaHF.Addr, o.Database, query(0, 0), o.ScaleInterval)

	eff, err := o.holdfastConfig(h.Addr, o.poolUser()).Effective()
	if err != nil {
		return nil, err
	}
	rep := &ScaleReport{Conns: o.ScaleConns, PoolMax: eff.Pool.Max, BackendMax: o.ScaleBackendMax,
		RSSTarget: o.RSSTarget, P99Target: o.ScaleP99, BackendConns: -1}
	var maxRSS atomic.Int64
	sctx, stopRSS := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // VmRSS every 250 ms
		defer wg.Done()
		for {
			if m, err := ReadProcMem(pid); err == nil && m.RSS > maxRSS.Load() {
				maxRSS.Store(m.RSS)
			}
			select {
			case <-sctx.Done():
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	if m, err := ReadProcMem(pid); err == nil {
		rep.BaseRSS = m.RSS
	}
	stopConns := b.sampleBackendConns(ctx, o.poolUser())
	var cpu0, cpu1 time.Duration
	res, err := RunScale(ctx, ScaleOptions{
		Endpoint: b.viaHF, Database: o.Database, Conns: o.ScaleConns,
		Interval: o.ScaleInterval, Duration: o.ScaleTime, Query: query,
		Started: func(opened int, took time.Duration) {
			cpu0, _ = ProcCPU(pid)
			if m, err := ReadProcMem(pid); err == nil {
				rep.IdleRSS = m.RSS
			}
			b.printf("opened %d connections in %v; statement phase starts\n", opened, took.Round(time.Millisecond))
		},
		Finished: func() {
			cpu1, _ = ProcCPU(pid)
			if m, err := ReadProcMem(pid); err == nil {
				rep.EndRSS = m.RSS
			}
		},
	})
	rep.BackendConns = stopConns()
	stopRSS()
	wg.Wait()
	rep.Result, rep.HoldfastCPU, rep.MaxSampled = res, cpu1-cpu0, maxRSS.Load()
	if m, merr := ReadProcMem(pid); merr == nil {
		rep.PeakRSS = m.HWM
	}
	exited := h.Exited()
	b.stopHoldfast()
	if err == nil {
		// The baseline: the same clients and statements straight to
		// MariaDB, right after, so that the latency is read against what
		// this machine gives without holdfast at that moment.
		b.printf("baseline: the same %d connections and statements straight to MariaDB (%s as %s)\n", o.ScaleConns, b.direct.Addr, b.direct.User)
		var d ScaleResult
		d, err = RunScale(ctx, ScaleOptions{Endpoint: b.direct, Database: o.Database, Conns: o.ScaleConns,
			Interval: o.ScaleInterval, Duration: o.ScaleTime, Query: query})
		rep.Direct = &d
	}
	rep.Print(b.w)
	switch {
	case err != nil:
		return rep, err
	case exited:
		return rep, fmt.Errorf("holdfast exited during the run; see %s", h.LogPath)
	case res.Opened == 0:
		return rep, fmt.Errorf("no connection could log in: %s", res.FirstErr)
	}
	return rep, nil
}

// maybeProfile profiles holdfast during one extra, uncounted run of the
// first missed workload (or the first workload) when Options.Profile asks
// for it: with holdfast's own -cpuprofile flag when the binary has one,
// else with perf.
func (b *runner) maybeProfile(ctx context.Context, verdicts []Verdict) {
	o := b.o
	missed := false
	for _, v := range verdicts {
		missed = missed || !v.Pass
	}
	if o.Profile == "never" || (o.Profile == "on-miss" && !missed) {
		return
	}
	w := o.Workloads[0]
	for _, v := range verdicts {
		if !v.Pass {
			w = v.Workload
			break
		}
	}
	path := o.CPUProfile
	if path == "" {
		path = b.dir + "/holdfast.cpu"
	}
	b.printf("\n== profile of holdfast: one extra %s run, not counted ==\n", w)
	if SupportsFlag(b.bin, "cpuprofile") {
		b.profileBuiltin(ctx, w, path)
		return
	}
	perf, err := exec.LookPath("perf")
	if err != nil || b.hf == nil {
		b.printf("holdfast has no -cpuprofile flag and perf is not installed: no profile taken\n")
		return
	}
	b.printf("holdfast has no -cpuprofile flag; sampling it with perf instead\n")
	b.profilePerf(ctx, perf, w, TargetHoldfast, path)
}

func (b *runner) profileBuiltin(ctx context.Context, w Workload, path string) {
	b.stopHoldfast()
	if _, err := b.startHoldfast(ctx, "holdfast-profile", "-cpuprofile", path); err != nil {
		b.printf("profile: %v\n", err)
		return
	}
	s := b.runOne(ctx, 0, w, TargetHoldfast)
	b.printSample(s)
	b.stopHoldfast() // writes the profile
	out, err := exec.CommandContext(ctx, b.o.Go, "tool", "pprof", "-top", "-nodecount=30", b.bin, path).CombinedOutput()
	if err != nil {
		b.printf("profile: go tool pprof: %v\n%s", err, out)
		return
	}
	b.printf("%s\nprofile: %s (go tool pprof %s %s)\n", out, path, b.bin, path)
}

// profilePerf samples the holdfast serving target with perf during one
// extra, uncounted run of w against target, and prints where its CPU went.
func (b *runner) profilePerf(ctx context.Context, perf string, w Workload, target, path string) {
	h := b.holdfastOf(target)
	data := path + ".perf.data"
	secs := strconv.Itoa(int(b.o.Time / time.Second))
	rec := exec.CommandContext(ctx, perf, "record", "-F", "499", "-g", "-p", strconv.Itoa(h.Pid()),
		"-o", data, "--", "sleep", secs)
	b.printf("profile: %s\n", strings.Join(rec.Args, " "))
	var recOut strings.Builder
	rec.Stdout, rec.Stderr = &recOut, &recOut
	if err := rec.Start(); err != nil {
		b.printf("profile: perf record: %v\n", err)
		return
	}
	time.Sleep(200 * time.Millisecond) // let perf attach before the load starts
	s := b.runOne(ctx, 0, w, target)
	b.printSample(s)
	if err := rec.Wait(); err != nil {
		b.printf("profile: perf record: %v\n%s", err, tail(recOut.String(), 5))
		return
	}
	report := func(args ...string) (string, error) {
		args = append([]string{"report", "-i", data, "--stdio"}, args...)
		out, err := exec.CommandContext(ctx, perf, args...).CombinedOutput()
		return string(out), err
	}
	byDSO, err := report("--no-children", "-g", "none", "--sort", "dso")
	if err != nil {
		b.printf("profile: perf report: %v\n%s", err, tail(byDSO, 5))
		return
	}
	b.printf("where holdfast's CPU went (perf, %s s at 499 Hz, pid %d):\n%s", secs, h.Pid(), dropComments(byDSO, 5))
	if self, err := report("--no-children", "-g", "none", "--sort", "dso,sym", "--percent-limit", "0.7"); err == nil {
		b.printf("self time, top functions:\n%s", dropComments(self, 20))
	}
	if cum, err := report("--children", "-g", "none", "--sort", "sym", "--percent-limit", "3"); err == nil {
		b.printf("holdfast functions including callees (kernel time counted under the Go caller):\n%s",
			dropComments(dropKernel(cum), 30))
	}
	full, _ := report("--no-children", "--sort", "symbol", "-g", "caller,0.5,callee", "--percent-limit", "1")
	if werr := os.WriteFile(path+".txt", []byte(full), 0o644); werr == nil {
		b.printf("profile: call graphs in %s; raw data %s\n", path+".txt", data)
	}
	if !b.o.Keep && b.o.CPUProfile == "" {
		b.printf("(pass --keep or --holdfast-cpuprofile FILE to keep them)\n")
	}
}

// dropKernel removes perf report lines of kernel symbols ("[k]").
func dropKernel(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.Contains(l, "[k] ") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// dropComments removes perf's '#' lines and blank lines, keeping at most n.
func dropComments(s string, n int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if out = append(out, strings.TrimRight(l, " ")); len(out) == n {
			break
		}
	}
	return strings.Join(out, "\n") + "\n"
}
