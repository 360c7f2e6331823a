package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// codeSwitching is the answer the statement path is to give a statement
// it cannot run while the primary switches (error 9010).
const codeSwitching = 9010

// codeReadOnly is 1290: a read-only server refused the write.
const codeReadOnly = 1290

// swReport is one scenario's answers and what they show.
type swReport struct {
	scenario string
	ev       swEvents
	answers  []swAnswer
	have     map[int64]bool // ids on the new primary at the end
	topology swTopology     // holdfast's at the end
	pace     time.Duration
}

// swPath is the figures of one path.
type swPath struct {
	path                string
	ops, ok             int
	codes               map[uint16]int      // failures by code
	first               map[uint16]swAnswer // the first failure of each code
	beforeFault         int                 // failures of operations ended before the fault began
	afterEnd            int                 // failures of operations begun after the fault ended
	afterEndCodes       map[uint16]int
	lostAcked           int // acknowledged, not on the new primary
	lies                int // "nothing ran", yet a row is there
	inDoubt             int // the connection broke after the statement went out
	inDoubtCommitted    int // ... and its rows are there
	readOnly            int // answered 1290 by a read-only server
	readOnlyAfterRetire int // ... begun after holdfast showed the former primary retired
	openAtFlip          int // transactions begun before the flip and ended after it
	switchingOpen       int // 9010 answers to transactions open at the flip
	switching           int // 9010 answers
	baseline            map[bool]time.Duration
	worst               time.Duration // longest operation overlapping the fault, its kind's baseline taken off
	worstAt             time.Time
	resumeAfter         time.Duration // from the VIP moving (kill: the promotion) to the first success that ended after it; -1: none
}

// classOf is an answer's class: success, a real error (the server, or
// holdfast, says nothing ran), or in doubt (the connection broke after the
// statement or COMMIT went out).
func classOf(a swAnswer) string {
	switch {
	case a.code == 0:
		return "success"
	case a.code == codeLost && (!a.txn || a.committing):
		return "in-doubt"
	default:
		return "error"
	}
}

// analyse computes a path's figures.
func (r *swReport) analyse(path string) swPath {
	p := swPath{path: path, codes: map[uint16]int{}, first: map[uint16]swAnswer{}, afterEndCodes: map[uint16]int{}, baseline: map[bool]time.Duration{}, resumeAfter: -1}
	var before [2][]time.Duration
	for _, a := range r.answers {
		if a.path == path && a.code == 0 && a.end.Before(r.ev.fault) {
			k := 0
			if a.txn {
				k = 1
			}
			before[k] = append(before[k], a.end.Sub(a.start))
		}
	}
	for k, l := range before {
		slices.Sort(l)
		if len(l) > 0 {
			p.baseline[k == 1] = l[len(l)/2]
		}
	}
	resumeFrom := r.ev.ended
	if !r.ev.promoted.IsZero() {
		resumeFrom = r.ev.promoted
	}
	for _, a := range r.answers {
		if a.path != path {
			continue
		}
		p.ops++
		present := 0
		for _, id := range a.ids {
			if r.have[id] {
				present++
			}
		}
		switch classOf(a) {
		case "success":
			p.ok++
			if present < len(a.ids) {
				p.lostAcked++
			}
			if !a.end.Before(resumeFrom) && (p.resumeAfter < 0 || a.end.Sub(resumeFrom) < p.resumeAfter) {
				p.resumeAfter = a.end.Sub(resumeFrom)
			}
		case "in-doubt":
			p.inDoubt++
			if present > 0 {
				p.inDoubtCommitted++
			}
		default:
			if present > 0 {
				p.lies++
			}
		}
		if a.code != 0 {
			p.codes[a.code]++
			if f, ok := p.first[a.code]; !ok || a.end.Before(f.end) {
				p.first[a.code] = a
			}
			if a.end.Before(r.ev.fault) {
				p.beforeFault++
			}
			if !a.start.Before(r.ev.ended) {
				p.afterEnd++
				p.afterEndCodes[a.code]++
			}
		}
		if a.code == codeReadOnly {
			p.readOnly++
			if !r.ev.retired.IsZero() && a.start.After(r.ev.retired) {
				p.readOnlyAfterRetire++
			}
		}
		open := a.txn && a.start.Before(r.ev.flipAt()) && a.end.After(r.ev.flipAt())
		if open {
			p.openAtFlip++
		}
		if a.code == codeSwitching {
			p.switching++
			if open {
				p.switchingOpen++
			}
		}
		if a.start.Before(r.ev.ended) && a.end.After(r.ev.fault) {
			if d := a.end.Sub(a.start) - p.baseline[a.txn]; d > p.worst {
				p.worst, p.worstAt = d, a.start
			}
		}
	}
	return p
}

// switchDuration is the fault's length: read-only to the VIP moved
// (planned), the pause set to the pause lifted (pause), or the kill to the
// promotion (kill).
func (r *swReport) switchDuration() time.Duration { return r.ev.ended.Sub(r.ev.fault) }

// flipAt is when the primary stopped taking writes (the fault's start
// when not recorded).
func (ev swEvents) flipAt() time.Time {
	if ev.flip.IsZero() {
		return ev.fault
	}
	return ev.flip
}

func fmtCodes(m map[uint16]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	var l []string
	for _, k := range keys {
		name := fmt.Sprint(k)
		switch k {
		case codeLost:
			name = "2013(lost)"
		case codeRefused:
			name = "no-connection(client)"
		case 2003:
			name = "2003(backend unreachable)"
		}
		l = append(l, fmt.Sprintf("%s×%d", name, m[k]))
	}
	return strings.Join(l, " ")
}

func fmtMs(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
}

// print writes the scenario's figures.
func (r *swReport) print(w io.Writer) {
	ev := r.ev
	rel := func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return fmt.Sprintf("%+.3fs", t.Sub(ev.fault).Seconds())
	}
	fmt.Fprintf(w, "timeline (from the fault at %.1fs into the load): ", ev.fault.Sub(ev.start).Seconds())
	switch r.scenario {
	case "planned", "pause":
		if r.scenario == "pause" {
			fmt.Fprintf(w, "pause set %s (%s), ", rel(ev.paused), ev.pauseSet)
		}
		fmt.Fprintf(w, "read-only %s, caught up %s, promoted %s, old primary replicating %s, VIP moved %s",
			rel(ev.steps.ReadOnly), rel(ev.steps.CaughtUp), rel(ev.steps.Promoted), rel(ev.steps.Repointed), rel(ev.steps.Moved))
		if r.scenario == "pause" {
			fmt.Fprintf(w, ", pause lifted %s (%s)", rel(ev.lifted), ev.pauseLift)
		}
	case "kill":
		fmt.Fprintf(w, "primary killed %s, replica promoted (its relay log, up to %s, applied first) and VIP moved %s", rel(ev.fault), ev.received, rel(ev.promoted))
	}
	fmt.Fprintf(w, "; holdfast showed the former primary retired %s, the new primary %s\n", rel(ev.retired), rel(ev.newPrimary))
	fmt.Fprintf(w, "switch duration %s; holdfast at the end: %d primary changes, %.2fs without a primary, %d checks, %d read-only answers, %d connections and %d dials retired\n",
		fmtMs(r.switchDuration()), r.topology.PrimaryChanges, r.topology.NoPrimarySeconds, r.topology.Checks, r.topology.ReadOnlyAnswers,
		r.topology.RetiredConnections, r.topology.RetiredDials)
	fo := r.topology.Failover
	fmt.Fprintf(w, "holdfast's statements: %d held, %d retried, %d answered 9010; transactions replayed on the new primary: %d (%d replays failed)\n",
		fo.Held, fo.Retried, fo.Refused, fo.TxnsReplayed, fo.TxnReplaysFailed)
	for _, path := range []string{pathHoldfast, pathDirect} {
		p := r.analyse(path)
		fmt.Fprintf(w, "%-8s %6d operations, %6d succeeded; errors by code: %s\n", p.path, p.ops, p.ok, fmtCodes(p.codes))
		fmt.Fprintf(w, "         errors ended before the switch began: %d; begun after it ended: %d (%s); acknowledged writes lost: %d; answers that said nothing ran while it had: %d\n",
			p.beforeFault, p.afterEnd, fmtCodes(p.afterEndCodes), p.lostAcked, p.lies)
		fmt.Fprintf(w, "         in doubt (connection lost): %d, of which committed: %d; answered 1290 by a read-only server: %d (%d begun after holdfast retired it)\n",
			p.inDoubt, p.inDoubtCommitted, p.readOnly, p.readOnlyAfterRetire)
		fmt.Fprintf(w, "         transactions open at the flip: %d (9010 answers: %d, to those open at the flip: %d); median before: autocommit %s, transaction %s\n",
			p.openAtFlip, p.switching, p.switchingOpen, fmtMs(p.baseline[false]), fmtMs(p.baseline[true]))
		fmt.Fprintf(w, "         worst operation's added latency: %s (began %s); first success ending after the %s: %s after it\n",
			fmtMs(p.worst), rel(p.worstAt), map[bool]string{true: "promotion", false: "VIP moved"}[r.scenario == "kill"], fmtMs(p.resumeAfter))
		for _, code := range slices.Sorted(maps.Keys(p.first)) {
			a := p.first[code]
			kind := "autocommit insert"
			if a.txn {
				kind = "transaction"
			}
			fmt.Fprintf(w, "         first %d: a %s begun %s, answered %s: %s\n", code, kind, rel(a.start), rel(a.end), a.msg)
		}
	}
}

// swCheck is one acceptance check of the holdfast path.
type swCheck struct {
	scenario, what, got string
	met                 bool
}

// checks are issue 45's acceptance checks on the holdfast path.
func (r *swReport) checks() []swCheck {
	p := r.analyse(pathHoldfast)
	var out []swCheck
	add := func(what string, met bool, got string, a ...any) {
		out = append(out, swCheck{scenario: r.scenario, what: what, got: fmt.Sprintf(got, a...), met: met})
	}
	bound := r.switchDuration() + time.Second
	switch r.scenario {
	case "pause":
		add("the pause set and lifted through the admin API", r.ev.pauseSet == "ok" && r.ev.pauseLift == "ok", "set: %s; lifted: %s", r.ev.pauseSet, r.ev.pauseLift)
		add("0 errors at all", len(p.codes) == 0, "%s", fmtCodes(p.codes))
		add("0 acknowledged writes lost", p.lostAcked == 0, "%d", p.lostAcked)
		add("no write answered by a read-only server", p.readOnly == 0, "%d × 1290", p.readOnly)
		add("worst added latency ≤ pause duration + 1 s", p.worst <= bound, "%s vs %s", fmtMs(p.worst), fmtMs(bound))
	case "planned":
		other := 0
		for c, n := range p.codes {
			if c != codeSwitching {
				other += n
			}
		}
		add("0 errors other than 9010", other == 0, "%d (%s)", other, fmtCodes(p.codes))
		add("9010 only for transactions open at the flip", p.switching == p.switchingOpen, "%d of %d 9010s; %d transactions open at the flip", p.switchingOpen, p.switching, p.openAtFlip)
		add("0 errors begun after the switch ended", p.afterEnd == 0, "%d", p.afterEnd)
		add("0 acknowledged writes lost", p.lostAcked == 0, "%d", p.lostAcked)
		add("no write answered by a read-only server", p.readOnly == 0, "%d × 1290", p.readOnly)
		add("worst added latency ≤ switch duration + 1 s", p.worst <= bound, "%s vs %s", fmtMs(p.worst), fmtMs(bound))
	case "kill":
		add("every answer true (no \"nothing ran\" answer for a write that is there)", p.lies == 0, "%d untrue", p.lies)
		add("0 acknowledged writes lost (the replica's relay log applied)", p.lostAcked == 0, "%d", p.lostAcked)
		add("writes resume within 1 s of the promotion", p.resumeAfter >= 0 && p.resumeAfter <= time.Second, "%s", fmtMs(p.resumeAfter))
	}
	return out
}

// printTable prints every scenario's figures, per path, as one Markdown
// table (the README's).
func printTable(w io.Writer, rs []*swReport) {
	fmt.Fprintf(w, "\n== summary (one row per scenario and path; worst added latency is over the switch, against the switch's duration) ==\n")
	fmt.Fprintln(w, "| scenario | path | operations | errors by code | 9010 (to transactions open at the flip) | transactions open at the flip | acknowledged writes lost | writes answered by a read-only server | in doubt (committed) | untrue answers | errors begun after the switch | worst added latency / switch | first success after the VIP moved (kill: the promotion) |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		for _, path := range []string{pathHoldfast, pathDirect} {
			p := r.analyse(path)
			fmt.Fprintf(w, "| %s | %s | %d | %s | %d (%d) | %d | %d | %d | %d (%d) | %d | %d | %s / %s | %s |\n",
				r.scenario, path, p.ops, fmtCodes(p.codes), p.switching, p.switchingOpen, p.openAtFlip, p.lostAcked, p.readOnly,
				p.inDoubt, p.inDoubtCommitted, p.lies, p.afterEnd, fmtMs(p.worst), fmtMs(r.switchDuration()), fmtMs(p.resumeAfter))
		}
	}
}

// printAcceptance prints every scenario's checks, PASS or FAIL, and a
// summary line.
func printAcceptance(w io.Writer, rs []*swReport) {
	fmt.Fprintf(w, "\n== acceptance (issue 45, holdfast path) ==\n")
	var all []swCheck
	for _, r := range rs {
		all = append(all, r.checks()...)
	}
	met := 0
	for _, c := range all {
		v := "FAIL"
		if c.met {
			v, met = "PASS", met+1
		}
		fmt.Fprintf(w, "%s  %-8s %-70s %s\n", v, c.scenario, c.what, c.got)
	}
	fmt.Fprintf(w, "%d of %d checks pass\n", met, len(all))
}
