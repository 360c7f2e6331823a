package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
)

// Checks made directly on the database, as the report names them.
const (
	checkInvariant  = "invariant"
	checkReservable = "reservable after expiry"
	checkExpiry     = "expiry"
)

// readLedger returns on_hand per pool of the harness's shop.
func readLedger(ctx context.Context, db *sql.DB) (map[PoolKey]int64, error) {
	out := map[PoolKey]int64{}
	err := reservation.ReadStock(ctx, reservation.SQLQuerier(db), reservation.PoolKey{ShopID: shopID}, func(p reservation.PoolStock) error {
		out[keyOf(p.Key)] = p.OnHand
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chaos: read ledger: %w", err)
	}
	return out, nil
}

// keyOf is the harness's name of one of its shop's pools.
func keyOf(k reservation.PoolKey) PoolKey { return PoolKey{Item: k.ItemID, Group: k.GroupID} }

// readFacts reads every reservation of the shop and the ledger.
func readFacts(ctx context.Context, db *sql.DB, initial map[PoolKey]int64) (facts, error) {
	f := facts{byKey: map[string]*reservationRow{}, byID: map[uint64]*reservationRow{}, initial: initial}
	rows, err := db.QueryContext(ctx, `SELECT reservation_id, idempotency_key, state, COALESCE(claim_kind, ''),
  COALESCE(released_quantity, -1), line_items FROM reservations WHERE shop_id = ?`, shopID)
	if err != nil {
		return f, fmt.Errorf("chaos: read reservations: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		r := &reservationRow{}
		var lines []byte
		if err := rows.Scan(&r.ID, &r.Key, &r.State, &r.ClaimKind, &r.ReleasedQty, &lines); err != nil {
			return f, fmt.Errorf("chaos: read reservations: %w", err)
		}
		if r.Lines, err = parseLineItems(lines); err != nil {
			return f, fmt.Errorf("chaos: reservation %s: %w", token(r.ID), err)
		}
		f.byKey[r.Key], f.byID[r.ID] = r, r
	}
	if err := rows.Err(); err != nil {
		return f, fmt.Errorf("chaos: read reservations: %w", err)
	}
	f.final, err = readLedger(ctx, db)
	return f, err
}

// parseLineItems decodes reservations.line_items, the lines as reserved:
// "item,group,qty" per line, ';' between lines (reservation/lines.go).
func parseLineItems(b []byte) ([]Line, error) {
	var out []Line
	for _, part := range strings.Split(string(b), ";") {
		f := strings.Split(part, ",")
		if len(f) != 3 {
			return nil, fmt.Errorf("chaos: line_items %q", b)
		}
		var v [3]int64
		for i := range f {
			x, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("chaos: line_items %q", b)
			}
			v[i] = x
		}
		out = append(out, Line{Item: v[0], Group: v[1], Qty: v[2]})
	}
	return out, nil
}

// breach is one pool that breaks the stock invariant
// (reservation.CheckStock), as the report words it.
type breach struct {
	at       time.Time
	key      PoolKey
	oversold bool // pool + reserved > on_hand (a forced claim may cause it)
	detail   string
}

// checkStock checks the stock invariant of every pool of the harness's
// shop.
func checkStock(ctx context.Context, db *sql.DB) ([]breach, error) {
	r, err := reservation.CheckStock(ctx, reservation.SQLQuerier(db), reservation.PoolKey{ShopID: shopID})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var out []breach
	for _, p := range r.Bad {
		k := keyOf(p.Key)
		out = append(out, breach{now, k, p.Oversold(), fmt.Sprintf("%s: %s", k, strings.Join(p.Problems(), "; "))})
	}
	return out, nil
}

func sortedKeys[V any](m map[PoolKey]V) []PoolKey {
	keys := make([]PoolKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b PoolKey) int {
		if a.Item != b.Item {
			return int(a.Item - b.Item)
		}
		return int(a.Group - b.Group)
	})
	return keys
}

// monitor samples the invariant once a second until ctx is done; samples
// the database cannot answer (it may be down) are skipped.
type monitor struct {
	mu       sync.Mutex // guards following
	samples  int
	breaches []breach
}

func (m *monitor) run(ctx context.Context, db *sql.DB) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for tickCtx(ctx, t.C) {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		bs, err := checkStock(sctx, db)
		cancel()
		if err != nil {
			continue
		}
		m.mu.Lock()
		m.samples++
		m.breaches = append(m.breaches, bs...)
		m.mu.Unlock()
	}
}

// waitExpired waits, up to timeout, until no reserved line is left: the
// TTL has passed for all of them and the sweeper has deleted them.
func waitExpired(ctx context.Context, db *sql.DB, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var lines, qty int64
		err := db.QueryRowContext(ctx, "SELECT COUNT(*), COALESCE(SUM(quantity), 0) FROM reserved_quantities WHERE shop_id = ?", shopID).Scan(&lines, &qty)
		if err == nil && lines == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("chaos: count reserved lines: %w", err)
			}
			var overdue int64
			_ = db.QueryRowContext(ctx, "SELECT COUNT(*) FROM reserved_quantities WHERE shop_id = ? AND expires_at < UTC_TIMESTAMP(6) - INTERVAL 5 SECOND", shopID).Scan(&overdue)
			return fmt.Errorf("%d reserved lines (%d units) left %s after the traffic, %d of them expired over 5 s ago: the sweeper did not expire them",
				lines, qty, timeout, overdue)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// reservable checks, through holdfast, that every unit of every pool can
// be reserved again now that nothing is reserved: availability shows the
// whole on_hand available, and reserves of at most pool_cap units each
// take all of it (the pool refilled inline as needed), after which the
// pool is empty. Then it releases them all. on_hand is the ledger after
// the traffic; a failing pool is a Violation.
func reservable(ctx context.Context, o *Options, db, root *sql.DB, scenario string, onHand map[PoolKey]int64) []Violation {
	var (
		mu  sync.Mutex // guards out
		out []Violation
		wg  sync.WaitGroup
	)
	keys := sortedKeys(onHand)
	work := make(chan PoolKey)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &client{id: -1 - w, db: db, o: o}
			defer func() {
				if c.conn != nil {
					c.conn.Close()
				}
			}()
			for k := range work {
				if why := c.reserveAll(ctx, root, scenario, k, onHand[k]); why != "" {
					mu.Lock()
					out = append(out, Violation{checkReservable, fmt.Sprintf("%s (on_hand %d): %s", k, onHand[k], why)})
					mu.Unlock()
				}
			}
		}()
	}
	for _, k := range keys {
		work <- k
	}
	close(work)
	wg.Wait()
	return out
}

// reserveAll is reservable for one pool; it returns what went wrong, or "".
func (c *client) reserveAll(ctx context.Context, root *sql.DB, scenario string, k PoolKey, onHand int64) string {
	avail := Call{Proc: "availability"}
	rows := c.do(&avail, "CALL holdfast.availability(?, ?)", shopID, k.Item)
	if avail.Kind != Answered {
		return "availability: " + avail.String()
	}
	found := false
	for _, r := range rows { // inventory_group_id, on_hand, reserved, pooled, available
		if len(r) == 5 && atoi(r[0]) == k.Group {
			found = true
			if atoi(r[1]) != onHand || atoi(r[2]) != 0 || atoi(r[4]) != onHand {
				return fmt.Sprintf("availability answered on_hand %s, reserved %s, available %s; want %d, 0, %d", r[1], r[2], r[4], onHand, onHand)
			}
		}
	}
	if !found {
		return fmt.Sprintf("availability has no row for location %d: %q", k.Group, rows)
	}
	var tokens []string
	defer func() {
		for _, t := range tokens {
			c.repeatFinal(func() Call { return c.release(t) })
		}
	}()
	for left, n := onHand, 0; left > 0; n++ {
		q := min(left, int64(c.o.PoolCap))
		key := fmt.Sprintf("final-%s-%d-%d-%d", scenario, k.Item, k.Group, n)
		req := []Line{{Item: k.Item, Qty: q}}
		r := c.repeatFinal(func() Call { return c.reserve(key, req, [][]int64{{k.Group}}, finalTTL) })
		if r.Kind != Answered || r.Replayed || len(r.Lines) != 1 || r.Lines[0].Group != k.Group {
			return fmt.Sprintf("only %d of the %d units could be reserved: %s", onHand-left, onHand, r.String())
		}
		tokens = append(tokens, r.Token)
		left -= q
	}
	p, ok, err := reservation.ReadPool(ctx, reservation.SQLQuerier(root), reservation.PoolKey{ShopID: shopID, ItemID: k.Item, GroupID: k.Group})
	switch {
	case err != nil:
		return "reading the pool: " + err.Error()
	case !ok:
		return "the pool has no ledger row"
	case p.Reserved != onHand || p.Pooled != 0:
		return fmt.Sprintf("with all %d units reserved, the database has %d reserved and %d left in the pool", onHand, p.Reserved, p.Pooled)
	}
	return ""
}

// finalTTL is the TTL of the final check's reserves: long enough that
// none lapses before the check has seen them all.
const finalTTL = 120 * time.Second

// repeatFinal repeats a call of the final check while holdfast answers
// "busy" or the like, a few times.
func (c *client) repeatFinal(call func() Call) Call {
	var r Call
	for i := 0; i < 20; i++ {
		if r = call(); !r.retryable() {
			return r
		}
		time.Sleep(100 * time.Millisecond)
	}
	return r
}
