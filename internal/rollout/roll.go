package rollout

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/chaos"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

func (r *run) run(ctx context.Context) error {
	o, res := r.o, r.res
	fmt.Fprintf(o.Out, "rollout: work directory %s\n", r.dir)
	start := time.Now()
	var err error
	if r.oldBin, res.BaseHash, err = BuildBase(ctx, o.Go, o.Repo, o.Base); err != nil {
		return err
	}
	if r.newBin, err = newBinary(o); err != nil {
		return err
	}
	res.Build = time.Since(start)
	fmt.Fprintf(o.Out, "rollout: built N-1 from %s (%.12s) and N from %s in %s\n", o.Base, res.BaseHash, o.Repo, res.Build.Round(time.Second))
	if err := r.setup(ctx); err != nil {
		return err
	}
	trafficCtx, stopTraffic := context.WithCancel(ctx)
	defer stopTraffic()
	var wg sync.WaitGroup
	r.traffic(trafficCtx, &wg)
	trafficStart := time.Now()
	err = r.roll(ctx)
	stopTraffic()
	wg.Wait()
	res.Traffic = time.Since(trafficStart)
	if err != nil {
		return err
	}
	return r.check(ctx)
}

// setup starts the private server and the N−1 fleet, stocks the shop and
// puts the drain and the cap in force through an N−1 instance.
func (r *run) setup(ctx context.Context) error {
	o := r.o
	mdir := filepath.Join(r.dir, "mariadb")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	var err error
	if r.srv, err = dbtest.NewPrivate(mdir, "--max-connections=500"); err != nil {
		return err
	}
	r.root = r.srv.Open("")
	for _, q := range []string{
		"CREATE DATABASE " + appDB,
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%[1]s'", backendUser),
		fmt.Sprintf("GRANT ALL ON %s.* TO '%s'@'%%'", appDB, backendUser),
		"CREATE TABLE " + appDB + ".orders (client INT NOT NULL, seq INT NOT NULL, version VARCHAR(8) NOT NULL, " +
			"created_at DATETIME(6) NOT NULL DEFAULT NOW(6), PRIMARY KEY (client, seq)) ENGINE=InnoDB",
	} {
		if _, err := r.root.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("rollout: %s: %w", q, err)
		}
	}
	for i := range o.Instances {
		in, err := newInstance(i, versionOld, r.oldBin, r.dir, r.srv.Addr, o, answersCall)
		if err != nil {
			return err
		}
		r.olds = append(r.olds, in)
	}
	out, err := r.olds[0].Migrate(ctx)
	if err != nil {
		return fmt.Errorf("rollout: N-1's migrate: %w", err)
	}
	r.res.OldMigrate = strings.TrimSpace(out)
	for _, in := range r.olds {
		if err := in.Start(ctx); err != nil {
			return fmt.Errorf("rollout: %w", err)
		}
		r.bal.add(in)
	}
	eo := chaos.ShortOptions(chaos.Instances)
	eo.TTL, eo.RetryBudget, eo.AnswerTimeout = o.TTL, workTimeout, workTimeout
	r.engine = &eo
	if err := chaos.Stock(ctx, r.engine, r.olds[0].db); err != nil {
		return err
	}
	tables := r.srv.Open(appDB)
	defer tables.Close()
	if r.initial, err = chaos.ReadLedger(ctx, tables); err != nil {
		return err
	}
	// The controls, through N−1's admin API (no credential there), in
	// force on every N−1 instance before the traffic starts.
	if err := adminWrite(ctx, r.olds[0], http.MethodPost, "/api/tags/"+drainedTag+"/drain?reason=rollout&by=rollout"); err != nil {
		return err
	}
	if err := adminWrite(ctx, r.olds[0], http.MethodPut, fmt.Sprintf("/api/tags/%s/limit?max=%d&by=rollout", cappedTag, o.Cap)); err != nil {
		return err
	}
	// And a row of a kind no version knows, as a later version would
	// write one.
	if _, err := r.root.ExecContext(ctx, "INSERT INTO "+appDB+".holdfast_controls (tag, kind, value, set_by, reason, set_at) VALUES (?, ?, 1, 'rollout', 'a later version', NOW(6))",
		futureTag, futureKind); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	for _, in := range r.olds {
		if err := waitControls(ctx, in); err != nil {
			return err
		}
	}
	fmt.Fprintf(o.Out, "rollout: %d N-1 instances serve; %s drained and %s capped at %d across the fleet\n",
		len(r.olds), drainedTag, cappedTag, o.Cap)
	return nil
}

// waitControls waits, up to 10 s (a few fleet polls), until in shows the
// drain and the cap in force.
func waitControls(ctx context.Context, in *instance) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		cs, err := controlsOf(ctx, in)
		if err == nil && cs.has(drainedTag, "drain") && cs.has(cappedTag, "limit") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("rollout: the drain and the cap are not in force on %s after 10s (%+v, %v)", in, cs, err)
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// traffic starts every client, the cap's sampler and the invariant's
// monitor, until ctx is done.
func (r *run) traffic(ctx context.Context, wg *sync.WaitGroup) {
	o := r.o
	seed := uint64(time.Now().UnixNano())
	pick := func() (int, *sql.DB, func()) {
		in := r.bal.pick()
		return in.n, in.db, in.done
	}
	for i := range o.EngineClients {
		c := chaos.NewEngineClient(r.engine, chaos.ClientOptions{ID: i, Seed: seed, Prefix: fmt.Sprintf("c%d-", i), Pick: pick, Replay: true})
		r.clients = append(r.clients, c)
		wg.Go(func() { c.Run(ctx) })
	}
	for i := range o.CheckoutClients {
		c := &checkout{id: i, bal: &r.bal, t: &r.t}
		r.checkouts = append(r.checkouts, c)
		wg.Go(func() { c.run(ctx) })
	}
	for range o.DrainedClients {
		wg.Go(func() { drained(ctx, &r.bal, &r.t) })
	}
	for range o.CappedClients {
		wg.Go(func() { capped(ctx, &r.bal, &r.t, o.CapHold) })
	}
	wg.Go(func() { r.sampler.run(ctx, r.root, o.Cap) })
	wg.Go(func() { r.monitor(ctx) })
}

// monitor checks the stock invariant once a second.
func (r *run) monitor(ctx context.Context) {
	tables := r.srv.Open(appDB)
	defer tables.Close()
	for ctx.Err() == nil {
		sleep(ctx, time.Second)
		bad, err := chaos.CheckInvariant(ctx, tables)
		if err != nil {
			continue
		}
		r.invMu.Lock()
		r.invSamples++
		r.invariant = append(r.invariant, bad...)
		r.invMu.Unlock()
	}
}

// roll runs the rollout under the traffic: a phase of N−1 alone, N's
// migrate (and o.BadStep), a phase, then each N−1 instance replaced by
// an N instance, the way a Deployment replaces pods, a phase after each.
func (r *run) roll(ctx context.Context) error {
	o, res := r.o, r.res
	sleep(ctx, o.Phase)
	// N's migrate, on the first N instance's configuration, with the
	// N−1 fleet running.
	n0, err := newInstance(o.Instances, versionNew, r.newBin, r.dir, r.srv.Addr, o, readyWithControls)
	if err != nil {
		return err
	}
	out, err := n0.Migrate(ctx)
	res.Migrate = strings.TrimSpace(out)
	if err != nil {
		return fmt.Errorf("rollout: N's migrate beside the N-1 fleet: %w", err)
	}
	fmt.Fprintf(o.Out, "rollout: N's migrate: %s\n", oneLine(res.Migrate))
	if len(o.BadStep) > 0 {
		for _, q := range o.BadStep {
			if _, err := r.root.ExecContext(ctx, "USE "+appDB+"; "+q); err != nil {
				return fmt.Errorf("rollout: the extra step %q: %w", q, err)
			}
		}
		fmt.Fprintf(o.Out, "rollout: applied the extra step: %s\n", strings.Join(o.BadStep, "; "))
	}
	sleep(ctx, o.Phase)
	for i, old := range r.olds {
		nu := n0
		if i > 0 {
			if nu, err = newInstance(o.Instances+i, versionNew, r.newBin, r.dir, r.srv.Addr, o, readyWithControls); err != nil {
				return err
			}
		}
		if err := r.replace(ctx, old, nu); err != nil {
			return err
		}
		if i == 0 {
			r.fleetSeen(ctx, nu, "mixed")
		}
		sleep(ctx, o.Phase)
	}
	r.fleetSeen(ctx, r.news[0], "upgraded")
	return ctx.Err()
}

// replace is one step of the rollout: nu started and waited for until
// ready (Process.Start: readyWithControls), then put in the balancer;
// old taken out of it, the work it was given let end, then stopped with
// SIGTERM.
func (r *run) replace(ctx context.Context, old, nu *instance) error {
	res := r.res
	step := Step{Old: old.n, New: nu.n}
	begin := time.Now()
	if err := nu.Start(ctx); err != nil {
		return fmt.Errorf("rollout: %w", err)
	}
	step.Ready = time.Since(begin)
	r.news = append(r.news, nu)
	r.bal.add(nu)
	r.bal.remove(old)
	begin = time.Now()
	if !old.waitIdle(workTimeout) {
		res.fail(checkMoved, "the work given to %s did not end within %s of its leaving the balancer", old, workTimeout)
	}
	step.Idle = time.Since(begin)
	begin = time.Now()
	if err := old.Stop(15 * time.Second); err != nil {
		res.fail(checkInstances, "%s: %v", old, err)
	}
	step.Stopped = time.Since(begin)
	res.Steps = append(res.Steps, step)
	fmt.Fprintf(r.o.Out, "rollout: %s replaced by %s: ready after %s, its clients moved within %s, stopped %s after SIGTERM\n",
		old, nu, step.Ready.Round(time.Millisecond), step.Idle.Round(time.Millisecond), step.Stopped.Round(time.Millisecond))
	return nil
}

// fleetSeen records the fleet as N instance in shows it (GET /api/fleet)
// and checks it: when mixed, the N−1 instances record no schema range nor
// control kinds and the N ones do; when upgraded, every instance does.
func (r *run) fleetSeen(ctx context.Context, in *instance, when string) {
	var fv fleetView
	var err error
	r.bal.mu.Lock()
	want := len(r.bal.live)
	r.bal.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fv = fleetView{}
		err = getJSON(ctx, "http://"+in.admin+"/api/fleet", &fv)
		if err == nil && len(fv.Status.Members) == want || time.Now().After(deadline) {
			break
		}
		sleep(ctx, 200*time.Millisecond)
	}
	if err != nil {
		r.res.fail(checkFleetView, "%s fleet: GET /api/fleet of %s: %v", when, in, err)
		return
	}
	var lines []string
	recorded := 0
	for _, m := range fv.Status.Members {
		rng := "not recorded"
		if m.Kinds != nil {
			recorded++
			rng = fmt.Sprintf("schema %d-%d, kinds %s", m.SchemaMin, m.SchemaMax, strings.Join(m.Kinds, ","))
		}
		lines = append(lines, fmt.Sprintf("%s %s: %s", m.ID, m.Version, rng))
	}
	r.res.Fleet = append(r.res.Fleet, fmt.Sprintf("%s fleet as %s shows it: %s", when, in, strings.Join(lines, "; ")))
	if len(fv.Status.Members) != want || recorded != len(r.news) {
		r.res.fail(checkFleetView, "%s fleet: %s shows %d members, %d recording their schema range and kinds; want %d and %d",
			when, in, len(fv.Status.Members), recorded, want, len(r.news))
	}
	// The row of a kind no version knows: N shows it ignored, never in
	// force.
	switch cs, err := controlsOf(ctx, in); {
	case err != nil:
		r.res.fail(checkFleetView, "%s fleet: GET /api/controls of %s: %v", when, in, err)
	case cs.has(futureTag, futureKind) || !cs.ignores(futureTag, futureKind):
		r.res.fail(checkFleetView, "%s fleet: %s does not show the %s row of %s as ignored: %+v", when, in, futureKind, futureTag, cs)
	}
}

func (r *run) close() {
	for _, in := range append(r.olds, r.news...) {
		_ = in.Stop(15 * time.Second)
		in.db.Close()
	}
	if r.root != nil {
		r.root.Close()
	}
	if r.srv != nil {
		r.srv.Stop()
	}
}
