package reservation

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// Pool counters.
//
// A refill must know how many units the ledger can still put in the pool:
// on_hand - pool rows - live reserved quantity. Summing the live reserved
// lines costs one index entry per reservation, under the ledger row lock,
// and a flash sale piles up reservations, so each refill would get slower
// exactly when pools drain fastest. Instead pool_counters keeps, per pool,
//
//	issued = pool rows + quantity of the reserved lines present + pending returns
//
// under the same lock. A reserve moves units from the pool to a line and
// leaves issued alone; so does nothing else without the ledger row lock:
//
//   - refill and the stock procedures (ledger lock held) add or delete units
//     and delete expired lines, and change issued by exactly what they
//     changed;
//   - a claim (ledger lock held) deletes the lines it deducts and takes
//     their quantity off issued;
//   - release and the sweeper delete lines without the ledger lock, and
//     insert a reservation_returns row per line in the same transaction, so
//     the sum holds at every commit; the next refill deletes those rows and
//     takes their quantity off issued.
//
// So on_hand - issued, read under the lock, is what the ledger can still
// issue, whatever the number of reservations, and
// issued - pool rows - pending returns - expired lines present is the live
// reserved quantity. Every change is exact: a transaction subtracts only
// rows it deleted itself, found locked (returns and expired lines are
// locked by primary key before they are deleted), and guards each DELETE's
// row count (GuardRowCount) so a mismatch rolls everything back. A missing
// counter row is recounted from the tables, under the lock, in one
// statement (one read view: a reserve or release committing meanwhile is
// seen entirely or not at all). The reconciler checks the counters.

// LockedPool is one pool as LockPool read it, under its ledger row lock.
// Finish then writes what the caller decided.
type LockedPool struct {
	Key    PoolKey
	Exists bool  // the ledger row exists
	OnHand int64 // inventory_ledger.on_hand
	// Pooled is the number of units in the pool: a consistent read
	// (reserves take units meanwhile, refills cannot) or, after LockUnits,
	// exact, and UnitIDs lists them in ascending order.
	Pooled  int64
	UnitIDs []int64
	Now     string // the database's UTC_TIMESTAMP(6), as text
	// Issued is pool_counters.issued (recounted if the row was missing)
	// less the returns and expired lines LockPool took, which Finish
	// deletes. NextID is the next unit id to use.
	Issued, NextID int64
	// Returned and Expired are the quantities of the returns and expired
	// lines taken; ExpiredLines counts the lines.
	Returned, Expired int64
	ExpiredLines      int
	// More says there were more returns or expired lines than one
	// transaction takes (takeBatch): run another.
	More bool

	counted   bool      // the pool_counters row exists
	recounted bool      // stored comes from recount, not from the row
	stored    [2]int64  // issued and next_unit_id as stored (or recounted)
	returns   [][]int64 // full primary keys of the returns taken
	expired   [][]int64 // (reservation_id, line_no) of the expired lines taken, locked
}

// Room is what the ledger can still issue into the pool: on_hand - issued.
// Negative when the pool promises more than the ledger holds (a forced
// claim, or on_hand lowered outside holdfast).
func (p *LockedPool) Room() int64 { return p.OnHand - p.Issued }

// Live is the reserved quantity still held, at most: lines not expired,
// plus returns not yet committed or beyond this transaction's batch.
func (p *LockedPool) Live() int64 { return p.Issued - p.Pooled }

// takeBatch bounds the returns and expired lines one transaction takes.
const takeBatch = 1000

var returnCols = []string{"shop_id", "inventory_item_id", "inventory_group_id", "reservation_id", "line_no"}

// LockPool locks key's inventory_ledger row, then its pool_counters row, in
// the caller's READ COMMITTED transaction (its first statement, if c is a
// TxRunner connection), and reads the pool: one round trip, plus one to
// recount a missing counter row and one to lock expired lines when there
// are any. A missing ledger row (Exists false) reads as on_hand 0.
func LockPool(ctx context.Context, c Conn, key PoolKey) (*LockedPool, error) {
	w := key.WhereSQL()
	var b strings.Builder
	b.WriteString("SELECT 'L', on_hand FROM inventory_ledger WHERE " + w + " FOR UPDATE; ")
	b.WriteString("SELECT 'C', issued, next_unit_id FROM pool_counters WHERE " + w + " FOR UPDATE; ")
	b.WriteString("SELECT 'U', COUNT(*) FROM reservation_units WHERE " + w + "; ")
	fmt.Fprintf(&b, "SELECT 'R', reservation_id, line_no, quantity FROM reservation_returns WHERE %s LIMIT %d; ", w, takeBatch)
	fmt.Fprintf(&b, "SELECT 'E', reservation_id, line_no FROM reserved_quantities WHERE %s AND expires_at <= UTC_TIMESTAMP(6) LIMIT %d; ", w, takeBatch)
	b.WriteString("SELECT 'T', UTC_TIMESTAMP(6)")
	rows, err := c.Query(ctx, b.String())
	if err != nil {
		return nil, err
	}
	p := &LockedPool{Key: key}
	var expired [][]int64
	for _, r := range rows {
		if len(r) < 2 {
			return nil, fmt.Errorf("reservation: lock pool %v: bad row", key)
		}
		if string(r[0]) == "T" {
			p.Now = string(r[1])
			continue
		}
		v, err := RowInts(r[1:])
		if err != nil {
			return nil, err
		}
		switch string(r[0]) {
		case "L":
			p.Exists, p.OnHand = true, v[0]
		case "C":
			p.counted, p.stored = true, [2]int64{v[0], v[1]}
		case "U":
			p.Pooled = v[0]
		case "R":
			p.returns = append(p.returns, []int64{key.ShopID, key.ItemID, key.GroupID, v[0], v[1]})
			p.Returned += v[2]
		case "E":
			expired = append(expired, v[:2])
		}
	}
	p.More = len(p.returns) == takeBatch || len(expired) == takeBatch
	// Without a ledger row a counter row is a leftover of a pool deleted
	// behind holdfast's back: recount it too.
	if !p.counted || !p.Exists {
		if err := p.recount(ctx, c); err != nil {
			return nil, err
		}
	}
	if len(expired) > 0 {
		// Lock them by primary key (the order claims and releases lock
		// lines in), re-checking expiry on the locked row: a release may
		// have deleted one meanwhile (it left a return instead).
		q, err := Interpolate(lockByKeysSQL(TableReserved, lineCols, expired, "t.reservation_id, t.line_no, t.quantity", "t.expires_at <= ?"), p.Now)
		if err != nil {
			return nil, err
		}
		locked, err := c.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, r := range locked {
			v, err := RowInts(r)
			if err != nil {
				return nil, err
			}
			p.expired = append(p.expired, v[:2])
			p.Expired += v[2]
		}
		p.ExpiredLines = len(p.expired)
	}
	p.Issued = p.stored[0] - p.Returned - p.Expired
	p.NextID = p.stored[1]
	return p, nil
}

// LockUnits locks every unit of the pool, in ascending id order — the
// order in which reserves' SKIP LOCKED selects take them, so the two never
// wait for each other in a cycle — waiting for reserves that hold some, and
// sets Pooled and UnitIDs exactly. While the locks are held no reserve can
// take a unit of the pool. For the stock procedures, before they shrink it.
func (p *LockedPool) LockUnits(ctx context.Context, c Conn) error {
	rows, err := c.Query(ctx, "SELECT id FROM reservation_units FORCE INDEX (PRIMARY) WHERE "+p.Key.WhereSQL()+" ORDER BY id FOR UPDATE")
	if err != nil {
		return err
	}
	p.UnitIDs = make([]int64, len(rows))
	for i, r := range rows {
		if p.UnitIDs[i], err = ColInt(r[0]); err != nil {
			return err
		}
	}
	p.Pooled = int64(len(rows))
	return nil
}

// recount computes issued and the next unit id from the tables, in one
// statement (one read view), under the ledger row lock.
func (p *LockedPool) recount(ctx context.Context, c Conn) error {
	w := p.Key.WhereSQL()
	rows, err := c.Query(ctx, `SELECT (SELECT COUNT(*) FROM reservation_units WHERE `+w+`)
 + (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities WHERE `+w+`)
 + (SELECT COALESCE(SUM(quantity), 0) FROM reservation_returns WHERE `+w+`),
 (SELECT COALESCE(MAX(id), 0) FROM reservation_units WHERE `+w+`)`)
	if err != nil {
		return err
	}
	if len(rows) != 1 {
		return fmt.Errorf("reservation: recount %v: %d rows", p.Key, len(rows))
	}
	v, err := RowInts(rows[0])
	if err != nil {
		return err
	}
	next := v[1] + 1
	if p.counted {
		next = max(next, p.stored[1]) // ids only ever grow
	}
	p.stored = [2]int64{v[0], next}
	p.recounted = true
	return nil
}

// Finish returns the statements that complete the caller's change: delete
// the units remove (locked by the caller), insert add new units, delete the
// expired lines and returns LockPool took, set on_hand to onHand if setOnHand
// (creating the ledger row if it did not exist), and write the counter. Each
// DELETE is guarded (GuardRowCount). Send them with CommitWith; "" means
// there is nothing to write. It updates p (Pooled, Issued, NextID) to the
// state after them.
func (p *LockedPool) Finish(add int64, remove []int64, setOnHand bool, onHand int64) string {
	k := p.Key
	var stmts []string
	if len(remove) > 0 {
		stmts = append(stmts, guardedDeleteSQL(TableUnits, unitCols, unitKeys(k, remove)))
		p.Pooled -= int64(len(remove))
		p.Issued -= int64(len(remove))
	}
	if add > 0 {
		var b strings.Builder
		b.Grow(int(add) * 48)
		b.WriteString("INSERT INTO reservation_units (shop_id, inventory_item_id, inventory_group_id, id) VALUES ")
		prefix := "(" + strconv.FormatInt(k.ShopID, 10) + "," + strconv.FormatInt(k.ItemID, 10) + "," + strconv.FormatInt(k.GroupID, 10) + ","
		for i := int64(0); i < add; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(prefix)
			b.WriteString(strconv.FormatInt(p.NextID+i, 10))
			b.WriteByte(')')
		}
		stmts = append(stmts, b.String())
		p.NextID += add
		p.Pooled += add
		p.Issued += add
	}
	if len(p.expired) > 0 {
		stmts = append(stmts, guardedDeleteSQL(TableReserved, lineCols, p.expired))
	}
	if len(p.returns) > 0 {
		stmts = append(stmts, guardedDeleteSQL(TableReturns, returnCols, p.returns))
	}
	if setOnHand {
		if p.Exists {
			stmts = append(stmts, "UPDATE inventory_ledger SET on_hand = "+strconv.FormatInt(onHand, 10)+", updated_at = UTC_TIMESTAMP(6) WHERE "+k.WhereSQL())
		} else {
			stmts = append(stmts, fmt.Sprintf("INSERT INTO inventory_ledger (shop_id, inventory_item_id, inventory_group_id, on_hand, updated_at) VALUES (%d, %d, %d, %d, UTC_TIMESTAMP(6))",
				k.ShopID, k.ItemID, k.GroupID, onHand))
		}
		p.OnHand = onHand
	}
	switch {
	case !p.counted:
		stmts = append(stmts, fmt.Sprintf("INSERT INTO pool_counters (shop_id, inventory_item_id, inventory_group_id, issued, next_unit_id) VALUES (%d, %d, %d, %d, %d)",
			k.ShopID, k.ItemID, k.GroupID, p.Issued, p.NextID))
	case p.recounted || p.Issued != p.stored[0] || p.NextID != p.stored[1]:
		stmts = append(stmts, fmt.Sprintf("UPDATE pool_counters SET issued = %d, next_unit_id = %d WHERE %s", p.Issued, p.NextID, k.WhereSQL()))
	}
	return strings.Join(stmts, "; ")
}

// issuedDecrementSQL takes qty off key's issued counter (a claim deleting
// lines under the ledger lock). A missing row stays missing: the next
// recount counts the truth.
func issuedDecrementSQL(key PoolKey, qty int64) string {
	return "UPDATE pool_counters SET issued = issued - " + strconv.FormatInt(qty, 10) + " WHERE " + key.WhereSQL()
}

// returnedLine is a reserved line deleted without the ledger lock.
type returnedLine struct {
	key  PoolKey
	id   uint64 // reservation_id
	line int64  // line_no
	qty  int64
}

// returnsInsertSQL records deleted lines as returns, in the transaction that
// deletes them (release, the sweeper). rows must not be empty.
func returnsInsertSQL(rows []returnedLine) string {
	var b strings.Builder
	b.WriteString("INSERT INTO reservation_returns (shop_id, inventory_item_id, inventory_group_id, reservation_id, line_no, quantity) VALUES ")
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "(%d,%d,%d,%d,%d,%d)", r.key.ShopID, r.key.ItemID, r.key.GroupID, r.id, r.line, r.qty)
	}
	return b.String()
}
