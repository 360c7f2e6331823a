package bench

import (
	"github.com/holdfast-db/holdfast/internal/holdfastproc"

	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
)

// Options configures Run. DefaultOptions gives the values `make bench-proxy`
// uses; the zero value is not usable.
type Options struct {
	// Mode is the comparison Run makes: ModeProxy (`make bench-proxy`) or
	// ModeAttribution (`make bench-attribution`).
	Mode string

	Repo     string // holdfast's repository root, where ./cmd/holdfast is built
	Go       string // the go command
	Sysbench string // the sysbench executable

	MariaDB       string // host:port of the MariaDB under test
	AdminUser     string // MariaDB account that may create users and databases and SET GLOBAL
	AdminPassword string
	Database      string // holds the sysbench tables; kept between runs
	// BenchUser is the MariaDB account sysbench logs in as, directly and
	// through the relay; holdfast's pool logs in as BenchUser+"_pool", so
	// MariaDB's process list tells its connections apart. Password = name.
	BenchUser string

	Rounds    int
	Time      time.Duration // per sysbench run
	Tables    int
	TableSize int
	// Settings, when any, run one more holdfast with them ("pool.max=8",
	// see HoldfastConfig.Settings) as the extra target holdfast+set, shown
	// beside the others and never judged: the targets are judged on the
	// shipped defaults.
	Settings []string
	// BackendTLS, when set, is a backend.tls.mode (ModeProxy): each round
	// runs every workload against one more target, TargetHoldfastTLS, a
	// holdfast on its defaults but for TLS to the backend (with
	// BackendTLSCA as backend.tls.ca_file). MariaDB must offer TLS. Shown,
	// not judged.
	BackendTLS   string
	BackendTLSCA string
	// BaselineRepo, when set, is another checkout of holdfast (an earlier
	// commit, say): its holdfast is built too and runs every workload as
	// the extra target TargetBaseline, on its own defaults, so that a
	// change is compared with the code before it in the same run. Shown,
	// not judged.
	BaselineRepo string

	// The connection-scale run and SkipSysbench, SkipScale: ModeProxy only.

	ScaleConns int
	// ScaleBackendMax is the most backend connections the scale run may
	// use (the target; holdfast's pool.max must not exceed it).
	ScaleBackendMax int
	ScaleTime       time.Duration
	ScaleInterval   time.Duration
	RSSTarget       int64         // bytes
	ScaleP99        time.Duration // target p99 statement latency

	// Workloads are the sysbench workloads of ModeProxy; DefaultOptions
	// gives every one in the package's Workloads (the targets).
	Workloads []Workload

	// LatencyRounds of LatencyPerRound statements per target: the
	// point_select@1 comparison (RunLatency), after the sysbench runs.
	LatencyRounds   int
	LatencyPerRound int

	SkipSysbench bool
	SkipScale    bool
	SkipSyscalls bool // the perf stat runs (system calls per query)
	// Profile is when to profile holdfast in one extra, uncounted run of
	// the first missed workload (the first workload when none missed):
	// "on-miss" (a throughput target missed), "always" or "never".
	// ModeAttribution profiles the attribution-on process, with perf, in a
	// run of the first workload that missed.
	Profile string
	// CPUProfile is where the profile is written; empty means a file in
	// the scratch directory (only its summary is printed).
	CPUProfile string
	Keep       bool // keep the scratch directory (configs, logs, binary)
}

// DefaultOptions returns the defaults of `make bench-proxy`.
func DefaultOptions() Options {
	return Options{
		Mode: ModeProxy,
		Repo: ".", Go: "go", Sysbench: "sysbench",
		MariaDB: "127.0.0.1:3306", AdminUser: "root",
		Database: "holdfast_bench", BenchUser: "holdfast_bench",
		Rounds: 5, Time: 10 * time.Second, Tables: 4, TableSize: 10000,
		ScaleConns: 5000, ScaleBackendMax: 32, ScaleTime: 30 * time.Second, ScaleInterval: time.Second,
		RSSTarget: 80 << 20, ScaleP99: 2 * time.Millisecond,
		LatencyRounds: 5, LatencyPerRound: 5000,
		Profile:   "on-miss",
		Workloads: slices.Clone(Workloads),
	}
}

// SelectWorkloads returns the workloads of Workloads named in names
// ("point_select@16,read_write@16"); an empty list selects all of them.
func SelectWorkloads(names string) ([]Workload, error) {
	if strings.TrimSpace(names) == "" {
		return slices.Clone(Workloads), nil
	}
	var out []Workload
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		i := slices.IndexFunc(Workloads, func(w Workload) bool { return w.String() == n })
		if i < 0 {
			known := make([]string, len(Workloads))
			for j, w := range Workloads {
				known[j] = w.String()
			}
			return nil, fmt.Errorf("bench: unknown workload %q (known: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, Workloads[i])
	}
	return out, nil
}

// The comparisons Run can make (Options.Mode).
const (
	// ModeProxy: sysbench direct / through a TCP relay / through holdfast,
	// then the connection-scale run.
	ModeProxy = "proxy"
	// ModeAttribution: sysbench through holdfast with per-tag accounting
	// on and off; see attribution.go.
	ModeAttribution = "attribution"
)

// Workloads are the sysbench workloads and their targets
// (holdfast tps relative to the TCP relay).
var Workloads = []Workload{
	{Test: "oltp_point_select", Threads: 16, Target: 1.2},
	{Test: "oltp_point_select", Threads: 256, Target: 1.5},
	{Test: "oltp_read_write", Threads: 16, Target: 1.15},
}

// holdfastUser is the account sysbench logs in to holdfast as (password
// the same).
const holdfastUser = "sbtest"

// Run runs the whole benchmark and writes its report to w. It returns an
// error when a run failed or could not start; missed targets are reported,
// not returned. Everything it starts is stopped before it returns.
func Run(ctx context.Context, o Options, w io.Writer) error {
	if err := o.validate(); err != nil {
		return err
	}
	b := &runner{o: o, w: w}
	defer b.cleanup()
	b.header(ctx)
	if o.Mode == ModeReplica {
		return b.runReplica(ctx) // on servers of its own
	}
	if err := b.setup(ctx); err != nil {
		return err
	}
	if o.Mode == ModeAttribution {
		return b.runAttribution(ctx)
	}
	if o.Mode == ModeOverload {
		return b.runOverload(ctx)
	}
	var failed []string
	var lat *LatencyReport
	var sys []SyscallSample
	var sums []Summary
	var verdicts []Verdict
	if !o.SkipSysbench {
		samples, err := b.sysbenchPhase(ctx)
		if err != nil {
			return err
		}
		sums = Summarize(samples, o.Workloads, o.targets())
		verdicts = Verdicts(sums, o.Workloads)
		for _, s := range samples {
			if s.Err != nil {
				failed = append(failed, fmt.Sprintf("round %d %s %s: %v", s.Round, s.Workload, s.Target, s.Err))
			}
		}
		b.printf("\n== sysbench results: medians of %d rounds ==\n", o.Rounds)
		PrintSummaries(w, sums)
		for _, v := range verdicts {
			b.printf("%s\n", v)
		}
		b.printExtraRatios(sums)
		if lat, err = b.latencyPhase(ctx); err != nil {
			failed = append(failed, "point_select@1: "+err.Error())
		}
		if !o.SkipSyscalls {
			sys = b.syscallPhase(ctx)
		}
		b.maybeProfile(ctx, verdicts)
		b.stopHoldfast()
	}
	var scale *ScaleReport
	if !o.SkipScale {
		var err error
		if scale, err = b.scalePhase(ctx); err != nil {
			failed = append(failed, "scale run: "+err.Error())
		}
	}

	b.printf("\n== summary (load average now %s) ==\n", loadAvg())
	if sums != nil {
		PrintSummaries(w, sums)
		for _, v := range verdicts {
			b.printf("%s\n", v)
		}
		b.printExtraRatios(sums)
	}
	if lat != nil {
		lat.Print(w)
	}
	if sys != nil {
		printSyscalls(w, sys)
	}
	if scale != nil {
		b.printf("connection scale: %d clients through holdfast (pool.max %d), one statement each per %v for %v:\n",
			o.ScaleConns, scale.PoolMax, o.ScaleInterval, o.ScaleTime)
		scale.Print(w)
	}
	return b.outcome(ctx, failed)
}

// latencyPhase runs point_select@1 on every target, a Go client taking
// turns between them (RunLatency).
func (b *runner) latencyPhase(ctx context.Context) (*LatencyReport, error) {
	o := b.o
	var eps []Endpoint
	for _, t := range o.targets() {
		eps = append(eps, b.endpoint(t))
	}
	b.printf("\n== point_select@1: one Go client, %d rounds of %d statements per target, taking turns (%s) ==\n",
		o.LatencyRounds, o.LatencyPerRound, strings.Join(o.targets(), ", "))
	rep, err := RunLatency(ctx, LatencyOptions{Endpoints: eps, Database: o.Database, Rounds: o.LatencyRounds,
		PerRound: o.LatencyPerRound, Warmup: 500, Query: PointSelect(o.TableSize)})
	if rep != nil && len(rep.Rounds) > 0 {
		rep.Print(b.w)
	}
	return rep, err
}

// printExtraRatios prints each extra target against the relay and the
// holdfast on the shipped defaults; they are never verdicts.
func (b *runner) printExtraRatios(sums []Summary) {
	tps := func(w Workload, t string) float64 { return summaryTPS(sums, w, t) }
	for _, x := range b.o.extras() {
		what := strings.Join(x.settings, " ")
		if x.baseline {
			what = "built from " + b.o.BaselineRepo
		}
		for _, w := range b.o.Workloads {
			v := tps(w, x.name)
			b.printf("extra %-16s %s/relay %s   %s/holdfast %s   (%s; not judged)\n", w,
				x.name, fmtRatio(ratio(v, tps(w, TargetRelay))), x.name, fmtRatio(ratio(v, tps(w, TargetHoldfast))), what)
		}
	}
}

// outcome ends a Run: ctx's error if it was cancelled, else an error
// counting the failed runs (listed first), else nil.
func (b *runner) outcome(ctx context.Context, failed []string) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if len(failed) > 0 {
		b.printf("\n%d run(s) failed:\n  %s\n", len(failed), strings.Join(failed, "\n  "))
		return fmt.Errorf("bench: %d run(s) failed", len(failed))
	}
	return nil
}

func (o Options) validate() error {
	switch o.Mode {
	case ModeProxy, ModeAttribution, ModeOverload, ModeReplica:
	default:
		return fmt.Errorf("bench: mode must be %s, %s, %s or %s, got %q", ModeProxy, ModeAttribution, ModeOverload, ModeReplica, o.Mode)
	}
	switch {
	case o.Rounds < 1:
		return errors.New("bench: rounds must be at least 1")
	case o.Time < time.Second:
		return errors.New("bench: time must be at least 1s")
	case o.Tables < 1 || o.TableSize < 1:
		return errors.New("bench: tables and table-size must be positive")
	case o.Mode == ModeProxy && !o.SkipSysbench && len(o.Workloads) == 0:
		return errors.New("bench: no workloads")
	case o.LatencyRounds < 1 || o.LatencyPerRound < 1:
		return errors.New("bench: latency-rounds and latency-per-round must be positive")
	case o.ScaleBackendMax < 1:
		return errors.New("bench: scale-backend-max must be positive")
	case o.ScaleConns < 1 || o.ScaleTime <= 0 || o.ScaleInterval <= 0:
		return errors.New("bench: scale-conns, scale-time and scale-interval must be positive")
	}
	for _, st := range o.Settings {
		if _, _, err := holdfastproc.ParseSetting(st); err != nil {
			return err
		}
	}
	if o.Mode == ModeOverload && len(o.Settings) > 0 {
		return errors.New("bench: -set is not for mode overload: its phases run the shipped defaults, and phase 3 adds only the classes")
	}
	switch o.BackendTLS {
	case "":
	case config.TLSPreferred, config.TLSRequired, config.TLSVerifyCA, config.TLSVerifyIdentity:
		if o.Mode != ModeProxy {
			return errors.New("bench: -backend-tls is for mode proxy")
		}
	default:
		return fmt.Errorf("bench: -backend-tls must be preferred, required, verify_ca or verify_identity, got %q", o.BackendTLS)
	}
	if o.BaselineRepo != "" {
		if o.Mode != ModeProxy {
			return errors.New("bench: -baseline-repo is for mode proxy")
		}
		if _, err := os.Stat(filepath.Join(o.BaselineRepo, "cmd", "holdfast")); err != nil {
			return fmt.Errorf("bench: -baseline-repo %s is not a holdfast checkout: %w", o.BaselineRepo, err)
		}
	}
	for _, x := range o.extras() {
		hc := o.holdfastConfig("127.0.0.1:1", x.poolUser)
		hc.Settings = x.settings
		if _, err := hc.Effective(); err != nil {
			return fmt.Errorf("bench: %s: %w", x.name, err)
		}
	}
	switch o.Profile {
	case "on-miss", "always", "never":
	default:
		return fmt.Errorf("bench: profile must be on-miss, always or never, got %q", o.Profile)
	}
	return nil
}

// poolUser is the MariaDB account holdfast's pool logs in as; each extra
// target has its own (extraTarget.poolUser), so each one's connections
// are counted apart.
func (o Options) poolUser() string { return o.BenchUser + "_pool" }

// extraTarget is a holdfast run beside the one on the shipped defaults,
// with settings changed, shown and never judged.
type extraTarget struct {
	name     string
	settings []string
	poolUser string
	baseline bool // built from Options.BaselineRepo
}

// extras are the extra targets the options ask for.
func (o Options) extras() []extraTarget {
	var out []extraTarget
	if len(o.Settings) > 0 {
		out = append(out, extraTarget{TargetSet, o.Settings, o.BenchUser + "_poolset", false})
	}
	if o.BackendTLS != "" {
		set := []string{"backend.tls.mode=" + o.BackendTLS}
		if o.BackendTLSCA != "" {
			set = append(set, fmt.Sprintf("backend.tls.ca_file=%q", o.BackendTLSCA))
		}
		out = append(out, extraTarget{TargetHoldfastTLS, set, o.BenchUser + "_pooltls", false})
	}
	if o.BaselineRepo != "" {
		out = append(out, extraTarget{TargetBaseline, nil, o.BenchUser + "_poolbase", true})
	}
	return out
}

// targets are the targets of each round, in order.
func (o Options) targets() []string {
	t := slices.Clone(Targets)
	for _, x := range o.extras() {
		t = append(t, x.name)
	}
	return t
}

// runner holds what one Run has started, so cleanup can stop it.
type runner struct {
	o       Options
	w       io.Writer
	dir     string // scratch: holdfast binary, configs, logs
	bin     string
	baseBin string // holdfast built from Options.BaselineRepo
	admin   *sql.DB
	relay   *RelayProc
	hf      *Holdfast
	direct  Endpoint
	viaHF   Endpoint
	sysb    Sysbench
	started time.Time
	load0   string // load average when the run started

	// ModeAttribution's targets: the holdfast serving each, and where
	// sysbench connects for it. Nil in ModeProxy, which uses hf and viaHF.
	hfs       map[string]*Holdfast
	eps       map[string]Endpoint
	attrProcs []attrProc

	// restoreMaxConns is the server's max_connections before setup raised
	// it (0: not raised), set back by cleanup.
	restoreMaxConns int
}

func (b *runner) printf(format string, a ...any) { fmt.Fprintf(b.w, format, a...) }

func (b *runner) header(ctx context.Context) {
	b.started, b.load0 = time.Now(), loadAvg()
	b.printf("== holdfast bench-%s, %s ==\n", b.o.Mode, b.started.Format(time.RFC3339))
	b.printf("command: %s\n", strings.Join(os.Args, " "))
	b.printf("machine: nproc %d, load average %s, %s\n", runtime.NumCPU(), b.load0, runtime.Version())
	if out, err := exec.CommandContext(ctx, b.o.Sysbench, "--version").Output(); err == nil {
		b.printf("sysbench: %s\n", strings.TrimSpace(string(out)))
	}
}

func (b *runner) setup(ctx context.Context) error {
	o := b.o
	lim, err := RaiseNoFile(uint64(2*o.ScaleConns + 1024))
	if err != nil {
		return err
	}
	b.printf("RLIMIT_NOFILE: %d (inherited by holdfast)\n", lim)

	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr = o.AdminUser, o.AdminPassword, "tcp", o.MariaDB
	b.admin, err = sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	b.admin.SetMaxOpenConns(2)
	var version string
	var maxConns int
	if err := b.admin.QueryRowContext(ctx, "SELECT VERSION(), @@max_connections").Scan(&version, &maxConns); err != nil {
		return fmt.Errorf("bench: MariaDB at %s: %w", o.MariaDB, err)
	}
	b.printf("MariaDB: %s at %s, max_connections %d\n", version, o.MariaDB, maxConns)
	stmts := []string{fmt.Sprintf("CREATE DATABASE IF NOT EXISTS `%s`", o.Database)}
	users := []string{o.BenchUser, o.poolUser()}
	for _, x := range o.extras() {
		users = append(users, x.poolUser)
	}
	for _, u := range users {
		stmts = append(stmts,
			fmt.Sprintf("CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%[1]s'", u),
			fmt.Sprintf("ALTER USER '%s'@'%%' IDENTIFIED BY '%[1]s'", u),
			fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", o.Database, u))
	}
	want := 2000 // 256 sysbench threads straight to MariaDB exceed its default 151
	if !o.SkipScale {
		want = max(want, o.ScaleConns+200) // the scale run's direct baseline
	}
	if maxConns < want && o.Mode == ModeProxy {
		// Set back when the run ends (cleanup): the server may be the
		// machine's own, which the bench leaves as it found it.
		stmts = append(stmts, fmt.Sprintf("SET GLOBAL max_connections = %d", want))
	}
	for _, q := range stmts {
		if _, err := b.admin.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: %s: %w", q, err)
		}
		if strings.HasPrefix(q, "SET GLOBAL") {
			b.restoreMaxConns = maxConns
			b.printf("ran: %s (was %d; set back when the run ends)\n", q, maxConns)
		}
	}

	if b.dir, b.bin, err = buildInScratch(ctx, o.Go, o.Repo, "holdfast-bench-", b.printf); err != nil {
		return err
	}
	if o.BaselineRepo != "" {
		b.baseBin = filepath.Join(b.dir, "holdfast-base")
		line, err := holdfastproc.Build{Go: o.Go, Repo: o.BaselineRepo, Out: b.baseBin}.Run(ctx)
		b.printf("build (%s): %s\n", TargetBaseline, line)
		if err != nil {
			return err
		}
	}

	b.direct = Endpoint{Name: TargetDirect, Addr: o.MariaDB, User: o.BenchUser, Password: o.BenchUser}
	b.sysb = Sysbench{Path: o.Sysbench, Database: o.Database, Tables: o.Tables, TableSize: o.TableSize}
	return b.prepareTables(ctx)
}

// prepareTables reuses sysbench tables of the right size, or recreates them.
func (b *runner) prepareTables(ctx context.Context) error {
	ok := true
	for i := 1; i <= b.o.Tables && ok; i++ {
		var n int
		q := fmt.Sprintf("SELECT COUNT(*) FROM `%s`.sbtest%d", b.o.Database, i)
		ok = b.admin.QueryRowContext(ctx, q).Scan(&n) == nil && n == b.o.TableSize
	}
	if ok {
		b.printf("tables: reusing %d × %d rows in %s\n", b.o.Tables, b.o.TableSize, b.o.Database)
		return nil
	}
	for _, cmd := range []string{"cleanup", "prepare"} {
		args := b.sysb.Args("oltp_read_write", b.direct, cmd)
		b.printf("tables: %s\n", b.sysb.CommandLine(args))
		start := time.Now()
		if _, _, err := b.sysb.Exec(ctx, args); err != nil {
			return err
		}
		if cmd == "prepare" {
			b.printf("tables: prepared in %v\n", time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}

// holdfastConfig is the configuration of the holdfasts the bench starts:
// sysbench's user, the pool's backend account and database; everything
// else holdfast's defaults.
func (o Options) holdfastConfig(listen, poolUser string) HoldfastConfig {
	return HoldfastConfig{
		Listen:   listen,
		Users:    []string{holdfastUser},
		Backend:  Endpoint{Addr: o.MariaDB, User: poolUser, Password: poolUser},
		Database: o.Database,
	}
}

// startHoldfast starts the holdfast of TargetHoldfast on the defaults.
func (b *runner) startHoldfast(ctx context.Context, name string, extra ...string) (*Holdfast, error) {
	// The admin listener on, as config.yaml ships it (on a free port):
	// its sampler and /metrics are part of what a user runs.
	hc := b.o.holdfastConfig("", b.o.poolUser())
	if err := hc.freeListen(); err != nil {
		return nil, err
	}
	addr := hc.Listen
	h, err := StartHoldfast(ctx, b.bin, b.dir, name, hc, extra...)
	if err != nil {
		return nil, err
	}
	b.hf = h
	b.viaHF = Endpoint{Name: TargetHoldfast, Addr: addr, User: holdfastUser, Password: holdfastUser}
	b.printf("holdfast: %s (pid %d; %s; %s; log %s)\n", h.Cmdline, h.Pid(), hc.Describe(), h.Chosen(), h.LogPath)
	return h, nil
}

// startExtraHoldfasts starts the holdfast of each extra target. They are
// stopped with the attribution processes.
func (b *runner) startExtraHoldfasts(ctx context.Context) error {
	for _, x := range b.o.extras() {
		hc := b.o.holdfastConfig("", x.poolUser)
		if err := hc.freeListen(); err != nil {
			return err
		}
		addr := hc.Listen
		hc.Settings = x.settings
		bin, describe := b.bin, hc.Describe()
		if x.baseline {
			bin, describe = b.baseBin, "built from "+b.o.BaselineRepo+", on its own defaults"
		}
		h, err := StartHoldfast(ctx, bin, b.dir, "holdfast-"+strings.ReplaceAll(x.name, "+", "-"), hc)
		if err != nil {
			return err
		}
		if b.hfs == nil {
			b.hfs, b.eps = map[string]*Holdfast{}, map[string]Endpoint{}
		}
		b.hfs[x.name] = h
		b.eps[x.name] = Endpoint{Name: x.name, Addr: addr, User: holdfastUser, Password: holdfastUser}
		b.attrProcs = append(b.attrProcs, attrProc{name: x.name, h: h})
		b.printf("%s: %s (pid %d; %s; %s; log %s) — an extra column, not judged\n",
			x.name, h.Cmdline, h.Pid(), describe, h.Chosen(), h.LogPath)
	}
	return nil
}

func (b *runner) stopHoldfast() {
	if b.hf == nil {
		return
	}
	if err := b.hf.Stop(); err != nil {
		b.printf("holdfast (pid %d) stopped uncleanly: %v\n", b.hf.Pid(), err)
	}
	b.hf = nil
}

func (b *runner) cleanup() {
	b.stopHoldfast()
	b.stopAttributionHoldfasts()
	if b.relay != nil {
		b.relay.Stop()
	}
	if b.admin != nil {
		if n := b.restoreMaxConns; n > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := b.admin.ExecContext(ctx, fmt.Sprintf("SET GLOBAL max_connections = %d", n)); err != nil {
				b.printf("could not set max_connections back to %d: %v\n", n, err)
			} else {
				b.printf("max_connections set back to %d\n", n)
			}
			cancel()
		}
		b.admin.Close()
	}
	if b.dir != "" {
		if b.o.Keep {
			b.printf("scratch directory kept: %s\n", b.dir)
		} else {
			os.RemoveAll(b.dir)
		}
	}
}

// endpoint returns where target is.
func (b *runner) endpoint(target string) Endpoint {
	if e, ok := b.eps[target]; ok {
		return e
	}
	switch target {
	case TargetRelay:
		return Endpoint{Name: TargetRelay, Addr: b.relay.Addr, User: b.o.BenchUser, Password: b.o.BenchUser}
	case TargetHoldfast:
		return b.viaHF
	}
	return b.direct
}

// roundOrder is the order in which round (counted from 1) runs targets:
// as given in odd rounds, reversed in even ones, so that over the rounds
// every target sits at every position alike and a steady drift in the
// machine's load weighs on each the same.
func roundOrder(targets []string, round int) []string {
	out := slices.Clone(targets)
	if round%2 == 0 {
		slices.Reverse(out)
	}
	return out
}

func (b *runner) sysbenchPhase(ctx context.Context) ([]Sample, error) {
	o := b.o
	var err error
	b.relay, err = StartRelayProc(ctx, o.MariaDB)
	if err != nil {
		return nil, err
	}
	b.printf("relay: %s (pid %d; %s → %s, io.Copy both ways: splice)\n", b.relay.Cmdline, b.relay.Pid(), b.relay.Addr, o.MariaDB)
	if _, err := b.startHoldfast(ctx, "holdfast-sysbench"); err != nil {
		return nil, err
	}
	if err := b.startExtraHoldfasts(ctx); err != nil {
		return nil, err
	}
	b.printf("commands (each round runs every workload against %s in turn, in the reverse order in even rounds):\n",
		strings.Join(o.targets(), ", "))
	for _, w := range o.Workloads {
		for _, t := range o.targets() {
			b.printf("  %s\n", b.sysb.CommandLine(b.sysb.RunArgs(w, b.endpoint(t), o.Time)))
		}
	}
	total := time.Duration(o.Rounds*len(o.Workloads)*len(o.targets())) * (o.Time + 2*time.Second)
	b.printf("%d rounds × %d runs of %v: about %v\n\n", o.Rounds, len(o.Workloads)*len(o.targets()), o.Time, total.Round(time.Minute))

	var samples []Sample
	for _, r := range o.sysbenchRuns() {
		if ctx.Err() != nil {
			return samples, ctx.Err()
		}
		s := b.runOne(ctx, r.round, r.w, r.target)
		samples = append(samples, s)
		b.printSample(s)
	}
	return samples, nil
}

// sysbenchRun is one sysbench run of the proxy comparison.
type sysbenchRun struct {
	round  int
	w      Workload
	target string
}

// sysbenchRuns lists the proxy comparison's runs in the order they run:
// round by round, each workload against every target. The targets' order
// reverses every other round (roundOrder), so that no target always runs
// after another: the machine's load drifts over a round, and an extra
// column that always ran last would carry that drift.
func (o Options) sysbenchRuns() []sysbenchRun {
	var out []sysbenchRun
	for round := 1; round <= o.Rounds; round++ {
		for _, w := range o.Workloads {
			for _, t := range roundOrder(o.targets(), round) {
				out = append(out, sysbenchRun{round, w, t})
			}
		}
	}
	return out
}

// holdfastOf is the holdfast process serving target; nil for direct and
// the relay.
func (b *runner) holdfastOf(target string) *Holdfast {
	if h, ok := b.hfs[target]; ok {
		return h
	}
	if target == TargetHoldfast {
		return b.hf
	}
	return nil
}

// runOne runs sysbench once, measuring the hop's CPU and, for holdfast,
// the backend connections it holds.
func (b *runner) runOne(ctx context.Context, round int, w Workload, target string) Sample {
	s := Sample{Round: round, Workload: w, Target: target, BackendConns: -1}
	hf := b.holdfastOf(target)
	if hf != nil && hf.Exited() {
		s.Err = fmt.Errorf("holdfast has exited; see %s", hf.LogPath)
		return s
	}
	hopCPU := func() time.Duration {
		switch {
		case target == TargetRelay:
			d, _ := ProcCPU(b.relay.Pid())
			return d
		case hf != nil:
			d, _ := ProcCPU(hf.Pid())
			return d
		}
		return 0
	}
	var stopSampler func() int
	if target == TargetHoldfast {
		stopSampler = b.sampleBackendConns(ctx, b.o.poolUser())
	}
	for _, x := range b.o.extras() {
		if target == x.name {
			stopSampler = b.sampleBackendConns(ctx, x.poolUser)
		}
	}
	args := b.sysb.RunArgs(w, b.endpoint(target), b.o.Time)
	rctx, cancel := context.WithTimeout(ctx, b.o.Time+2*time.Minute)
	defer cancel()
	cpu0, start := hopCPU(), time.Now()
	out, sbCPU, err := b.sysb.Exec(rctx, args)
	s.Wall, s.HopCPU, s.SysbenchCPU = time.Since(start), hopCPU()-cpu0, sbCPU
	if stopSampler != nil {
		s.BackendConns = stopSampler()
	}
	res, perr := ParseSysbench(out)
	s.Result = res
	if s.Err = err; s.Err == nil {
		s.Err = perr
	}
	return s
}

// printSample prints one run; round 0 is the uncounted profile run.
func (b *runner) printSample(s Sample) {
	label := fmt.Sprintf("round %d/%d", s.Round, b.o.Rounds)
	if strings.Contains(s.Target, pairSep) {
		label = fmt.Sprintf("pair %d", s.Round)
	}
	if s.Round == 0 {
		label = "profile run"
	}
	if s.Err != nil {
		b.printf("%s %-16s %-8s ERROR %v\n", label, s.Workload, s.Target, s.Err)
		return
	}
	r := s.Result
	line := fmt.Sprintf("%s %-16s %-8s tps %9.1f  qps %9.1f  p95 %7.2f ms  errors %d  reconnects %d  sysbench %.2f cores",
		label, s.Workload, s.Target, r.TPS, r.QPS, r.P95, r.Errors, r.Reconnects,
		s.SysbenchCPU.Seconds()/s.Wall.Seconds())
	if s.HopCPU > 0 {
		line += fmt.Sprintf("  hop %.2f cores", s.HopCPU.Seconds()/s.Wall.Seconds())
	}
	if s.BackendConns >= 0 {
		line += fmt.Sprintf("  backend conns ≤ %d", s.BackendConns)
	}
	if r.Errors > 0 || r.Reconnects > 0 {
		line += "  ! non-zero errors/reconnects"
	}
	b.printf("%s\n", line)
}

// sampleBackendConns counts the connections of user (a holdfast's pool
// account) in MariaDB's process list every 500 ms until the returned
// function is called, which returns the most seen (-1 if no sample
// succeeded).
func (b *runner) sampleBackendConns(ctx context.Context, user string) func() int {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	most := -1
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			var n int
			err := b.admin.QueryRowContext(ctx,
				"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", user).Scan(&n)
			if err == nil {
				most = max(most, n)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() int {
		cancel()
		wg.Wait()
		return most
	}
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
