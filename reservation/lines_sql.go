package reservation

import (
	"context"
	"slices"
	"strconv"
	"strings"
)

// Deleting many rows by primary key.
//
// A DELETE ... WHERE pk IN (long list) is planned from index statistics once
// the list is longer than eq_range_index_dive_limit (200 by default), and
// the plan is then often a scan of the whole table or key prefix; a DELETE
// does not skip rows it cannot lock the way a SKIP LOCKED select does, so it
// waits on every row another reserve holds, and two such DELETEs deadlock.
// FORCE INDEX only turns the scan into a prefix scan. Joining a derived
// table of the exact keys, STRAIGHT_JOIN so the keys drive, makes the plan an
// eq_ref lookup per key: exactly those rows are locked, whatever the
// statistics say. Every multi-row delete of the engine and the refiller
// goes through DeleteByKeys.
//
// The same reasoning keeps every locking access to reserved_quantities on
// its primary key (reservation_id, line_no): a DELETE that found rows through
// rq_pool or rq_expires would lock the secondary record before the clustered
// one, the opposite of a claim or release deleting by primary key, and
// InnoDB deadlocks the two. Rows are found with an unlocked read and deleted
// by key, with the condition re-checked on the locked row.

// DeleteByKeys deletes the rows of table whose columns cols equal one of
// keys, plus the condition cond on the row (aliased t; "" for none) with its
// args, and returns the number of rows deleted.
func DeleteByKeys(ctx context.Context, c Conn, table string, cols []string, keys [][]int64, cond string, args ...any) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	res, err := c.Exec(ctx, DeleteByKeysSQL(table, cols, keys, cond), args...)
	return int(res.AffectedRows), err
}

// DeleteByKeysSQL is the statement DeleteByKeys sends, for a caller that
// batches it with others in one round trip. keys must not be empty.
func DeleteByKeysSQL(table string, cols []string, keys [][]int64, cond string) string {
	var b strings.Builder
	b.Grow(64 + len(keys)*(16+24*len(cols)))
	b.WriteString("DELETE t FROM ")
	writeKeysJoin(&b, table, cols, keys)
	if cond != "" {
		b.WriteString(" WHERE " + cond)
	}
	return b.String()
}

// lockByKeysSQL selects sel from the rows of table whose cols equal one of
// keys (and that satisfy cond, "" for any), locking them: like
// DeleteByKeysSQL, each key is an eq_ref lookup on the primary key, so
// exactly those rows are locked, clustered record only.
func lockByKeysSQL(table string, cols []string, keys [][]int64, sel, cond string) string {
	var b strings.Builder
	b.Grow(64 + len(sel) + len(keys)*(16+24*len(cols)))
	b.WriteString("SELECT " + sel + " FROM ")
	writeKeysJoin(&b, table, cols, keys)
	if cond != "" {
		b.WriteString(" WHERE " + cond)
	}
	b.WriteString(" FOR UPDATE")
	return b.String()
}

// writeKeysJoin writes "(SELECT 1 AS k0, 2 AS k1 UNION ALL SELECT ...) k
// STRAIGHT_JOIN table t ON t.col0 = k.k0 AND ...", with the keys in
// ascending order: the rows are locked in primary-key order, the order of
// any scan of the table, so two statements locking overlapping rows this way
// (two sweepers, a sweeper and a bulk UPDATE) never wait on each other in a
// cycle. The caller's keys are not reordered.
func writeKeysJoin(b *strings.Builder, table string, cols []string, keys [][]int64) {
	if !slices.IsSortedFunc(keys, slices.Compare[[]int64]) {
		keys = slices.Clone(keys)
		slices.SortFunc(keys, slices.Compare[[]int64])
	}
	b.WriteString("(")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		b.WriteString("SELECT ")
		for j, v := range k {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.FormatInt(v, 10))
			if i == 0 {
				b.WriteString(" AS k" + strconv.Itoa(j))
			}
		}
	}
	b.WriteString(") k STRAIGHT_JOIN " + table + " t ON ")
	for j, col := range cols {
		if j > 0 {
			b.WriteString(" AND ")
		}
		b.WriteString("t." + col + " = k.k" + strconv.Itoa(j))
	}
}

var (
	unitCols = []string{"shop_id", "inventory_item_id", "inventory_group_id", "id"}
	lineCols = []string{"reservation_id", "line_no"}
)

// unitKeys returns the reservation_units keys (unitCols) of key's pool for
// the given unit ids.
func unitKeys(key PoolKey, ids []int64) [][]int64 {
	keys := make([][]int64, len(ids))
	for i, id := range ids {
		keys[i] = []int64{key.ShopID, key.ItemID, key.GroupID, id}
	}
	return keys
}

// guardedDeleteSQL is DeleteByKeysSQL followed by GuardRowCount: in one
// multi-statement round trip, the statements after it run only if exactly
// len(keys) rows were deleted.
func guardedDeleteSQL(table string, cols []string, keys [][]int64) string {
	return DeleteByKeysSQL(table, cols, keys, "") + "; " + GuardRowCount(int64(len(keys)))
}
