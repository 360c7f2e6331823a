package bench

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// syscallEvents are what perf stat counts on the hop's process: every
// system call, the ones a relay's data path makes, and context switches.
var syscallEvents = []string{
	"raw_syscalls:sys_enter",
	"syscalls:sys_enter_read",
	"syscalls:sys_enter_write",
	"syscalls:sys_enter_writev",
	"syscalls:sys_enter_splice",
	"syscalls:sys_enter_epoll_pwait",
	"syscalls:sys_enter_futex",
	"syscalls:sys_enter_nanosleep",
	"context-switches",
}

// eventLabel is an event's column in the report.
func eventLabel(e string) string {
	switch e {
	case "raw_syscalls:sys_enter":
		return "syscalls"
	case "context-switches":
		return "ctx switches"
	}
	return strings.TrimPrefix(e, "syscalls:sys_enter_")
}

// SyscallSample is one perf stat of a hop over one sysbench run.
type SyscallSample struct {
	Target  string
	Queries int64
	Counts  map[string]int64 // by event
	Err     error
}

// PerQuery is an event's count per query.
func (s SyscallSample) PerQuery(event string) float64 {
	if s.Queries == 0 {
		return 0
	}
	return float64(s.Counts[event]) / float64(s.Queries)
}

// parsePerfStat reads `perf stat -x,` output: value,unit,event,...
func parsePerfStat(out string) (map[string]int64, error) {
	counts := map[string]int64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Split(l, ",")
		if len(f) < 3 || strings.HasPrefix(l, "#") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("bench: perf stat: %q: %w", l, err)
		}
		counts[f[2]] = n
	}
	for _, e := range syscallEvents {
		if _, ok := counts[e]; !ok {
			return nil, fmt.Errorf("bench: perf stat did not count %s:\n%s", e, tail(out, 5))
		}
	}
	return counts, nil
}

// syscallPhase runs point_select@16 once more against the relay and each
// holdfast, uncounted, with perf stat on the hop's process (this process
// for the relay), and prints system calls and context switches per query.
// It is skipped, saying why, when perf cannot count tracepoints here.
func (b *runner) syscallPhase(ctx context.Context) []SyscallSample {
	perf, err := exec.LookPath("perf")
	if err != nil {
		b.printf("\n== system calls per query: skipped, perf is not installed (apt-get install linux-perf) ==\n")
		return nil
	}
	w := Workload{Test: "oltp_point_select", Threads: 16}
	b.printf("\n== system calls per query: one more %s run per hop, uncounted, with perf stat on the hop's process ==\n", w)
	var out []SyscallSample
	for _, t := range b.o.targets() {
		var pid int
		switch {
		case t == TargetDirect:
			continue
		case t == TargetRelay:
			pid = b.relay.Pid()
		default:
			pid = b.holdfastOf(t).Pid()
		}
		s := SyscallSample{Target: t}
		file := filepath.Join(b.dir, "perf-"+t+".txt")
		secs := strconv.Itoa(int(b.o.Time / time.Second))
		args := []string{"stat", "-x,", "-o", file, "-e", strings.Join(syscallEvents, ","), "-p", strconv.Itoa(pid), "--", "sleep", secs}
		b.printf("perf: %s %s (with %s)\n", perf, strings.Join(args, " "), b.sysb.CommandLine(b.sysb.RunArgs(w, b.endpoint(t), b.o.Time)))
		cmd := exec.CommandContext(ctx, perf, args...)
		if err := cmd.Start(); err != nil {
			s.Err = err
			out = append(out, s)
			continue
		}
		run := b.runOne(ctx, 0, w, t)
		werr := cmd.Wait()
		switch {
		case run.Err != nil:
			s.Err = run.Err
		case werr != nil:
			s.Err = fmt.Errorf("perf stat: %w: %s", werr, tail(readFile(file), 3))
		default:
			s.Queries = run.Result.Queries
			s.Counts, s.Err = parsePerfStat(readFile(file))
		}
		out = append(out, s)
	}
	printSyscalls(b.w, out)
	return out
}

// printSyscalls writes the per-query table and the verdict: holdfast's
// system calls per query no more than the relay's.
func printSyscalls(w io.Writer, samples []SyscallSample) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "hop\tqueries\t"
	for _, e := range syscallEvents {
		head += eventLabel(e) + "\t"
	}
	fmt.Fprintln(tw, head+" (per query)")
	var relay, hf float64
	for _, s := range samples {
		if s.Err != nil {
			fmt.Fprintf(tw, "%s\tERROR %v\t\n", s.Target, s.Err)
			continue
		}
		line := fmt.Sprintf("%s\t%d\t", s.Target, s.Queries)
		for _, e := range syscallEvents {
			line += fmt.Sprintf("%.2f\t", s.PerQuery(e))
		}
		fmt.Fprintln(tw, line)
		switch s.Target {
		case TargetRelay:
			relay = s.PerQuery("raw_syscalls:sys_enter")
		case TargetHoldfast:
			hf = s.PerQuery("raw_syscalls:sys_enter")
		}
	}
	tw.Flush()
	if relay == 0 || hf == 0 {
		return
	}
	word := "PASS"
	if hf > relay {
		word = "MISS"
	}
	fmt.Fprintf(w, "%s point_select@16  holdfast makes %.2f system calls per query, the relay %.2f (target: no more than the relay)\n", word, hf, relay)
}
