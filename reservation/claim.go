package reservation

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Result columns of claim, release and extend.
var (
	ClaimColumns   = []string{"token", "outcome", "line_no", "inventory_item_id", "inventory_group_id", "quantity"}
	ReleaseColumns = []string{"token", "outcome", "quantity"}
	ExtendColumns  = []string{"token", "expires_at"}
)

// headerByID reads one reservations row without locking it; nil if absent.
func (e *Engine) headerByID(ctx context.Context, tag string, id uint64) (*header, error) {
	rows, err := e.query(ctx, tag, "SELECT "+headerCols+" FROM reservations WHERE reservation_id = ?", id)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return decodeHeader(rows[0])
}

func unknownToken(proc string, id uint64) error {
	return newError(CodeUnknownToken, "45000", "holdfast.%s: unknown reservation token %s", proc, formatToken(id))
}

// lockLedgerSQL locks the ledger rows of keys in primary-key order, in one
// statement (InnoDB walks the ranges in key order). Its rows are tagged 'L':
// 'L', shop_id, inventory_item_id, inventory_group_id, on_hand.
func lockLedgerSQL(keys []PoolKey) string {
	var b strings.Builder
	b.WriteString("SELECT 'L', shop_id, inventory_item_id, inventory_group_id, on_hand FROM inventory_ledger FORCE INDEX (PRIMARY) WHERE ")
	for i, k := range keys {
		if i > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString("(" + k.WhereSQL() + ")")
	}
	b.WriteString(" ORDER BY shop_id, inventory_item_id, inventory_group_id FOR UPDATE")
	return b.String()
}

// lockedOnHand reads lockLedgerSQL's 'L' rows: the locked on_hand per pool.
func lockedOnHand(rows [][][]byte) (map[PoolKey]int64, error) {
	onHand := make(map[PoolKey]int64, len(rows))
	for _, r := range rows {
		v, err := RowInts(r)
		if err != nil {
			return nil, err
		}
		onHand[PoolKey{v[0], v[1], v[2]}] = v[3]
	}
	return onHand, nil
}

// shortLine says that the locked on_hand does not cover line i (from 0) of a
// claim.
func shortLine(i int, l heldLine) string {
	return fmt.Sprintf("line %d (item %d at location %d) needs %d and on_hand is lower", i+1, l.item, l.group, l.qty)
}

// deductSQL is a claim's deduction of qty from k's on_hand, guarded as ever;
// the caller checks, with GuardRowCount(1), that the guard passed.
func deductSQL(k PoolKey, qty int64) string {
	return fmt.Sprintf("UPDATE inventory_ledger SET on_hand = on_hand - %d, updated_at = UTC_TIMESTAMP(6) WHERE %s AND on_hand >= %d",
		qty, k.WhereSQL(), qty)
}

// byTag splits the rows of a multi-statement Query by their first column.
func byTag(rows [][][]byte) map[string][][][]byte {
	out := map[string][][][]byte{}
	for _, r := range rows {
		if len(r) > 0 {
			out[string(r[0])] = append(out[string(r[0])], r[1:])
		}
	}
	return out
}

func headerPools(h *header) []PoolKey {
	keys := make([]PoolKey, 0, len(h.lines))
	for _, l := range h.lines {
		k := PoolKey{h.shop, l.item, l.group}
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b PoolKey) int { return cmpBool(ledgerLess(a, b), ledgerLess(b, a)) })
	return keys
}

// deleteLinesSQL deletes the locked lines of reservation id, guarded;
// column col of each held row is its line_no.
func deleteLinesSQL(id uint64, held [][][]byte, col int) (string, error) {
	keys := make([][]int64, len(held))
	for i, r := range held {
		n, err := ColInt(r[col])
		if err != nil {
			return "", err
		}
		keys[i] = []int64{int64(id), n}
	}
	return guardedDeleteSQL(TableReserved, lineCols, keys), nil
}

// errAlreadyClaimed makes a claim transaction roll back when another claim
// of the same reservation committed first.
var errAlreadyClaimed = errors.New("reservation: already claimed")

func (e *Engine) callClaim(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	start := time.Now()
	defer func() { e.m.claimDur.Observe(time.Since(start)) }()
	id, err := tokenArg("claim", args, 0)
	if err != nil {
		e.m.claims.inc(claimBadArgument)
		return nil, nil, err
	}
	outcome, h, err := e.claim(ctx, id, o)
	switch {
	case err == nil:
		e.m.claims.inc(outcome)
	case errors.Is(err, ErrUnknownToken):
		e.m.claims.inc(claimUnknown)
	case errors.Is(err, ErrExpired):
		e.m.claims.inc(claimForcedFailed)
	case errors.Is(err, ErrGuardViolated):
		e.m.claims.inc(claimGuardRefused)
	case errors.Is(err, ErrOutcomeUnknown):
		e.m.claims.inc(claimOutcomeUnknown)
	case errors.As(err, new(*UnavailableError)):
		e.m.claims.inc(claimUnavailable)
	default:
		e.m.claims.inc(claimError)
	}
	if err != nil {
		return nil, nil, err
	}
	tok := formatToken(h.id)
	rows := make([][]any, len(h.lines))
	for i, l := range h.lines {
		rows[i] = []any{tok, claimOutcomes[outcome], int64(i + 1), l.item, l.group, l.qty}
	}
	return ClaimColumns, rows, nil
}

// claim deducts a reservation from the ledger: an unlocked read of the
// reservation, then one transaction. For a reservation that read active,
// the transaction is sent whole, its writes guarded (claimOneTrip); when a
// guard finds it changed, or it read otherwise, the transaction locks the
// ledger rows (key order), re-checks the reservation's lines FOR UPDATE
// and its row FOR UPDATE, then deducts each line with the guard on_hand >=
// qty, deletes the lines and records the claim (state, claimed_at,
// claim_kind, and claimed_by, the call's id) — the claim log that makes a
// repeated claim a reported duplicate, and lets a claim whose connection
// was lost during COMMIT find its own claim and answer it as made
// (recovery.go).
//
// If the reservation expired (or was released) the deduction is forced: the
// same guarded UPDATE, which may push pool + reserved above on_hand (the
// units went back to the pool and may be reserved by someone else); it is
// alerted either way, and the pools are handed to the refiller, which
// shrinks a pool that exceeds the ledger. A failed forced deduction changes
// nothing and is error 9104: the payment must be refunded.
func (e *Engine) claim(ctx context.Context, id uint64, o *CallOptions) (int, *header, error) {
	call := e.newCall(procClaim)
	for {
		outcome, h, err := e.claimOnce(ctx, call.id, id)
		if errors.Is(err, ErrUnknownToken) && o != nil && o.Legacy != nil {
			outcome, h, err = e.claimLegacyOnce(ctx, call.id, id, o.Legacy)
		}
		if err == nil {
			e.claimed(ctx, outcome, h)
			if outcome != claimDuplicate {
				o.changed(Change{Shop: h.shop, Lines: heldToLines(h.lines)})
			}
			return outcome, h, nil
		}
		if !call.again(ctx, err, true) {
			return 0, nil, call.answer(ctx, err)
		}
	}
}

// claimKinds maps claim_kind to the outcome a claim answers.
// "legacy" is a claim of a reservation the engine had no record of, deducted
// from the lines the legacy store recorded (claimLegacyOnce); it answers
// "claimed", as the legacy system did.
var claimKinds = map[string]int{"normal": claimClaimed, "late": claimLate, "forced": claimForced, "legacy": claimClaimed}

// claimOnce is one attempt of call callID to claim reservation id.
func (e *Engine) claimOnce(ctx context.Context, callID, id uint64) (int, *header, error) {
	h, err := e.headerByID(ctx, TagClaim, id)
	if err != nil {
		return 0, nil, err
	}
	if h == nil {
		return 0, nil, unknownToken("claim", id)
	}
	if h.state == "claimed" {
		if h.claimedBy == callID {
			return claimKinds[h.claimKind], h, nil // this call claimed it; the answer was lost
		}
		return claimDuplicate, h, nil
	}
	keys := headerPools(h)
	if h.state == "active" && !e.cfg.DisableOneTrip {
		switch err := e.claimOneTrip(ctx, callID, h, keys); {
		case err == nil:
			return claimClaimed, h, nil
		case !errors.Is(err, errOneTripRolledBack):
			return 0, nil, err
		}
		e.m.claimOneTripFallbacks.Add(1)
	}
	var (
		outcome   int
		expiredAt time.Time
		short     string
	)
	// Two round trips: lock the ledger rows, the lines and the
	// reservation (in the global order), decide with the locked on_hand in
	// hand, then write everything and COMMIT.
	err = e.tx.Run(ctx, TagClaim, func(ctx context.Context, c Conn) error {
		outcome, short = claimClaimed, ""
		rows, err := c.Query(ctx, lockLedgerSQL(keys)+
			"; SELECT 'Q', line_no, expires_at <= UTC_TIMESTAMP(6) FROM reserved_quantities FORCE INDEX (PRIMARY) WHERE reservation_id = ? FOR UPDATE"+
			"; SELECT 'H', state, expires_at, claimed_by, claim_kind FROM reservations WHERE reservation_id = ? FOR UPDATE", id, id)
		if err != nil {
			return err
		}
		t := byTag(rows)
		onHand, err := lockedOnHand(t["L"])
		if err != nil {
			return err
		}
		held, hrow := t["Q"], t["H"]
		if len(hrow) == 0 {
			return unknownToken("claim", id) // pruned meanwhile
		}
		if string(hrow[0][0]) == "1" {
			if callIDCol(hrow[0][2]) == callID {
				outcome = claimKinds[string(hrow[0][3])]
				return errDoneByThisCall
			}
			return errAlreadyClaimed
		}
		expiredAt, _ = ColTime(hrow[0][1])
		present := make(map[int64]bool, len(held))
		for _, r := range held {
			n, _ := ColInt(r[0])
			present[n] = true
			if string(r[1]) == "1" {
				outcome = claimLate
			}
		}
		if string(hrow[0][0]) == "2" || len(present) < len(h.lines) {
			outcome = claimForced
		}
		var stmts []string
		freed := map[PoolKey]int64{} // quantity of the held lines deleted, per pool
		for i, l := range h.lines {
			k := PoolKey{h.shop, l.item, l.group}
			if have, ok := onHand[k]; !ok || have < l.qty {
				short = shortLine(i, l)
				if outcome == claimForced {
					return ErrExpired // rolls back; reported below
				}
				// The units were held, yet the ledger no longer covers
				// them: a forced claim of an expired reservation took
				// them (the seeds' "Y meets the guard"), or the ledger
				// was changed outside holdfast. Deduct nothing.
				return newError(CodeGuardViolated, "45000",
					"holdfast.claim: reservation %s: %s although it was reserved (a forced claim or a change outside holdfast took the units); nothing was deducted, refund or restock",
					formatToken(id), short)
			}
			onHand[k] -= l.qty
			// Guarded as ever, and the guard checked: the locked on_hand
			// above says it passes.
			stmts = append(stmts, deductSQL(k, l.qty), GuardRowCount(1))
			if present[int64(i+1)] {
				freed[k] += l.qty
			}
		}
		if len(held) > 0 {
			del, err := deleteLinesSQL(id, held, 0)
			if err != nil {
				return err
			}
			stmts = append(stmts, del)
		}
		for _, k := range keys {
			if q := freed[k]; q > 0 {
				stmts = append(stmts, issuedDecrementSQL(k, q))
			}
		}
		kind := map[int]string{claimClaimed: "normal", claimLate: "late", claimForced: "forced"}[outcome]
		stmts = append(stmts, "UPDATE reservations SET state = 1, finished_at = UTC_TIMESTAMP(6), claim_kind = ?, claimed_by = ? WHERE reservation_id = ?")
		return CommitWith(ctx, c, strings.Join(stmts, "; "), kind, callID, id)
	})
	tok := formatToken(id)
	switch {
	case errors.Is(err, errDoneByThisCall):
		return outcome, h, nil
	case errors.Is(err, errAlreadyClaimed):
		return claimDuplicate, h, nil
	case errors.Is(err, ErrGuardViolated):
		e.log.Error("reservation: claim refused by the ledger guard although the units were reserved, refund needed",
			"token_ref", TokenRef(tok), "shop_id", h.shop, "reason", short)
		return 0, nil, err
	case errors.Is(err, ErrExpired):
		e.log.Error("reservation: claim after expiry: forced deduction FAILED, refund needed",
			"token_ref", TokenRef(tok), "shop_id", h.shop, "expired_at", expiredAt, "reason", short)
		return 0, nil, newError(CodeExpired, "45000",
			"holdfast.claim: reservation %s expired at %s and the forced deduction failed: %s; nothing was deducted, refund the payment",
			tok, expiredAt.Format(time.RFC3339), short)
	case err != nil:
		return 0, nil, err
	}
	return outcome, h, nil
}

// claimOneTrip is claimOnce's transaction in one round trip, for a
// reservation that was active and unexpired when read, as almost every
// claim finds it. Nothing is read first; every write is guarded instead:
//
//   - per item/location, in ledger key order: each line's deduction
//     (deductSQL), guarded to have changed the ledger row, and the pool's
//     issued counter, down by the lines' quantity (a pool_counters row is
//     only ever locked under its ledger row's lock, so taking one before
//     the next item's ledger row makes no lock cycle);
//   - the DELETE of the reservation's unexpired lines, guarded to have
//     deleted all of them: a line that expired, or was swept, released or
//     claimed meanwhile, fails it;
//   - the claim record, guarded to have found the reservation active (a
//     backstop: whatever ends a reservation deletes its lines first);
//
// then COMMIT. Any guard failing rolls it all back and returns
// errOneTripRolledBack: the caller runs the two-round-trip transaction,
// which reads what it finds and answers it (late, forced, duplicate,
// refused).
func (e *Engine) claimOneTrip(ctx context.Context, callID uint64, h *header, keys []PoolKey) error {
	stmts := make([]string, 0, 2*len(h.lines)+len(keys)+4)
	for _, k := range keys {
		var freed int64
		for _, l := range h.lines {
			if (PoolKey{h.shop, l.item, l.group}) == k {
				stmts = append(stmts, deductSQL(k, l.qty), GuardRowCount(1))
				freed += l.qty
			}
		}
		stmts = append(stmts, issuedDecrementSQL(k, freed))
	}
	stmts = append(stmts, "DELETE FROM "+TableReserved+" WHERE reservation_id = ? AND expires_at > UTC_TIMESTAMP(6)",
		GuardRowCount(int64(len(h.lines))))
	stmts = append(stmts, "UPDATE reservations SET state = 1, finished_at = UTC_TIMESTAMP(6), claim_kind = 'normal', claimed_by = ? WHERE reservation_id = ? AND state = 0",
		GuardRowCount(1))
	q := strings.Join(stmts, "; ")
	err := e.tx.Run(ctx, TagClaim, func(ctx context.Context, c Conn) error {
		return CommitWith(ctx, c, q, h.id, callID, h.id)
	})
	if IsDBError(err, errNumGuard) {
		return fmt.Errorf("%w: %w", errOneTripRolledBack, err)
	}
	if err == nil {
		e.m.claimOneTrip.Add(1)
	}
	return err
}

// claimed alerts on a late or forced claim this call made, once, whichever
// attempt made it.
func (e *Engine) claimed(ctx context.Context, outcome int, h *header) {
	tok := formatToken(h.id)
	switch outcome {
	case claimLate:
		e.log.Warn("reservation: claim after expiry: units were still held, claimed; TTL is too short for the payment flow",
			"token_ref", TokenRef(tok), "shop_id", h.shop, "expired_at", h.expiresAt)
	case claimForced:
		e.log.Error("reservation: claim after expiry: forced deduction succeeded; pool + reserved may exceed on_hand until the refiller shrinks the pool",
			"token_ref", TokenRef(tok), "shop_id", h.shop, "expired_at", h.expiresAt, "released", h.state == "released")
		for _, k := range headerPools(h) {
			if err := e.refiller.RefillNow(ctx, k); err != nil {
				e.log.Error("reservation: refill after forced claim failed", "pool", k.String(), "err", err)
			}
		}
	}
}

func (e *Engine) callRelease(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	id, err := tokenArg("release", args, 0)
	if err != nil {
		e.m.ops[opRelease].inc(opBadArgument)
		return nil, nil, err
	}
	outcome, qty, err := e.release(ctx, id)
	if err != nil {
		e.m.ops[opRelease].inc(opOutcomeOf(err))
		return nil, nil, err
	}
	e.m.ops[opRelease].inc(outcome)
	name := map[int]string{opOK: "released", opDuplicate: "duplicate", opExpired: "expired", opClaimed: "claimed"}[outcome]
	return ReleaseColumns, [][]any{{formatToken(id), name, qty}}, nil
}

// release deletes a reservation's lines and marks it released. Releasing
// twice reports "duplicate"; releasing a claimed reservation changes nothing
// and reports "claimed"; releasing an expired one reports "expired" (and
// marks it released, so a later claim is a forced one). It locks
// reserved_quantities then reservations and never the ledger: giving units
// back cannot break the invariant. The release records the call's id and
// the quantity it gave back, so a release whose connection was lost during
// COMMIT answers what it did (recovery.go).
func (e *Engine) release(ctx context.Context, id uint64) (int, int64, error) {
	call := e.newCall(procOp(opRelease))
	for {
		outcome, qty, err := e.releaseOnce(ctx, call.id, id)
		if err == nil || !call.again(ctx, err, true) {
			return outcome, qty, call.answer(ctx, err)
		}
	}
}

func (e *Engine) releaseOnce(ctx context.Context, callID, id uint64) (int, int64, error) {
	var (
		outcome int
		qty     int64
		pools   []PoolKey
	)
	err := e.tx.Run(ctx, TagRelease, func(ctx context.Context, c Conn) error {
		outcome, qty, pools = opOK, 0, nil
		rows, err := c.Query(ctx, "SELECT 'Q', shop_id, inventory_item_id, inventory_group_id, quantity, line_no FROM reserved_quantities FORCE INDEX (PRIMARY) WHERE reservation_id = ? FOR UPDATE"+
			"; SELECT 'H', state, released_by, released_quantity FROM reservations WHERE reservation_id = ? FOR UPDATE", id, id)
		if err != nil {
			return err
		}
		t := byTag(rows)
		held, hrow := t["Q"], t["H"]
		if len(hrow) == 0 {
			return unknownToken("release", id)
		}
		if callIDCol(hrow[0][1]) == callID {
			// This call released it; the answer was lost.
			if qty, err = ColInt(hrow[0][2]); err != nil {
				return err
			}
			if qty == 0 {
				outcome = opExpired
			}
			return errDoneByThisCall
		}
		switch string(hrow[0][0]) {
		case "1":
			outcome = opClaimed
			return nil
		case "2":
			outcome = opDuplicate
			return nil
		}
		if len(held) == 0 {
			outcome = opExpired
		}
		var stmts []string
		if len(held) > 0 {
			gone := make([]returnedLine, len(held))
			for i, r := range held {
				v, err := RowInts(r)
				if err != nil {
					return err
				}
				qty += v[3]
				k := PoolKey{v[0], v[1], v[2]}
				pools = append(pools, k)
				gone[i] = returnedLine{key: k, id: id, line: v[4], qty: v[3]}
			}
			// The ledger is not locked: the units go back through
			// reservation_returns (see counters.go).
			del, err := deleteLinesSQL(id, held, 4)
			if err != nil {
				return err
			}
			stmts = append(stmts, del, returnsInsertSQL(gone))
		}
		stmts = append(stmts, "UPDATE reservations SET state = 2, finished_at = UTC_TIMESTAMP(6), released_by = ?, released_quantity = ? WHERE reservation_id = ?")
		return CommitWith(ctx, c, strings.Join(stmts, "; "), callID, qty, id)
	})
	if errors.Is(err, errDoneByThisCall) {
		err = nil
	}
	if err != nil {
		return 0, 0, err
	}
	for _, k := range pools {
		e.refiller.Notify(k, 0)
	}
	return outcome, qty, nil
}

func (e *Engine) callExtend(ctx context.Context, args []any, o *CallOptions) ([]string, [][]any, error) {
	id, err := tokenArg("extend", args, 0)
	if err != nil {
		e.m.ops[opExtend].inc(opBadArgument)
		return nil, nil, err
	}
	if args[1] == nil {
		e.m.ops[opExtend].inc(opBadArgument)
		return nil, nil, badArg("extend", 2, "ttl_seconds", "must be a positive integer, got NULL")
	}
	ttl, err := e.ttlArg("extend", args, 1)
	if err != nil {
		e.m.ops[opExtend].inc(opBadArgument)
		return nil, nil, err
	}
	exp, err := e.extend(ctx, id, ttl)
	if err != nil {
		e.m.ops[opExtend].inc(opOutcomeOf(err))
		return nil, nil, err
	}
	e.m.ops[opExtend].inc(opOK)
	return ExtendColumns, [][]any{{formatToken(id), exp}}, nil
}

// extend sets a live reservation's expiry to now + ttl. It locks the ledger
// rows first: the refiller decides which lines are expired under the ledger
// lock and deletes them in the same transaction, so an extend must not slip
// in between. It records the call's id, so an extend whose connection was
// lost during COMMIT answers the expiry it set (recovery.go).
func (e *Engine) extend(ctx context.Context, id uint64, ttl time.Duration) (time.Time, error) {
	call := e.newCall(procOp(opExtend))
	for {
		exp, err := e.extendOnce(ctx, call.id, id, ttl)
		if err == nil || !call.again(ctx, err, true) {
			return exp, call.answer(ctx, err)
		}
	}
}

func (e *Engine) extendOnce(ctx context.Context, callID, id uint64, ttl time.Duration) (time.Time, error) {
	h, err := e.headerByID(ctx, TagExtend, id)
	if err != nil {
		return time.Time{}, err
	}
	if h == nil {
		return time.Time{}, unknownToken("extend", id)
	}
	if h.extendedBy == callID {
		return h.expiresAt, nil // this call extended it; the answer was lost
	}
	tok := formatToken(id)
	if h.state == "claimed" || h.state == "released" {
		return time.Time{}, newError(CodeExpired, "45000", "holdfast.extend: reservation %s is %s, not active", tok, h.state)
	}
	var exp time.Time
	err = e.tx.Run(ctx, TagExtend, func(ctx context.Context, c Conn) error {
		rows, err := c.Query(ctx, lockLedgerSQL(headerPools(h))+
			"; SELECT 'Q', expires_at <= UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) FROM reserved_quantities FORCE INDEX (PRIMARY) WHERE reservation_id = ? FOR UPDATE"+
			"; SELECT 'H', state, extended_by, expires_at FROM reservations WHERE reservation_id = ? FOR UPDATE", id, id)
		if err != nil {
			return err
		}
		t := byTag(rows)
		held, hrow := t["Q"], t["H"]
		if len(hrow) == 0 {
			return unknownToken("extend", id)
		}
		if callIDCol(hrow[0][1]) == callID {
			if exp, err = ColTime(hrow[0][2]); err != nil {
				return err
			}
			return errDoneByThisCall
		}
		if string(hrow[0][0]) != "0" {
			return newError(CodeExpired, "45000", "holdfast.extend: reservation %s is no longer active", tok)
		}
		if len(held) < len(h.lines) || slices.ContainsFunc(held, func(r [][]byte) bool { return string(r[0]) == "1" }) {
			return newError(CodeExpired, "45000", "holdfast.extend: reservation %s expired at %s", tok, h.expiresAt.Format(time.RFC3339))
		}
		now, err := ColTime(held[0][1])
		if err != nil {
			return err
		}
		exp = now.Add(ttl).Truncate(time.Microsecond)
		return CommitWith(ctx, c, "UPDATE reserved_quantities SET expires_at = ? WHERE reservation_id = ?; UPDATE reservations SET expires_at = ?, extended_by = ? WHERE reservation_id = ?",
			exp, id, exp, callID, id)
	})
	if errors.Is(err, errDoneByThisCall) {
		err = nil
	}
	return exp, err
}
