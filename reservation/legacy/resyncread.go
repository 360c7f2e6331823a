package legacy

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
)

// What Resync reads of the engine's tables: the pools, and one pool's
// on_hand and live reservations under its ledger row lock, from which it
// rewrites the legacy Redis counters (holdfast resync-redis).

// ListPools returns up to limit pools (ledger rows) after the key after,
// in key order; shops, when not empty, restricts them to those shops. Start
// with the zero reservation.PoolKey.
func ListPools(ctx context.Context, conns reservation.Conns, shops []int64, after reservation.PoolKey, limit int) ([]reservation.PoolKey, error) {
	q := "SELECT shop_id, inventory_item_id, inventory_group_id FROM inventory_ledger WHERE (shop_id > ? OR (shop_id = ? AND (inventory_item_id > ? OR (inventory_item_id = ? AND inventory_group_id > ?))))"
	if len(shops) > 0 {
		ids := make([]string, len(shops))
		for i, s := range shops {
			ids[i] = fmt.Sprint(s)
		}
		q += " AND shop_id IN (" + strings.Join(ids, ",") + ")"
	}
	q += " ORDER BY shop_id, inventory_item_id, inventory_group_id LIMIT ?"
	rows, err := reservation.Query(ctx, conns, reservation.TagRead, q, after.ShopID, after.ShopID, after.ItemID, after.ItemID, after.GroupID, limit)
	if err != nil {
		return nil, err
	}
	out := make([]reservation.PoolKey, 0, len(rows))
	for _, r := range rows {
		v, err := reservation.RowInts(r)
		if err != nil {
			return nil, err
		}
		if len(v) != 3 {
			return nil, fmt.Errorf("legacy: list pools: %d columns, want 3", len(v))
		}
		out = append(out, reservation.PoolKey{ShopID: v[0], ItemID: v[1], GroupID: v[2]})
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

	c reservation.Conn // the locking transaction's connection
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
		id, err := reservation.ColUint(r[0])
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
func WithPoolLocked(ctx context.Context, conns reservation.Conns, key reservation.PoolKey, fn func(ctx context.Context, v *PoolView) error) error {
	tx := reservation.TxRunner{Conns: conns, MaxRetries: 3}
	return tx.Run(ctx, reservation.TagRead, func(ctx context.Context, c reservation.Conn) error {
		rows, err := c.Query(ctx, "SELECT 'L', on_hand FROM inventory_ledger WHERE "+key.WhereSQL()+" FOR UPDATE"+
			"; SELECT 'Q', reservation_id, quantity, expires_at FROM reserved_quantities WHERE "+key.WhereSQL()+" AND expires_at > UTC_TIMESTAMP(6)")
		if err != nil {
			return err
		}
		v := &PoolView{c: c}
		for _, r := range rows {
			switch string(r[0]) {
			case "L":
				v.Exists = true
				if v.OnHand, err = reservation.ColInt(r[1]); err != nil {
					return err
				}
			case "Q":
				var l LiveLine
				if l.ReservationID, err = reservation.ColUint(r[1]); err != nil {
					return err
				}
				if l.Qty, err = reservation.ColInt(r[2]); err != nil {
					return err
				}
				if l.ExpiresAt, err = reservation.ColTime(r[3]); err != nil {
					return err
				}
				v.Live = append(v.Live, l)
			}
		}
		if v.Live == nil {
			v.Live = []LiveLine{}
		}
		return fn(ctx, v)
	})
}
