package bench

import (
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/internal/rawmysql"

	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// `make bench-reserve` (RunReserve) measures holdfast's reservation engine on
// one hot item at one location against two baselines on a counter row, all
// through the same holdfast: load generator → holdfast → Relay adding
// RelayDelay each way → MariaDB. Each round runs, for each client count,
// the three workloads (reserve_load.go) back to back, their order rotated
// every round; every run starts from fresh state (a fresh counter, or a
// fresh shop whose one pool receives OnHand units) and ends with a
// consistency check: nothing oversold, every reservation the clients were
// told of exists, and no other.

// ReserveOptions configures RunReserve. DefaultReserveOptions gives the
// values `make bench-reserve` uses; the zero value is not usable.
type ReserveOptions struct {
	Repo string // holdfast's repository root, where ./cmd/holdfast is built
	Go   string // the go command

	MariaDB       string // host:port of the MariaDB under test
	AdminUser     string // MariaDB account that may create users and databases
	AdminPassword string
	// Database belongs to the harness: it is dropped and created afresh
	// at the start of every run. holdfast's schema and the counter tables
	// live in it.
	Database string
	// PoolUser is the MariaDB account holdfast's pool logs in as (created,
	// password = name).
	PoolUser string

	Clients    []int         // concurrent clients, each a connection to holdfast
	Time       time.Duration // of each run
	Rounds     int
	Workloads  []string      // subset of ReserveWorkloads, in first-round order
	RelayDelay time.Duration // added by the relay in each direction
	// Pause separates runs, so one run's background work (InnoDB purge,
	// refills) settles before the next.
	Pause time.Duration

	OnHand   int64 // units at the start of every run: counter and ledger
	TTL      int   // ttl_seconds of each reserve (and of the baseline's records)
	Item     int64 // the hot inventory_item_id
	Location int64 // its inventory_group_id

	Keep bool // keep the scratch directory (binary, config, holdfast's log)

	// Settings ("reservation.batches_per_pool=1", see
	// HoldfastConfig.Settings) are workload (e)'s: a second holdfast runs
	// with them, and its runs are compared with (c)'s. The first holdfast,
	// and every verdict, stays on the shipped defaults.
	Settings []string
	// ERepo, when set, is another checkout of holdfast that workload (e)'s
	// holdfast is built from (with Settings, if any): a change is measured
	// against the code before it in the same rounds.
	ERepo string

	// RedisServer is the redis-server binary workload (d) starts, on a free
	// port without persistence, as the legacy counter of a second holdfast.
	RedisServer string
}

// Variant describes workload (e)'s holdfast against (c)'s; empty when o
// has none.
func (o ReserveOptions) Variant() string {
	var parts []string
	if o.ERepo != "" {
		parts = append(parts, "built from "+o.ERepo)
	}
	if len(o.Settings) > 0 {
		parts = append(parts, "-set "+strings.Join(o.Settings, " "))
	}
	return strings.Join(parts, ", ")
}

// DefaultReserveOptions returns the defaults of `make bench-reserve`.
func DefaultReserveOptions() ReserveOptions {
	return ReserveOptions{
		Repo: ".", Go: "go",
		MariaDB: "127.0.0.1:3306", AdminUser: "root",
		Database: "holdfast_bench_reserve", PoolUser: "holdfast_rsv_pool",
		Clients: []int{8, 64, 256}, Time: 10 * time.Second, Rounds: 3,
		Workloads:  slices.Clone(ReserveWorkloads),
		RelayDelay: 500 * time.Microsecond, Pause: 2 * time.Second,
		OnHand: 10_000_000, TTL: 3600, Item: 1001, Location: 1,
		RedisServer: "redis-server",
	}
}

func (o ReserveOptions) validate() error {
	switch {
	case o.Rounds < 1:
		return errors.New("bench: rounds must be at least 1")
	case o.Time < time.Second:
		return errors.New("bench: time must be at least 1s")
	case len(o.Clients) == 0:
		return errors.New("bench: no client counts")
	case o.RelayDelay < 0 || o.Pause < 0:
		return errors.New("bench: relay-delay and pause must not be negative")
	case o.OnHand < 1 || o.TTL < 1 || o.Item < 1 || o.Location < 1:
		return errors.New("bench: on-hand, ttl, item and location must be positive")
	case o.Database == "" || strings.ContainsAny(o.Database, "`'\\") || strings.ContainsAny(o.PoolUser, "`'\\@"):
		return errors.New("bench: database and pool user must be plain names")
	}
	for _, n := range o.Clients {
		if n < 1 {
			return fmt.Errorf("bench: client count %d is not positive", n)
		}
	}
	if len(o.Workloads) == 0 {
		return errors.New("bench: no workloads")
	}
	for _, w := range o.Workloads {
		if !slices.Contains(ReserveWorkloads, w) && w != WorkloadVariant {
			return fmt.Errorf("bench: unknown workload %q (want a, b, c, d or e)", w)
		}
	}
	for _, st := range o.Settings {
		if _, _, err := holdfastproc.ParseSetting(st); err != nil {
			return err
		}
	}
	if o.ERepo != "" {
		if _, err := os.Stat(filepath.Join(o.ERepo, "cmd", "holdfast")); err != nil {
			return fmt.Errorf("bench: -e-repo %s is not a holdfast checkout: %w", o.ERepo, err)
		}
	}
	if hasE := slices.Contains(o.Workloads, WorkloadVariant); hasE != (o.Variant() != "") {
		return errors.New("bench: workload e runs holdfast with the -set settings or built from -e-repo: give e with one of them, or neither")
	}
	return nil
}

// ParseClients parses a comma-separated list of client counts ("8,64,256").
func ParseClients(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bench: client count %q is not a positive integer", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// reserveUser is the account the clients log in to holdfast as
// (password the same).
const reserveUser = "reserver"

// reserveRunner holds what one RunReserve has started, so cleanup can stop
// it.
type reserveRunner struct {
	o     ReserveOptions
	w     io.Writer
	dir   string
	bin   string
	admin *sql.DB // no default database
	db    *sql.DB // the bench database, directly (not through the relay)
	relay *netrelay.Relay
	hf    *reserveTarget // holdfast on its defaults: workloads (c) and the verdicts
	dbPid int            // MariaDB's process, 0 when not local
	shop  int64          // the last shop used by WorkloadCall, WorkloadShadow or WorkloadVariant

	// Workload (d): a second holdfast with a Redis beside its engine.
	redis  *exec.Cmd
	shadow *reserveTarget

	// Workload (e): a holdfast with the -set settings, or built from -e-repo.
	variant *reserveTarget
}

// reserveTarget is one holdfast process the workloads run through.
type reserveTarget struct {
	h       *Holdfast
	ep      Endpoint // for the clients
	metrics string   // its /metrics URL
	label   string   // what it is, for the printout
}

// startTarget starts a holdfast from bin on hc (whose listeners are chosen)
// and prints what it runs with.
func (b *reserveRunner) startTarget(ctx context.Context, bin, name, label string, hc HoldfastConfig) (*reserveTarget, error) {
	h, err := StartHoldfast(ctx, bin, b.dir, name, hc)
	if err != nil {
		return nil, err
	}
	b.printf("%s: %s (pid %d; %s; %s; log %s)\n", label, h.Cmdline, h.Pid(), hc.Describe(), h.Chosen(), h.LogPath)
	return &reserveTarget{h: h, label: label, metrics: "http://" + hc.AdminListen + "/metrics",
		ep: Endpoint{Name: TargetHoldfast, Addr: hc.Listen, User: reserveUser, Password: reserveUser}}, nil
}

// target is the holdfast a workload runs through.
func (b *reserveRunner) target(wl string) *reserveTarget {
	switch wl {
	case WorkloadShadow:
		return b.shadow
	case WorkloadVariant:
		return b.variant
	}
	return b.hf
}

func (b *reserveRunner) printf(format string, a ...any) { fmt.Fprintf(b.w, format, a...) }

// RunReserve runs `make bench-reserve` and writes its report to w. It
// returns an error when a run errored or failed its consistency check, or
// when the bench could not start; missed targets are reported, not
// returned. Everything it starts is stopped before it returns.
func RunReserve(ctx context.Context, o ReserveOptions, w io.Writer) (err error) {
	if err := o.validate(); err != nil {
		return err
	}
	b := &reserveRunner{o: o, w: w}
	defer func() { b.cleanup(err != nil) }()
	load0 := loadAvg()
	b.printf("== holdfast bench-reserve, %s ==\n", time.Now().Format(time.RFC3339))
	b.printf("command: %s\n", strings.Join(os.Args, " "))
	b.printf("machine: nproc %d, load average %s, %s\n", runtime.NumCPU(), load0, runtime.Version())
	if err := b.setup(ctx); err != nil {
		return err
	}

	var samples []ReserveSample
	for round := 1; round <= o.Rounds; round++ {
		b.printf("\n-- round %d/%d (load average %s) --\n", round, o.Rounds, loadAvg())
		for _, n := range o.Clients {
			for _, wl := range reserveOrder(o.Workloads, round) {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				s := b.runOne(ctx, round, wl, n)
				samples = append(samples, s)
				b.printSample(s)
				if h := b.target(wl).h; h.Exited() {
					return fmt.Errorf("bench: holdfast exited; see %s", h.LogPath)
				}
				if o.Pause > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(o.Pause):
					}
				}
			}
		}
	}

	var failed []string
	verified := 0
	for _, s := range samples {
		if s.Err != nil || len(s.Problems) > 0 {
			why := strings.Join(s.Problems, "; ")
			if s.Err != nil {
				why = strings.TrimPrefix(strings.Join([]string{why, s.Err.Error()}, "; "), "; ")
			}
			failed = append(failed, fmt.Sprintf("round %d %s at %d clients: %s", s.Round, workloadName(s.Workload), s.Clients, why))
		}
		if s.Checked && len(s.Problems) == 0 {
			verified++
		}
	}
	sums := SummarizeReserve(samples, o.Workloads, o.Clients)
	b.printf("\n== summary: medians of %d rounds of %v, holdfast on its defaults, relay %v each way (load average %s → %s) ==\n",
		o.Rounds, o.Time, o.RelayDelay, load0, loadAvg())
	PrintReserveSummaries(w, sums)
	b.printRelay(samples)
	b.printf("consistency: %d of %d runs verified (zero oversell, every reservation accounted for)\n", verified, len(samples))
	for _, v := range ReserveVerdicts(sums) {
		b.printf("%s\n", v)
	}
	PrintClosedLoop(w, sums, o.Clients)
	PrintShadowCost(w, sums, o.Clients)
	PrintVariantEffect(w, sums, o.Clients, o.Variant())
	if verified == len(samples) {
		b.printf("PASS  zero oversell in every run\n")
	} else {
		b.printf("MISS  zero oversell in every run: %d run(s) failed their check or errored\n", len(samples)-verified)
	}
	if len(failed) > 0 {
		b.printf("\n%d run(s) errored or failed their check:\n  %s\n", len(failed), strings.Join(failed, "\n  "))
		return fmt.Errorf("bench: %d run(s) errored or failed their check", len(failed))
	}
	return ctx.Err()
}

func (b *reserveRunner) setup(ctx context.Context) error {
	o := b.o
	lim, err := RaiseNoFile(uint64(4*slices.Max(o.Clients) + 1024))
	if err != nil {
		return err
	}
	b.printf("RLIMIT_NOFILE: %d (inherited by holdfast)\n", lim)

	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = o.AdminUser, o.AdminPassword, "tcp", o.MariaDB
	if b.admin, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b.admin.SetMaxOpenConns(2)
	var version, pidFile string
	var maxConns int
	if err := b.admin.QueryRowContext(ctx, "SELECT VERSION(), @@max_connections, @@pid_file").
		Scan(&version, &maxConns, &pidFile); err != nil {
		return fmt.Errorf("bench: MariaDB at %s: %w", o.MariaDB, err)
	}
	isolation := "unknown"
	for _, v := range []string{"@@global.transaction_isolation", "@@global.tx_isolation"} { // MariaDB ≥ 11.1, older
		if b.admin.QueryRowContext(ctx, "SELECT "+v).Scan(&isolation) == nil {
			break
		}
	}
	b.dbPid = localPid(pidFile)
	b.printf("MariaDB: %s at %s, max_connections %d, isolation %s, CPU measured: %v\n",
		version, o.MariaDB, maxConns, isolation, b.dbPid != 0)
	for _, q := range []string{
		fmt.Sprintf("DROP DATABASE IF EXISTS `%s`", o.Database),
		fmt.Sprintf("CREATE DATABASE `%s`", o.Database),
		fmt.Sprintf("CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%[1]s'", o.PoolUser),
		fmt.Sprintf("ALTER USER '%s'@'%%' IDENTIFIED BY '%[1]s'", o.PoolUser),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", o.Database, o.PoolUser),
	} {
		if err := execTimeout(ctx, b.admin, time.Minute, q); err != nil {
			return err
		}
	}
	b.printf("database: %s dropped and created afresh; holdfast's pool logs in as %s\n", o.Database, o.PoolUser)
	cfg.DBName = o.Database
	if b.db, err = sql.Open("mysql", cfg.FormatDSN()); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b.db.SetMaxOpenConns(4)
	for _, q := range reserveSchema {
		if err := execTimeout(ctx, b.db, time.Minute, q); err != nil {
			return err
		}
	}

	if b.dir, b.bin, err = buildInScratch(ctx, o.Go, o.Repo, "holdfast-bench-reserve-", b.printf); err != nil {
		return err
	}

	if b.relay, err = netrelay.Start("127.0.0.1:0", o.MariaDB, o.RelayDelay); err != nil {
		return err
	}
	b.printf("relay: %s → %s, %v added each way (netrelay.Relay, in this process)\n", b.relay.Addr(), o.MariaDB, o.RelayDelay)
	if err := b.calibrate(ctx); err != nil {
		return err
	}

	hc := HoldfastConfig{
		Users:    []string{reserveUser},
		Backend:  Endpoint{Addr: b.relay.Addr().String(), User: o.PoolUser, Password: o.PoolUser},
		Database: o.Database,
	}
	if err := hc.freeListen(); err != nil {
		return err
	}
	addr := hc.Listen
	migrateCfg := filepath.Join(b.dir, "holdfast-migrate.yaml")
	if err := hc.proc().Write(migrateCfg, yamlHeader); err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	out, err := holdfastproc.New(holdfastproc.Options{Bin: b.bin, Config: migrateCfg, Unset: []string{"GOMAXPROCS"}, Env: hc.TablesEnv()}).Migrate(ctx)
	b.printf("migrate: %s migrate -config %s: %s\n", b.bin, migrateCfg, strings.TrimSpace(out))
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if b.hf, err = b.startTarget(ctx, b.bin, "holdfast-reserve", "holdfast (backend = the relay)", hc); err != nil {
		return err
	}
	if slices.Contains(o.Workloads, WorkloadShadow) {
		if err := b.setupShadow(ctx, hc); err != nil {
			return err
		}
	}
	if o.Variant() != "" {
		vc := hc
		vc.Settings = o.Settings
		if err := vc.freeListen(); err != nil {
			return err
		}
		bin := b.bin
		if o.ERepo != "" {
			bin = filepath.Join(b.dir, "holdfast-e")
			line, err := holdfastproc.Build{Go: o.Go, Repo: o.ERepo, Out: bin}.Run(ctx)
			b.printf("build (workload e): %s\n", line)
			if err != nil {
				return err
			}
		}
		if b.variant, err = b.startTarget(ctx, bin, "holdfast-e", "holdfast of workload e ("+o.Variant()+")", vc); err != nil {
			return err
		}
	}

	k := PoolKey{Shop: 1, Item: o.Item, Location: o.Location}
	b.printf("load generator: rawmysql.Conn connections (raw text protocol, in this process) as %s to holdfast %s, database %s;\n"+
		"  each client sends one operation after another for %v; a run's rate is reservations / (start → last answer)\n",
		reserveUser, addr, o.Database, o.Time)
	b.printf("workloads (one hot row / pool; %d units at the start of every run):\n", o.OnHand)
	b.printf("  (a) BEGIN; %s; %s; COMMIT\n", sqlTakeCounter, fmt.Sprintf(sqlInsertBaseline, "<run>-<client>-<seq>", o.Item, o.TTL))
	b.printf("  (b) %s   (autocommit; no reservation record)\n", sqlTakeCounter)
	b.printf("  (c) %s\n      (a fresh shop_id per run, stocked with CALL holdfast.receive(<shop>, %d, %d, %d))\n",
		ReserveCall(k.Shop, o.Item, o.Location, "<run>-<client>-<seq>", o.TTL), o.Item, o.Location, o.OnHand)
	if b.variant != nil {
		b.printf("  (e) the same CALL through the holdfast %s (a fresh shop per run)\n", o.Variant())
	}
	if b.shadow != nil {
		b.printf("  (d) the same CALL through the second holdfast (authority redis: a Lua script on Redis decides, the engine\n" +
			"      runs the same reserve in shadow; a fresh shop per run, stocked through that holdfast)\n")
	}
	b.printf("rounds: %d × clients %v × workloads %v (rotated each round), %v each, %v pause: about %v\n",
		o.Rounds, o.Clients, o.Workloads, o.Time, o.Pause,
		(time.Duration(o.Rounds*len(o.Clients)*len(o.Workloads)) * (o.Time + o.Pause + 2*time.Second)).Round(time.Second))
	return nil
}

// calibrate measures what the relay really adds: SELECT 1 round trips
// directly and through the relay, one connection each, alternating.
func (b *reserveRunner) calibrate(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rtts [2][]time.Duration
	var cs [2]*rawmysql.Conn
	for i, addr := range []string{b.o.MariaDB, b.relay.Addr().String()} {
		c, err := dial(cctx, addr, b.o.PoolUser, b.o.PoolUser, b.o.Database)
		if err != nil {
			return fmt.Errorf("bench: relay calibration: %w", err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		cs[i] = c
	}
	st0 := b.relay.Stats()
	for range 200 {
		for i, c := range cs {
			t0 := time.Now()
			if _, err := c.Query("SELECT 1"); err != nil {
				return fmt.Errorf("bench: relay calibration: %w", err)
			}
			rtts[i] = append(rtts[i], time.Since(t0))
		}
	}
	st := b.relay.Stats()
	for i := range rtts {
		slices.Sort(rtts[i])
	}
	direct, relayed := percentile(rtts[0], 0.5), percentile(rtts[1], 0.5)
	late := time.Duration(0)
	if n := st.Chunks - st0.Chunks; n > 0 {
		late = (st.Late - st0.Late) / time.Duration(n)
	}
	b.printf("relay calibration (200 sequential SELECT 1, otherwise idle process): median round trip direct %v, via relay %v:\n"+
		"  %v added per round trip, so %v one way (configured %v; the relay's own count: chunks written %v late on average)\n",
		roundDur(direct), roundDur(relayed), roundDur(relayed-direct), roundDur((relayed-direct)/2), b.o.RelayDelay, roundDur(late))
	return nil
}

// runOne makes one run of workload wl at n clients, from fresh state, and
// checks it.
func (b *reserveRunner) runOne(ctx context.Context, round int, wl string, n int) ReserveSample {
	o := b.o
	s := ReserveSample{Round: round, Workload: wl, Clients: n}
	runTag := fmt.Sprintf("r%d%s%d", round, wl, n)
	var op Op
	var k PoolKey
	// Every statement of the harness's own is bounded: a lock held by
	// something else must not hang the bench.
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	switch wl {
	case WorkloadTxn, WorkloadUpdate:
		if s.Err = ResetCounter(rctx, b.db, o.OnHand); s.Err != nil {
			return s
		}
		op = UpdateOp()
		if wl == WorkloadTxn {
			op = TxnOp(runTag, o.Item, o.TTL)
		}
	case WorkloadCall, WorkloadShadow, WorkloadVariant:
		b.shop++
		k = PoolKey{Shop: b.shop, Item: o.Item, Location: o.Location}
		if s.Err = b.receive(rctx, b.target(wl).ep, k, o.OnHand); s.Err != nil {
			return s
		}
		op = CallOp(runTag, k, o.TTL)
	}
	t := b.target(wl)
	ep, metricsURL, hf := t.ep, t.metrics, t.h

	m0, merr := b.scrape(ctx, metricsURL)
	st0, sterr := b.serverStatus(rctx)
	var hf0, hf1, db0, db1, self0, self1 time.Duration
	var rs0, rs1 netrelay.Stats
	res, err := RunLoad(ctx, LoadSpec{Endpoint: ep, Database: o.Database, Clients: n, Duration: o.Time, Op: op,
		Started: func() {
			rs0, db0, self0 = b.relay.Stats(), b.dbCPU(), SelfCPU()
			hf0, _ = ProcCPU(hf.Pid())
		},
		Finished: func() {
			rs1, db1, self1 = b.relay.Stats(), b.dbCPU(), SelfCPU()
			hf1, _ = ProcCPU(hf.Pid())
		},
	})
	s.Load, s.LoadAvg = res, loadAvg()
	s.HoldfastCPU, s.MariaDBCPU, s.SelfCPU = hf1-hf0, db1-db0, self1-self0
	s.RelayChunks, s.RelayLate = rs1.Chunks-rs0.Chunks, rs1.Late-rs0.Late
	// After the run, on a context of its own: a cancelled bench still
	// reports and checks what it measured.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	if merr == nil {
		if m1, err := b.scrape(cctx, metricsURL); err == nil {
			s.Metrics = metricsDigest(m0, m1, wl != WorkloadTxn && wl != WorkloadUpdate)
			if wl == WorkloadShadow {
				s.Metrics += shadowDigest(m0, m1)
			}
		}
	}
	if sterr == nil {
		if st1, err := b.serverStatus(cctx); err == nil {
			d := func(name string) int64 { return st1[name] - st0[name] }
			s.Deadlocks, s.LockWaits = d("Innodb_deadlocks"), d("Innodb_row_lock_waits")
			s.Statements, s.Commits, s.Fsyncs = d("Questions"), d("Com_commit"), d("Innodb_data_fsyncs")
		}
	}
	switch {
	case err != nil:
		s.Err = err
	case res.Broken > 0:
		s.Err = fmt.Errorf("%d connection(s) broke: %s", res.Broken, res.FirstErr)
	case res.Failed > 0:
		s.Err = fmt.Errorf("%d operation(s) failed: %s", res.Failed, res.FirstErr)
	}
	if err != nil && res.Wall == 0 {
		return s
	}

	switch wl {
	case WorkloadTxn, WorkloadUpdate:
		c, err := CheckCounter(cctx, b.db)
		if err != nil {
			s.Err = errors.Join(s.Err, err)
			break
		}
		s.Problems, s.Checked = c.Problems(o.OnHand, res.Reserved, wl == WorkloadTxn), true
		s.CheckNote = fmt.Sprintf("counter %d → %d (fell by %d; clients counted %d)", o.OnHand, c.Available, o.OnHand-c.Available, res.Reserved)
		if wl == WorkloadTxn {
			s.CheckNote += fmt.Sprintf(", %d reservations_baseline rows", c.BaselineRows)
		}
	case WorkloadCall, WorkloadShadow, WorkloadVariant:
		c, err := CheckPool(cctx, b.db, k, res.IDs)
		if err != nil {
			s.Err = errors.Join(s.Err, err)
			break
		}
		s.Problems, s.Checked = c.Problems(o.OnHand, res.Reserved), true
		s.CheckNote = fmt.Sprintf("%d reserved_quantities rows (quantity %d), %d reservations, %d tokens to clients (%d unmatched); pool %d + reserved %d ≤ on_hand %d",
			c.Lines, c.Reserved, c.Reservations, len(res.IDs), c.Missing+c.Extra, c.Pooled, c.Reserved, c.OnHand)
		if len(s.Problems) == 0 {
			// Keep the tables the same size from run to run.
			if err := DropShop(cctx, b.db, k); err != nil {
				s.Err = errors.Join(s.Err, err)
			}
		}
	}
	return s
}

// execTimeout runs q on db, giving up after d.
func execTimeout(ctx context.Context, db *sql.DB, d time.Duration, q string) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if _, err := db.ExecContext(ctx, q); err != nil {
		return fmt.Errorf("bench: %s: %w", q, err)
	}
	return nil
}

// receive stocks pool k with qty units through the holdfast at ep.
func (b *reserveRunner) receive(ctx context.Context, ep Endpoint, k PoolKey, qty int64) error {
	c, err := ep.Dial(ctx, b.o.Database)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var onHand string
	q := fmt.Sprintf("CALL holdfast.receive(%d, %d, %d, %d)", k.Shop, k.Item, k.Location, qty)
	if _, err := c.Exec(q, func(cols [][]byte) error {
		if len(cols) < 3 {
			return fmt.Errorf("bench: receive answered %d columns", len(cols))
		}
		onHand = string(cols[2])
		return nil
	}); err != nil {
		return fmt.Errorf("bench: %s: %w", q, err)
	}
	if onHand != strconv.FormatInt(qty, 10) {
		return fmt.Errorf("bench: %s: on_hand is now %q, want %d (a fresh shop)", q, onHand, qty)
	}
	return nil
}

// serverCounters are the server-wide status counters a run reports the
// change of, by SHOW GLOBAL STATUS name.
var serverCounters = []string{"Innodb_deadlocks", "Innodb_row_lock_waits", "Questions", "Com_commit", "Innodb_data_fsyncs"}

// serverStatus reads serverCounters.
func (b *reserveRunner) serverStatus(ctx context.Context) (map[string]int64, error) {
	rows, err := b.admin.QueryContext(ctx,
		"SHOW GLOBAL STATUS WHERE Variable_name IN ('"+strings.Join(serverCounters, "', '")+"')")
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer rows.Close()
	out := make(map[string]int64, len(serverCounters))
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		out[name] = v
	}
	return out, rows.Err()
}

// scrape reads holdfast's /metrics.
func (b *reserveRunner) scrape(ctx context.Context, url string) (m map[string]float64, err error) {
	err = httpGet(ctx, url, 5*time.Second, func(r io.Reader) (err error) {
		m, err = parseMetrics(r)
		return err
	})
	return m, err
}

// httpGet GETs url, bounded by timeout (and ctx), and hands the body of a
// 200 answer to read.
func httpGet(ctx context.Context, url string, timeout time.Duration, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("bench: GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("bench: GET %s: %s", url, resp.Status)
	}
	if err := read(resp.Body); err != nil {
		return fmt.Errorf("bench: GET %s: %w", url, err)
	}
	return nil
}

func (b *reserveRunner) dbCPU() time.Duration {
	if b.dbPid == 0 {
		return 0
	}
	d, _ := ProcCPU(b.dbPid)
	return d
}

// localPid reads the pid of a MariaDB running on this machine from its pid
// file; 0 when it cannot be read or names no mariadbd/mysqld process.
func localPid(pidFile string) int {
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if name := strings.TrimSpace(string(comm)); err != nil || (name != "mariadbd" && name != "mysqld") {
		return 0
	}
	return pid
}

// cleanup stops everything; the scratch directory is kept with -keep and
// when the bench failed (holdfast's log is in it).
func (b *reserveRunner) cleanup(failed bool) {
	for _, t := range []*reserveTarget{b.hf, b.shadow, b.variant} {
		if t == nil {
			continue
		}
		if err := t.h.Stop(); err != nil {
			b.printf("%s (pid %d) stopped uncleanly: %v\n", t.label, t.h.Pid(), err)
		}
		if log := strings.TrimSpace(readFile(t.h.LogPath)); log != "" {
			b.printf("%s's log (%s), last lines:\n%s\n", t.label, t.h.LogPath, tail(log, 20))
		}
	}
	if b.redis != nil {
		_ = b.redis.Process.Kill()
		_ = b.redis.Wait()
	}
	if b.relay != nil {
		b.relay.Close()
	}
	for _, db := range []*sql.DB{b.db, b.admin} {
		if db != nil {
			db.Close()
		}
	}
	if b.dir != "" {
		if b.o.Keep || failed {
			b.printf("scratch directory kept: %s\n", b.dir)
		} else {
			os.RemoveAll(b.dir)
		}
	}
}
