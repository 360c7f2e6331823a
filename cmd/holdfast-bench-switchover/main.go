// Command holdfast-bench-switchover is the harness of `make
// bench-switchover`: a primary switchover and a primary killed, under a
// write load through holdfast and, in the same run, straight to the VIP,
// on two private MariaDB servers with GTID replication. See
// internal/bench/switchover.go.
//
//	holdfast-bench-switchover [-scenarios planned,pause,kill] [-time 20s] [-switch-at 6s] ...
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/holdfast-db/holdfast/internal/bench"
)

func main() {
	o := bench.DefaultSwitchoverOptions()
	scenarios := flag.String("scenarios", strings.Join(o.Scenarios, ","), "scenarios to run, in order: planned (a switchover as an HA tool does it), pause (the same, holdfast's pause control set on the clients' tag before the flip and lifted after), kill (the primary killed, the replica promoted -promote-after later, its relay log applied first)")
	flag.StringVar(&o.Repo, "repo", o.Repo, "holdfast repository root (./cmd/holdfast is built from it)")
	flag.StringVar(&o.Go, "go", o.Go, "go command used to build holdfast")
	flag.DurationVar(&o.Duration, "time", o.Duration, "load per scenario")
	flag.DurationVar(&o.SwitchAt, "switch-at", o.SwitchAt, "when the fault comes, into the load")
	flag.DurationVar(&o.PromoteAfter, "promote-after", o.PromoteAfter, "kill: how long after the kill the replica is promoted and the VIP moved")
	flag.DurationVar(&o.PauseSettle, "pause-settle", o.PauseSettle, "pause: how long after the pause is set the switchover begins (open transactions finish meanwhile)")
	flag.StringVar(&o.PauseTag, "pause-tag", "sw", "pause: the tag paused (the clients' default_tag is sw)")
	flag.IntVar(&o.Autocommit, "autocommit", o.Autocommit, "clients per path running autocommit INSERTs")
	flag.IntVar(&o.Txn, "txn", o.Txn, "clients per path running short transactions (BEGIN, two INSERTs, COMMIT)")
	flag.DurationVar(&o.Pace, "pace", o.Pace, "each client's pause between two operations")
	flag.BoolVar(&o.Keep, "keep", false, "keep the scratch directory (binary, configuration, holdfast's log, the servers' data)")
	flag.Func("set", "a holdfast setting over config.yaml's defaults, path=value (failover.transaction_replay=true); repeatable", func(s string) error {
		o.Set = append(o.Set, s)
		return nil
	})
	flag.Parse()
	o.Scenarios = strings.Split(*scenarios, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := bench.RunSwitchover(ctx, o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-bench-switchover:", err)
		stop()
		os.Exit(1)
	}
}
