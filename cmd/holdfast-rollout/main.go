// Command holdfast-rollout is holdfast's rolling-upgrade harness (`make
// bench-rollout`): it builds the release before (a commit of the
// repository's history) and this checkout, runs a fleet of the former on
// a private MariaDB under checkout and engine traffic with a drain and a
// fleet-wide cap in force, migrates the schema with the latter, replaces
// the instances one at a time, and checks that no client of a ready
// instance got an error the controls do not dictate, that the controls
// held, and that every answer was true. It exits 1 on any violation. See
// package internal/rollout.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/holdfast-db/holdfast/internal/rollout"
)

func main() {
	o := rollout.DefaultOptions()
	flag.StringVar(&o.Repo, "repo", o.Repo, "holdfast's repository root: this version is built from it, the base from its history")
	flag.StringVar(&o.Base, "base", o.Base, "the commit the earlier version (N-1) is built from")
	flag.StringVar(&o.Go, "go", o.Go, "the go command that builds the earlier version")
	flag.StringVar(&o.Dir, "dir", o.Dir, "work directory (default: a temporary one, kept only on violations)")
	flag.BoolVar(&o.Keep, "keep", o.Keep, "keep the work directory")
	flag.IntVar(&o.Instances, "instances", o.Instances, "instances in the fleet")
	flag.DurationVar(&o.Phase, "phase", o.Phase, "traffic before the migrate, after it, and after each replacement")
	flag.IntVar(&o.EngineClients, "engine-clients", o.EngineClients, "clients of CALL holdfast.*")
	flag.IntVar(&o.CheckoutClients, "checkout-clients", o.CheckoutClients, "clients of checkout transactions")
	flag.IntVar(&o.CappedClients, "capped-clients", o.CappedClients, "clients of the capped tag")
	flag.IntVar(&o.Cap, "cap", o.Cap, "the fleet-wide cap on the capped tag")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := rollout.Run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "holdfast-rollout:", err)
		os.Exit(1)
	}
	if len(res.Violations) > 0 {
		fmt.Println("holdfast-rollout: VIOLATIONS found")
		os.Exit(1)
	}
	fmt.Println("holdfast-rollout: no violations")
}
