package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// A simulation of the fleet's sharing of a cap, with no database: several
// Fleets (the real renewals and settling, caps.go) on one in-memory grant
// table (the real renewal decision, share.go), each in front of a gate
// that admits as the proxy's does (gate.go: a slot given back goes to the
// oldest waiter unless the gate holds more than its limit), with clients
// that run statements back to back. Time is the simulation's own, in
// steps of 10 ms.

const (
	simPoll    = time.Second
	simTTL     = 5 * time.Second
	simStep    = 10 * time.Millisecond
	simTimeout = 5 * time.Second // pool.acquire_timeout
)

// simBound is the convergence bound caps.go documents: three poll
// intervals plus the longest hold under the cap.
func simBound(hold time.Duration) time.Duration { return 3*simPoll + hold }

// memGrants is holdfast_cap_grants in memory: Store.Grant's transaction
// on a map, under the simulation's clock.
type memGrants struct {
	mu   sync.Mutex // guards following
	now  time.Time
	cap  int
	rows map[string]memRow
}

type memRow struct {
	g       Grant
	renewed time.Time
}

func (m *memGrants) Grant(_ context.Context, tag, instance string, want, used int, ttl, period, _ time.Duration) (Share, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var gs []Grant
	self := -1
	ids := make([]string, 0, len(m.rows))
	for id := range m.rows {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		r := m.rows[id]
		if m.now.Sub(r.renewed) > ttl {
			delete(m.rows, id)
			continue
		}
		if id == instance {
			self = len(gs)
		}
		gs = append(gs, r.g)
	}
	round, left := Round(m.now.UnixMicro(), period)
	sh, self := renewal(m.cap, round, gs, self, instance, want, used)
	sh.RoundLeft = left
	m.rows[instance] = memRow{g: sh.Grants[self], renewed: m.now}
	return sh, nil
}

func (m *memGrants) ReleaseGrants(context.Context, string, []string) error { return nil }

func (m *memGrants) sum() (granted int, by map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	by = map[string]int{}
	for id, r := range m.rows {
		if m.now.Sub(r.renewed) <= simTTL {
			granted += r.g.Granted
			by[id] = r.g.Granted
		}
	}
	return granted, by
}

// simGate is one instance's gate of the capped tag, with its clients: the
// fleet's Applier.
type simGate struct {
	now     *time.Time
	hold    time.Duration // each statement's
	limit   int
	inUse   int
	queue   []simWaiter // oldest first
	running []time.Time // when each running statement ends
	peak    int
	clients int

	served, timeouts int
	servedAt         []time.Time
}

type simWaiter struct{ since time.Time }

func (g *simGate) ApplyFleetControls(cs []Applied) {
	for _, a := range cs {
		if a.Limited {
			g.limit = a.Limit
		}
	}
	for g.inUse < g.limit && len(g.queue) > 0 {
		g.inUse++
		g.start()
	}
}

func (g *simGate) Demand(_ string, restart bool) (held, want int) {
	held, want = g.inUse, max(g.peak, g.inUse+len(g.queue))
	if restart {
		g.peak = g.inUse + len(g.queue)
	}
	return held, want
}

func (g *simGate) SetFleetSize(int) {}

// enter is a client's new statement.
func (g *simGate) enter() {
	if g.inUse < g.limit && len(g.queue) == 0 {
		g.inUse++
		g.running = append(g.running, g.now.Add(g.hold))
	} else {
		g.queue = append(g.queue, simWaiter{since: *g.now})
	}
	g.peak = max(g.peak, g.inUse+len(g.queue))
}

// start runs the oldest waiter's statement on a slot it was handed.
func (g *simGate) start() {
	g.queue = g.queue[1:]
	g.running = append(g.running, g.now.Add(g.hold))
}

// step ends the statements due, hands their slots on, times out waiters;
// each client whose statement ended or failed sends its next at once.
func (g *simGate) step() {
	var again int
	keep := g.running[:0]
	for _, end := range g.running {
		if end.After(*g.now) {
			keep = append(keep, end)
			continue
		}
		g.served++
		g.servedAt = append(g.servedAt, *g.now)
		again++
	}
	g.running = keep
	for range again {
		if g.inUse <= g.limit && len(g.queue) > 0 {
			g.start() // the slot goes on to the oldest waiter
		} else {
			g.inUse--
		}
	}
	for len(g.queue) > 0 && g.now.Sub(g.queue[0].since) >= simTimeout {
		g.queue = g.queue[1:]
		g.timeouts++
		again++
	}
	for range again {
		g.enter()
	}
}

// servedIn counts the statements served from..until.
func (g *simGate) servedIn(from, until time.Time) int {
	n := 0
	for _, at := range g.servedAt {
		if !at.Before(from) && at.Before(until) {
			n++
		}
	}
	return n
}

type simInstance struct {
	f         *Fleet
	gate      *simGate
	phase     time.Duration // of its polls
	from      time.Time     // it runs from then (joins)
	until     time.Time     // and stops then (killed; zero: never)
	started   bool
	clientsAt time.Time // its clients start then (zero: when it starts)
}

type sim struct {
	t     *testing.T
	now   time.Time
	start time.Time
	grant *memGrants
	ins   []*simInstance
}

func newSim(t *testing.T, capN int) *sim {
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := &sim{t: t, now: start, start: start}
	s.grant = &memGrants{now: start, cap: capN, rows: map[string]memRow{}}
	return s
}

// add is an instance with clients, running from at (after the start) on.
func (s *sim) add(clients int, hold, at time.Duration) *simInstance {
	i := len(s.ins)
	g := &simGate{now: &s.now, hold: hold, clients: clients}
	f := New(Options{Applier: g, Self: Member{ID: fmt.Sprintf("inst-%d", i)}, Poll: simPoll, TTL: simTTL,
		Log: slog.New(slog.DiscardHandler)})
	f.grants, f.now = s.grant, func() time.Time { return s.now }
	f.known = true
	f.controls = []Control{{Tag: "t", Kind: KindLimit, Value: int64(s.grant.cap), SetBy: "sim"}}
	f.deadlines = []time.Time{{}}
	in := &simInstance{f: f, gate: g, phase: time.Duration(i*370) * time.Millisecond % simPoll, from: s.start.Add(at)}
	s.ins = append(s.ins, in)
	return in
}

func (in *simInstance) live(now time.Time) bool {
	return !now.Before(in.from) && (in.until.IsZero() || now.Before(in.until))
}

// run advances the simulation by d, checking at every step that the
// grants never add up to more than the cap and that no instance holds
// more than its grant.
func (s *sim) run(d time.Duration) {
	ctx := context.Background()
	end := s.now.Add(d)
	for s.now.Before(end) {
		s.now = s.now.Add(simStep)
		s.grant.mu.Lock()
		s.grant.now = s.now
		s.grant.mu.Unlock()
		for _, in := range s.ins {
			if !in.live(s.now) {
				continue
			}
			g := in.gate
			if !in.started && !s.now.Before(in.clientsAt) { // its clients start
				in.started = true
				for range g.clients {
					g.enter()
				}
			}
			g.step()
			since := s.now.Sub(in.from)
			if since%simPoll == in.phase {
				in.f.apply(ctx, s.now)
			} else if since%(simPoll/settleEvery) == in.phase%(simPoll/settleEvery) {
				in.f.settle(ctx)
			}
		}
		sum, by := s.grant.sum()
		if sum > s.grant.cap {
			s.t.Fatalf("at %v: grants %v add up to %d, over the cap %d", s.now.Sub(s.start), by, sum, s.grant.cap)
		}
		for _, in := range s.ins {
			if in.live(s.now) && in.gate.inUse > by[in.f.o.Self.ID] && in.gate.inUse > 0 {
				s.t.Fatalf("at %v: %s holds %d, over its grant %d", s.now.Sub(s.start), in.f.o.Self.ID, in.gate.inUse, by[in.f.o.Self.ID])
			}
		}
	}
}

// report logs and returns each instance's part of the statements served
// from..until, and the timeouts.
func (s *sim) report(what string, from, until time.Duration) []float64 {
	total := 0
	counts := make([]int, len(s.ins))
	for i, in := range s.ins {
		counts[i] = in.gate.servedIn(s.start.Add(from), s.start.Add(until))
		total += counts[i]
	}
	parts := make([]float64, len(s.ins))
	var b strings.Builder
	for i, in := range s.ins {
		parts[i] = float64(counts[i]) / float64(max(total, 1))
		fmt.Fprintf(&b, " inst-%d: %d (%.0f%%), %d timeouts;", i, counts[i], 100*parts[i], in.gate.timeouts)
	}
	s.t.Logf("%s, %v..%v:%s", what, from, until, b.String())
	return parts
}

// converged reports when, after from, every live instance's admission
// ceiling first equalled its fair share with the grants settled on them.
func (s *sim) converged() bool {
	for _, in := range s.ins {
		if !in.live(s.now) {
			continue
		}
		c := in.f.caps["t"]
		if c.renewed.IsZero() || c.ceiling != c.share.Fair || c.share.Granted != c.share.Fair {
			return false
		}
	}
	return true
}

func (s *sim) runUntilConverged(limit time.Duration) time.Duration {
	start := s.now
	for !s.converged() {
		if s.now.Sub(start) > limit {
			s.t.Fatalf("not converged within %v", limit)
		}
		s.run(simStep)
	}
	return s.now.Sub(start)
}

// Three instances, 8 clients each, a cap of 3, statements of 300 ms: the
// first instance to renew takes the whole cap, and within the bound each
// holds its third; from then on each serves about a third of the
// statements and no client waits out the acquire timeout.
func TestSimEvenLoad(t *testing.T) {
	const hold = 300 * time.Millisecond
	s := newSim(t, 3)
	for range 3 {
		s.add(8, hold, 0)
	}
	took := s.runUntilConverged(simBound(hold) + simPoll)
	t.Logf("converged after %v (bound %v)", took, simBound(hold))
	if took > simBound(hold) {
		t.Errorf("converged after %v, over the bound %v", took, simBound(hold))
	}
	s.run(20*time.Second - took)
	for i, p := range s.report("8/8/8 clients, cap 3", simBound(hold), 20*time.Second) {
		if p < 0.25 || p > 0.42 {
			t.Errorf("inst-%d served %.0f%% of the statements, want 25%%..42%%", i, 100*p)
		}
		if n := s.ins[i].gate.timeouts; n > 0 {
			t.Errorf("inst-%d: %d clients waited out the acquire timeout", i, n)
		}
	}
}

// Skewed demand, 16 / 4 / 0 clients under a cap of 3: the shares follow
// it (2.4 / 0.6 / 0 on average), so each client of the fleet gets about
// the same part of the cap.
func TestSimSkewedLoad(t *testing.T) {
	const hold = 200 * time.Millisecond
	s := newSim(t, 3)
	s.add(16, hold, 0)
	s.add(4, hold, 0)
	s.add(0, hold, 0)
	s.run(20 * time.Second)
	p := s.report("16/4/0 clients, cap 3", simBound(hold), 20*time.Second)
	if p[0] < 0.70 || p[0] > 0.90 || p[2] != 0 {
		t.Errorf("16/4/0 clients served %.2f / %.2f / %.2f, want about 0.8 / 0.2 / 0", p[0], p[1], p[2])
	}
}

// A fourth instance joins three that share a cap of 3: it gets its first
// slot within the bound plus one round of turns, and from then on the
// cap goes round the four by turns (3/4 of a slot each on average).
func TestSimJoin(t *testing.T) {
	const hold = 100 * time.Millisecond
	s := newSim(t, 3)
	for range 3 {
		s.add(8, hold, 0)
	}
	joiner := s.add(8, hold, 10*time.Second)
	s.run(10 * time.Second)
	s.run(20 * time.Second)
	first := joiner.gate.servedAt[0].Sub(joiner.from)
	bound := simBound(hold) + TurnRounds*simPoll
	t.Logf("the fourth instance's first statement was served %v after it joined (bound %v)", first, bound)
	if first > bound {
		t.Errorf("the fourth instance waited %v for its first slot, over %v", first, bound)
	}
	for i, p := range s.report("8/8/8 then a fourth with 8, cap 3", 10*time.Second+bound, 30*time.Second) {
		if p < 0.18 || p > 0.32 {
			t.Errorf("inst-%d served %.0f%% of the statements after the join, want about 25%%", i, 100*p)
		}
	}
}

// An instance dies (its polls stop, its clients with it): its grant goes
// back to the others after the ttl, and they share the cap.
func TestSimDeath(t *testing.T) {
	const hold = 100 * time.Millisecond
	s := newSim(t, 4)
	for range 3 {
		s.add(8, hold, 0)
	}
	s.ins[2].until = s.start.Add(10 * time.Second)
	s.run(10 * time.Second)
	dead := s.now
	for {
		_, by := s.grant.sum()
		if s.converged() && by["inst-0"]+by["inst-1"] == 4 {
			break
		}
		if s.now.Sub(dead) > simTTL+simBound(hold)+simPoll {
			t.Fatalf("the dead instance's grant did not go to the others within the ttl and the bound: grants %v", by)
		}
		s.run(simStep)
	}
	took := s.now.Sub(dead)
	t.Logf("after the death, the two live instances held the whole cap in %v (ttl %v + bound %v)", took, simTTL, simBound(hold))
	s.run(10 * time.Second)
	p := s.report("8/8/8, the third dead at 10 s, cap 4", 10*time.Second+simTTL+simBound(hold), s.now.Sub(s.start))
	if p[0] < 0.4 || p[1] < 0.4 {
		t.Errorf("after the death the two live instances served %.2f / %.2f, want about half each", p[0], p[1])
	}
}

// A cap smaller than the instances that want it (1 over three) goes round
// them by turns: each serves about a third of the statements, and none
// goes without a slot for longer than a few rounds.
func TestSimTurns(t *testing.T) {
	const hold = 100 * time.Millisecond
	s := newSim(t, 1)
	for range 3 {
		s.add(4, hold, 0)
	}
	s.run(40 * time.Second)
	for i, p := range s.report("4/4/4 clients, cap 1", simBound(hold), 40*time.Second) {
		if p < 0.25 || p > 0.42 {
			t.Errorf("inst-%d served %.0f%% of the statements, want about a third", i, 100*p)
		}
	}
	for i, in := range s.ins {
		longest := time.Duration(0)
		last := s.start.Add(simBound(hold))
		for _, at := range in.gate.servedAt {
			if at.After(last) {
				longest = max(longest, at.Sub(last))
				last = at
			}
		}
		t.Logf("inst-%d went %v at most without a statement served", i, longest)
		if longest > 3*TurnRounds*simPoll {
			t.Errorf("inst-%d went %v without a statement served, over three rounds", i, longest)
		}
	}
}

// An instance whose clients start calling the capped tag after a quiet
// while, just after a poll (its demand 0 at its last renewal), writes its
// demand at once, not at its next poll: it gets its share within the
// other instance's next poll, the hold and the grants' moving (a poll and
// a half and the hold), not a poll later.
func TestSimDemandAppears(t *testing.T) {
	const hold = 100 * time.Millisecond
	s := newSim(t, 2)
	s.add(8, hold, 0)
	late := s.add(8, hold, 0)
	late.clientsAt = s.start.Add(10*time.Second + late.phase + 20*time.Millisecond)
	s.run(20 * time.Second)
	first := late.gate.servedAt[0].Sub(late.clientsAt)
	t.Logf("the quiet instance's first statement was served %v after its clients started", first)
	if first > simPoll+simPoll/2+hold {
		t.Errorf("the quiet instance waited %v for its first slot, over a poll and a half and the hold", first)
	}
	s.report("8 clients, and 8 more on a quiet instance from 10 s, cap 2", 10*time.Second+simBound(hold), 20*time.Second)
}
