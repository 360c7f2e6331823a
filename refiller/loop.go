package refiller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/reservation"
)

// Start runs the background loop until ctx is cancelled or Close is called.
// Start may be called once.
func (r *Refiller) Start(ctx context.Context) error {
	switch err := r.loops.Start(ctx, r.loop); {
	case errors.Is(err, lifecycle.ErrClosed):
		return errors.New("refiller: closed")
	case err != nil:
		return errors.New("refiller: already started")
	}
	return nil
}

// Close stops the background loop and waits for it. Refills already
// running (inline ones included) finish on their own. Close is idempotent.
func (r *Refiller) Close() error {
	r.loops.Close()
	return nil
}

func (r *Refiller) loop(ctx context.Context) {
	tick := time.NewTicker(r.cfg.Interval)
	defer tick.Stop()
	var scan <-chan time.Time
	if r.cfg.ScanInterval > 0 {
		t := time.NewTicker(r.cfg.ScanInterval)
		defer t.Stop()
		scan = t.C
	}
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
			// A reserve took units: look now, at most every minCheckGap,
			// so a hot pool is topped up before it runs dry rather than
			// on the next tick.
			if wait := minCheckGap - time.Since(last); wait > 0 && lifecycle.Sleep(ctx, wait) != nil {
				return
			}
			last = time.Now()
			r.CheckDirty(ctx)
		case <-tick.C:
			last = time.Now()
			r.CheckDirty(ctx)
		case <-scan:
			if !r.duty.Runs(lifecycle.DutyPoolScan) {
				continue
			}
			if err := r.ScanOnce(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("refiller: scan failed", "err", err)
			}
		}
	}
}

// minCheckGap spaces the checks Notify triggers.
const minCheckGap = 5 * time.Millisecond

// poolState is an unlocked look at one pool.
type poolState struct {
	key            reservation.PoolKey
	onHand, pooled int64
	room           int64 // on_hand - issued + pending returns
	counted        bool  // the pool has a pool_counters row (else room is unknown)
	threshold      int64 // refill under this depth
	needsFill      bool
	needsTrim      bool
}

// thresholdLocked is the depth under which key's pool is refilled: the
// watermark, or what reserves here would take within Lead at the pool's
// recent rate, whichever is higher (at most the cap).
func (r *Refiller) thresholdLocked(key reservation.PoolKey, now time.Time) int64 {
	capN := float64(r.cfg.PoolCap)
	t := r.cfg.Watermark * capN
	if h := r.hot[key]; h != nil && r.cfg.Lead > 0 {
		t = max(t, h.rateAt(now)*r.cfg.Lead.Seconds())
	}
	return int64(min(t, capN))
}

func (r *Refiller) judge(p *poolState) {
	low := p.pooled < p.threshold
	p.needsFill = low && (!p.counted || p.room > 0)
	p.needsTrim = p.counted && p.room < 0 || p.pooled > int64(r.cfg.PoolCap)
}

// CheckDirty looks at the pools notified since the last call (one unlocked
// statement) and refills those under their threshold whose ledger has
// units to add, and those that promise more than the ledger holds. A pool
// looked at within the last Interval whose depth then, less what reserves
// here took since, is still well above its threshold is skipped without a
// look (other instances may drain it too, hence the bound). The loop calls
// it every Interval and soon after each Notify.
func (r *Refiller) CheckDirty(ctx context.Context) {
	now := time.Now()
	r.mu.Lock()
	keys := make([]reservation.PoolKey, 0, len(r.dirty))
	for k := range r.dirty {
		if h := r.hot[k]; h != nil && !h.lookedAt.IsZero() && now.Sub(h.lookedAt) < r.cfg.Interval {
			if t := r.thresholdLocked(k, now); h.depth > t+t/4 {
				continue
			}
		}
		keys = append(keys, k)
	}
	clear(r.dirty)
	r.mu.Unlock()
	for len(keys) > 0 {
		n := min(len(keys), 100)
		states, err := r.look(ctx, keys[:n])
		if err != nil {
			if ctx.Err() == nil {
				r.log.Warn("refiller: depth check failed", "err", err)
			}
			return
		}
		for _, s := range states {
			if s.needsFill || s.needsTrim {
				switch err := r.refillShared(ctx, s.key, Background); {
				case err == nil || ctx.Err() != nil:
				case reservation.ReadOnlyRefusal(err):
					// The primary is being switched over: look again at
					// the next tick, on the new primary.
					r.log.Debug("refiller: refill refused by a read-only server", "pool", s.key.String(), "err", err)
					r.mu.Lock()
					r.dirty[s.key] = struct{}{}
					r.mu.Unlock()
				default:
					r.log.Warn("refiller: refill failed", "pool", s.key.String(), "err", err)
				}
			}
		}
		keys = keys[n:]
	}
}

// stateColumnsSQL reads, for the ledger row aliased l, on_hand, the pool
// depth, the counter (NULL when missing) and the pending returns: bounded
// work, whatever the number of reservations.
const stateColumnsSQL = `l.on_hand,
 (SELECT COUNT(*) FROM reservation_units u
   WHERE u.shop_id = l.shop_id AND u.inventory_item_id = l.inventory_item_id AND u.inventory_group_id = l.inventory_group_id),
 (SELECT c.issued FROM pool_counters c
   WHERE c.shop_id = l.shop_id AND c.inventory_item_id = l.inventory_item_id AND c.inventory_group_id = l.inventory_group_id),
 (SELECT COALESCE(SUM(x.quantity), 0) FROM reservation_returns x
   WHERE x.shop_id = l.shop_id AND x.inventory_item_id = l.inventory_item_id AND x.inventory_group_id = l.inventory_group_id)
FROM inventory_ledger l`

// stateLocked decodes the columns of stateColumnsSQL (row[0:4]) for key.
func (r *Refiller) stateLocked(key reservation.PoolKey, row [][]byte, now time.Time) (*poolState, error) {
	v, err := ints(row[:2])
	if err != nil {
		return nil, err
	}
	s := &poolState{key: key, onHand: v[0], pooled: v[1], threshold: r.thresholdLocked(key, now)}
	if row[2] != nil {
		w, err := ints(row[2:4])
		if err != nil {
			return nil, err
		}
		s.counted, s.room = true, s.onHand-w[0]+w[1]
	}
	r.judge(s)
	return s, nil
}

// look reads depth, on_hand, counter and pending returns of keys in one
// statement.
func (r *Refiller) look(ctx context.Context, keys []reservation.PoolKey) ([]*poolState, error) {
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT %d, %s WHERE %s", i, stateColumnsSQL, k.WhereSQL())
	}
	asked := time.Now()
	rows, err := r.query(ctx, b.String())
	if err != nil {
		return nil, err
	}
	out := make([]*poolState, 0, len(rows))
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, row := range rows {
		i, err := ints(row[:1])
		if err != nil {
			return nil, err
		}
		s, err := r.stateLocked(keys[i[0]], row[1:], now)
		if err != nil {
			return nil, err
		}
		if h := r.hot[s.key]; h != nil {
			h.observe(s.pooled, asked) // as of the query's start, at the latest
		}
		out = append(out, s)
	}
	return out, nil
}

// ScanOnce walks every ledger row (pages of 500, unlocked) and refills the
// pools that need it. It finds pools nobody reserved from here: stock just
// received, pools other instances drained, pools left over-promised.
func (r *Refiller) ScanOnce(ctx context.Context) error {
	var after reservation.PoolKey
	for {
		rows, err := r.query(ctx, `SELECT l.shop_id, l.inventory_item_id, l.inventory_group_id, `+stateColumnsSQL+`
WHERE l.shop_id > ? OR (l.shop_id = ? AND (l.inventory_item_id > ? OR (l.inventory_item_id = ? AND l.inventory_group_id > ?)))
ORDER BY l.shop_id, l.inventory_item_id, l.inventory_group_id LIMIT 500`,
			after.ShopID, after.ShopID, after.ItemID, after.ItemID, after.GroupID)
		if err != nil {
			return err
		}
		now := time.Now()
		for _, row := range rows {
			v, err := ints(row[:3])
			if err != nil {
				return err
			}
			key := reservation.PoolKey{ShopID: v[0], ItemID: v[1], GroupID: v[2]}
			after = key
			r.mu.Lock()
			s, err := r.stateLocked(key, row[3:], now)
			r.mu.Unlock()
			if err != nil {
				return err
			}
			if s.needsFill || s.needsTrim {
				if err := r.refillShared(ctx, s.key, Scan); err != nil {
					if ctx.Err() != nil {
						return err
					}
					r.log.Warn("refiller: refill failed", "pool", s.key.String(), "err", err)
				}
			}
		}
		if len(rows) < 500 {
			return nil
		}
	}
}

func (r *Refiller) query(ctx context.Context, q string, args ...any) ([][][]byte, error) {
	c, err := r.conns.Borrow(ctx, reservation.TagRefill)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, q, args...)
	var d reservation.DBError
	c.Release(err != nil && !errors.As(err, &d))
	return rows, err
}

// touchLocked counts a reserve on key (taken units at now) for the take
// rate and the hot-pool ranking, keeping at most 4*HotPools pools (the least
// touched is forgotten).
func (r *Refiller) touchLocked(key reservation.PoolKey, taken int, now time.Time) {
	if h := r.hot[key]; h != nil {
		h.touches++
		h.take(taken, now)
		return
	}
	if len(r.hot) >= 4*r.cfg.HotPools {
		var victim reservation.PoolKey
		least := ^uint64(0)
		for k, h := range r.hot {
			if h.touches < least {
				victim, least = k, h.touches
			}
		}
		delete(r.hot, victim)
		// Age the rest so new hot pools can climb.
		for _, h := range r.hot {
			h.touches -= min(h.touches, least)
		}
	}
	h := &hotPool{touches: 1}
	h.take(taken, now)
	r.hot[key] = h
}

// PoolDepth is one pool's last observed depth.
type PoolDepth struct {
	Key   reservation.PoolKey
	Depth int64
}

// hottestLocked returns up to HotPools pools with a known depth, most
// reserved from first.
func (r *Refiller) hottestLocked() []PoolDepth {
	type kv struct {
		k reservation.PoolKey
		h *hotPool
	}
	all := make([]kv, 0, len(r.hot))
	for k, h := range r.hot {
		if !h.lookedAt.IsZero() { // its depth was read at least once
			all = append(all, kv{k, h})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].h.touches > all[j].h.touches })
	if len(all) > r.cfg.HotPools {
		all = all[:r.cfg.HotPools]
	}
	out := make([]PoolDepth, len(all))
	for i, x := range all {
		out[i] = PoolDepth{x.k, x.h.depth}
	}
	return out
}
