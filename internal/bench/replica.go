package bench

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// ModeReplica (`make bench-replica`) measures reads on replicas: sysbench
// oltp_read_only through holdfast in front of a private primary and
// replica (MariaDB GTID replication, started for the run on ports and data
// directories of their own), once with every read on the primary (the
// shipped defaults) and once with sysbench's tag routed to the replica
// (backend.replicas and routing.tags, nothing else). It reports, same run,
// the primary's SELECTs and CPU per query, throughput, and the latency a
// single client sees (p50/p99 of 5,000 point selects each way). Both
// servers share this machine's CPUs, so throughput shows what routing costs
// here, not what a replica on its own host adds.
const ModeReplica = "replica"

// replicaTag is the default_tag of sysbench's user: its statements are
// untagged.
const replicaTag = "sysbench_ro"

type replicaPhase struct {
	name                string
	sb                  SysbenchResult
	primarySel, replSel int64         // Com_select during the sysbench run
	primaryCPU, replCPU time.Duration // mariadbd CPU during it
	p50, p99            time.Duration // one client's point selects
}

func (b *runner) runReplica(ctx context.Context) error {
	o := b.o
	var err error
	if b.dir, b.bin, err = buildInScratch(ctx, o.Go, o.Repo, "holdfast-bench-", b.printf); err != nil {
		return err
	}
	mk := func(name string) (string, error) {
		d := filepath.Join(b.dir, name)
		return d, os.MkdirAll(d, 0o755)
	}
	pdir, err := mk("primary")
	if err != nil {
		return err
	}
	rdir, err := mk("replica")
	if err != nil {
		return err
	}
	primary, err := dbtest.NewPrivate(pdir)
	if err != nil {
		return err
	}
	defer primary.Stop()
	replica, err := dbtest.NewPrivate(rdir, "--server-id=2", "--read-only=1")
	if err != nil {
		return err
	}
	defer replica.Stop()
	if err := replica.Follow(primary); err != nil {
		return err
	}
	b.printf("servers: primary %s (pid %d), replica %s (pid %d), private MariaDB with GTID replication\n",
		primary.Addr, primary.Pid(), replica.Addr, replica.Pid())
	pdb, rdb := primary.Open(""), replica.Open("")
	defer pdb.Close()
	defer rdb.Close()
	for _, q := range []string{
		fmt.Sprintf("CREATE DATABASE IF NOT EXISTS `%s`", o.Database),
		fmt.Sprintf("CREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%[1]s'", o.poolUser()),
		fmt.Sprintf("GRANT ALL ON `%s`.* TO '%s'@'%%'", o.Database, o.poolUser()),
	} {
		if _, err := pdb.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: %s: %w", q, err)
		}
	}
	b.sysb = Sysbench{Path: o.Sysbench, Database: o.Database, Tables: o.Tables, TableSize: o.TableSize}
	args := b.sysb.Args("oltp_read_only", Endpoint{Addr: primary.Addr, User: "root"}, "prepare")
	b.printf("tables: %s\n", b.sysb.CommandLine(args))
	if _, _, err := b.sysb.Exec(ctx, args); err != nil {
		return err
	}
	if err := dbtest.CaughtUp(ctx, pdb, rdb, 2*time.Minute); err != nil {
		return err
	}

	threads := 16
	b.printf("\n== replica: sysbench oltp_read_only@%d (--skip_trx=on --db-ps-mode=disable), %v per run, %d rounds ==\n", threads, o.Time, o.Rounds)
	var runs [2][]replicaPhase
	for round := range o.Rounds {
		for k, routed := range []bool{false, true} {
			if round%2 == 1 {
				routed = !routed
				k = 1 - k
			}
			ph, err := b.replicaRun(ctx, primary, replica, pdb, rdb, routed, threads)
			if err != nil {
				return err
			}
			b.printf("round %d/%d %s\n", round+1, o.Rounds, ph.line())
			runs[k] = append(runs[k], ph)
		}
	}
	a, r := medianPhase(runs[0]), medianPhase(runs[1])
	b.printf("\n== replica summary (medians of %d rounds; load average now %s) ==\n", o.Rounds, loadAvg())
	b.printf("%s\n%s\n", a.line(), r.line())
	perQ := func(n int64, q int64) float64 { return float64(n) / float64(max(q, 1)) }
	b.printf("primary SELECTs per query: %.3f all on the primary, %.3f with reads on the replica\n",
		perQ(a.primarySel, a.sb.Queries), perQ(r.primarySel, r.sb.Queries))
	b.printf("primary CPU per query: %.1f µs all on the primary, %.1f µs with reads on the replica (%.2f×)\n",
		float64(a.primaryCPU.Microseconds())/float64(max(a.sb.Queries, 1)), float64(r.primaryCPU.Microseconds())/float64(max(r.sb.Queries, 1)),
		(float64(r.primaryCPU)/float64(max(r.sb.Queries, 1)))/(float64(a.primaryCPU)/float64(max(a.sb.Queries, 1))))
	var ratios []string
	var d50, d99 []time.Duration
	for i := range runs[0] {
		ratios = append(ratios, fmt.Sprintf("%.2f", runs[1][i].sb.QPS/max(runs[0][i].sb.QPS, 1)))
		d50 = append(d50, runs[1][i].p50-runs[0][i].p50)
		d99 = append(d99, runs[1][i].p99-runs[0][i].p99)
	}
	b.printf("throughput: %.0f qps all on the primary, %.0f qps with reads on the replica (%.2f×; per round %s; both servers share this machine's %d CPUs)\n",
		a.sb.QPS, r.sb.QPS, r.sb.QPS/max(a.sb.QPS, 1), strings.Join(ratios, " "), runtime.NumCPU())
	b.printf("one client's point select, routing's cost: p50 %v, p99 %v (medians of the per-round differences, replica minus primary; per round p50 %v, p99 %v)\n",
		medianDur(d50), medianDur(d99), d50, d99)
	share := perQ(r.primarySel, r.sb.Queries)
	verdict := "MET"
	if share > 0.05 {
		verdict = "MISSED"
	}
	b.printf("reads on the primary with routing: %.1f%% of queries (target ≤ 5%%: holdfast's own probes only): %s\n", 100*share, verdict)
	return nil
}

func (p replicaPhase) line() string {
	return fmt.Sprintf("%-26s qps %8.0f  p95 %6.2f ms  errors %d  primary SELECTs %8d  replica SELECTs %8d  primary CPU %6.2fs  replica CPU %6.2fs  1-client p50 %v p99 %v",
		p.name, p.sb.QPS, p.sb.P95, p.sb.Errors, p.primarySel, p.replSel, p.primaryCPU.Seconds(), p.replCPU.Seconds(), p.p50, p.p99)
}

func medianDur(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// medianPhase is the run with the median qps.
func medianPhase(ps []replicaPhase) replicaPhase {
	s := slices.Clone(ps)
	slices.SortFunc(s, func(x, y replicaPhase) int {
		switch {
		case x.sb.QPS < y.sb.QPS:
			return -1
		case x.sb.QPS > y.sb.QPS:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// replicaRun starts holdfast (routed: with the replica and sysbench's tag
// routed to it), runs sysbench and the one-client latency through it.
func (b *runner) replicaRun(ctx context.Context, primary, replica *dbtest.Private, pdb, rdb *sql.DB, routed bool, threads int) (replicaPhase, error) {
	o := b.o
	hc := HoldfastConfig{Users: []string{holdfastUser}, Backend: Endpoint{Addr: primary.Addr, User: o.poolUser(), Password: o.poolUser()},
		Database: o.Database, DefaultTags: map[string]string{holdfastUser: replicaTag}}
	name := "all on the primary"
	if routed {
		name = "reads on the replica"
		hc.Settings = []string{"backend.replicas=[{address: " + replica.Addr + "}]", "routing.tags={" + replicaTag + ": replica_stale_ok}"}
	}
	if err := hc.freeListen(); err != nil {
		return replicaPhase{}, err
	}
	h, err := StartHoldfast(ctx, b.bin, b.dir, "holdfast-replica", hc)
	if err != nil {
		return replicaPhase{}, err
	}
	defer h.Stop()
	ep := Endpoint{Addr: h.Addr, User: holdfastUser, Password: holdfastUser}
	// Warm-up: the pools open, the replica is checked.
	args := b.sysb.Args("oltp_read_only", ep, "run", "--threads="+fmt.Sprint(threads), "--time=2", "--report-interval=0", "--skip_trx=on", "--db-ps-mode=disable")
	if _, _, err := b.sysb.Exec(ctx, args); err != nil {
		return replicaPhase{}, err
	}
	ph := replicaPhase{name: name}
	sel := func(db *sql.DB) int64 {
		v, _ := dbtest.GlobalStatus(ctx, db, "Com_select")
		return v
	}
	p0, r0 := sel(pdb), sel(rdb)
	pc0, _ := ProcCPU(primary.Pid())
	rc0, _ := ProcCPU(replica.Pid())
	args = b.sysb.Args("oltp_read_only", ep, "run", "--threads="+fmt.Sprint(threads), "--time="+fmt.Sprint(int(o.Time.Seconds())),
		"--report-interval=0", "--skip_trx=on", "--db-ps-mode=disable")
	out, _, err := b.sysb.Exec(ctx, args)
	if err != nil {
		return ph, err
	}
	pc1, _ := ProcCPU(primary.Pid())
	rc1, _ := ProcCPU(replica.Pid())
	ph.primarySel, ph.replSel = sel(pdb)-p0, sel(rdb)-r0
	ph.primaryCPU, ph.replCPU = pc1-pc0, rc1-rc0
	if ph.sb, err = ParseSysbench(out); err != nil {
		return ph, err
	}
	ph.p50, ph.p99, err = oneClientLatency(ctx, ep, o.Database, o.TableSize, 5000)
	return ph, err
}

// oneClientLatency times n point selects from one client (text protocol).
func oneClientLatency(ctx context.Context, ep Endpoint, dbName string, rows, n int) (p50, p99 time.Duration, err error) {
	cfg := mysql.NewConfig()
	cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName = ep.User, ep.Password, "tcp", ep.Addr, dbName
	cfg.InterpolateParams = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	lat := make([]time.Duration, 0, n)
	for range n {
		var c string
		t0 := time.Now()
		if err := db.QueryRowContext(ctx, "SELECT c FROM sbtest1 WHERE id = ?", 1+rand.IntN(rows)).Scan(&c); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	return lat[n/2].Round(time.Microsecond), lat[n*99/100].Round(time.Microsecond), nil
}
