package chaos

import (
	"bytes"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"
)

// Result is one scenario's figures.
type Result struct {
	N        int
	Scenario Scenario
	Title    string
	Clients  int
	Traffic  time.Duration
	Settle   time.Duration // from the end of the traffic until every client finished its last order
	Check    time.Duration // waiting for expiry, and reserving everything again
	Expire   time.Duration // of Check, waiting for expiry

	Calls   map[string]int            // by procedure
	Answers map[string]map[string]int // by procedure, then answer label
	// Recoveries is holdfast_reservation_recoveries_total by procedure,
	// summed over instances and incarnations.
	Recoveries map[string]float64
	// Resolved counts unknown outcomes by procedure, then "9108" or
	// "connection lost", by what the database says they did.
	Resolved map[string]map[string]*resolution

	Faults      int // faults injected (kills, restarts)
	FaultMisses int // attempts that found nothing to kill
	Starts      int // holdfast incarnations

	// Units: on_hand summed over every pool before and after the traffic,
	// and the quantity of every claimed reservation.
	InitialUnits, FinalUnits, ClaimedUnits int64

	Samples        int // invariant samples during the traffic
	ForcedBreaches int // failing samples explained by a forced claim
	Reservable     int // pools found wholly reservable after expiry

	Violations []Violation
	Journal    string   // path of the journal file (JSON lines), in the work directory
	Notes      []string // scenario-specific lines for the report
}

// tally counts calls and answers.
func (r *Result) tally(calls []Call) {
	r.Calls, r.Answers = map[string]int{}, map[string]map[string]int{}
	for i := range calls {
		c := &calls[i]
		r.Calls[c.Proc]++
		if r.Answers[c.Proc] == nil {
			r.Answers[c.Proc] = map[string]int{}
		}
		r.Answers[c.Proc][c.answerLabel()]++
	}
}

var procOrder = []string{procReserve, procClaim, procRelease}

func (r *Result) print(out io.Writer) {
	var w bytes.Buffer
	defer func() { _, _ = out.Write(w.Bytes()) }()
	total := 0
	for _, n := range r.Calls {
		total += n
	}
	fmt.Fprintf(&w, "   %d clients, %s of traffic, %s more to finish the last orders, %s until all expired, %s to reserve everything again\n",
		r.Clients, r.Traffic.Round(time.Second), r.Settle.Round(time.Second), r.Expire.Round(time.Second), (r.Check - r.Expire).Round(time.Second))
	fmt.Fprintf(&w, "   faults: %s\n", r.faultLine())
	for _, n := range r.Notes {
		fmt.Fprintf(&w, "   %s\n", n)
	}
	fmt.Fprintf(&w, "   calls %d:", total)
	for _, p := range procOrder {
		fmt.Fprintf(&w, " %s %d", p, r.Calls[p])
	}
	fmt.Fprintln(&w)
	for _, p := range procOrder {
		fmt.Fprintf(&w, "   answers %-8s %s\n", p+":", counts(r.Answers[p]))
	}
	var rec []string
	for _, p := range sortedNames(r.Recoveries) {
		if r.Recoveries[p] == 0 {
			continue
		}
		rec = append(rec, fmt.Sprintf("%s %.0f", p, r.Recoveries[p]))
	}
	fmt.Fprintf(&w, "   recoveries (holdfast_reservation_recoveries_total): %s\n", orNone(strings.Join(rec, ", ")))
	var unk []string
	for _, p := range procOrder {
		for _, kind := range sortedNames(r.Resolved[p]) {
			x := r.Resolved[p][kind]
			unk = append(unk, fmt.Sprintf("%s %s %d (took effect %d, none %d)", p, kind, x.Effect+x.None, x.Effect, x.None))
		}
	}
	fmt.Fprintf(&w, "   unknown outcomes, resolved on the database: %s\n", orNone(strings.Join(unk, "; ")))
	fmt.Fprintf(&w, "   units: initial on_hand %d = final on_hand %d + claimed %d%s\n", r.InitialUnits, r.FinalUnits, r.ClaimedUnits,
		map[bool]string{true: "", false: "  (MISMATCH)"}[r.InitialUnits == r.FinalUnits+r.ClaimedUnits])
	fmt.Fprintf(&w, "   invariant: %d samples during the traffic", r.Samples)
	if r.ForcedBreaches > 0 {
		fmt.Fprintf(&w, " (%d over on_hand after a forced claim, as documented)", r.ForcedBreaches)
	}
	fmt.Fprintf(&w, ", and at the end; reservable after expiry: %d pools\n", r.Reservable)
	fmt.Fprintf(&w, "   violations: %d\n", len(r.Violations))
	if len(r.Violations) > 0 {
		fmt.Fprintf(&w, "     (every call and its answer: %s)\n", r.Journal)
	}
	byCheck := map[string][]Violation{}
	for _, v := range r.Violations {
		byCheck[v.Check] = append(byCheck[v.Check], v)
	}
	for _, check := range sortedNames(byCheck) {
		vs := byCheck[check]
		fmt.Fprintf(&w, "     %s: %d\n", check, len(vs))
		for i, v := range vs {
			if i == 20 {
				fmt.Fprintf(&w, "       ... %d more\n", len(vs)-i)
				break
			}
			fmt.Fprintf(&w, "       - %s\n", v.Detail)
		}
	}
}

func (r *Result) faultLine() string {
	switch r.Scenario {
	case KillBackend:
		return fmt.Sprintf("%d backend connections killed (%d ticks found none)", r.Faults, r.FaultMisses)
	case KillMariaDB:
		return fmt.Sprintf("MariaDB killed and restarted %d times", r.Faults)
	case KillHoldfast:
		return fmt.Sprintf("holdfast killed and restarted %d times", r.Faults)
	case Controls:
		return fmt.Sprintf("%d control changes, instance kills and backend kills (%d missed: no live instance answered, or nothing to kill)", r.Faults, r.FaultMisses)
	case Replica:
		return fmt.Sprintf("the replica killed and restarted %d times", r.Faults)
	case Switchover:
		return fmt.Sprintf("%d planned switchovers", r.Faults)
	case Failover:
		return fmt.Sprintf("%d primary killed and replica promoted", r.Faults)
	}
	return fmt.Sprintf("none besides the %d instances", r.Starts)
}

// counts prints answer labels by count, "ok" and outcomes first.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := sortedNames(m)
	sort.SliceStable(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func sortedNames[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
