package rollout

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/holdfast-db/holdfast/internal/chaos"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// Checks, as the report names them.
const (
	checkErrors    = "no errors from ready instances"
	checkDrain     = "drain held"
	checkCap       = "cap held"
	checkCheckout  = "checkout rows"
	checkEngine    = "engine answers"
	checkExpired   = "expired by N"
	checkFleetView = "fleet view"
	checkMoved     = "clients moved"
	checkInstances = "instances"
)

// check judges what the traffic saw and the database holds.
func (r *run) check(ctx context.Context) error {
	o, res := r.o, r.res
	t := &r.t
	// Every unexpected answer of the tagged traffic is a violation: every
	// client worked on a ready instance only (the balancer's).
	t.mu.Lock()
	for _, b := range t.bad {
		res.fail(checkErrors, "%s", b)
	}
	if t.nbad > len(t.bad) {
		res.fail(checkErrors, "and %d more unexpected answers", t.nbad-len(t.bad))
	}
	t.mu.Unlock()
	for _, v := range []string{versionOld, versionNew} {
		res.Drained[v] = t.count(workDrained, v, "")
		if refused := t.count(workDrained, v, "9001"); refused != res.Drained[v] {
			res.fail(checkDrain, "%s: %d of %d statements of the drained tag were not refused with 9001", v, res.Drained[v]-refused, res.Drained[v])
		}
		if res.Drained[v] == 0 {
			res.fail(checkDrain, "no statement of the drained tag reached %s: the drain was not tested there", v)
		}
	}
	s := &r.sampler
	s.mu.Lock()
	res.CapSamples, res.CapMax = s.samples, s.max
	for _, l := range s.over {
		res.fail(checkCap, "%s", l)
	}
	if s.nover > len(s.over) {
		res.fail(checkCap, "and %d more samples over the cap", s.nover-len(s.over))
	}
	s.mu.Unlock()
	if res.CapMax == 0 {
		res.fail(checkCap, "no statement of the capped tag was seen running: the cap was not tested")
	}

	// The checkout rows: each client's committed ones, no more.
	for _, c := range r.checkouts {
		var n int
		if err := r.root.QueryRowContext(ctx, "SELECT COUNT(*) FROM "+appDB+".orders WHERE client = ?", c.id).Scan(&n); err != nil {
			return fmt.Errorf("rollout: %w", err)
		}
		if n != c.committed {
			res.fail(checkCheckout, "checkout client %d committed %d transactions, and %d of its rows are in the table", c.id, c.committed, n)
		}
		res.Committed += c.committed
	}

	// The engine: every answer true, once (chaos's judge), and no error
	// but a true "insufficient stock" (9101) from a ready instance.
	var calls []chaos.Call
	for _, c := range r.clients {
		calls = append(calls, c.Journal()...)
	}
	byN := map[int]*instance{}
	for _, in := range append(slices.Clone(r.olds), r.news...) {
		byN[in.n] = in
	}
	for i := range calls {
		c := &calls[i]
		in := byN[c.Instance]
		bad := ""
		if c.Kind != chaos.Answered && !(c.Kind == chaos.Failed && c.Code == 9101) {
			bad = c.String()
		}
		t.add(in, workEngine+" "+c.Proc, c.Answer(), "")
		if bad != "" {
			res.fail(checkErrors, "%s", bad)
		}
	}
	res.CrossVersion = crossVersion(calls, byN)
	tables := r.srv.Open(appDB)
	defer tables.Close()
	v, err := chaos.Judge(ctx, tables, calls, r.initial, o.TTL)
	if err != nil {
		res.fail(checkEngine, "judging the engine's answers: %v", err)
	}
	for _, x := range v.Violations {
		res.fail(checkEngine, "%s", x)
	}
	res.Units = [3]int64{v.InitialUnits, v.FinalUnits, v.ClaimedUnits}
	res.Unknown = v.Unknown
	r.invMu.Lock()
	res.InvariantSamples = r.invSamples
	for _, x := range r.invariant {
		res.fail(checkEngine, "during the rollout: %s", x)
	}
	r.invMu.Unlock()
	// What N−1 left reserved, N's sweeper expires.
	begin := time.Now()
	if err := chaos.WaitExpired(ctx, tables, o.TTL+30*time.Second); err != nil {
		res.fail(checkExpired, "%v", err)
	}
	res.Expire = time.Since(begin)

	for _, in := range append(slices.Clone(r.olds), r.news...) {
		for _, e := range in.UnexpectedExits() {
			res.fail(checkInstances, "%s: %s (log %s)", in, e, in.log)
		}
		for _, l := range holdfastproc.LogProblems(in.log) {
			res.fail(checkInstances, "%s log: %s (%s)", in, l, in.log)
		}
	}
	for _, in := range r.news {
		if !in.Alive() {
			res.fail(checkInstances, "%s is not running at the end (log %s)", in, in.log)
		}
	}
	res.tally = t
	return nil
}

// crossVersion counts the repeats of an answered reserve or claim (the
// clients replay each once) that an instance of the other version
// answered than the call that made it: the exactly-once answers across
// versions that chaos.Judge checked.
func crossVersion(calls []chaos.Call, byN map[int]*instance) int {
	maker := map[string]string{} // reserve key or claimed token -> version of the answer that made it
	n := 0
	for i := range calls {
		c := &calls[i]
		if c.Kind != chaos.Answered {
			continue
		}
		key := ""
		switch {
		case c.Proc == "reserve":
			key = "reserve " + c.Key
		case c.Proc == "claim":
			key = "claim " + c.Token
		default:
			continue
		}
		v := byN[c.Instance].version
		first, seen := maker[key]
		switch {
		case !seen:
			maker[key] = v
		case first != v:
			n++
		}
	}
	return n
}
