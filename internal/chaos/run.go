package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// Run builds holdfast, starts a private MariaDB under the work directory
// and runs each scenario of o in turn, writing progress and each
// scenario's report to o.Out. It returns the results; a scenario that
// could not be run at all (holdfast would not build or start) is an
// error. The caller checks Result.Violations.
func Run(ctx context.Context, o Options) ([]*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "holdfast-chaos-")
		if err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	var results []*Result
	keep := o.Keep
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	// The driver logs every broken connection; the journal has them.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))

	fmt.Fprintf(o.Out, "chaos: work directory %s, seed %d\n", dir, o.Seed)
	bin, err := buildHoldfast(ctx, o.Go, o.Repo, dir, o.Race)
	if err != nil {
		return nil, err
	}
	mdir := filepath.Join(dir, "mariadb")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	srv, err := dbtest.NewPrivate(mdir, "--innodb-buffer-pool-size=128M", "--max-connections=2000")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	root := srv.Open("")
	defer root.Close()
	if _, err := root.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", backendUser, backendUser)); err != nil {
		return nil, fmt.Errorf("chaos: create backend account: %w", err)
	}
	fmt.Fprintf(o.Out, "chaos: private MariaDB at %s; holdfast built%s\n", srv.Addr, map[bool]string{true: " with -race"}[o.Race])
	rng := rand.New(rand.NewPCG(o.Seed, 1))
	for i, sc := range o.Scenarios {
		if ctx.Err() != nil {
			break
		}
		r, err := runScenario(ctx, &o, i+1, sc, bin, dir, srv, root, rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64())))
		if err != nil {
			keep = true
			return results, fmt.Errorf("chaos: scenario %s: %w (work directory %s kept)", sc, err, dir)
		}
		r.print(o.Out)
		results = append(results, r)
		if len(r.Violations) > 0 {
			keep = true
		}
	}
	if keep {
		fmt.Fprintf(o.Out, "chaos: work directory kept: %s\n", dir)
	}
	return results, ctx.Err()
}

// describeScenario is the report's title of a scenario.
func describeScenario(o *Options, sc Scenario) string {
	switch sc {
	case KillBackend:
		return fmt.Sprintf("backend connections killed every %s", o.BackendKillEvery)
	case KillMariaDB:
		return fmt.Sprintf("MariaDB kill -9 every %s, restarted after %v", o.MariaDBKillEvery, o.MariaDBDown)
	case KillHoldfast:
		return fmt.Sprintf("holdfast kill -9 every %s, restarted after %s", o.HoldfastKillEvery, o.HoldfastDown)
	case Instances:
		return fmt.Sprintf("%d holdfast instances on one database", o.Instances)
	}
	return string(sc)
}

func runScenario(ctx context.Context, o *Options, n int, sc Scenario, bin, dir string, srv *dbtest.Private, root *sql.DB, rng *rand.Rand) (*Result, error) {
	res := &Result{N: n, Scenario: sc, Title: describeScenario(o, sc), Clients: o.Clients}
	fmt.Fprintf(o.Out, "\n== %d. %s: %s\n", n, sc, res.Title)
	dbName := fmt.Sprintf("chaos_%d_%s", n, sc)
	for _, q := range []string{
		"CREATE DATABASE " + dbName,
		fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'%%'", dbName, backendUser),
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
	}
	ndb := srv.Open(dbName)
	defer ndb.Close()

	instances := 1
	if sc == Instances {
		instances = o.Instances
	}
	hs := make([]*holdfast, instances)
	for i := range hs {
		listen, err := freeAddr()
		if err != nil {
			return nil, err
		}
		admin, err := freeAddr()
		if err != nil {
			return nil, err
		}
		hs[i], err = newHoldfast(i, fmt.Sprintf("s%d-holdfast-%d", n, i), bin, dir, holdfastConfig{Listen: listen, Admin: admin,
			Backend: srv.Addr, Database: dbName, Instances: instances, TTL: o.TTL, PoolCap: o.PoolCap})
		if err != nil {
			return nil, err
		}
	}
	if err := hs[0].migrate(ctx); err != nil {
		return nil, err
	}
	for _, h := range hs {
		if err := h.start(ctx); err != nil {
			return nil, err
		}
	}
	defer func() {
		for _, h := range hs {
			h.stop()
		}
	}()
	dbs := make([][2]*sql.DB, instances) // per instance: interpolated, prepared
	for i, h := range hs {
		for j, interp := range []bool{true, false} {
			d, err := sql.Open("mysql", clientDSN(h.cfg.Listen, interp, o.AnswerTimeout))
			if err != nil {
				return nil, err
			}
			d.SetMaxIdleConns(o.Clients)
			defer d.Close()
			dbs[i][j] = d
		}
	}
	if err := stock(ctx, o, dbs[0][0]); err != nil {
		return nil, err
	}
	initial, err := readLedger(ctx, ndb)
	if err != nil {
		return nil, err
	}
	for _, v := range initial {
		res.InitialUnits += v
	}

	// Traffic, with the scenario's fault beside it.
	start := time.Now()
	faultCtx, stopFaults := context.WithCancel(ctx)
	var bg sync.WaitGroup
	var flog faultLog
	var mon monitor
	bg.Go(func() { scrapeLoop(faultCtx, hs) })
	bg.Go(func() { mon.run(faultCtx, ndb) })
	switch sc {
	case KillBackend:
		krng := rand.New(rand.NewPCG(rng.Uint64(), 2))
		bg.Go(func() { killBackends(faultCtx, root, o.BackendKillEvery, krng, &flog) })
	case KillMariaDB:
		bg.Go(func() { killMariaDB(faultCtx, srv, o.MariaDBKillEvery, o.MariaDBDown, &flog) })
	case KillHoldfast:
		bg.Go(func() { killHoldfast(faultCtx, hs[0], o.HoldfastKillEvery, o.HoldfastDown, &flog) })
	}
	trafficCtx, stopTraffic := context.WithTimeout(ctx, o.Traffic)
	defer stopTraffic()
	clients := make([]*client, o.Clients)
	var cwg sync.WaitGroup
	for i := range clients {
		inst := i % instances
		c := &client{id: i, instance: inst, db: dbs[inst][(i/instances)%2], o: o,
			rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(i))), prefix: fmt.Sprintf("s%d-c%d-", n, i)}
		clients[i] = c
		cwg.Go(func() { c.run(trafficCtx) })
	}
	<-trafficCtx.Done()
	res.Traffic = time.Since(start)
	stopFaults()
	bg.Wait()
	fmt.Fprintf(o.Out, "   traffic stopped after %s; waiting for the clients' last orders\n", res.Traffic.Round(time.Second))
	cwg.Wait()
	res.Settle = time.Since(start) - res.Traffic
	for _, h := range hs {
		_ = h.scrape(ctx)
	}
	var calls []Call
	for _, c := range clients {
		calls = append(calls, c.journal...)
	}
	res.tally(calls)
	res.Journal = filepath.Join(dir, fmt.Sprintf("s%d-journal.jsonl", n))
	if err := writeJournal(res.Journal, calls); err != nil {
		return nil, err
	}
	for _, h := range hs {
		for p, v := range h.recoveries() {
			if res.Recoveries == nil {
				res.Recoveries = map[string]float64{}
			}
			res.Recoveries[p] += v
		}
	}
	res.Faults, res.FaultMisses, res.Violations = flog.counts()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}

	// Judge the answers, then the stock.
	f, err := readFacts(ctx, ndb, initial)
	if err != nil {
		return nil, err
	}
	v := judge(calls, f, sc == KillHoldfast, o.TTL)
	res.Violations = append(res.Violations, v.Violations...)
	res.Resolved = v.Resolved
	for _, u := range v.ClaimedUnits {
		res.ClaimedUnits += u
	}
	for _, u := range f.final {
		res.FinalUnits += u
	}
	res.Samples = mon.samples
	for _, b := range mon.breaches {
		if t, ok := v.ForcedPools[b.key]; ok && t.Before(b.at) {
			res.ForcedBreaches++ // documented: pool + reserved may exceed on_hand after a forced claim
			continue
		}
		res.Violations = append(res.Violations, Violation{checkInvariant, "during the traffic at " + b.at.Format("15:04:05") + ": " + b.detail})
	}
	checkStart := time.Now()
	if err := waitExpired(ctx, ndb, o.TTL+o.Settle); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		res.Violations = append(res.Violations, Violation{checkExpiry, err.Error()})
	} else {
		res.Expire = time.Since(checkStart)
		res.Reservable = len(f.final)
		vs := reservable(ctx, o, dbs[0][0], ndb, fmt.Sprintf("s%d", n), f.final)
		res.Reservable -= len(vs)
		res.Violations = append(res.Violations, vs...)
	}
	res.Check = time.Since(checkStart)
	pools, err := readPools(ctx, ndb)
	if err != nil {
		return nil, err
	}
	for _, b := range breaches(pools) {
		res.Violations = append(res.Violations, Violation{checkInvariant, "at the end: " + b})
	}
	if final, err := readLedger(ctx, ndb); err == nil && !mapsEqual(final, f.final) {
		res.Violations = append(res.Violations, Violation{checkConserved, "the final check (reserve and release everything) changed on_hand"})
	}
	for _, h := range hs {
		if !h.alive() {
			res.Violations = append(res.Violations, Violation{"holdfast", fmt.Sprintf("holdfast %d is not running at the end (log %s)", h.n, h.log)})
		}
		for _, e := range h.unexpectedExits() {
			res.Violations = append(res.Violations, Violation{"holdfast", e + " (log " + h.log + ")"})
		}
		for _, l := range logProblems(h.log) {
			res.Violations = append(res.Violations, Violation{"holdfast", fmt.Sprintf("holdfast %d log: %s (%s)", h.n, l, h.log)})
		}
		res.Starts += h.starts
	}
	return res, nil
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

func mapsEqual(a, b map[PoolKey]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Violated reports whether any result has a violation.
func Violated(rs []*Result) bool {
	return slices.ContainsFunc(rs, func(r *Result) bool { return len(r.Violations) > 0 })
}
