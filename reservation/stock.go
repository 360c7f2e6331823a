package reservation

import (
	"context"
)

// Result columns of the stock procedures.
var (
	StockColumns        = []string{"inventory_item_id", "inventory_group_id", "on_hand", "reserved", "pooled"}
	AvailabilityColumns = []string{"inventory_group_id", "on_hand", "reserved", "pooled", "available"}
)

// maxStock bounds on_hand and every quantity a stock procedure takes.
const maxStock = 1_000_000_000_000

func (e *Engine) stockArgs(proc string, args []any, last string, rule intRule) (PoolKey, int64, error) {
	var k PoolKey
	var err error
	if k.ShopID, err = intArg(proc, args, 0, "shop_id", positive); err != nil {
		return k, 0, err
	}
	if k.ItemID, err = intArg(proc, args, 1, "inventory_item_id", positive); err != nil {
		return k, 0, err
	}
	if k.GroupID, err = intArg(proc, args, 2, "inventory_group_id", positive); err != nil {
		return k, 0, err
	}
	v, err := intArg(proc, args, 3, last, rule)
	if err != nil {
		return k, 0, err
	}
	if v > maxStock || v < -maxStock {
		return k, 0, badArg(proc, 4, last, "must be between %d and %d, got %d", -maxStock, maxStock, v)
	}
	return k, v, nil
}

func (e *Engine) callReceive(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	k, qty, err := e.stockArgs("receive", args, "quantity", positive)
	if err != nil {
		e.m.ops[opReceive].inc(opBadArgument)
		return nil, nil, err
	}
	row, err := e.changeStock(ctx, opReceive, k, func(onHand int64) int64 { return onHand + qty }, o)
	return e.stockAnswer(opReceive, row, err)
}

func (e *Engine) callSetOnHand(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	k, v, err := e.stockArgs("set_on_hand", args, "on_hand", nonNegative)
	if err != nil {
		e.m.ops[opSetOnHand].inc(opBadArgument)
		return nil, nil, err
	}
	row, err := e.changeStock(ctx, opSetOnHand, k, func(int64) int64 { return v }, o)
	return e.stockAnswer(opSetOnHand, row, err)
}

func (e *Engine) callAdjust(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	k, delta, err := e.stockArgs("adjust", args, "delta", anyInt)
	if err != nil {
		e.m.ops[opAdjust].inc(opBadArgument)
		return nil, nil, err
	}
	if delta == 0 {
		e.m.ops[opAdjust].inc(opBadArgument)
		return nil, nil, badArg("adjust", 4, "delta", "must not be 0")
	}
	row, err := e.changeStock(ctx, opAdjust, k, func(onHand int64) int64 { return onHand + delta }, o)
	return e.stockAnswer(opAdjust, row, err)
}

func (e *Engine) stockAnswer(op int, row []any, err error) ([]string, [][]any, error) {
	if err != nil {
		e.m.ops[op].inc(opOutcomeOf(err))
		return nil, nil, err
	}
	e.m.ops[op].inc(opOK)
	return StockColumns, [][]any{row}, nil
}

// changeStock sets key's on_hand to next(on_hand) under the guard
//
//	next(on_hand) >= reserved quantity still live
//
// shrinks the pool so that pool rows + reserved <= the new on_hand (the
// pool is only pre-cut availability, so it gives way; live reservations do
// not: 9106), and tops the pool up to min(cap, what the new on_hand can
// still issue), so freshly received stock is reservable at once. One
// transaction, in the global lock order: the ledger row and the pool's
// counter FOR UPDATE, with the expired lines and pending returns it takes
// (LockPool: the live quantity comes from the counter, not from summing
// reservations); then, only when the new on_hand is below what the pool
// has issued, every pool row FOR UPDATE (LockUnits: this waits for reserves
// that hold units, and no new reservation can start on the pool, since
// their SKIP LOCKED select finds nothing and their inline refill waits for
// the ledger row) so that exactly the excess can be deleted. A missing
// ledger row counts as on_hand 0 and is created.
//
// None of the three stock procedures is idempotent, so one whose connection
// was lost during COMMIT answers 9108 at once (recovery.go); one lost
// earlier is run again, and so is one that created the ledger row second
// (1062: nothing was made).
func (e *Engine) changeStock(ctx context.Context, op int, k PoolKey, next func(int64) int64, o *CallOptions) ([]any, error) {
	call := e.newCall(procOp(op))
	created := false
	for {
		row, delta, err := e.changeStockOnce(ctx, opNames[op], k, next)
		if err == nil {
			e.refiller.Notify(k, 0)
			o.changed(Change{Pool: k, OnHandDelta: delta})
			return row, nil
		}
		if IsDBError(err, errNumDupKey) && !created {
			// The pool had no ledger row, and another call created it
			// (and the pool's first units) meanwhile: READ COMMITTED locks
			// no gap. The database refused an INSERT before the COMMIT,
			// so nothing was made: run it again, once, on that row.
			created = true
			continue
		}
		if !call.again(ctx, err, true) {
			return nil, call.answer(ctx, err)
		}
	}
}

func (e *Engine) changeStockOnce(ctx context.Context, proc string, k PoolKey, next func(int64) int64) ([]any, int64, error) {
	var row []any
	var delta int64
	err := e.tx.Run(ctx, TagStock, func(ctx context.Context, c Conn) error {
		p, err := LockPool(ctx, c, k)
		if err != nil {
			return err
		}
		n := next(p.OnHand)
		delta = n - p.OnHand
		switch {
		case n < 0:
			return newError(CodeGuardViolated, "45000", "holdfast.%s: on_hand of item %d at location %d would be %d; it cannot go below 0",
				proc, k.ItemID, k.GroupID, n)
		case n > maxStock:
			return newError(CodeGuardViolated, "45000", "holdfast.%s: on_hand of item %d at location %d would be %d; at most %d is allowed",
				proc, k.ItemID, k.GroupID, n, int64(maxStock))
		}
		// The live quantity needs the exact unit count, which only the
		// units' locks give when the pool shrinks.
		shrink := n < p.Issued
		if shrink {
			if err := p.LockUnits(ctx, c); err != nil {
				return err
			}
		}
		live := p.Live()
		switch {
		case n < live:
			return newError(CodeGuardViolated, "45000",
				"holdfast.%s: on_hand of item %d at location %d would be %d, below the %d units held by live reservations; release or claim them first",
				proc, k.ItemID, k.GroupID, n, live)
		}
		var remove []int64
		var add int64
		if shrink {
			excess := min(p.Issued-n, p.Pooled)
			remove = p.UnitIDs[p.Pooled-excess:] // the newest
		} else {
			add = max(min(int64(e.cfg.PoolCap)-p.Pooled, n-p.Issued), 0)
		}
		if err := CommitWith(ctx, c, p.Finish(add, remove, true, n)); err != nil {
			return err
		}
		row = []any{k.ItemID, k.GroupID, n, live, p.Pooled}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return row, delta, nil
}

func (e *Engine) callAvailability(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	const proc = "availability"
	shop, err := intArg(proc, args, 0, "shop_id", positive)
	if err == nil {
		var item int64
		if item, err = intArg(proc, args, 1, "inventory_item_id", positive); err == nil {
			return e.availability(ctx, shop, item)
		}
	}
	e.m.ops[opAvailability].inc(opBadArgument)
	return nil, nil, err
}

// availability reports, per location of one item, on_hand, the quantity held
// by live reservations, the pooled units and what can still be reserved
// (on_hand - reserved, not below 0), in one lock-free read whose cost does
// not grow with the number of reservations (see poolColumnsSQL).
func (e *Engine) availability(ctx context.Context, shop, item int64) ([]string, [][]any, error) {
	call := e.newCall(procOp(opAvailability))
	var rows [][][]byte
	for {
		var err error
		rows, err = e.query(ctx, TagRead, "SELECT p.inventory_group_id, "+poolColumnsSQL+
			poolFrom("l.shop_id = ? AND l.inventory_item_id = ?")+" ORDER BY p.inventory_group_id", shop, item)
		if err == nil {
			break
		}
		if !call.again(ctx, err, false) {
			err = call.answer(ctx, err)
			e.m.ops[opAvailability].inc(opOutcomeOf(err))
			return nil, nil, err
		}
	}
	out := make([][]any, 0, len(rows))
	for _, r := range rows {
		v, err := RowInts(r)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, []any{v[0], v[1], v[3], v[2], max(v[1]-v[3], 0)})
	}
	e.m.ops[opAvailability].inc(opOK)
	return AvailabilityColumns, out, nil
}
