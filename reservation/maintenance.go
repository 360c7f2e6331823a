package reservation

import (
	"context"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// The sweeper and the reconciler: the engine's background loops, started
// by Start. Both are also callable one cycle at a time (SweepOnce,
// ReconcileOnce) for tests and the on-call CLI.

func (e *Engine) runSweeper(ctx context.Context) {
	pace := time.Duration(float64(time.Second) / e.cfg.SweepRate)
	for {
		if !e.duties.Runs(lifecycle.DutySweeper) {
			if lifecycle.Sleep(ctx, e.cfg.SweepInterval) != nil {
				return
			}
			continue
		}
		e.m.sweepCycles.Add(1)
		n, err := e.SweepOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := pace
		if err != nil {
			e.log.Warn("reservation: sweep failed", "err", err)
			wait = e.cfg.SweepInterval
		} else if n < e.cfg.SweepBatch {
			// Caught up: prune old finished reservations, then rest.
			if _, err := e.PruneOnce(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("reservation: prune failed", "err", err)
			}
			wait = e.cfg.SweepInterval
		}
		if lifecycle.Sleep(ctx, wait) != nil {
			return
		}
	}
}

// SweepOnce deletes up to Config.SweepBatch expired reserved lines in one
// READ COMMITTED transaction and returns how many it deleted. It takes no
// ledger lock: deleting reservations can only lower pool + reserved. The
// lines are found by an unlocked read, then locked by primary key with
// expiry re-checked on the locked row (an extend racing with it wins), and
// each one deleted leaves a reservation_returns row, so the pool's counter
// stays exact and the next refill re-pools the units (see counters.go).
func (e *Engine) SweepOnce(ctx context.Context) (int, error) {
	rows, err := e.query(ctx, TagSweep,
		"SELECT reservation_id, line_no, UTC_TIMESTAMP(6) FROM reserved_quantities WHERE expires_at <= UTC_TIMESTAMP(6) ORDER BY expires_at LIMIT ?",
		e.cfg.SweepBatch)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	now := string(rows[0][2])
	keys := make([][]int64, len(rows))
	for i, r := range rows {
		if keys[i], err = RowInts(r[:2]); err != nil {
			return 0, err
		}
	}
	var gone []returnedLine
	err = e.tx.Run(ctx, TagSweep, func(ctx context.Context, c Conn) error {
		gone = gone[:0]
		locked, err := c.Query(ctx, lockByKeysSQL(TableReserved, lineCols, keys,
			"t.reservation_id, t.line_no, t.shop_id, t.inventory_item_id, t.inventory_group_id, t.quantity", "t.expires_at <= ?"), now)
		if err != nil || len(locked) == 0 {
			return err
		}
		del := make([][]int64, len(locked))
		for i, r := range locked {
			v, err := RowInts(r)
			if err != nil {
				return err
			}
			del[i] = v[:2]
			gone = append(gone, returnedLine{key: PoolKey{v[2], v[3], v[4]}, id: uint64(v[0]), line: v[1], qty: v[5]})
		}
		return CommitWith(ctx, c, guardedDeleteSQL(TableReserved, lineCols, del)+"; "+returnsInsertSQL(gone))
	})
	if err != nil {
		return 0, err
	}
	n := len(gone)
	e.m.swept.Add(uint64(n))
	notified := map[PoolKey]bool{}
	for _, g := range gone {
		if !notified[g.key] {
			notified[g.key] = true
			e.refiller.Notify(g.key, 0)
		}
	}
	return n, nil
}

// PruneOnce deletes up to Config.SweepBatch reservations that ended more
// than Config.Retention ago (their expiry passed that long ago and no line
// is held), so the idempotency and claim records stay bounded. Like every
// locking statement of the engine it deletes by primary key.
func (e *Engine) PruneOnce(ctx context.Context) (int, error) {
	rows, err := e.query(ctx, TagSweep,
		"SELECT reservation_id, UTC_TIMESTAMP(6) - INTERVAL ? SECOND FROM reservations WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? SECOND ORDER BY expires_at LIMIT ?",
		int64(e.cfg.Retention/time.Second), int64(e.cfg.Retention/time.Second), e.cfg.SweepBatch)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	keys := make([][]int64, len(rows))
	for i, r := range rows {
		id, err := ColInt(r[0])
		if err != nil {
			return 0, err
		}
		keys[i] = []int64{id}
	}
	var n int
	err = e.tx.Run(ctx, TagSweep, func(ctx context.Context, c Conn) error {
		var err error
		n, err = DeleteByKeys(ctx, c, TableReservations, []string{"reservation_id"}, keys,
			"t.expires_at < ? AND NOT EXISTS (SELECT 1 FROM reserved_quantities r WHERE r.reservation_id = t.reservation_id)", string(rows[0][1]))
		return err
	})
	e.m.pruned.Add(uint64(n))
	return n, err
}

// Violation is a pool that breaks the invariant pool + reserved <= on_hand,
// or whose pool_counters row disagrees with the tables (Drift != 0): see
// PoolStock.
type Violation struct {
	Key      PoolKey
	OnHand   int64
	Pooled   int64
	Reserved int64 // every reserved line present, expired or not
	Drift    int64 // PoolStock.Drift
	// NoLedger: the pool holds units or lines but has no inventory_ledger
	// row (OnHand is then 0).
	NoLedger bool
	// Cycles is how many consecutive cycles the pool has failed.
	Cycles int
}

// reconcilerState is the reconciler's memory between cycles. Only the
// reconciler goroutine (or a ReconcileOnce caller, never both) touches it.
type reconcilerState struct {
	streak map[PoolKey]int
}

func (e *Engine) runReconciler(ctx context.Context) {
	for {
		if lifecycle.Sleep(ctx, e.cfg.ReconcileInterval) != nil {
			return
		}
		if !e.duties.Runs(lifecycle.DutyReconciler) {
			continue
		}
		if _, err := e.ReconcileOnce(ctx); err != nil && ctx.Err() == nil {
			e.log.Warn("reservation: reconcile failed", "err", err)
		}
	}
}

// ReconcileOnce checks the stock invariant of every pool (CheckStock:
//
//	rows in reservation_units + quantity in reserved_quantities <= on_hand
//
// and that the pool's pool_counters row, if any, counts exactly the pool
// rows, reserved quantity and pending returns), reading through
// ReplicaConns (the primary when none is configured), one consistent
// statement per page of ledger rows. It counts every reserved line present,
// expired or not, which the engine also keeps within on_hand; only a forced
// claim, or a write outside holdfast, breaks it. A pool is alerted (error
// log, metric) when it has failed ReconcileAlertAfter consecutive cycles,
// which rides out replication lag. It returns this cycle's violations. Not
// safe to call concurrently with itself or with the loop Start runs.
func (e *Engine) ReconcileOnce(ctx context.Context) ([]Violation, error) {
	if e.recon.streak == nil {
		e.recon.streak = map[PoolKey]int{}
	}
	rep, err := CheckStock(ctx, connsQuerier{e.replica, TagReconcile}, PoolKey{})
	if err != nil {
		e.m.reconErrors.Add(1)
		return nil, err
	}
	found := make([]Violation, len(rep.Bad))
	for i, p := range rep.Bad {
		found[i] = Violation{Key: p.Key, OnHand: p.OnHand, Pooled: p.Pooled, Reserved: p.Reserved, Drift: p.Drift(), NoLedger: p.NoLedger}
	}
	failing := make(map[PoolKey]bool, len(found))
	alerting := 0
	for i := range found {
		k := found[i].Key
		failing[k] = true
		e.recon.streak[k]++
		n := e.recon.streak[k]
		found[i].Cycles = n
		if n >= e.cfg.ReconcileAlertAfter {
			alerting++
			if n == e.cfg.ReconcileAlertAfter {
				e.m.reconAlerts.Add(1)
				v := found[i]
				if p := rep.Bad[i]; p.NoLedger {
					e.log.Error("reservation: invariant broken: units or reserved lines of a pool with no inventory_ledger row",
						"pool", k.String(), "pooled", v.Pooled, "reserved", v.Reserved, "cycles", n)
				} else if p.Oversold() {
					e.log.Error("reservation: invariant broken: pool rows + reserved > on_hand",
						"pool", k.String(), "on_hand", v.OnHand, "pooled", v.Pooled,
						"reserved", v.Reserved, "drift", v.Drift, "cycles", n)
				} else {
					e.log.Error("reservation: pool counter drift: pool_counters.issued differs from pool rows + reserved + returns (delete the row to recount)",
						"pool", k.String(), "drift", v.Drift, "on_hand", v.OnHand, "pooled", v.Pooled, "reserved", v.Reserved, "cycles", n)
				}
			}
		}
	}
	for k := range e.recon.streak {
		if !failing[k] {
			delete(e.recon.streak, k)
		}
	}
	e.m.reconCycles.Add(1)
	e.m.reconViolations.Store(int64(len(found)))
	e.m.reconAlerting.Store(int64(alerting))
	return found, nil
}
