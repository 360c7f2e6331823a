package reservation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// pending is one reserve attempt waiting for, or inside, a transaction.
type pending struct {
	req   *reserveReq
	pools []PoolKey // the location chosen for each line in this attempt
	out   outcome

	id   uint64    // reservation_id for this attempt
	took [][]int64 // unit ids taken per line, inside the transaction
	now  time.Time // database time of the transaction

	// Combiner bookkeeping, guarded by the combiner's mu.
	state pendingState
	wake  chan bool // buffered 1: true = lead the combiner, false = out is ready
	sess  *session  // handed over with leadership; nil means none open
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
//
// A duplicate idempotency key (1062) rolls the batch back; the keys are then
// looked up, the reserves whose key exists are answered from it (replay or
// conflict) and the rest run again, so a replay never fails the others.
//
// s, when non-nil, is the combiner's session to run on; otherwise the
// transaction borrows its own connection.
func (e *Engine) runBatch(ctx context.Context, batch []*pending, s *session) {
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
	e.m.batchSize.observeValue(float64(len(run)))
	// Reads after a transaction go over the session when there is one: a
	// leader holding a connection must not borrow a second (a pool
	// exhausted by such leaders would deadlock). On the session, with
	// autocommit off, such a read just opens the next transaction; it takes
	// no lock.
	read := e.reader(TagReserve)
	if s != nil {
		read = func(ctx context.Context, q string, args ...any) ([][][]byte, error) {
			rows, err := s.c.Query(ctx, q, args...)
			if err != nil && !isDB(err) {
				s.broken = true
			}
			return rows, err
		}
	}
	for round := 0; len(run) > 0; round++ {
		if round == 3 {
			for _, p := range run {
				p.out = outcome{retry: true}
			}
			return
		}
		for _, p := range run {
			p.id = newID()
		}
		fn := func(ctx context.Context, c Conn) error { return e.batchTx(ctx, c, run) }
		var err error
		if s != nil {
			err = e.sessionTx(ctx, s, fn)
		} else {
			err = e.tx.Run(ctx, TagReserve, fn)
		}
		if (err == nil || errors.Is(err, errNoneFit)) && (s == nil || !s.broken) {
			e.diagnoseShort(ctx, read, run)
		}
		switch {
		case err == nil:
			touched := map[PoolKey]bool{}
			for _, p := range run {
				if len(p.out.short) > 0 {
					continue
				}
				lines := make([]heldLine, len(p.req.lines))
				for i, l := range p.req.lines {
					lines[i] = heldLine{item: l.item, group: p.pools[i].GroupID, qty: l.qty}
					touched[p.pools[i]] = true
				}
				p.out.res = &reservation{id: p.id, expiresAt: p.now.Add(p.req.ttl), lines: lines, state: "active"}
			}
			for k := range touched {
				e.refiller.Notify(k)
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
					rest = append(rest, p) // a random id collided, or the other batch rolled back
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

// poolDemand is the units one batch wants from one pool.
type poolDemand struct {
	key PoolKey
	n   int64
}

func (e *Engine) batchTx(ctx context.Context, c Conn, run []*pending) error {
	demand := map[PoolKey]int64{}
	for _, p := range run {
		p.out = outcome{}
		p.took = make([][]int64, len(p.pools))
		for i, k := range p.pools {
			demand[k] += p.req.lines[i].qty
		}
	}
	parts := make([]poolDemand, 0, len(demand))
	for k, n := range demand {
		parts = append(parts, poolDemand{k, n})
	}
	slices.SortFunc(parts, func(a, b poolDemand) int { return cmpBool(groupLess(a.key, b.key), groupLess(b.key, a.key)) })

	q := make([]byte, 0, 256*len(parts))
	for i, pd := range parts {
		if len(parts) > 1 {
			if i > 0 {
				q = append(q, " UNION ALL "...)
			}
			q = append(q, '(')
		}
		q = append(q, "SELECT id, "...)
		q = strconv.AppendInt(q, int64(i), 10)
		q = append(q, ", UTC_TIMESTAMP(6) FROM reservation_units FORCE INDEX (PRIMARY) WHERE "...)
		q = append(q, pd.key.WhereSQL()...)
		q = append(q, " ORDER BY id LIMIT "...)
		q = strconv.AppendInt(q, pd.n, 10)
		q = append(q, " FOR UPDATE SKIP LOCKED"...)
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
		v, err := rowInts(row[:2])
		if err != nil {
			return err
		}
		if now.IsZero() {
			if now, err = colTime(row[2]); err != nil {
				return err
			}
		}
		k := parts[v[1]].key
		avail[k] = append(avail[k], v[0])
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

	// DELETE the units taken, by exact primary key (see DeleteByKeys).
	var keys [][]int64
	for _, p := range ok {
		for i, k := range p.pools {
			for _, id := range p.took[i] {
				keys = append(keys, []int64{k.ShopID, k.ItemID, k.GroupID, id})
			}
		}
	}
	total := len(keys)
	n, err := DeleteByKeys(ctx, c, TableUnits, unitCols, keys, "")
	if err != nil {
		return err
	}
	if n != total {
		return fmt.Errorf("reservation: deleted %d units, expected %d", n, total)
	}

	first := true
	ins := make([]byte, 0, 128+96*total)
	ins = append(ins, "INSERT INTO reserved_quantities (reservation_id, line_no, shop_id, inventory_item_id, inventory_group_id, quantity, expires_at) VALUES "...)
	for _, p := range ok {
		exp := now.Add(p.req.ttl)
		for i, k := range p.pools {
			if !first {
				ins = append(ins, ',')
			}
			first = false
			ins = append(ins, '(')
			ins = strconv.AppendUint(ins, p.id, 10)
			ins = append(ins, ',')
			ins = strconv.AppendInt(ins, int64(i+1), 10)
			ins = append(ins, ',')
			ins = strconv.AppendInt(ins, k.ShopID, 10)
			ins = append(ins, ',')
			ins = strconv.AppendInt(ins, k.ItemID, 10)
			ins = append(ins, ',')
			ins = strconv.AppendInt(ins, k.GroupID, 10)
			ins = append(ins, ',')
			ins = strconv.AppendInt(ins, p.req.lines[i].qty, 10)
			ins = append(ins, ',')
			ins, _ = AppendLiteral(ins, exp)
			ins = append(ins, ')')
		}
	}
	if _, err := c.Exec(ctx, string(ins)); err != nil {
		return err
	}

	sorted := slices.Clone(ok)
	slices.SortFunc(sorted, func(a, b *pending) int {
		if a.req.shop != b.req.shop {
			return cmpBool(a.req.shop < b.req.shop, a.req.shop > b.req.shop)
		}
		return cmpBool(a.req.key < b.req.key, a.req.key > b.req.key)
	})
	hdr := make([]byte, 0, 256*len(sorted))
	hdr = append(hdr, "INSERT INTO reservations (reservation_id, shop_id, idempotency_key, request_hash, state, line_count, line_items, created_at, expires_at) VALUES "...)
	for j, p := range sorted {
		if j > 0 {
			hdr = append(hdr, ',')
		}
		lines := make([]heldLine, len(p.req.lines))
		for i, l := range p.req.lines {
			lines[i] = heldLine{item: l.item, group: p.pools[i].GroupID, qty: l.qty}
		}
		hdr = append(hdr, '(')
		hdr = strconv.AppendUint(hdr, p.id, 10)
		hdr = append(hdr, ',')
		hdr = strconv.AppendInt(hdr, p.req.shop, 10)
		hdr = append(hdr, ',')
		hdr, _ = AppendLiteral(hdr, []byte(p.req.key))
		hdr = append(hdr, ',')
		hdr, _ = AppendLiteral(hdr, p.req.hash[:])
		hdr = append(hdr, ",0,"...)
		hdr = strconv.AppendInt(hdr, int64(len(lines)), 10)
		hdr = append(hdr, ',')
		hdr, _ = AppendLiteral(hdr, encodeLines(lines))
		hdr = append(hdr, ',')
		hdr, _ = AppendLiteral(hdr, now)
		hdr = append(hdr, ',')
		hdr, _ = AppendLiteral(hdr, now.Add(p.req.ttl))
		hdr = append(hdr, ')')
	}
	_, err = c.Exec(ctx, string(hdr))
	return err
}
