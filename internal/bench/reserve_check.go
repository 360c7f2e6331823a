package bench

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/holdfast-db/holdfast/reservation"
)

// PoolKey names one item at one location of one shop: one holdfast pool.
type PoolKey struct{ Shop, Item, Location int64 }

// key is k as the reservation package names a pool.
func (k PoolKey) key() reservation.PoolKey {
	return reservation.PoolKey{ShopID: k.Shop, ItemID: k.Item, GroupID: k.Location}
}

func (k PoolKey) where() string {
	return fmt.Sprintf("shop_id = %d AND inventory_item_id = %d AND inventory_group_id = %d", k.Shop, k.Item, k.Location)
}

// reserveSchema creates the counter workloads' tables in the database the
// bench db is connected to (holdfast's schema is created by holdfast
// migrate).
var reserveSchema = []string{
	`CREATE TABLE IF NOT EXISTS counter (
  id INT NOT NULL PRIMARY KEY,
  available BIGINT NOT NULL
) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS reservations_baseline (
  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
  idempotency_key VARBINARY(255) NOT NULL,
  item BIGINT NOT NULL,
  quantity INT NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  UNIQUE KEY reservations_baseline_key (idempotency_key)
) ENGINE=InnoDB`,
}

// ResetCounter puts available units in the counter and empties
// reservations_baseline: the fresh state of workloads (a) and (b).
func ResetCounter(ctx context.Context, db *sql.DB, available int64) error {
	if _, err := db.ExecContext(ctx,
		"INSERT INTO counter (id, available) VALUES (1, ?) ON DUPLICATE KEY UPDATE available = VALUES(available)",
		available); err != nil {
		return fmt.Errorf("bench: reset counter: %w", err)
	}
	if _, err := db.ExecContext(ctx, "TRUNCATE TABLE reservations_baseline"); err != nil {
		return fmt.Errorf("bench: reset counter: %w", err)
	}
	return nil
}

// CounterCheck is the counter workloads' state after a run.
type CounterCheck struct {
	Available    int64 // counter.available now
	BaselineRows int64 // rows in reservations_baseline
}

// CheckCounter reads the counter and counts the baseline's reservations in
// one statement.
func CheckCounter(ctx context.Context, db *sql.DB) (CounterCheck, error) {
	var c CounterCheck
	err := db.QueryRowContext(ctx,
		"SELECT (SELECT available FROM counter WHERE id = 1), (SELECT COUNT(*) FROM reservations_baseline)").
		Scan(&c.Available, &c.BaselineRows)
	if err != nil {
		return c, fmt.Errorf("bench: check counter: %w", err)
	}
	return c, nil
}

// Problems compares c with a run that started at start units and whose
// clients counted reserved successes; records says whether each success
// also inserted a reservations_baseline row (workload (a)). No problems:
// nothing was oversold and nothing was lost.
func (c CounterCheck) Problems(start, reserved int64, records bool) []string {
	var out []string
	if c.Available < 0 {
		out = append(out, fmt.Sprintf("OVERSOLD: counter is %d, below zero", c.Available))
	}
	if taken := start - c.Available; taken != reserved {
		out = append(out, fmt.Sprintf("counter fell by %d but clients counted %d reservations", taken, reserved))
	}
	if records && c.BaselineRows != reserved {
		out = append(out, fmt.Sprintf("%d reservations_baseline rows but clients counted %d reservations", c.BaselineRows, reserved))
	}
	return out
}

// PoolCheck is one holdfast pool's state after a run: the stock as
// reservation.ReadPool reads it, and what the bench compares with its
// clients' counts.
type PoolCheck struct {
	reservation.PoolStock
	Found        bool  // the pool has a ledger row
	Reservations int64 // rows in reservations for the shop
	// Missing counts reservation ids the clients were given that have no
	// reserved_quantities row; Extra counts rows no client was told about.
	Missing, Extra int
}

// CheckPool reads pool k with reservation.ReadPool (one statement, one
// read view, so a refill committing meanwhile is seen whole or not at
// all), then counts the shop's reservations and compares the reserved
// lines with ids, the sorted reservation ids the clients were given.
func CheckPool(ctx context.Context, db *sql.DB, k PoolKey, ids []uint64) (PoolCheck, error) {
	var c PoolCheck
	var err error
	c.PoolStock, c.Found, err = reservation.ReadPool(ctx, reservation.SQLQuerier(db), k.key())
	if err != nil {
		return c, fmt.Errorf("bench: check pool: %w", err)
	}
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reservations WHERE shop_id = ?", k.Shop).Scan(&c.Reservations); err != nil {
		return c, fmt.Errorf("bench: check pool: %w", err)
	}
	rows, err := db.QueryContext(ctx, "SELECT reservation_id FROM reserved_quantities WHERE "+k.where())
	if err != nil {
		return c, fmt.Errorf("bench: check pool: %w", err)
	}
	defer rows.Close()
	got := make([]uint64, 0, len(ids))
	for rows.Next() {
		var id uint64
		if err := rows.Scan(&id); err != nil {
			return c, fmt.Errorf("bench: check pool: %w", err)
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		return c, fmt.Errorf("bench: check pool: %w", err)
	}
	slices.Sort(got)
	c.Missing, c.Extra = diffSorted(ids, got)
	return c, nil
}

// diffSorted counts the elements of want missing from got and those of got
// not in want (both sorted; duplicates count separately).
func diffSorted(want, got []uint64) (missing, extra int) {
	i, j := 0, 0
	for i < len(want) && j < len(got) {
		switch {
		case want[i] == got[j]:
			i++
			j++
		case want[i] < got[j]:
			missing++
			i++
		default:
			extra++
			j++
		}
	}
	return missing + len(want) - i, extra + len(got) - j
}

// Problems compares c with a run on a pool that started with onHand units
// and whose clients counted reserved one-unit reservations. No problems:
// the pool keeps the stock invariant (reservation.PoolStock: nothing
// oversold, the pool counter exact) and every success is a reserved line
// and vice versa.
func (c PoolCheck) Problems(onHand, reserved int64) []string {
	var out []string
	if !c.Found {
		return []string{fmt.Sprintf("pool %v has no inventory_ledger row", c.Key)}
	}
	if c.OnHand != onHand {
		out = append(out, fmt.Sprintf("on_hand is %d, want %d (nothing was claimed)", c.OnHand, onHand))
	}
	out = append(out, c.PoolStock.Problems()...)
	if c.Lines != reserved || c.Reserved != reserved {
		out = append(out, fmt.Sprintf("%d reserved_quantities rows (quantity %d) but clients counted %d reservations",
			c.Lines, c.Reserved, reserved))
	}
	if c.Reservations != reserved {
		out = append(out, fmt.Sprintf("%d reservations rows but clients counted %d", c.Reservations, reserved))
	}
	if c.Missing > 0 || c.Extra > 0 {
		out = append(out, fmt.Sprintf("tokens vs reserved lines: %d given to clients but not reserved, %d reserved but given to no client",
			c.Missing, c.Extra))
	}
	return out
}

// DropShop deletes every row of shop's pool k (and the shop's
// reservations) in one transaction, taking the ledger row lock first as
// holdfast does, so a refill running meanwhile waits and then finds no
// ledger row. It keeps the tables the same size from run to run.
func DropShop(ctx context.Context, db *sql.DB, k PoolKey) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("bench: drop shop: %w", err)
	}
	defer tx.Rollback()
	w := k.where()
	for _, q := range []string{
		"SELECT on_hand FROM inventory_ledger WHERE " + w + " FOR UPDATE",
		"DELETE FROM reservation_units WHERE " + w,
		"DELETE FROM reserved_quantities WHERE " + w,
		fmt.Sprintf("DELETE FROM reservations WHERE shop_id = %d", k.Shop),
		"DELETE FROM inventory_ledger WHERE " + w,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("bench: drop shop: %s: %w", q, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("bench: drop shop: %w", err)
	}
	return nil
}
