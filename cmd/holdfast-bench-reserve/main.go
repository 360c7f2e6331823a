// Command holdfast-bench-reserve is the harness of `make bench-reserve`: one
// hot item at one location, reserved through a freshly built holdfast whose
// backend is reached through a latency-injecting relay, against a
// transactional counter and an autocommit UPDATE of a counter row, and the
// same CALL in shadow mode behind a Redis counter. See internal/bench
// (reserve.go, reserve_shadow.go).
//
//	holdfast-bench-reserve [-mariadb HOST:PORT] [-clients 8,64,256] [-time D] [-rounds N] ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/holdfast-db/holdfast/internal/bench"
)

func main() {
	o := bench.DefaultReserveOptions()
	clients := flag.String("clients", joinInts(o.Clients), "concurrent clients of each run, comma-separated")
	workloads := flag.String("workloads", strings.Join(o.Workloads, ","), "workloads, comma-separated: a (txn counter), b (autocommit UPDATE), c (CALL holdfast.reserve), d (the same with a Redis counter deciding, engine in shadow), e (the same as c on a second holdfast, with -set or from -e-repo; added by either)")
	flag.StringVar(&o.Repo, "repo", o.Repo, "holdfast repository root (./cmd/holdfast is built from it)")
	flag.StringVar(&o.Go, "go", o.Go, "go command used to build holdfast")
	flag.StringVar(&o.MariaDB, "mariadb", o.MariaDB, "MariaDB host:port")
	flag.StringVar(&o.AdminUser, "mariadb-user", o.AdminUser, "MariaDB account that may create users and databases")
	flag.StringVar(&o.AdminPassword, "mariadb-password", o.AdminPassword, "password of -mariadb-user")
	flag.StringVar(&o.Database, "database", o.Database, "database the bench owns: DROPPED and created afresh at start")
	flag.StringVar(&o.PoolUser, "pool-user", o.PoolUser, "MariaDB account holdfast's pool logs in as (created; password = name)")
	flag.DurationVar(&o.Time, "time", o.Time, "duration of each run")
	flag.IntVar(&o.Rounds, "rounds", o.Rounds, "rounds; each runs every workload at every client count")
	flag.DurationVar(&o.RelayDelay, "relay-delay", o.RelayDelay, "latency the relay adds in each direction between holdfast and MariaDB")
	flag.DurationVar(&o.Pause, "pause", o.Pause, "pause between runs")
	flag.Int64Var(&o.OnHand, "on-hand", o.OnHand, "units at the start of every run (counter and ledger); large enough never to sell out")
	flag.IntVar(&o.TTL, "ttl", o.TTL, "ttl_seconds of each reserve (must exceed holdfast's payment-side minimum, 960 s by default)")
	flag.BoolVar(&o.Keep, "keep", false, "keep the scratch directory (binary, config, holdfast's log)")
	flag.StringVar(&o.RedisServer, "redis-server", o.RedisServer, "redis-server binary workload d starts (a private one, on a free port)")
	flag.Func("set", "run workload e: the same CALL as c through a second holdfast with this setting changed (path=value, e.g. -set reservation.batches_per_pool=1; repeatable), compared with c in the same rounds and never judged",
		func(v string) error { o.Settings = append(o.Settings, v); return nil })
	flag.StringVar(&o.ERepo, "e-repo", "", "run workload e: the same CALL as c through a second holdfast built from this checkout (e.g. a git worktree of the code before a change), compared with c in the same rounds and never judged")
	flag.Parse()
	var err error
	if o.Clients, err = bench.ParseClients(*clients); err != nil {
		fail(err)
	}
	o.Workloads = strings.Split(*workloads, ",")
	if (len(o.Settings) > 0 || o.ERepo != "") && !slices.Contains(o.Workloads, bench.WorkloadVariant) {
		o.Workloads = append(o.Workloads, bench.WorkloadVariant)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.RunReserve(ctx, o, os.Stdout); err != nil {
		stop()
		fail(err)
	}
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "holdfast-bench-reserve:", err)
	os.Exit(1)
}
