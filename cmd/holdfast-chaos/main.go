// Command holdfast-chaos is holdfast's fault harness (`make chaos`): it
// runs the real holdfast against a private MariaDB, drives checkout
// traffic through CALL holdfast.* while killing backend connections,
// MariaDB or holdfast, with several instances on one database, or while
// the primary is switched over or killed and its replica promoted, and
// checks on the database that the stock is whole and every answer was
// true. It exits 1 on any violation. See package internal/chaos.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast-db/holdfast/internal/chaos"
)

func main() {
	o := chaos.DefaultOptions()
	scenarios := flag.String("scenarios", "all", "comma-separated scenarios: backend, mariadb, holdfast, instances, controls, replica, switchover, failover, or all")
	flag.StringVar(&o.Repo, "repo", o.Repo, "holdfast's repository root (where ./cmd/holdfast is built)")
	flag.StringVar(&o.Go, "go", o.Go, "the go command")
	flag.BoolVar(&o.Race, "race", o.Race, "build holdfast with -race; a reported data race is a violation")
	flag.StringVar(&o.Dir, "dir", o.Dir, "work directory (default: a temporary one, kept only on violations)")
	flag.BoolVar(&o.Keep, "keep", o.Keep, "keep the work directory")
	flag.IntVar(&o.Clients, "clients", o.Clients, "concurrent clients")
	flag.DurationVar(&o.Traffic, "traffic", o.Traffic, "traffic per scenario")
	flag.DurationVar(&o.TTL, "ttl", o.TTL, "ttl_seconds of every reserve (whole seconds, at least 3s)")
	flag.DurationVar(&o.BackendKillEvery, "backend-kill-every", o.BackendKillEvery, "backend scenario: kill a backend connection this often")
	flag.DurationVar(&o.MariaDBKillEvery, "mariadb-kill-every", o.MariaDBKillEvery, "mariadb and replica scenarios: kill MariaDB (replica: the replica) this often")
	flag.DurationVar(&o.HoldfastKillEvery, "holdfast-kill-every", o.HoldfastKillEvery, "holdfast and controls scenarios: kill holdfast (controls: one instance after another) this often")
	flag.IntVar(&o.Instances, "instances", o.Instances, "instances and controls scenarios: holdfast instances")
	flag.DurationVar(&o.ControlEvery, "control-every", o.ControlEvery, "controls scenario: change an on-call control this often")
	flag.DurationVar(&o.SwitchoverEvery, "switchover-every", o.SwitchoverEvery, "switchover scenario: switch the primary over this often; failover scenario: kill the primary this far into the traffic")
	flag.DurationVar(&o.PromoteAfter, "promote-after", o.PromoteAfter, "failover scenario: promote the replica this long after the kill")
	flag.Uint64Var(&o.Seed, "seed", o.Seed, "random seed (0: from the clock)")
	flag.Parse()
	var err error
	if o.Scenarios, err = chaos.ParseScenarios(*scenarios); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	results, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-chaos:", err)
		os.Exit(1)
	}
	if chaos.Violated(results) {
		fmt.Println("holdfast-chaos: VIOLATIONS found")
		os.Exit(1)
	}
	fmt.Println("holdfast-chaos: no violations")
}
