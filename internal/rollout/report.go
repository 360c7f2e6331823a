package rollout

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"time"
)

// Result is a rollout's figures and violations.
type Result struct {
	Base      string // the commit N−1 was built from, as given
	BaseHash  string
	Instances int
	Cap       int

	Build   time.Duration // both builds
	Traffic time.Duration // from the first phase to the end of the last
	Expire  time.Duration // waiting, after the traffic, for N to expire what was left reserved

	OldMigrate, Migrate string // N−1's and N's migrate output
	Steps               []Step
	Fleet               []string // the fleet as an N instance showed it, mixed and upgraded

	// Drained is how many statements of the drained tag each version got
	// (each must have been refused).
	Drained map[string]int
	// CapMax is the most statements of the capped tag seen running at
	// once, fleet-wide, in CapSamples samples.
	CapSamples, CapMax int
	Committed          int // checkout transactions committed
	// Units: on_hand summed over the shop's pools before and after, and
	// the quantity claimed; Unknown calls whose outcome their client did
	// not learn; InvariantSamples the checks of the stock invariant
	// during the rollout.
	Units            [3]int64
	Unknown          int
	InvariantSamples int
	// CrossVersion counts replayed reserves and repeated claims answered
	// by the other version than the call that made the reservation or
	// the claim.
	CrossVersion int

	Violations []string
	tally      *tally
}

// Step is one replacement: instance Old (N−1) by instance New (N).
type Step struct {
	Old, New int
	// Ready: from New's start until it was ready; Idle: from Old's leaving
	// the balancer until its clients' work ended; Stopped: from Old's
	// SIGTERM until it exited.
	Ready, Idle, Stopped time.Duration
}

func (r *Result) fail(check, format string, a ...any) {
	r.Violations = append(r.Violations, check+": "+fmt.Sprintf(format, a...))
}

func (r *Result) print(out io.Writer) {
	var w bytes.Buffer
	defer func() { _, _ = out.Write(w.Bytes()) }()
	fmt.Fprintf(&w, "\n== rollout of %d instances from N-1 (%s, %.12s) to N, under traffic, %s drained and %s capped at %d\n",
		r.Instances, r.Base, r.BaseHash, drainedTag, cappedTag, r.Cap)
	fmt.Fprintf(&w, "   builds %s; traffic %s; N expired what was left reserved in %s\n",
		r.Build.Round(time.Second), r.Traffic.Round(time.Second), r.Expire.Round(100*time.Millisecond))
	fmt.Fprintf(&w, "   N-1's migrate: %s\n   N's migrate, beside the N-1 fleet: %s\n", oneLine(r.OldMigrate), oneLine(r.Migrate))
	for _, s := range r.Steps {
		fmt.Fprintf(&w, "   step: instance %d (N-1) -> instance %d (N): ready after %s, clients moved within %s, stopped %s after SIGTERM\n",
			s.Old, s.New, s.Ready.Round(time.Millisecond), s.Idle.Round(time.Millisecond), s.Stopped.Round(time.Millisecond))
	}
	for _, f := range r.Fleet {
		fmt.Fprintf(&w, "   %s\n", f)
	}
	if t := r.tally; t != nil {
		for _, work := range []string{workCheckout, workDrained, workCapped, workEngine + " reserve", workEngine + " claim", workEngine + " release"} {
			fmt.Fprintf(&w, "   %-24s N-1: %-34s N: %s\n", work, strings.Join(t.answers(work, versionOld), ", "), strings.Join(t.answers(work, versionNew), ", "))
		}
	}
	fmt.Fprintf(&w, "   cap: at most %d statements of %s running at once in %d samples (cap %d)\n", r.CapMax, cappedTag, r.CapSamples, r.Cap)
	fmt.Fprintf(&w, "   checkout: %d transactions committed; engine: on_hand %d -> %d, %d units claimed, %d unknown outcomes resolved, invariant checked %d times,\n"+
		"   %d replayed reserves and repeated claims answered by the other version than the call that made them\n",
		r.Committed, r.Units[0], r.Units[1], r.Units[2], r.Unknown, r.InvariantSamples, r.CrossVersion)
	if len(r.Violations) == 0 {
		fmt.Fprintln(&w, "   no violations")
		return
	}
	fmt.Fprintf(&w, "   VIOLATIONS (%d):\n", len(r.Violations))
	// The first maxListed of each check, then how many more.
	listed, more := map[string]int{}, map[string]int{}
	var checks []string
	for _, v := range r.Violations {
		check, _, _ := strings.Cut(v, ":")
		if listed[check]+more[check] == 0 {
			checks = append(checks, check)
		}
		if listed[check] < maxListed {
			listed[check]++
			fmt.Fprintf(&w, "   - %s\n", v)
		} else {
			more[check]++
		}
	}
	for _, c := range checks {
		if more[c] > 0 {
			fmt.Fprintf(&w, "   - %s: and %d more\n", c, more[c])
		}
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
