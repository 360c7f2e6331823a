package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// scenario is one scenario's run: its own database on the private
// server, its holdfast instances, its clients. run sets it up, runs the
// traffic with the fault beside it, then checks; it belongs to Run's
// goroutine.
type scenario struct {
	o        *Options
	n        int
	sc       Scenario
	bin, dir string
	srv      *dbtest.Private
	replica  *dbtest.Private // the replica scenario's replica of srv
	root     *sql.DB         // the private server (the pair's first primary), as root
	rng      *rand.Rand
	// pair is the switchover and failover scenarios' own servers and VIP
	// (nil in the others): their database lives there, not on srv.
	pair *pair

	db  *sql.DB // the scenario's holdfast tables (tablesDB), as root
	hs  []*holdfast
	dbs [][2]*sql.DB // per instance, client pools: interpolated, prepared
	res *Result

	initial  map[PoolKey]int64 // on_hand before the traffic
	calls    []Call
	mon      monitor
	faults   faultLog
	controls controlLog // the controls scenario's changes

	// The replica scenario's reads (replica.go).
	readMu         sync.Mutex
	stockReads     int64
	readViolations []Violation
}

func (s *scenario) run(ctx context.Context) (*Result, error) {
	s.res = &Result{N: s.n, Scenario: s.sc, Title: describeScenario(s.o, s.sc), Clients: s.o.Clients}
	fmt.Fprintf(s.o.Out, "\n== %d. %s: %s\n", s.n, s.sc, s.res.Title)
	defer s.close()
	if err := s.setup(ctx); err != nil {
		return nil, err
	}
	s.traffic(ctx)
	if err := ctx.Err(); err != nil {
		return s.res, err
	}
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.res, nil
}

// setup creates the database and the schema, starts the holdfast
// instances and stocks the items.
func (s *scenario) setup(ctx context.Context) error {
	name := fmt.Sprintf("chaos_%d_%s", s.n, s.sc)
	replica, backend := "", s.srv.Addr
	if s.sc == Replica {
		if err := s.startReplica(ctx); err != nil {
			return err
		}
		replica = s.replica.Addr
	}
	if s.sc == Switchover || s.sc == Failover {
		if err := s.startPair(ctx); err != nil {
			return err
		}
		s.root, backend = s.pair.root, s.pair.vip.Addr().String()
	}
	// holdfast's own work runs as backendUser too (no fleet.user), so
	// that the backend kills reach the engine's connections: it needs its
	// tables' schema.
	for _, q := range []string{
		"CREATE DATABASE " + name,
		"CREATE DATABASE " + tablesDB(name),
		fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'%%'", name, backendUser),
		fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'%%'", tablesDB(name), backendUser),
	} {
		if _, err := s.root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("chaos: %s: %w", q, err)
		}
	}
	if s.pair != nil {
		var err error
		if s.db, err = s.pair.openVIP(tablesDB(name)); err != nil {
			return err
		}
	} else {
		s.db = s.srv.Open(tablesDB(name))
	}
	instances := 1
	if s.sc == Instances || s.sc == Controls {
		instances = s.o.Instances
	}
	for i := 0; i < instances; i++ {
		listen, err := dbtest.ListenAddr()
		if err != nil {
			return err
		}
		admin, err := dbtest.ListenAddr()
		if err != nil {
			return err
		}
		h, err := newHoldfast(i, fmt.Sprintf("s%d-holdfast-%d", s.n, i), s.bin, s.dir, holdfastConfig{Listen: listen, Admin: admin,
			Backend: backend, Database: name, TTL: s.o.TTL, PoolCap: s.o.PoolCap, Replica: replica})
		if err != nil {
			return err
		}
		s.hs = append(s.hs, h)
	}
	if err := s.hs[0].migrate(ctx); err != nil {
		return err
	}
	for _, h := range s.hs {
		if err := h.start(ctx); err != nil {
			return err
		}
		var pair [2]*sql.DB
		for j, interp := range []bool{true, false} {
			d, err := sql.Open("mysql", clientDSN(h.cfg.Listen, interp, s.o.AnswerTimeout))
			if err != nil {
				return fmt.Errorf("chaos: %w", err)
			}
			d.SetMaxIdleConns(s.o.Clients)
			pair[j] = d
		}
		s.dbs = append(s.dbs, pair)
	}
	if err := stock(ctx, s.o, s.dbs[0][0]); err != nil {
		return err
	}
	var err error
	if s.initial, err = readLedger(ctx, s.db); err != nil {
		return err
	}
	for _, v := range s.initial {
		s.res.InitialUnits += v
	}
	return nil
}

func (s *scenario) close() {
	for _, h := range s.hs {
		h.stop()
	}
	if s.replica != nil {
		s.replica.Stop()
	}
	for _, pair := range s.dbs {
		pair[0].Close()
		pair[1].Close()
	}
	if s.db != nil {
		s.db.Close()
	}
	if s.pair != nil {
		s.pair.close()
	}
}

// traffic runs the clients for Options.Traffic with the scenario's fault,
// the recoveries scraper and the invariant monitor beside them, then
// waits for every client to finish its last order, and collects the
// journal.
func (s *scenario) traffic(ctx context.Context) {
	o, res := s.o, s.res
	start := time.Now()
	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	var bg sync.WaitGroup
	bg.Go(func() { scrapeLoop(faultCtx, s.hs) })
	bg.Go(func() { s.mon.run(faultCtx, s.db) })
	switch s.sc {
	case KillBackend:
		krng := rand.New(rand.NewPCG(s.rng.Uint64(), 2))
		bg.Go(func() { killBackends(faultCtx, s.root, o.BackendKillEvery, krng, &s.faults) })
	case KillMariaDB:
		bg.Go(func() { killMariaDB(faultCtx, s.srv, o.MariaDBKillEvery, o.MariaDBDown, &s.faults) })
	case KillHoldfast:
		bg.Go(func() { killHoldfast(faultCtx, s.hs[0], o.HoldfastKillEvery, o.HoldfastDown, &s.faults) })
	case Replica:
		bg.Go(func() { killReplica(faultCtx, s.replica, s.srv, o.MariaDBKillEvery, o.MariaDBDown, &s.faults) })
		var stocked int64
		for _, v := range s.initial {
			stocked += v
		}
		for i := range max(2, o.Clients/8) {
			bg.Go(func() {
				readStock(faultCtx, s.dbs[i%len(s.dbs)][0], s.hs[0].cfg.tables(), stocked, &s.stockReads, &s.readMu, &s.readViolations)
			})
		}
	case Switchover:
		bg.Go(func() { s.pair.switchovers(faultCtx, o.SwitchoverEvery, &s.faults) })
	case Failover:
		bg.Go(func() { s.pair.failover(faultCtx, o.SwitchoverEvery, o.PromoteAfter, &s.faults) })
	case Controls:
		crng := rand.New(rand.NewPCG(s.rng.Uint64(), 3))
		krng := rand.New(rand.NewPCG(s.rng.Uint64(), 4))
		bg.Go(func() { controlLoop(faultCtx, s.hs, o.ControlEvery, crng, &s.faults, &s.controls) })
		bg.Go(func() { killHoldfastRotating(faultCtx, s.hs, o.HoldfastKillEvery, o.HoldfastDown, &s.faults) })
		bg.Go(func() { killBackends(faultCtx, s.root, 5*o.BackendKillEvery, krng, &s.faults) })
	}
	trafficCtx, stopTraffic := context.WithTimeout(ctx, o.Traffic)
	defer stopTraffic()
	clients := make([]*client, o.Clients)
	var cwg sync.WaitGroup
	for i := range clients {
		inst := i % len(s.hs)
		c := &client{id: i, instance: inst, db: s.dbs[inst][(i/len(s.hs))%2], o: o,
			rng: rand.New(rand.NewPCG(s.rng.Uint64(), uint64(i))), prefix: fmt.Sprintf("s%d-c%d-", s.n, i)}
		if s.sc == Controls {
			c.tag = tagOf(i)
		}
		c.ryw = s.sc == Replica
		c.tables = s.hs[0].cfg.tables()
		clients[i] = c
		cwg.Go(func() { c.run(trafficCtx) })
	}
	<-trafficCtx.Done()
	res.Traffic = time.Since(start)
	stopFaults()
	bg.Wait() // every fault undone: the servers run
	fmt.Fprintf(o.Out, "   traffic stopped after %s; waiting for the clients' last orders\n", res.Traffic.Round(time.Second))
	cwg.Wait()
	res.Settle = time.Since(start) - res.Traffic
	for _, h := range s.hs {
		_ = h.scrape(ctx)
		for p, v := range h.recoveries() {
			if res.Recoveries == nil {
				res.Recoveries = map[string]float64{}
			}
			res.Recoveries[p] += v
		}
	}
	ownReads := 0
	for _, c := range clients {
		s.calls = append(s.calls, c.journal...)
		ownReads += c.ownReads
		s.readViolations = append(s.readViolations, c.violations...)
	}
	if s.sc == Replica {
		routed, fell, err := replicaReads(ctx, s.hs)
		note := fmt.Sprintf("reads: %d stock reads, %d reservations read back by their clients, %d wrong or unanswered; holdfast routed %d to the replica (%d of them ran on the primary after all)",
			s.stockReads, ownReads, len(s.readViolations), routed, fell)
		if err != nil {
			note += fmt.Sprintf(" (routing counts incomplete: %v)", err)
		}
		res.Notes = append(res.Notes, note)
	}
	if s.pair != nil {
		res.Notes = append(res.Notes, s.pair.switchNotes(start, s.calls)...)
	}
	res.tally(s.calls)
	res.Faults, res.FaultMisses, res.Violations = s.faults.counts()
	res.Violations = append(res.Violations, s.readViolations...)
}

// check judges the journal against the database, then checks the stock:
// the invariant (sampled during the traffic, and at the end), that every
// unit is reservable again once everything left behind has expired, and
// that the holdfast processes neither crashed nor panicked.
func (s *scenario) check(ctx context.Context) error {
	o, res := s.o, s.res
	res.Journal = filepath.Join(s.dir, fmt.Sprintf("s%d-journal.jsonl", s.n))
	if err := writeJournal(res.Journal, s.calls); err != nil {
		return err
	}
	if s.pair != nil {
		// The facts from the primary itself: a pooled connection through
		// the VIP may still be on a former primary.
		s.db.Close()
		s.db = s.pair.current().Open(s.hs[0].cfg.tables())
	}
	f, err := readFacts(ctx, s.db, s.initial)
	if err != nil {
		return err
	}
	v := judge(s.calls, f, s.sc == KillHoldfast || s.sc == Controls, s.sc == Controls, o.TTL)
	res.Violations = append(res.Violations, v.Violations...)
	if s.sc == Controls {
		res.Violations = append(res.Violations, checkControls(s.calls, &s.controls)...)
		res.Notes = append(res.Notes, "controls: "+controlSummary(&s.controls))
	}
	res.Resolved = v.Resolved
	for _, u := range v.ClaimedUnits {
		res.ClaimedUnits += u
	}
	for _, u := range f.final {
		res.FinalUnits += u
	}
	res.Samples = s.mon.samples
	for _, b := range s.mon.breaches {
		if t, ok := v.ForcedPools[b.key]; ok && b.oversold && t.Before(b.at) {
			res.ForcedBreaches++ // documented: pool + reserved may exceed on_hand after a forced claim
			continue
		}
		res.Violations = append(res.Violations, Violation{checkInvariant, "during the traffic at " + b.at.Format("15:04:05") + ": " + b.detail})
	}

	checkStart := time.Now()
	if err := waitExpired(ctx, s.db, o.TTL+o.Settle); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		res.Violations = append(res.Violations, Violation{checkExpiry, err.Error()})
	} else {
		res.Expire = time.Since(checkStart)
		vs := reservable(ctx, o, s.dbs[0][0], s.db, fmt.Sprintf("s%d", s.n), f.final)
		res.Reservable = len(f.final) - len(vs)
		res.Violations = append(res.Violations, vs...)
	}
	res.Check = time.Since(checkStart)
	bs, err := checkStock(ctx, s.db)
	if err != nil {
		return err
	}
	for _, b := range bs {
		res.Violations = append(res.Violations, Violation{checkInvariant, "at the end: " + b.detail})
	}
	if final, err := readLedger(ctx, s.db); err == nil && !mapsEqual(final, f.final) {
		res.Violations = append(res.Violations, Violation{checkConserved, "the final check (reserve and release everything) changed on_hand"})
	}
	for _, h := range s.hs {
		if !h.Alive() {
			res.Violations = append(res.Violations, Violation{"holdfast", fmt.Sprintf("holdfast %d is not running at the end (log %s)", h.n, h.log)})
		}
		for _, e := range h.UnexpectedExits() {
			res.Violations = append(res.Violations, Violation{"holdfast", e + " (log " + h.log + ")"})
		}
		for _, l := range holdfastproc.LogProblems(h.log) {
			res.Violations = append(res.Violations, Violation{"holdfast", fmt.Sprintf("holdfast %d log: %s (%s)", h.n, l, h.log)})
		}
		res.Starts += h.Starts()
	}
	return nil
}

// stock creates every item at locations 1 and 2 through holdfast.receive
// (see Options.Items).
func stock(ctx context.Context, o *Options, db *sql.DB) error {
	for item := 1; item <= o.Items; item++ {
		qty := o.OnHand
		switch {
		case item <= o.ScarceItems:
			qty = o.ScarceOnHand
		case item == o.ScarceItems+1:
			qty = o.HotOnHand
		}
		for _, g := range []int{1, 2} {
			if _, err := db.ExecContext(ctx, "CALL holdfast.receive(?, ?, ?, ?)", shopID, item, g, qty); err != nil {
				return fmt.Errorf("chaos: stock item %d at location %d: %w", item, g, err)
			}
		}
	}
	return nil
}
