package reservation

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// ReserveColumns are the columns of reserve's result: one row per line.
var ReserveColumns = []string{"token", "expires_at", "line_no", "inventory_item_id", "inventory_group_id", "quantity", "state", "replayed"}

// reservation is a reservation as reported to the client.
type reservation struct {
	id        uint64
	expiresAt time.Time
	lines     []heldLine
	state     string // active, claimed, released, expired
	replayed  bool
}

func (r *reservation) rows() [][]any {
	out := make([][]any, len(r.lines))
	replayed := int64(0)
	if r.replayed {
		replayed = 1
	}
	tok := formatToken(r.id)
	for i, l := range r.lines {
		out[i] = []any{tok, r.expiresAt, int64(i + 1), l.item, l.group, l.qty, r.state, replayed}
	}
	return out
}

// Tokens are "rsv_" and 16 hex digits of the reservation_id.
const tokenPrefix = "rsv_"

func formatToken(id uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], id)
	return tokenPrefix + hex.EncodeToString(b[:])
}

func parseToken(s string) (uint64, bool) {
	if len(s) != len(tokenPrefix)+16 || !strings.HasPrefix(s, tokenPrefix) {
		return 0, false
	}
	v, err := strconv.ParseUint(s[len(tokenPrefix):], 16, 64)
	return v, err == nil && v != 0
}

func tokenArg(proc string, args []any, i int) (uint64, error) {
	s, ok := args[i].(string)
	if b, isBytes := args[i].([]byte); isBytes {
		s, ok = string(b), true
	}
	id, valid := parseToken(s)
	if !ok || !valid {
		return 0, badArg(proc, i+1, "token", "is not a holdfast reservation token (rsv_ and 16 hex digits), got %s", describe(args[i]))
	}
	return id, nil
}

// newID returns a random non-zero reservation id (or call id) below
// 2^62: the bit above it is the caller's (CallerIDBit).
func newID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.BigEndian.Uint64(b[:]) >> 2; v != 0 {
			return v
		}
	}
}

func (e *Engine) callReserve(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	start := time.Now()
	req, err := e.parseReserve(args)
	if err == nil {
		err = req.apply(o)
	}
	if err != nil {
		e.m.reserves.inc(reserveBadArgument)
		return nil, nil, err
	}
	res, err := e.reserve(ctx, req)
	e.m.reserveDur.Observe(time.Since(start))
	if err != nil {
		e.m.reserves.inc(reserveOutcomeOf(err))
		return nil, nil, err
	}
	if res.replayed {
		e.m.reserves.inc(reserveReplayed)
	} else {
		e.m.reserves.inc(reserveReserved)
	}
	return ReserveColumns, res.rows(), nil
}

func (e *Engine) parseReserve(args []any) (*reserveReq, error) {
	const proc = "reserve"
	shop, err := intArg(proc, args, 0, "shop_id", positive)
	if err != nil {
		return nil, err
	}
	key, err := stringArg(proc, args, 1, "idempotency_key", 255)
	if err != nil {
		return nil, err
	}
	js, ok := args[2].(string)
	if b, isBytes := args[2].([]byte); isBytes {
		js, ok = string(b), true
	}
	if !ok {
		return nil, badArg(proc, 3, "lines_json", "must be a JSON string, got %s", describe(args[2]))
	}
	lines, err := parseLines(js, lineLimits{MaxLines: e.cfg.MaxLines, MaxLocations: e.cfg.MaxLocations, MaxQty: int64(e.cfg.PoolCap)})
	if err != nil {
		return nil, badArg(proc, 3, "lines_json", "%s", err.Error())
	}
	ttl, err := e.ttlArg(proc, args, 3)
	if err != nil {
		return nil, err
	}
	var ttlArg int64
	if args[3] != nil {
		ttlArg, _ = toInt(args[3])
	}
	return &reserveReq{shop: shop, key: key, lines: lines, ttlArg: ttlArg, ttl: ttl,
		hash: requestHash(shop, ttlArg, lines), ids: []uint64{newID()}}, nil
}

// outcome is what one attempt (one transaction, alone or coalesced) did
// for one reserve.
type outcome struct {
	res   *reservation         // success, or a replay found by the duplicate-key path
	err   error                // final failure (conflict, I/O, ...)
	short []int                // indexes of lines that did not get their units
	stats map[PoolKey]poolStat // unlocked look at the short pools, read once per batch
	retry bool                 // try again at once (duplicate key resolved for someone else, ...)
}

// reserve runs the reserve loop of the design: take units; on a shortfall
// the transaction is already rolled back, so count without locks and either
// back off (rows merely locked), refill inline (pool really short), move the
// line to its next location (ledger short there), or report insufficient
// stock (ledger short everywhere). A lost backend connection is recovered
// from (recovery.go): after a lost COMMIT the key is looked up first
// (settleReserve), then the reserve runs again with the same
// reservation_id, and a duplicate key found to be this call's own is
// answered as the reservation it made.
func (e *Engine) reserve(ctx context.Context, req *reserveReq) (*reservation, error) {
	call := e.newCall(procReserve)

	choice := make([]int, len(req.lines)) // index into each line's locations
	seen := make([][]string, len(req.lines))
	backoffs := 0
	retried := false
	coalesced := !e.cfg.DisableCoalescing && len(req.lines) == 1
	for {
		if call.unsure {
			r, err := e.settleReserve(ctx, req)
			if err != nil {
				if call.again(ctx, err, false) {
					continue
				}
				return nil, call.answer(ctx, err)
			}
			if r != nil {
				return r, nil
			}
			call.unsure = false // it did not commit: run it again
		}
		if err := ctx.Err(); err != nil {
			return nil, call.answer(ctx, err)
		}
		pools := make([]PoolKey, len(req.lines))
		for i, l := range req.lines {
			pools[i] = PoolKey{req.shop, l.item, l.locations[choice[i]]}
		}
		var out outcome
		if coalesced {
			out = e.comb.submit(ctx, pools[0], req, retried)
		} else {
			p := &pending{req: req, pools: pools}
			e.runBatch(ctx, []*pending{p}, nil, nil)
			out = p.out
		}
		switch {
		case out.err != nil:
			if call.again(ctx, out.err, true) {
				continue
			}
			return nil, call.answer(ctx, out.err)
		case out.res != nil:
			return out.res, nil
		case out.retry:
			continue
		}

		retried = true
		shortPools := make([]PoolKey, 0, len(out.short))
		for _, i := range out.short {
			shortPools = append(shortPools, pools[i])
		}
		stats := out.stats
		if stats == nil {
			var err error
			if stats, err = e.poolStats(ctx, e.reader(TagReserve), shortPools); err != nil {
				if call.again(ctx, err, false) {
					continue
				}
				return nil, call.answer(ctx, err)
			}
		}
		var refill []PoolKey
		backoff := false
		var final error // the answer, unless the key turns out to be used
		for _, i := range out.short {
			l, k := req.lines[i], pools[i]
			st := stats[k]
			switch {
			case !st.exists:
				final = newError(CodeBadArgument, "22023",
					"holdfast.reserve: argument 3 (lines_json) line %d: location %d is unknown for item %d (no inventory_ledger row)",
					i+1, k.GroupID, l.item)
			case st.available() < l.qty:
				seen[i] = append(seen[i], fmt.Sprintf("%d at location %d", max(st.available(), 0), k.GroupID))
				choice[i]++
				if choice[i] == len(l.locations) {
					final = newError(CodeInsufficientStock, "45000",
						"holdfast.reserve: insufficient stock for line %d (item %d, qty %d): available %s",
						i+1, l.item, l.qty, strings.Join(seen[i], ", "))
				}
			case st.pooled >= l.qty:
				backoff = true // the rows exist but others hold them
			default:
				refill = append(refill, k)
			}
			if final != nil {
				break
			}
		}
		// Give up on contention while there is still time to answer: the
		// next try would not finish within the deadline.
		// (The deadline moves out when the call is held: hold.go.)
		if deadline, _ := ctx.Deadline(); final == nil && time.Until(deadline) <= e.cfg.BackoffMax {
			final = newError(CodeBusy, "HY000",
				"holdfast.reserve: could not take the units within call_timeout (%v) because of pool contention; nothing was reserved, retry", e.cfg.CallTimeout)
		}
		if final != nil {
			return e.finalAnswer(ctx, call, req, final)
		}
		if len(refill) > 0 {
			slices.SortFunc(refill, func(a, b PoolKey) int { return cmpBool(groupLess(a, b), groupLess(b, a)) })
			var rerr error
			for _, k := range refill {
				e.m.inlineRefills.Add(1)
				if rerr = e.refiller.RefillNow(ctx, k); rerr != nil {
					break
				}
			}
			// A refill's lost connection says nothing about this reserve,
			// which has not committed anything: try again.
			if rerr != nil && !call.again(ctx, rerr, false) {
				return nil, call.answer(ctx, fmt.Errorf("reservation: inline refill: %w", rerr))
			}
			continue
		}
		if backoff && coalesced && backoffs < 2 {
			// The rows are held by a sibling batch of this pool, which
			// commits within one transaction time; the next batch starts
			// after it, so requeue at the head at once.
			backoffs++
			continue
		}
		if backoff {
			e.m.backoffs.Add(1)
			if err := lifecycle.Sleep(ctx, jitter(e.cfg.BackoffMin, e.cfg.BackoffMax, backoffs)); err != nil {
				return nil, call.answer(ctx, err)
			}
			backoffs++
		}
	}
}

// settleReserve finds out, after this call's COMMIT was lost, whether the
// reservation was made: it reads the key's reservation with a locking read,
// which waits for a transaction still inserting the key (the lost one, if
// the database is still running it) and then sees it committed or not. It
// returns the answer if the key is used (this call's reservation, or
// another call's: replay or conflict), nil if not.
func (e *Engine) settleReserve(ctx context.Context, req *reserveReq) (*reservation, error) {
	var h *header
	err := e.tx.Run(ctx, TagReserve, func(ctx context.Context, c Conn) error {
		rows, err := c.Query(ctx, "SELECT "+headerCols+" FROM reservations WHERE shop_id = ? AND idempotency_key = ? FOR UPDATE",
			req.shop, []byte(req.key))
		if err != nil || len(rows) == 0 {
			return err
		}
		h, err = decodeHeader(rows[0])
		return err
	})
	if err != nil || h == nil {
		return nil, err
	}
	return answerFromHeader(req, h)
}

func cmpBool(less, greater bool) int {
	switch {
	case less:
		return -1
	case greater:
		return 1
	}
	return 0
}

// poolStat is an unlocked snapshot of one pool.
type poolStat struct {
	exists bool  // the ledger row exists
	onHand int64 // inventory_ledger.on_hand
	pooled int64 // reservation_units rows, locked ones included
	active int64 // reserved quantity not yet expired
}

// available is what the ledger can still promise: on_hand less the live
// reservations (the pool is part of it).
func (s poolStat) available() int64 { return s.onHand - s.active }

// poolColumnsSQL is the select list that reads, for one pool, on_hand, the
// pool's units and the live reserved quantity, in bounded time: from the
// counter (issued - pool - pending returns - expired lines present; see
// counters.go), or, for a pool whose counter is missing, by summing its live
// lines. It reads from poolFrom, which counts the pool's units once.
const poolColumnsSQL = `p.on_hand, p.pooled, CASE WHEN p.issued IS NULL THEN p.rest ELSE p.rest - p.pooled END`

// poolDerivedSQL is the derived table p of poolFrom, up to its WHERE.
const poolDerivedSQL = ` FROM (SELECT l.inventory_group_id, l.on_hand, c.issued,
 (SELECT COUNT(*) FROM reservation_units u
   WHERE u.shop_id = l.shop_id AND u.inventory_item_id = l.inventory_item_id AND u.inventory_group_id = l.inventory_group_id) AS pooled,
 CASE WHEN c.issued IS NULL THEN
  (SELECT COALESCE(SUM(r.quantity), 0) FROM reserved_quantities r
    WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.inventory_group_id = l.inventory_group_id
      AND r.expires_at > UTC_TIMESTAMP(6))
 ELSE c.issued
  - (SELECT COALESCE(SUM(x.quantity), 0) FROM reservation_returns x
      WHERE x.shop_id = l.shop_id AND x.inventory_item_id = l.inventory_item_id AND x.inventory_group_id = l.inventory_group_id)
  - (SELECT COALESCE(SUM(r.quantity), 0) FROM reserved_quantities r
      WHERE r.shop_id = l.shop_id AND r.inventory_item_id = l.inventory_item_id AND r.inventory_group_id = l.inventory_group_id
        AND r.expires_at <= UTC_TIMESTAMP(6))
 END AS rest
 FROM inventory_ledger l LEFT JOIN pool_counters c
 ON c.shop_id = l.shop_id AND c.inventory_item_id = l.inventory_item_id AND c.inventory_group_id = l.inventory_group_id
 WHERE `

// poolFrom is the FROM clause of poolColumnsSQL: a derived table p with a
// row per ledger row (aliased l) that matches where.
func poolFrom(where string) string { return poolDerivedSQL + where + ") p" }

// poolStats reads the given pools in one consistent, lock-free statement.
func (e *Engine) poolStats(ctx context.Context, read readFunc, keys []PoolKey) (map[PoolKey]poolStat, error) {
	out := make(map[PoolKey]poolStat, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" UNION ALL ")
		}
		fmt.Fprintf(&b, "SELECT %d, %s%s", i, poolColumnsSQL, poolFrom(qualified(k, "l")))
	}
	rows, err := read(ctx, b.String())
	if err != nil {
		return nil, err
	}
	for _, row := range rows {
		v, err := RowInts(row)
		if err != nil {
			return nil, err
		}
		out[keys[v[0]]] = poolStat{exists: true, onHand: v[1], pooled: v[2], active: v[3]}
	}
	return out, nil
}

// qualified is k.WhereSQL with every column prefixed by alias.
func qualified(k PoolKey, alias string) string {
	return fmt.Sprintf("%s.shop_id = %d AND %s.inventory_item_id = %d AND %s.inventory_group_id = %d",
		alias, k.ShopID, alias, k.ItemID, alias, k.GroupID)
}

// readFunc runs one lock-free read.
type readFunc func(ctx context.Context, q string, args ...any) ([][][]byte, error)

// reader reads on a connection borrowed under tag for each read.
func (e *Engine) reader(tag string) readFunc {
	return func(ctx context.Context, q string, args ...any) ([][][]byte, error) {
		return e.query(ctx, tag, q, args...)
	}
}

// query runs one autocommit read on a connection borrowed under tag.
func (e *Engine) query(ctx context.Context, tag string, q string, args ...any) ([][][]byte, error) {
	return queryOn(ctx, e.conns, tag, q, args...)
}

// Query runs one autocommit read on a connection of conns borrowed under
// tag, and gives the connection back, broken when it was lost. For
// packages that read the engine's tables beside it (reservation/legacy).
func Query(ctx context.Context, conns Conns, tag string, q string, args ...any) ([][][]byte, error) {
	return queryOn(ctx, conns, tag, q, args...)
}

// queryOn runs one autocommit read on a connection of conns borrowed under
// tag.
func queryOn(ctx context.Context, conns Conns, tag string, q string, args ...any) ([][][]byte, error) {
	c, err := conns.Borrow(ctx, tag)
	if err != nil {
		return nil, err
	}
	rows, err := c.Query(ctx, q, args...)
	c.Release(brokenBy(err))
	return rows, err
}

// header is a reservations row.
type header struct {
	id        uint64
	shop      int64
	key       string
	hash      []byte
	state     string
	lines     []heldLine
	expiresAt time.Time
	claimKind string // normal, late, forced; "" unless claimed
	// The calls that claimed, released and last extended it (0: none
	// recorded), and the quantity the release gave back.
	claimedBy, releasedBy, extendedBy uint64
	releasedQty                       int64
}

const headerCols = "reservation_id, shop_id, idempotency_key, request_hash, state, line_items, expires_at, expires_at <= UTC_TIMESTAMP(6)" +
	", claim_kind, claimed_by, released_by, released_quantity, extended_by"

func decodeHeader(row [][]byte) (*header, error) {
	id, err := ColUint(row[0])
	if err != nil {
		return nil, err
	}
	shop, err := ColInt(row[1])
	if err != nil {
		return nil, err
	}
	lines, err := decodeLines(row[5])
	if err != nil {
		return nil, err
	}
	exp, err := ColTime(row[6])
	if err != nil {
		return nil, err
	}
	h := &header{id: id, shop: shop, key: string(row[2]), hash: row[3], lines: lines, expiresAt: exp,
		claimKind: string(row[8]), claimedBy: callIDCol(row[9]), releasedBy: callIDCol(row[10]), extendedBy: callIDCol(row[12])}
	if h.releasedQty, err = ColInt(row[11]); err != nil {
		return nil, err
	}
	switch string(row[4]) {
	case "1":
		h.state = "claimed"
	case "2":
		h.state = "released"
	default:
		h.state = "active"
		if string(row[7]) == "1" {
			h.state = "expired"
		}
	}
	return h, nil
}

type idemKey struct {
	shop int64
	key  string
}

// lookupKeys reads the reservations rows of the given idempotency keys.
func (e *Engine) lookupKeys(ctx context.Context, read readFunc, keys []idemKey) (map[idemKey]*header, error) {
	var b strings.Builder
	args := make([]any, 0, 2*len(keys))
	b.WriteString("SELECT " + headerCols + " FROM reservations WHERE ")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(shop_id = ? AND idempotency_key = ?)")
		args = append(args, k.shop, []byte(k.key))
	}
	rows, err := read(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	out := make(map[idemKey]*header, len(rows))
	for _, row := range rows {
		h, err := decodeHeader(row)
		if err != nil {
			return nil, err
		}
		out[idemKey{h.shop, h.key}] = h
	}
	return out, nil
}

// finalAnswer gives a reserve's business failure (final) as its answer,
// unless the key was used meanwhile (a replay racing this call), which is
// answered as the replay or conflict. A lookup that loses its connection
// is made again; the failure itself was decided on a live connection and
// stands.
func (e *Engine) finalAnswer(ctx context.Context, call *callRun, req *reserveReq, final error) (*reservation, error) {
	for {
		r, err := e.replayOrConflict(ctx, req)
		switch {
		case r != nil || (err != nil && !connLost(err) && !isBorrowError(err)):
			return r, err
		case err != nil && errors.Is(final, ErrBusy):
			return nil, final // out of time: nothing was reserved
		case err != nil:
			if call.again(ctx, err, false) {
				continue
			}
			return nil, call.answer(ctx, err)
		}
		return nil, final
	}
}

// replayOrConflict answers req from an existing reservation with its key:
// the original reservation if the request is the same, a conflict error if
// not, or (nil, nil) if the key is unused.
func (e *Engine) replayOrConflict(ctx context.Context, req *reserveReq) (*reservation, error) {
	found, err := e.lookupKeys(ctx, e.reader(TagReserve), []idemKey{{req.shop, req.key}})
	if err != nil {
		return nil, err
	}
	h := found[idemKey{req.shop, req.key}]
	if h == nil {
		return nil, nil
	}
	return answerFromHeader(req, h)
}

func answerFromHeader(req *reserveReq, h *header) (*reservation, error) {
	if string(h.hash) != string(req.hash[:]) {
		return nil, newError(CodeIdempotencyConflict, "45000",
			"holdfast.reserve: idempotency key %s of shop %d was used by a different request (reservation %s); use a new key for a new request",
			quoteShort(req.key), req.shop, formatToken(h.id))
	}
	// This call's own reservation (made by an attempt whose answer was
	// lost) is not a replay.
	return &reservation{id: h.id, expiresAt: h.expiresAt, lines: h.lines, state: h.state, replayed: !req.mine(h.id)}, nil
}
