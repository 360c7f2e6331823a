package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
)

// resyncOpts are the flags of `holdfast resync-redis`.
type resyncOpts struct {
	shops   *string
	dryRun  *bool
	force   *bool
	verbose *bool
}

func resyncFlags(fs *flag.FlagSet) resyncOpts {
	return resyncOpts{
		shops:  fs.String("shops", "", "resync-redis: only these shops (comma-separated ids); empty means every pool"),
		dryRun: fs.Bool("dry-run", false, "resync-redis: report each pool's counter and the engine's availability, write nothing"),
		force: fs.Bool("force", false, "resync-redis: also shops whose reserves Redis decides (see docs/migration.md); "+
			"migrate: apply the steps even while live instances of a version too old for the new schema run"),
		verbose: fs.Bool("v", false, "resync-redis: print every pool, not only those that change"),
	}
}

// resyncRedis is `holdfast resync-redis`: it rewrites the legacy Redis
// counters from the ledger and the engine's live reservations, pool by
// pool under the pool's ledger row lock, while holdfast keeps serving
// (package reservation/legacy, Resync).
func resyncRedis(ctx context.Context, cfg config.Config, o resyncOpts, out io.Writer) error {
	rc := cfg.Reservation
	if !rc.Redis.Enabled() {
		return errors.New("resync-redis: reservation.redis.address is not set")
	}
	var shops []int64
	for _, f := range strings.Split(*o.shops, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 {
			return fmt.Errorf("resync-redis: -shops: bad shop id %q", f)
		}
		shops = append(shops, n)
	}
	// As holdfast's own account, where its tables are.
	user, password := cfg.Own()
	t, err := newTables(cfg, user, password, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer t.close()
	loc, err := t.locate(ctx)
	if err != nil {
		return fmt.Errorf("resync-redis: as %s: %w", user, err)
	}
	schema := loc.schema
	db, err := dbAs(cfg, user, password, schema, func(c *mysql.Config) {
		c.MultiStatements = true // a pool's lock and reads go in one round trip
	})
	if err != nil {
		return err
	}
	defer db.Close()
	st := legacy.NewStore(rc.Redis.WithDefaults(rc.Engine.WithDefaults().Retention), nil)
	defer st.Close()
	changed := 0
	rep, err := legacy.Resync(ctx, reservation.SQLConns(db), st, legacy.ResyncOptions{Shops: shops, Force: *o.force, DryRun: *o.dryRun,
		Progress: func(r legacy.ResyncResult) {
			old := "missing"
			if r.HadOld {
				old = strconv.FormatInt(r.Old, 10)
			}
			if r.HadOld && r.Old == r.New && !*o.verbose {
				return
			}
			changed++
			verb := "set to"
			if *o.dryRun {
				verb = "would be"
			}
			fmt.Fprintf(out, "%s: counter %s %s %d (on_hand - live reservations)", r.Key, old, verb, r.New)
			if r.Created > 0 || r.Resynced > 0 {
				fmt.Fprintf(out, "; %d live reservations recorded, %d stale records dropped", r.Created, r.Resynced)
			}
			fmt.Fprintln(out)
		}})
	if err != nil {
		return err
	}
	mode := "resynced"
	if *o.dryRun {
		mode = "checked (dry run, nothing written)"
	}
	fmt.Fprintf(out, "%s %d pools at %s: %d counters differed, %d live reservations recorded, %d stale records dropped\n",
		mode, rep.Pools, time.Now().UTC().Format(time.RFC3339), rep.Changed, rep.Created, rep.Resynced)
	if !*o.dryRun && len(shops) == 0 {
		if rep.Cleared {
			fmt.Fprintln(out, "the Redis counters are no longer marked stale")
		} else {
			fmt.Fprintln(out, "a write to Redis failed while the resync ran: the counters stay marked stale; run it again")
		}
	}
	return nil
}
