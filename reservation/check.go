package reservation

import (
	"context"
	"database/sql"
	"fmt"
)

// The stock invariant, checked from the tables.
//
// For every pool (one item at one location of one shop: one
// inventory_ledger row):
//
//	pool rows + reserved quantity <= on_hand
//
// where the reserved quantity counts every reserved_quantities line
// present, expired or not (its units are out of the pool until it is swept
// or refilled over), and, when the pool has a pool_counters row,
//
//	pool_counters.issued = pool rows + reserved quantity + pending returns
//
// (counters.go). ReadStock and CheckStock read both and are the one place
// that does: the reconciler, the benchmarks and the chaos harness use them.

// Querier runs one statement and returns every row of its result; a NULL
// column is a nil []byte. Conn is one; SQLQuerier adapts database/sql.
type Querier interface {
	Query(ctx context.Context, query string, args ...any) ([][][]byte, error)
}

// SQLQuerier returns a Querier over a *sql.DB, *sql.Conn or *sql.Tx (say, a
// replica's, or one inside a consistent-snapshot transaction). Arguments
// are interpolated by Interpolate, as SQLConns does.
func SQLQuerier(q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}) Querier {
	return sqlQuerier{q}
}

type sqlQuerier struct {
	q interface {
		QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	}
}

func (s sqlQuerier) Query(ctx context.Context, query string, args ...any) ([][][]byte, error) {
	q, err := Interpolate(query, args...)
	if err != nil {
		return nil, err
	}
	rows, err := s.q.QueryContext(ctx, q)
	if err != nil {
		return nil, mapDriverError(err)
	}
	return scanAll(rows)
}

// connsQuerier borrows a connection from conns for each statement.
type connsQuerier struct {
	conns Conns
	tag   string
}

func (c connsQuerier) Query(ctx context.Context, q string, args ...any) ([][][]byte, error) {
	return queryOn(ctx, c.conns, c.tag, q, args...)
}

// PoolStock is one pool as ReadStock read it, in one statement (one read
// view: a transaction committing meanwhile is seen whole or not at all).
type PoolStock struct {
	Key    PoolKey
	OnHand int64 // inventory_ledger.on_hand
	Pooled int64 // rows in reservation_units
	// Lines and Reserved are the reserved_quantities lines of the pool and
	// their summed quantity, expired or not.
	Lines, Reserved int64
	Returns         int64 // quantity in reservation_returns (pending returns)
	// Issued is pool_counters.issued; Counted is false (and Issued 0) when
	// the pool has no counter row yet.
	Issued  int64
	Counted bool
	// NoLedger marks units or lines of a pool with no ledger row (found by
	// CheckStock only): its on_hand is taken as 0, so any unit oversells.
	NoLedger bool
}

// Oversold reports whether the pool promises more than the ledger holds:
// pool rows + reserved > on_hand.
func (p PoolStock) Oversold() bool { return p.Pooled+p.Reserved > p.OnHand }

// Drift is pool_counters.issued less what it counts (pool rows + reserved
// + pending returns); 0 when they agree or there is no counter row. A
// positive drift only makes refills cautious; a negative one lets them
// over-fill: both come from writes outside holdfast (or a bug). Deleting
// the counter row makes the next refill recount it.
func (p PoolStock) Drift() int64 {
	if !p.Counted {
		return 0
	}
	return p.Issued - (p.Pooled + p.Reserved + p.Returns)
}

// OK reports whether the pool keeps the invariant.
func (p PoolStock) OK() bool { return !p.Oversold() && p.Drift() == 0 }

// Problems says in words how the pool breaks the invariant; none when OK.
func (p PoolStock) Problems() []string {
	var out []string
	if p.NoLedger {
		out = append(out, fmt.Sprintf("NO LEDGER ROW: pool %d + reserved %d of a pool with no inventory_ledger row (pool %v)", p.Pooled, p.Reserved, p.Key))
	} else if p.Oversold() {
		out = append(out, fmt.Sprintf("OVERSOLD: pool %d + reserved %d > on_hand %d (pool %v)", p.Pooled, p.Reserved, p.OnHand, p.Key))
	}
	if d := p.Drift(); d != 0 {
		out = append(out, fmt.Sprintf("counter drift %d: pool_counters.issued %d, pool %d + reserved %d + returns %d (pool %v)",
			d, p.Issued, p.Pooled, p.Reserved, p.Returns, p.Key))
	}
	return out
}

// stockPage bounds the ledger rows one statement of ReadStock reads.
const stockPage = 500

// ReadStock reads every pool within scope, in ledger key order, one
// statement per page of stockPage ledger rows, and calls each for every
// pool. A zero field of scope matches every value: PoolKey{} is every
// pool, PoolKey{ShopID: 3} those of shop 3, a full key one pool. Only
// pools with a ledger row are read. An error from each stops the read and
// is returned.
func ReadStock(ctx context.Context, q Querier, scope PoolKey, each func(PoolStock) error) error {
	conds, args := scopeConds("l", scope)
	where := ""
	for _, c := range conds {
		where += c + " AND "
	}
	var after PoolKey
	for {
		rows, err := q.Query(ctx, `SELECT l.shop_id, l.inventory_item_id, l.inventory_group_id, l.on_hand,
 (SELECT COUNT(*) FROM reservation_units u
   WHERE u.shop_id = l.shop_id AND u.inventory_item_id = l.inventory_item_id AND u.inventory_group_id = l.inventory_group_id),
 (SELECT COUNT(*) FROM reserved_quantities r
   WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.inventory_group_id = l.inventory_group_id),
 (SELECT COALESCE(SUM(r.quantity), 0) FROM reserved_quantities r
   WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.inventory_group_id = l.inventory_group_id),
 (SELECT COALESCE(SUM(x.quantity), 0) FROM reservation_returns x
   WHERE x.shop_id = l.shop_id AND x.inventory_item_id = l.inventory_item_id AND x.inventory_group_id = l.inventory_group_id),
 (SELECT c.issued FROM pool_counters c
   WHERE c.shop_id = l.shop_id AND c.inventory_item_id = l.inventory_item_id AND c.inventory_group_id = l.inventory_group_id)
FROM inventory_ledger l
WHERE `+where+`(l.shop_id > ? OR (l.shop_id = ? AND (l.inventory_item_id > ? OR (l.inventory_item_id = ? AND l.inventory_group_id > ?))))
ORDER BY l.shop_id, l.inventory_item_id, l.inventory_group_id LIMIT `+fmt.Sprint(stockPage),
			append(args, after.ShopID, after.ShopID, after.ItemID, after.ItemID, after.GroupID)...)
		if err != nil {
			return err
		}
		for _, r := range rows {
			if len(r) != 9 {
				return fmt.Errorf("reservation: read stock: %d columns, want 9", len(r))
			}
			v, err := RowInts(r)
			if err != nil {
				return err
			}
			p := PoolStock{Key: PoolKey{v[0], v[1], v[2]}, OnHand: v[3], Pooled: v[4], Lines: v[5], Reserved: v[6], Returns: v[7],
				Issued: v[8], Counted: r[8] != nil}
			after = p.Key
			if err := each(p); err != nil {
				return err
			}
		}
		if len(rows) < stockPage {
			return nil
		}
	}
}

// ReadPool reads one pool; ok is false when it has no ledger row.
func ReadPool(ctx context.Context, q Querier, key PoolKey) (p PoolStock, ok bool, err error) {
	err = ReadStock(ctx, q, key, func(s PoolStock) error {
		p, ok = s, true
		return nil
	})
	return p, ok, err
}

// StockReport is what CheckStock found.
type StockReport struct {
	Pools int         // pools read
	Bad   []PoolStock // those that break the invariant, in key order
}

// scopeConds returns the conditions on table alias's key columns that
// keep the rows within scope (a zero field matches every value), and their
// arguments.
func scopeConds(alias string, scope PoolKey) (conds []string, args []any) {
	for _, f := range []struct {
		col string
		v   int64
	}{{"shop_id", scope.ShopID}, {"inventory_item_id", scope.ItemID}, {"inventory_group_id", scope.GroupID}} {
		if f.v != 0 {
			conds = append(conds, alias+"."+f.col+" = ?")
			args = append(args, f.v)
		}
	}
	return conds, args
}

// CheckStock reads every pool within scope (see ReadStock) and reports
// those that break the invariant, then the pools within scope that hold
// units or lines but have no ledger row (NoLedger), which ReadStock, led
// by the ledger, cannot see.
func CheckStock(ctx context.Context, q Querier, scope PoolKey) (StockReport, error) {
	var r StockReport
	err := ReadStock(ctx, q, scope, func(p PoolStock) error {
		r.Pools++
		if !p.OK() {
			r.Bad = append(r.Bad, p)
		}
		return nil
	})
	if err != nil {
		return r, err
	}
	orphans, err := readNoLedger(ctx, q, scope)
	r.Bad = append(r.Bad, orphans...)
	return r, err
}

// noLedgerLimit bounds the pools readNoLedger reports: a few name the
// fault as well as all of them.
const noLedgerLimit = 100

// readNoLedger returns the pools within scope that have rows in
// reservation_units or reserved_quantities but none in inventory_ledger,
// in key order, at most noLedgerLimit of them.
func readNoLedger(ctx context.Context, q Querier, scope PoolKey) ([]PoolStock, error) {
	conds, args := scopeConds("t", scope)
	where := ""
	for _, c := range conds {
		where += " AND " + c
	}
	const noLedger = ` WHERE NOT EXISTS (SELECT 1 FROM inventory_ledger l
   WHERE l.shop_id = t.shop_id AND l.inventory_item_id = t.inventory_item_id AND l.inventory_group_id = t.inventory_group_id)`
	rows, err := q.Query(ctx, `SELECT shop_id, inventory_item_id, inventory_group_id, SUM(pooled), SUM(line_count), SUM(qty) FROM (
 SELECT t.shop_id, t.inventory_item_id, t.inventory_group_id, COUNT(*) AS pooled, 0 AS line_count, 0 AS qty
  FROM reservation_units t`+noLedger+where+` GROUP BY t.shop_id, t.inventory_item_id, t.inventory_group_id
 UNION ALL
 SELECT t.shop_id, t.inventory_item_id, t.inventory_group_id, 0, COUNT(*), SUM(t.quantity)
  FROM reserved_quantities t`+noLedger+where+` GROUP BY t.shop_id, t.inventory_item_id, t.inventory_group_id
) o GROUP BY shop_id, inventory_item_id, inventory_group_id
ORDER BY shop_id, inventory_item_id, inventory_group_id LIMIT `+fmt.Sprint(noLedgerLimit), append(args, args...)...)
	if err != nil {
		return nil, err
	}
	var out []PoolStock
	for _, r := range rows {
		if len(r) != 6 {
			return nil, fmt.Errorf("reservation: read pools with no ledger row: %d columns, want 6", len(r))
		}
		v, err := RowInts(r)
		if err != nil {
			return nil, err
		}
		out = append(out, PoolStock{Key: PoolKey{v[0], v[1], v[2]}, Pooled: v[3], Lines: v[4], Reserved: v[5], NoLedger: true})
	}
	return out, nil
}
