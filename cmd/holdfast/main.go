// Command holdfast is the MySQL sidecar: it serves the MySQL protocol,
// pools backend connections and attributes their hold time by tag.
//
//	holdfast [serve] [-config FILE]                   run the sidecar
//	holdfast migrate [-config FILE] [-move-tables] [-user NAME] [-force]  create or upgrade holdfast's schema
//	holdfast migrate [-config FILE] -print-grants [-dialect mysql]  print the grants that keep applications off it
//	holdfast check-config [-config FILE] [-print-listen | -print-admin-listen]  validate a configuration
//	holdfast check-backend [-config FILE] [-print-address]  connect to the backend once
//	holdfast resync-redis [-config FILE] [-shops 1,2] [-dry-run] [-force]  rewrite the Redis counters from the ledger
//	holdfast version                                  print the version, commit, build date and Go version
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/internal/version"
	"github.com/holdfast-db/holdfast/proxy"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "holdfast:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	cmd := "serve"
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	if cmd == "version" {
		printVersion(os.Stdout)
		return nil
	}
	fs := flag.NewFlagSet("holdfast "+cmd, flag.ContinueOnError)
	path := fs.String("config", "", "configuration file (YAML); empty means built-in defaults")
	printListen := fs.Bool("print-listen", false, "check-config: print only the listen address")
	printAdmin := fs.Bool("print-admin-listen", false, "check-config: print only admin.listen (empty: none)")
	printAddr := fs.Bool("print-address", false, "check-backend: print the configured backend address and exit")
	resync := resyncFlags(fs)
	mig := migrateFlags(fs, resync.force)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := config.Load(*path)
	if err != nil {
		return err
	}
	switch cmd {
	case "serve":
		return serve(*path, cfg)
	case "migrate":
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		return migrate(ctx, cfg, mig, os.Stdout)
	case "check-config":
		switch {
		case *printListen:
			fmt.Println(cfg.Listen)
		case *printAdmin:
			fmt.Println(cfg.Admin.Listen)
		default:
			fmt.Println("configuration OK")
		}
		return nil
	case "resync-redis":
		return resyncRedis(context.Background(), cfg, resync, os.Stdout)
	case "check-backend":
		if *printAddr {
			fmt.Println(cfg.Backend.Address)
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), cfg.Backend.DialTimeout)
		defer cancel()
		version, err := proxy.CheckBackend(ctx, cfg)
		if err != nil {
			return err
		}
		fmt.Printf("%s (%s)\n", cfg.Backend.Address, version)
		return nil
	}
	return fmt.Errorf("unknown command %q (want serve, migrate, check-config, check-backend, resync-redis or version)", cmd)
}

func newLogger(c config.Log) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: lvl}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// chooseProcs picks GOMAXPROCS: max_procs when set; else the GOMAXPROCS
// environment variable when set (Go has applied it: available is its
// value); else half the CPUs available to the process (Go's default,
// which follows a container's CPU quota), at least 1 and at most 4. See
// max_procs in config.yaml for why.
func chooseProcs(maxProcs, available int, fromEnv bool) (int, string) {
	switch {
	case maxProcs > 0:
		return maxProcs, "max_procs"
	case fromEnv:
		return available, "GOMAXPROCS environment variable"
	}
	return max(1, min(4, available/2)), fmt.Sprintf("max_procs 0: half of %d CPUs available, 1 to 4", available)
}

func serve(path string, cfg config.Config) error {
	log := newLogger(cfg.Log)
	procs, why := chooseProcs(cfg.MaxProcs, runtime.GOMAXPROCS(0), os.Getenv("GOMAXPROCS") != "")
	runtime.GOMAXPROCS(procs)
	log.Info("starting", "version", version.Get().String(), "max_procs", procs, "chosen_by", why)
	// From here on a signal waits for the loop at the end: SIGHUP must not
	// end a holdfast that is still starting.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer signal.Stop(sigs)
	srv, err := proxy.New(cfg, log)
	if err != nil {
		return err
	}
	// The admin listener's certificate is read before anything starts.
	ac, err := newAdminAccess(path, cfg.Admin, localToken{})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(admin.NewCollector(srv, srv.Recorder()), srv.ClassCollector(), srv.ReplicaCollector(), srv.TopologyCollector())
	reg.MustRegister(processCollectors()...)

	// Built first, started below once the admin listener serves: nothing
	// here reaches the backend. The fleet before the engine: the engine's
	// background loops run the fleet duties this instance holds.
	fctx, fcancel := context.WithCancel(context.Background())
	defer fcancel()
	tbl, err := serveTables(cfg, srv, reg, log)
	if err != nil {
		return err
	}
	defer tbl.close()
	fl, leaveFleet, err := newFleet(cfg, srv, tbl, fleetDuties(cfg), log)
	if err != nil {
		return err
	}
	defer leaveFleet()
	ready := &readiness{srv: srv}
	var adminFleet admin.Fleet
	if fl != nil {
		adminFleet = fleetView{fl, tbl}
		reg.MustRegister(fleet.NewCollector(fl))
		// No client is served before the fleet's controls are read: a
		// drain in force applies from a new instance's first statement.
		ready.fleetRead = fl.Read()
		srv.HoldLogins(fl.Read(), "the fleet's controls have not been read yet")
	}
	var eng, started *engine // started: the engine's background work runs
	if cfg.Reservation.Enabled {
		if eng, err = newEngine(cfg, srv, tbl, dutiesOf(fl), log); err != nil {
			return err
		}
		reg.MustRegister(eng.collectors()...)
	}
	rl := newReloader(path, cfg, srv, log)

	// The admin listener first, so that its probes answer while the rest
	// starts and while the backend is down: a liveness probe restarts
	// nothing for want of a database.
	errc := make(chan error, 2)
	var adm *admin.Admin
	if cfg.Admin.Listen != "" {
		adm = admin.New(srv, admin.Options{Access: ac.Access, Pprof: cfg.Admin.Pprof, Gatherer: reg, Log: log,
			Authority: eng.authority(), Fleet: adminFleet, Ready: ready.get, Reload: rl.reload,
			Failover: func() config.Failover { return rl.current().Failover }})
		ln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		defer adm.Close()
		ac.writeLocalToken(localToken{}, log)
		rl.setAdmin(adm, ac.local)
		go func() {
			if err := adm.Serve(ln); err != nil {
				errc <- fmt.Errorf("admin listener: %w", err)
			}
		}()
		log.Info("admin API, status page, probes and metrics listening", "addr", cfg.Admin.Listen, "tls", ac.TLS != nil,
			"credentials", len(ac.Credentials), "pprof", cfg.Admin.Pprof)
	}

	tbl.findTables(fctx, cfg)
	if err := joinFleet(fctx, cfg, fl, log); err != nil {
		return err
	}
	if eng != nil {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cctx, ccancel := context.WithTimeout(ctx, cfg.Backend.DialTimeout)
		installed := installed(cctx, tbl)
		ccancel()
		if installed {
			if err := eng.start(ctx); err != nil {
				return err
			}
			started = eng
		} else {
			log.Warn("the reservation schema is not installed: run `holdfast migrate`; CALL holdfast.* fails and the refiller, sweeper and reconciler stay off until holdfast restarts after it",
				"database", tbl.Schema())
		}
	}
	go func() { errc <- srv.ListenAndServe() }()
	if cfg.ReloadWatch > 0 && path != "" {
		go rl.watch(fctx, cfg.ReloadWatch)
	}
	// stop closes the admin listener, then the engine (its refiller and
	// sweeper finish on connections of the pool), then the server and its
	// pool.
	stop := func() {
		if adm != nil {
			_ = adm.Close()
		}
		if started != nil {
			started.close()
		}
		srv.Close()
	}

	for {
		select {
		case err := <-errc:
			stop()
			return err
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				rl.reload(context.Background(), "SIGHUP")
				continue
			}
			// Unready at once; clients are served on for shutdown_delay,
			// then drained for up to shutdown_grace.
			ready.stopping.Store(true)
			cur := rl.current()
			if err := delayShutdown(cur.ShutdownDelay, sig, sigs, errc, rl, log); err != nil {
				stop()
				return err
			}
			log.Info("shutting down: draining clients", "signal", sig.String(), "grace", cur.ShutdownGrace)
			ctx, cancel := context.WithTimeout(context.Background(), cur.ShutdownGrace)
			err := srv.Drain(ctx)
			cancel()
			stop()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return err
			}
			log.Info("stopped")
			return nil
		}
	}
}

// delayShutdown waits out shutdown_delay d after the signal sig, the
// client listener still open: until d passes, another SIGTERM or SIGINT
// comes, or a listener fails (its error). A SIGHUP meanwhile reloads.
func delayShutdown(d time.Duration, sig os.Signal, sigs <-chan os.Signal, errc <-chan error, rl *reloader, log *slog.Logger) error {
	if d <= 0 {
		return nil
	}
	log.Info("shutting down: unready now; clients are served for shutdown_delay before the listener closes",
		"signal", sig.String(), "shutdown_delay", d)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return nil
		case err := <-errc:
			return err
		case s := <-sigs:
			if s == syscall.SIGHUP {
				rl.reload(context.Background(), "SIGHUP")
				continue
			}
			log.Info("shutting down: shutdown_delay cut short", "signal", s.String())
			return nil
		}
	}
}
