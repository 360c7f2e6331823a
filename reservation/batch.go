package reservation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
)

// pending is one reserve attempt waiting for, or inside, a transaction.
type pending struct {
	req   *reserveReq
	pools []PoolKey // the location chosen for each line in this attempt
	out   outcome

	id   uint64    // reservation_id for this attempt
	took [][]int64 // unit ids taken per line, inside the transaction
	now  time.Time // database time of the transaction

	// callers are the tags its CALL runs for (attribution.Callers of its
	// context): a batch's statements run for all of its reserves' callers.
	callers []*attribution.Tag
}

// errNoneFit makes the transaction roll back when no reserve in it got all
// its units: nothing is kept locked while the reservers diagnose and retry.
var errNoneFit = errors.New("reservation: no reserve in the batch got its units")

// runBatch takes units for every reserve in batch in one READ COMMITTED
// transaction and sets each one's out. A single multi-line reserve is a
// batch of one; the combiner batches single-line reserves of one pool.
//
// Inside the transaction: one SELECT ... FOR UPDATE SKIP LOCKED per pool,
// parenthesised and joined with UNION ALL in ascending inventory_group_id
// order, taking the summed quantity of the pool; the units go to the
// reserves in arrival order, each all-or-nothing; then one DELETE of the
// units taken, one multi-row INSERT into reserved_quantities and one into
// reservations (sorted by idempotency key, so concurrent batches insert
// keys in one order), COMMIT. Reserves that did not fit are reported short
// (their units were never taken) and the others still commit. Tables are
// touched in the global order units -> reserved_quantities -> reservations.
// Two round trips: the select (with SET TRANSACTION and START TRANSACTION
// in front of it when not on a session), then the rest in one, the DELETE
// guarded (GuardRowCount) so that COMMIT runs only if it deleted exactly
// the units locked. A single pool's batch is one round trip
// (batchOneTrip), falling back to the two when the pool turns out short;
// after a batch that came up short the next runs in two from the start.
// The pool's counter does not change: units move from the pool to lines.
//
// ps, when non-nil, is what the combiner's batches remember (poolState): a
// single pool's select starts after its cursor, and runs in one round trip
// unless the last batch came up short.
//
// A duplicate idempotency key (1062) rolls the batch back; the keys are then
// looked up, the reserves whose key exists are answered from it (replay or
// conflict) and the rest run again, so a replay never fails the others.
//
// s, when non-nil, is the combiner's session to run on; otherwise the
// transaction borrows its own connection.
func (e *Engine) runBatch(ctx context.Context, batch []*pending, s *session, ps *poolState) {
	seen := make(map[idemKey]bool, len(batch))
	run := make([]*pending, 0, len(batch))
	for _, p := range batch {
		k := idemKey{p.req.shop, p.req.key}
		if seen[k] {
			// Same key twice in one batch: let the first go; this one comes
			// back and finds the first's reservation (or conflicts with it).
			p.out = outcome{retry: true}
			continue
		}
		seen[k] = true
		run = append(run, p)
	}
	e.m.batches.Add(1)
	e.m.batchSize.ObserveCount(uint64(len(run)))
	// Reads after a transaction go over the session when there is one: a
	// leader holding a connection must not borrow a second (a pool
	// exhausted by such leaders would deadlock). On the session, with
	// autocommit off, such a read just opens the next transaction; it takes
	// no lock.
	read := e.reader(TagReserve)
	if s != nil {
		read = func(ctx context.Context, q string, args ...any) ([][][]byte, error) {
			rows, err := s.c.Query(ctx, q, args...)
			if brokenBy(err) {
				s.broken = true
			}
			return rows, err
		}
	}
	// A single pool's batch runs in one round trip unless the last batch of
	// its combiner came up short. Tests that stop a reserve between its
	// select and its commit (hookLocked) need the two.
	oneTrip := ps != nil && !ps.short.Load() && !e.cfg.DisableOneTrip && !e.oneTripOff.Load() && e.hookLocked == nil
	for round := 0; len(run) > 0; round++ {
		if round == 3 {
			for _, p := range run {
				p.out = outcome{retry: true}
			}
			return
		}
		for _, p := range run {
			p.id = p.req.id()
		}
		fn := func(ctx context.Context, c Conn) error { return e.batchTx(ctx, c, run, ps, oneTrip) }
		var err error
		if s != nil {
			err = e.sessionTx(ctx, s, fn)
			if s.broken {
				// The session's connection is in an unknown state (a
				// lost ROLLBACK or COMMIT): it is released, broken,
				// before the rest of the batch borrows one of its own.
				e.closeSession(s)
				s, read = nil, e.reader(TagReserve)
			}
		} else {
			err = e.tx.Run(ctx, TagReserve, fn)
		}
		if err != nil && ps != nil {
			// Rolled back: the units it took are free again, below the
			// cursor; start the next batch at the head.
			ps.cursor.Store(0)
		}
		if oneTrip && errors.Is(err, errOneTripRolledBack) {
			// Not all fitted: run again in two round trips, which serve
			// the reserves that fit and report the others short.
			e.m.oneTripFallbacks.Add(1)
			oneTrip = false
			round--
			continue
		}
		if err == nil || errors.Is(err, errNoneFit) {
			e.diagnoseShort(ctx, read, run)
		}
		switch {
		case err == nil:
			touched := map[PoolKey]int{}
			for _, p := range run {
				if len(p.out.short) > 0 {
					continue
				}
				lines := make([]heldLine, len(p.req.lines))
				for i, l := range p.req.lines {
					lines[i] = heldLine{item: l.item, group: p.pools[i].GroupID, qty: l.qty}
					touched[p.pools[i]] += int(l.qty)
				}
				p.out.res = &reservation{id: p.id, expiresAt: p.now.Add(p.req.ttl), lines: lines, state: "active"}
			}
			for k, n := range touched {
				e.refiller.Notify(k, n)
			}
			return
		case errors.Is(err, errNoneFit):
			return // every p.out.short is set
		case IsDBError(err, errNumDupKey):
			keys := make([]idemKey, len(run))
			for i, p := range run {
				keys[i] = idemKey{p.req.shop, p.req.key}
			}
			found, lerr := e.lookupKeys(ctx, read, keys)
			if lerr != nil {
				for _, p := range run {
					p.out = outcome{err: lerr}
				}
				return
			}
			rest := run[:0]
			for _, p := range run {
				if h := found[idemKey{p.req.shop, p.req.key}]; h != nil {
					r, aerr := answerFromHeader(p.req, h)
					p.out = outcome{res: r, err: aerr}
				} else {
					// The reservation id collided with another's (or the
					// other batch that had the key rolled back): a new id.
					p.req.ids = append(p.req.ids, newIDLike(p.req.id()))
					rest = append(rest, p)
				}
			}
			run = rest
		default:
			for _, p := range run {
				p.out = outcome{err: err}
			}
			return
		}
	}
}

// diagnoseShort reads the pools the short reserves of a batch missed, once
// for all of them, after the transaction ended (so nothing is held while
// they decide to back off, refill or give up). On error each reserve reads
// for itself.
func (e *Engine) diagnoseShort(ctx context.Context, read readFunc, run []*pending) {
	var keys []PoolKey
	for _, p := range run {
		for _, i := range p.out.short {
			if !slices.Contains(keys, p.pools[i]) {
				keys = append(keys, p.pools[i])
			}
		}
	}
	if len(keys) == 0 {
		return
	}
	stats, err := e.poolStats(ctx, read, keys)
	if err != nil {
		return
	}
	for _, p := range run {
		if len(p.out.short) > 0 {
			p.out.stats = stats
		}
	}
}

// casMax raises v to x unless it is already higher.
func casMax(v *atomic.Int64, x int64) {
	for {
		old := v.Load()
		if old >= x || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// The one-round-trip form of a single pool's batch keeps what it needs
// between its statements in these user variables, and clears them before
// COMMIT (and with the ROLLBACK: onRollback), so no client that gets the
// connection next sees them.
const clearBatchVars = "SET @holdfast_batch_units = NULL, @holdfast_batch_max = NULL, @holdfast_batch_now = NULL"

// oneTripMaxUnits bounds the units of a batch sent in one round trip. On
// MariaDB, JSON_ARRAYAGG is cut at group_concat_max_len (1 MiB by default);
// 4096 ids take at most 82 KB. A list cut shorter all the same only makes
// the guard fail and the batch run again in two round trips.
const oneTripMaxUnits = 4096

// refusedSQL reports whether server error n refuses a statement's text
// rather than its data: a parse error (1064), a feature or function the
// server lacks (1235, 1305), wrong arguments to a native function (1582,
// 1583).
func refusedSQL(n uint16) bool {
	switch n {
	case 1064, 1235, 1305, 1582, 1583:
		return true
	}
	return false
}

// errOneTripRolledBack is the answer of a one-round-trip transaction
// (batchOneTrip, claimOneTrip) that rolled back because a guard found the
// rows otherwise than expected (or the server refused the statement): the
// caller runs it again in two round trips.
var errOneTripRolledBack = errors.New("reservation: the one-round-trip transaction rolled back; it runs again in two")

// batchOneTrip runs the transaction of a batch of one pool, pd, in one round
// trip, when every reserve in it is expected to fit:
//
//   - the same SKIP LOCKED select as batchTx's, in a derived table, locks
//     pd.n units (after from) and leaves their ids in a user variable
//     (JSON_ARRAYAGG), with the highest id and the database time;
//   - a DELETE joins those ids (JSON_TABLE, STRAIGHT_JOIN: an eq_ref lookup
//     per id on the primary key, rows this transaction already holds) and
//     is guarded (GuardRowCount) to have deleted pd.n rows: fewer means the
//     pool had fewer free units, and the transaction stops and rolls back
//     (errOneTripRolledBack) before anything else ran;
//   - the INSERTs of batchTx, with the time taken from the variable;
//   - a SELECT of the highest id and the time, the variables cleared,
//     COMMIT.
//
// Nothing is decided between the statements, so it is all sent at once.
func (e *Engine) batchOneTrip(ctx context.Context, c Conn, run []*pending, pd poolDemand, from int64, ps *poolState) error {
	q := make([]byte, 0, 1024+192*len(run))
	q = append(q, "SELECT JSON_ARRAYAGG(id), MAX(id), UTC_TIMESTAMP(6) INTO @holdfast_batch_units, @holdfast_batch_max, @holdfast_batch_now FROM ("...)
	q = appendTakeSQL(q, "id", pd, from)
	q = append(q, ") d; DELETE t FROM JSON_TABLE(@holdfast_batch_units, '$[*]' COLUMNS (id BIGINT PATH '$')) k STRAIGHT_JOIN reservation_units t ON t.shop_id = "...)
	q = strconv.AppendInt(q, pd.key.ShopID, 10)
	q = append(q, " AND t.inventory_item_id = "...)
	q = strconv.AppendInt(q, pd.key.ItemID, 10)
	q = append(q, " AND t.inventory_group_id = "...)
	q = strconv.AppendInt(q, pd.key.GroupID, 10)
	q = append(q, " AND t.id = k.id; "...)
	q = append(q, GuardRowCount(pd.n)...)
	q = append(q, "; "...)
	q = appendHeldSQL(q, run, func(q []byte, d time.Duration) []byte {
		q = append(q, "@holdfast_batch_now"...)
		if d != 0 {
			q = append(q, " + INTERVAL "...)
			q = strconv.AppendInt(q, d.Microseconds(), 10)
			q = append(q, " MICROSECOND"...)
		}
		return q
	})
	q = append(q, "; SELECT @holdfast_batch_max, @holdfast_batch_now; "...)
	q = append(q, clearBatchVars...)
	rows, err := commitQuery(ctx, c, string(q))
	if err != nil {
		if IsDBError(err, errNumGuard) {
			return fmt.Errorf("%w: %w", errOneTripRolledBack, err) // the two-trip run sets ps.short
		}
		if n, ok := dbErrorNumber(err); ok && refusedSQL(n) {
			// The server does not take the statement (a version without
			// one of its functions): two round trips from now on.
			if !e.oneTripOff.Swap(true) {
				e.log.Warn("reservation: the database refused the one-round-trip reserve batch; batches take two round trips from now on (set reservation.disable_one_trip to skip the attempt)", "err", err)
			}
			return fmt.Errorf("%w: %w", errOneTripRolledBack, err)
		}
		return err
	}
	// Committed. The last row is the final SELECT's (the guard's comes
	// before it). Without it the reserves' answers are not known here, so
	// they are found by key, as after a lost COMMIT (recovery.go).
	var maxID []int64
	var now time.Time
	if len(rows) == 0 || len(rows[len(rows)-1]) != 2 {
		err = fmt.Errorf("a one-trip reserve batch committed but returned %d rows, not its last unit and time", len(rows))
	} else if maxID, err = RowInts(rows[len(rows)-1][:1]); err == nil {
		now, err = ColTime(rows[len(rows)-1][1])
	}
	if err != nil {
		return &commitUnknownError{markLost(err)}
	}
	e.m.oneTrip.Add(1)
	casMax(&ps.cursor, maxID[0])
	for _, p := range run {
		p.now = now
	}
	return nil
}

// appendTakeSQL appends the locking read that takes pd's units: the first
// pd.n units of the pool (after unit from, when positive) that no other
// transaction holds, in id order on the clustered key, selecting sel.
func appendTakeSQL(q []byte, sel string, pd poolDemand, from int64) []byte {
	q = append(q, "SELECT "...)
	q = append(q, sel...)
	q = append(q, " FROM reservation_units FORCE INDEX (PRIMARY) WHERE "...)
	q = append(q, pd.key.WhereSQL()...)
	if from > 0 {
		q = append(q, " AND id > "...)
		q = strconv.AppendInt(q, from, 10)
	}
	q = append(q, " ORDER BY id LIMIT "...)
	q = strconv.AppendInt(q, pd.n, 10)
	return append(q, " FOR UPDATE SKIP LOCKED"...)
}

// poolDemand is the units one batch wants from one pool.
type poolDemand struct {
	key PoolKey
	n   int64
}

// batchTx is one attempt at run's transaction on c. oneTrip asks for the
// one-round-trip form (batchOneTrip) where the batch is of one pool.
func (e *Engine) batchTx(ctx context.Context, c Conn, run []*pending, ps *poolState, oneTrip bool) error {
	demand := map[PoolKey]int64{}
	for _, p := range run {
		p.out = outcome{}
		for i, k := range p.pools {
			demand[k] += p.req.lines[i].qty
		}
	}
	parts := make([]poolDemand, 0, len(demand))
	for k, n := range demand {
		parts = append(parts, poolDemand{k, n})
	}
	slices.SortFunc(parts, func(a, b poolDemand) int { return cmpBool(groupLess(a.key, b.key), groupLess(b.key, a.key)) })

	// A single pool's batch starts after the highest unit the last batch of
	// this combiner took (see combiner.cursor), not at the head of the pool.
	var from int64
	if ps != nil && len(parts) == 1 {
		from = ps.cursor.Load()
	}
	if oneTrip && len(parts) == 1 && parts[0].n <= oneTripMaxUnits && onRollback(c, clearBatchVars) {
		return e.batchOneTrip(ctx, c, run, parts[0], from, ps)
	}
	q := make([]byte, 0, 256*len(parts))
	for i, pd := range parts {
		if len(parts) > 1 {
			if i > 0 {
				q = append(q, " UNION ALL "...)
			}
			q = append(q, '(')
		}
		q = appendTakeSQL(q, "id, "+strconv.Itoa(i)+", UTC_TIMESTAMP(6)", pd, from)
		if len(parts) > 1 {
			q = append(q, ')')
		}
	}
	rows, err := c.Query(ctx, string(q))
	if err != nil {
		return err
	}
	if e.hookLocked != nil {
		e.hookLocked(ctx, c)
	}
	avail := make(map[PoolKey][]int64, len(parts))
	var now time.Time
	for _, row := range rows {
		v, err := RowInts(row[:2])
		if err != nil {
			return err
		}
		if now.IsZero() {
			if now, err = ColTime(row[2]); err != nil {
				return err
			}
		}
		k := parts[v[1]].key
		avail[k] = append(avail[k], v[0])
	}
	if ps != nil && len(parts) == 1 {
		if got := avail[parts[0].key]; int64(len(got)) == parts[0].n {
			casMax(&ps.cursor, got[len(got)-1])
			ps.short.Store(false)
		} else {
			ps.cursor.Store(0) // reached the tail: the next batch starts at the head
			ps.short.Store(true)
		}
	}

	var ok []*pending
	for _, p := range run {
		for i, k := range p.pools {
			if int64(len(avail[k])) < p.req.lines[i].qty {
				p.out.short = append(p.out.short, i)
			}
		}
		if len(p.out.short) > 0 {
			continue
		}
		p.took = make([][]int64, len(p.pools))
		for i, k := range p.pools {
			n := p.req.lines[i].qty
			p.took[i], avail[k] = avail[k][:n], avail[k][n:]
		}
		p.now = now
		ok = append(ok, p)
	}
	if len(ok) == 0 {
		return errNoneFit
	}

	// One round trip ends the transaction: DELETE the units taken, by
	// exact primary key (see DeleteByKeys), guarded so that COMMIT runs only
	// if exactly the units this transaction locked were deleted; INSERT the
	// lines and the reservations; COMMIT.
	var keys [][]int64
	for _, p := range ok {
		for i, k := range p.pools {
			for _, id := range p.took[i] {
				keys = append(keys, []int64{k.ShopID, k.ItemID, k.GroupID, id})
			}
		}
	}
	total := len(keys)
	q = make([]byte, 0, 256+64*total+96*total+256*len(ok))
	q = append(q, guardedDeleteSQL(TableUnits, unitCols, keys)...)
	q = append(q, "; "...)
	q = appendHeldSQL(q, ok, func(q []byte, d time.Duration) []byte {
		q, _ = AppendLiteral(q, now.Add(d))
		return q
	})
	if err := CommitWith(ctx, c, string(q)); err != nil {
		if IsDBError(err, errNumGuard) {
			return fmt.Errorf("reservation: deleting the %d units this transaction locked did not delete them all; rolled back: %w", total, err)
		}
		return err
	}
	return nil
}

// appendHeldSQL appends to q the INSERTs of ok's lines (reserved_quantities)
// and reservations, "; " between them and none after. at appends the SQL
// value of the transaction's time plus d.
func appendHeldSQL(q []byte, ok []*pending, at func(q []byte, d time.Duration) []byte) []byte {
	first := true
	q = append(q, "INSERT INTO reserved_quantities (reservation_id, line_no, shop_id, inventory_item_id, inventory_group_id, quantity, expires_at) VALUES "...)
	for _, p := range ok {
		for i, k := range p.pools {
			if !first {
				q = append(q, ',')
			}
			first = false
			q = append(q, '(')
			q = strconv.AppendUint(q, p.id, 10)
			q = append(q, ',')
			q = strconv.AppendInt(q, int64(i+1), 10)
			q = append(q, ',')
			q = strconv.AppendInt(q, k.ShopID, 10)
			q = append(q, ',')
			q = strconv.AppendInt(q, k.ItemID, 10)
			q = append(q, ',')
			q = strconv.AppendInt(q, k.GroupID, 10)
			q = append(q, ',')
			q = strconv.AppendInt(q, p.req.lines[i].qty, 10)
			q = append(q, ',')
			q = at(q, p.req.ttl)
			q = append(q, ')')
		}
	}
	q = append(q, "; "...)

	sorted := slices.Clone(ok)
	slices.SortFunc(sorted, func(a, b *pending) int {
		if a.req.shop != b.req.shop {
			return cmpBool(a.req.shop < b.req.shop, a.req.shop > b.req.shop)
		}
		return cmpBool(a.req.key < b.req.key, a.req.key > b.req.key)
	})
	// The authority column (schema version 4) is written only when a
	// reserve of the batch has one, so an engine without a legacy store
	// works on version 3 too.
	withAuthority := slices.ContainsFunc(sorted, func(p *pending) bool { return p.req.authority != AuthorityNone })
	q = append(q, "INSERT INTO reservations (reservation_id, shop_id, idempotency_key, request_hash, state, line_count, line_items, created_at, expires_at"...)
	if withAuthority {
		q = append(q, ", authority"...)
	}
	q = append(q, ") VALUES "...)
	for j, p := range sorted {
		if j > 0 {
			q = append(q, ',')
		}
		lines := make([]heldLine, len(p.req.lines))
		for i, l := range p.req.lines {
			lines[i] = heldLine{item: l.item, group: p.pools[i].GroupID, qty: l.qty}
		}
		q = append(q, '(')
		q = strconv.AppendUint(q, p.id, 10)
		q = append(q, ',')
		q = strconv.AppendInt(q, p.req.shop, 10)
		q = append(q, ',')
		q, _ = AppendLiteral(q, []byte(p.req.key))
		q = append(q, ',')
		q, _ = AppendLiteral(q, p.req.hash[:])
		q = append(q, ",0,"...)
		q = strconv.AppendInt(q, int64(len(lines)), 10)
		q = append(q, ',')
		q, _ = AppendLiteral(q, encodeLines(lines))
		q = append(q, ',')
		q = at(q, 0)
		q = append(q, ',')
		q = at(q, p.req.ttl)
		if withAuthority {
			q = append(q, ',')
			if p.req.authority == AuthorityNone {
				q = append(q, "NULL"...)
			} else {
				q = strconv.AppendInt(q, int64(p.req.authority), 10)
			}
		}
		q = append(q, ')')
	}
	return q
}
