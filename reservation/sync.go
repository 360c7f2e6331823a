package reservation

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Reading the engine's view for a store kept beside it: the pools, and one
// pool's on_hand and live reservations under its ledger row lock. Package
// reservation/legacy rewrites the legacy Redis counters from them
// (holdfast resync-redis).

// ListPools returns up to limit pools (ledger rows) after the key after,
// in key order; shops, when not empty, restricts them to those shops. Start
// with the zero PoolKey.
func ListPools(ctx context.Context, conns Conns, shops []int64, after PoolKey, limit int) ([]PoolKey, error) {
	q := "SELECT shop_id, inventory_item_id, inventory_group_id FROM inventory_ledger WHERE (shop_id > ? OR (shop_id = ? AND (inventory_item_id > ? OR (inventory_item_id = ? AND inventory_group_id > ?))))"
	if len(shops) > 0 {
		ids := make([]string, len(shops))
		for i, s := range shops {
			ids[i] = fmt.Sprint(s)
		}
		q += " AND shop_id IN (" + strings.Join(ids, ",") + ")"
	}
	q += " ORDER BY shop_id, inventory_item_id, inventory_group_id LIMIT ?"
	rows, err := queryOn(ctx, conns, TagRead, q, after.ShopID, after.ShopID, after.ItemID, after.ItemID, after.GroupID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]PoolKey, 0, len(rows))
	for _, r := range rows {
		v, err := rowInts(r)
		if err != nil {
			return nil, err
		}
		out = append(out, PoolKey{v[0], v[1], v[2]})
	}
	return out, nil
}

// LiveLine is a line of a live reservation in one pool.
type LiveLine struct {
	ReservationID uint64
	Qty           int64
	ExpiresAt     time.Time
}

// PoolView is one pool as WithPoolLocked read it, under its ledger row
// lock.
type PoolView struct {
	Exists bool  // the ledger row exists
	OnHand int64 // inventory_ledger.on_hand
	// Live are the pool's reserved lines not expired, as the transaction's
	// read saw them.
	Live []LiveLine

	c Conn // the locking transaction's connection
}

// Ended reports, of ids, those the engine has finished by now, each with
// how: "claimed", "released" or "expired", reading afresh in the locking
// transaction. An id the engine has no reservation for, or a live one, is
// not in the map.
func (v *PoolView) Ended(ctx context.Context, ids []uint64) (map[uint64]string, error) {
	out := map[uint64]string{}
	if len(ids) == 0 {
		return out, nil
	}
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatUint(id, 10)
	}
	rows, err := v.c.Query(ctx, "SELECT reservation_id, state FROM reservations WHERE reservation_id IN ("+strings.Join(list, ",")+
		") AND (state <> 0 OR expires_at <= UTC_TIMESTAMP(6))")
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		id, err := colUint(r[0])
		if err != nil {
			return nil, err
		}
		out[id] = map[string]string{"1": "claimed", "2": "released"}[string(r[1])]
		if out[id] == "" {
			out[id] = "expired"
		}
	}
	return out, nil
}

// WithPoolLocked runs fn while key's inventory_ledger row is locked FOR
// UPDATE, in a READ COMMITTED transaction of its own, with on_hand and the
// pool's live (unexpired) reserved lines as that transaction reads them.
// While fn runs no claim, refill, extend or stock procedure of the pool can
// commit (they lock the row first); reserves, releases and the sweeper can.
// The transaction changes nothing; fn's error is returned.
func WithPoolLocked(ctx context.Context, conns Conns, key PoolKey, fn func(ctx context.Context, v *PoolView) error) error {
	tx := TxRunner{Conns: markConns{conns}, MaxRetries: 3}
	return tx.Run(ctx, TagRead, func(ctx context.Context, c Conn) error {
		rows, err := c.Query(ctx, "SELECT 'L', on_hand FROM inventory_ledger WHERE "+key.WhereSQL()+" FOR UPDATE"+
			"; SELECT 'Q', reservation_id, quantity, expires_at FROM reserved_quantities WHERE "+key.WhereSQL()+" AND expires_at > UTC_TIMESTAMP(6)")
		if err != nil {
			return err
		}
		t := byTag(rows)
		v := &PoolView{Exists: len(t["L"]) > 0, c: c}
		if v.Exists {
			if v.OnHand, err = colInt(t["L"][0][0]); err != nil {
				return err
			}
		}
		v.Live = make([]LiveLine, 0, len(t["Q"]))
		for _, r := range t["Q"] {
			id, err := colUint(r[0])
			if err != nil {
				return err
			}
			q, err := colInt(r[1])
			if err != nil {
				return err
			}
			exp, err := colTime(r[2])
			if err != nil {
				return err
			}
			v.Live = append(v.Live, LiveLine{ReservationID: id, Qty: q, ExpiresAt: exp})
		}
		return fn(ctx, v)
	})
}
