// Command holdfast-bench is the harness of `make bench-proxy` and `make
// bench-attribution`. With -mode proxy (the default): sysbench against
// MariaDB directly, through a plain TCP relay and through a freshly built
// holdfast, point_select@1 latency and system calls per query on each,
// then a connection-scale run. The relay is this same executable run as
// `holdfast-bench relay -target HOST:PORT`, a process of its own as
// holdfast is. With -mode attribution: sysbench
// point_select through two holdfast processes from one fresh build, per-tag
// accounting on and off. See internal/bench.
//
//	holdfast-bench [-mode proxy|attribution] [-mariadb HOST:PORT] [-rounds N] [-time D] ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast-db/holdfast/internal/bench"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == bench.RelayCommand {
		if err := bench.RelayMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "holdfast-bench relay:", err)
			os.Exit(1)
		}
		return
	}
	o := bench.DefaultOptions()
	flag.StringVar(&o.Mode, "mode", o.Mode, "comparison to run: proxy (direct / relay / holdfast, connection scale), attribution (holdfast with attribution on / off) overload (checkout beside a background flood, overload classes off / on) or replica (sysbench oltp_read_only with reads on the primary / on a replica, on a private pair)")
	flag.StringVar(&o.Repo, "repo", o.Repo, "holdfast repository root (./cmd/holdfast is built from it)")
	flag.StringVar(&o.Go, "go", o.Go, "go command used to build holdfast")
	flag.StringVar(&o.Sysbench, "sysbench", o.Sysbench, "sysbench executable")
	flag.StringVar(&o.MariaDB, "mariadb", o.MariaDB, "MariaDB host:port")
	flag.StringVar(&o.AdminUser, "mariadb-user", o.AdminUser, "MariaDB account that may create users and databases and SET GLOBAL")
	flag.StringVar(&o.AdminPassword, "mariadb-password", o.AdminPassword, "password of -mariadb-user")
	flag.StringVar(&o.Database, "database", o.Database, "database for the sysbench tables (kept between runs)")
	flag.StringVar(&o.BenchUser, "bench-user", o.BenchUser, "MariaDB account created for sysbench; holdfast's pool uses NAME_pool (password = name)")
	flag.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds; each runs every workload against every target (proxy: direct, relay, holdfast; attribution: on-tagged, off, on)")
	flag.DurationVar(&o.Time, "time", o.Time, "duration of each sysbench run")
	flag.IntVar(&o.Tables, "tables", o.Tables, "sysbench --tables")
	flag.IntVar(&o.TableSize, "table-size", o.TableSize, "sysbench --table-size")
	flag.Func("set", "proxy mode: also run holdfast with this setting changed, as the extra target holdfast+set (never judged); path=value, e.g. -set pool.max=8 -set max_procs=2; repeatable",
		func(v string) error { o.Settings = append(o.Settings, v); return nil })
	flag.StringVar(&o.BackendTLS, "backend-tls", o.BackendTLS, "proxy mode: also run every workload through a holdfast with this backend.tls.mode (the \"TLS to backend\" target holdfast+tls, not judged); MariaDB must offer TLS")
	flag.StringVar(&o.BackendTLSCA, "backend-tls-ca", o.BackendTLSCA, "backend.tls.ca_file of the holdfast+tls target (verify_ca, verify_identity)")
	flag.StringVar(&o.BaselineRepo, "baseline-repo", "", "proxy mode: also build holdfast from this other checkout (an earlier commit: git worktree add DIR COMMIT) and run every workload through it on its own defaults, as the extra target holdfast@base (not judged)")
	flag.IntVar(&o.ScaleConns, "scale-conns", o.ScaleConns, "client connections in the connection-scale run")
	flag.IntVar(&o.ScaleBackendMax, "scale-backend-max", o.ScaleBackendMax, "target: the most backend connections the connection-scale run may use")
	flag.DurationVar(&o.ScaleTime, "scale-time", o.ScaleTime, "duration of the connection-scale statement phase")
	flag.DurationVar(&o.ScaleInterval, "scale-interval", o.ScaleInterval, "each scale connection runs one statement per interval")
	flag.IntVar(&o.LatencyRounds, "latency-rounds", o.LatencyRounds, "point_select@1: paired rounds")
	flag.IntVar(&o.LatencyPerRound, "latency-per-round", o.LatencyPerRound, "point_select@1: statements per target in a round")
	workloads := flag.String("workloads", "", "proxy mode: comma-separated subset of the sysbench workloads (point_select@16, point_select@256, read_write@16); empty: all")
	flag.BoolVar(&o.SkipSysbench, "skip-sysbench", false, "skip the sysbench comparison (proxy mode)")
	flag.BoolVar(&o.SkipScale, "skip-scale", false, "skip the connection-scale run (proxy mode)")
	flag.BoolVar(&o.SkipSyscalls, "skip-syscalls", false, "skip the system-call count runs under perf stat (proxy mode)")
	flag.StringVar(&o.Profile, "profile", o.Profile, "profile holdfast in an extra run (proxy: the first missed workload, or the first; attribution: the attribution-on process, the first missed workload): on-miss, always or never")
	flag.StringVar(&o.CPUProfile, "holdfast-cpuprofile", "", "where to write that profile (holdfast's -cpuprofile when it has one, else perf)")
	flag.BoolVar(&o.Keep, "keep", false, "keep the scratch directory (binary, configs, holdfast logs)")
	flag.Parse()
	var err error
	if o.Workloads, err = bench.SelectWorkloads(*workloads); err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-bench:", err)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.Run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-bench:", err)
		stop()
		os.Exit(1)
	}
}
