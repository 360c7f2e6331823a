package bench

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

func TestLatencyAddedIsPerRound(t *testing.T) {
	us := time.Microsecond
	r := &LatencyReport{Targets: []string{TargetDirect, TargetRelay, TargetHoldfast}, Queries: 30, Rounds: []LatencyRound{
		{P50: []time.Duration{100 * us, 130 * us, 120 * us}, P99: []time.Duration{200 * us, 260 * us, 230 * us}},
		{P50: []time.Duration{300 * us, 325 * us, 320 * us}, P99: []time.Duration{400 * us, 500 * us, 420 * us}}, // a noisy round
		{P50: []time.Duration{110 * us, 140 * us, 125 * us}, P99: []time.Duration{210 * us, 270 * us, 240 * us}},
	}}
	if a50, a99 := r.Added(2); a50 != 20*us || a99 != 30*us {
		t.Fatalf("holdfast added %v, %v; want the median of each round's difference (20µs, 30µs)", a50, a99)
	}
	var b strings.Builder
	r.Print(&b)
	if !strings.Contains(b.String(), "PASS point_select@1   holdfast adds p50 20.0 µs over direct, the relay 30.0 µs") {
		t.Fatalf("report:\n%s", b.String())
	}
	r.Rounds[0].P50[2], r.Rounds[2].P50[2] = 150*us, 160*us
	b.Reset()
	r.Print(&b)
	if !strings.Contains(b.String(), "MISS point_select@1") {
		t.Fatalf("report:\n%s", b.String())
	}
}

// TestRunLatency times statements on two real targets taking turns.
func TestRunLatency(t *testing.T) {
	cfg := dbtest.Config(t)
	ep := Endpoint{Name: TargetDirect, Addr: cfg.Addr, User: cfg.User, Password: cfg.Passwd}
	other := ep
	other.Name = TargetHoldfast
	rep, err := RunLatency(context.Background(), LatencyOptions{Endpoints: []Endpoint{ep, other}, Rounds: 2, PerRound: 20, Warmup: 2,
		Query: func(_, k int) string { return "SELECT 1" }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rounds) != 2 || rep.Queries != 40 || rep.Rounds[1].P50[1] <= 0 || rep.Rounds[1].P99[0] < rep.Rounds[1].P50[0] {
		t.Fatalf("report %+v", rep)
	}
}

func TestParsePerfStat(t *testing.T) {
	var b strings.Builder
	b.WriteString("# started on Tue Dec  1 10:00:00 2026\n\n")
	for i, e := range syscallEvents {
		b.WriteString(strings.Join([]string{strconv.Itoa(1000 * (i + 1)), "", e, "10000000000", "100.00", "", ""}, ",") + "\n")
	}
	counts, err := parsePerfStat(b.String())
	if err != nil {
		t.Fatal(err)
	}
	s := SyscallSample{Target: TargetHoldfast, Queries: 500, Counts: counts}
	if got := s.PerQuery("raw_syscalls:sys_enter"); got != 2 {
		t.Fatalf("per query %v, want 2", got)
	}
	if _, err := parsePerfStat("1,,raw_syscalls:sys_enter,1,100.00,,\n"); err == nil {
		t.Fatal("an event missing from perf's output was accepted")
	}
	if _, err := parsePerfStat("<not counted>,,raw_syscalls:sys_enter,0,0.00,,\n"); err == nil {
		t.Fatal("an uncounted event was accepted")
	}
}
