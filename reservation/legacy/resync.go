package legacy

import (
	"context"
	"errors"
	"fmt"

	"github.com/holdfast-db/holdfast/reservation"
)

// Resync (holdfast resync-redis) rewrites the Redis counters from the
// engine's view, for the moment Redis becomes a shadow again after it
// missed writes (an outage, a restart without persistence), and before it
// decides again.
//
// Pool by pool, under the pool's inventory_ledger row lock (held by a
// transaction that changes nothing, so no claim, refill, extend or stock
// procedure of the pool commits meanwhile), it reads on_hand and the live
// reservations, and one Redis script (resyncScript) records every live
// reservation Redis lacks, marks "resynced" every record Redis holds in
// the pool that the engine does not have live, and sets
//
//	counter = on_hand - live reserved quantity
//
// Reserves and releases go on meanwhile without racing it: each dual write
// is idempotent per token (a mirror of a reservation the resync recorded
// changes nothing); a record Redis holds that the engine did not read as
// live is looked up again, and given the engine's end (claimed, released,
// expired: so a claim or release of it arriving late changes the counter
// exactly as it would have) only if the engine has finished it (a reserve
// that committed after the read stays held, and so does one only Redis
// has); and a reservation the engine read as live that Redis has seen end
// meanwhile is not held.

// ResyncOptions configure Resync.
type ResyncOptions struct {
	// Shops restricts the resync to these shops; empty means every pool.
	Shops []int64
	// Force resyncs shops whose reserves Redis decides (the switch puts them
	// on redis): their counters are then rewritten from the engine's view,
	// which lacks reservations whose shadow failed. Without it those shops
	// are refused (a dry run reads them all).
	Force bool
	// DryRun reads and reports, writing nothing to Redis.
	DryRun bool
	// Progress, when not nil, is called for each pool resynced.
	Progress func(ResyncResult)
}

// ResyncReport sums up a resync.
type ResyncReport struct {
	Pools, Changed, Created, Resynced int
	// Cleared says the fleet-wide "stale" mark was cleared (no write to
	// Redis failed since the resync started).
	Cleared bool
}

// Resync rewrites the Redis counters of st from the engine's tables in
// conns' database: see above. It refuses shops the switch puts on Redis
// unless opts.Force.
func Resync(ctx context.Context, conns reservation.Conns, st *Store, opts ResyncOptions) (ResyncReport, error) {
	var rep ResyncReport
	sw, _, err := ReadState(ctx, conns)
	if err != nil {
		return rep, err
	}
	if sw != nil && !opts.Force && !opts.DryRun {
		if len(opts.Shops) == 0 && !sw.AllHoldfast() {
			return rep, fmt.Errorf("legacy: the authority switch (%s) lets Redis decide some shops' reserves: resync the shops on holdfast (-shop), switch every shop to holdfast first, or -force", sw)
		}
		for _, s := range opts.Shops {
			if sw.For(s) == reservation.AuthorityRedis {
				return rep, fmt.Errorf("legacy: Redis decides shop %d's reserves (%s): switch it to holdfast first, or -force", s, sw)
			}
		}
	}
	if err := st.Ping(ctx); err != nil {
		return rep, err
	}
	start, err := dbNow(ctx, conns)
	if err != nil {
		return rep, err
	}
	var after reservation.PoolKey
	for {
		keys, err := ListPools(ctx, conns, opts.Shops, after, 500)
		if err != nil {
			return rep, err
		}
		for _, k := range keys {
			after = k
			var res ResyncResult
			err := WithPoolLocked(ctx, conns, k, func(ctx context.Context, v *PoolView) error {
				if !v.Exists {
					return nil
				}
				res = ResyncResult{Key: k, New: v.OnHand}
				for _, l := range v.Live {
					res.New -= l.Qty
				}
				res.Available = res.New
				if opts.DryRun {
					c, err := st.Counters(ctx, []reservation.PoolKey{k})
					if err != nil {
						return err
					}
					res.Old, res.HadOld = c[k]
					return nil
				}
				// The records Redis holds here that the engine did not
				// read as live: those it has finished since are dropped.
				members, err := st.heldMembers(ctx, k)
				if err != nil {
					return err
				}
				live := make(map[string]bool, len(v.Live))
				for _, l := range v.Live {
					live[reservation.FormatToken(l.ReservationID)] = true
				}
				var ids []uint64
				for _, m := range members {
					if id, ok := reservation.ParseToken(m); ok && !live[m] {
						ids = append(ids, id)
					}
				}
				done, err := v.Ended(ctx, ids)
				if err != nil {
					return err
				}
				ended := make(map[string]string, len(done))
				for id, how := range done {
					ended[reservation.FormatToken(id)] = how
				}
				r, err := st.resyncPool(ctx, k, v.OnHand, v.Live, ended)
				r.Available = res.Available
				res = r
				return err
			})
			if err != nil {
				return rep, fmt.Errorf("legacy: resync pool %s: %w", k, err)
			}
			rep.Pools++
			if !res.HadOld || res.Old != res.New {
				rep.Changed++
			}
			rep.Created += res.Created
			rep.Resynced += res.Resynced
			if opts.Progress != nil {
				opts.Progress(res)
			}
		}
		if len(keys) < 500 {
			break
		}
	}
	if !opts.DryRun && len(opts.Shops) == 0 {
		if err := clearStale(ctx, conns, start); err != nil {
			return rep, err
		}
		_, rs, err := ReadState(ctx, conns)
		if err != nil {
			return rep, err
		}
		rep.Cleared = !rs.Stale
	}
	return rep, nil
}

func dbNow(ctx context.Context, conns reservation.Conns) (string, error) {
	c, err := conns.Borrow(ctx, TagAuthority)
	if err != nil {
		return "", err
	}
	rows, err := c.Query(ctx, "SELECT UTC_TIMESTAMP(6)")
	c.Release(err != nil && !isDB(err))
	if err != nil {
		return "", err
	}
	if len(rows) == 0 {
		return "", errors.New("legacy: no database time")
	}
	return string(rows[0][0]), nil
}
