package reservation

import (
	"context"
	"errors"
	"strings"
)

// errShadowAppeared makes a legacy claim roll back when the engine's own
// reservation with the token exists after all (a shadow reserve whose answer
// was late): the claim goes the ordinary way.
var errShadowAppeared = errors.New("reservation: the reservation exists in the engine after all")

// claimLegacyOnce is one attempt of call callID to claim reservation id,
// which the engine has no record of, from the lines the legacy store
// recorded (CallOptions.Legacy): what a claim in the Redis era did, deduct
// the MySQL ledger. One transaction: lock the ledger rows of the lines (key
// order) and the reservations row of id; if the row exists now, it decides
// (claimed by this call, by another, or go the ordinary way); otherwise
// deduct each line, guarded by on_hand >= qty, and insert the reservation
// as claimed (claim_kind 'legacy', authority redis, claimed_by the call),
// so a repeated claim finds it and answers duplicate. A line the ledger
// cannot cover changes nothing and is error 9106: the payment must be
// refunded.
func (e *Engine) claimLegacyOnce(ctx context.Context, callID, id uint64, leg *LegacyReservation) (int, *header, error) {
	if len(leg.Lines) == 0 || leg.Shop < 1 {
		return 0, nil, unknownToken("claim", id)
	}
	h := &header{id: id, shop: leg.Shop, key: leg.Key, state: "claimed", expiresAt: leg.ExpiresAt, claimKind: "legacy", claimedBy: callID}
	for _, l := range leg.Lines {
		h.lines = append(h.lines, heldLine{item: l.Item, group: l.Group, qty: l.Qty})
	}
	keys := headerPools(h)
	outcome := claimClaimed
	var short string
	key := leg.Key
	if key == "" || len(key) > 255 {
		key = "legacy-claim:" + formatToken(id)
	}
	for attempt := 0; ; attempt++ {
		err := e.tx.Run(ctx, TagClaim, func(ctx context.Context, c Conn) error {
			outcome, short = claimClaimed, ""
			rows, err := c.Query(ctx, lockLedgerSQL(keys)+
				"; SELECT 'H', state, claimed_by, claim_kind FROM reservations WHERE reservation_id = ? FOR UPDATE", id)
			if err != nil {
				return err
			}
			t := byTag(rows)
			if hrow := t["H"]; len(hrow) > 0 {
				if string(hrow[0][0]) != "1" {
					return errShadowAppeared
				}
				if callIDCol(hrow[0][1]) == callID {
					outcome = claimKinds[string(hrow[0][2])]
					return errDoneByThisCall
				}
				return errAlreadyClaimed
			}
			onHand, err := lockedOnHand(t["L"])
			if err != nil {
				return err
			}
			var stmts []string
			for i, l := range h.lines {
				k := PoolKey{h.shop, l.item, l.group}
				if have, ok := onHand[k]; !ok || have < l.qty {
					short = shortLine(i, l)
					return newError(CodeGuardViolated, "45000",
						"holdfast.claim: reservation %s (made by the legacy counter): %s; nothing was deducted, refund or restock",
						formatToken(id), short)
				}
				onHand[k] -= l.qty
				stmts = append(stmts, deductSQL(k, l.qty), GuardRowCount(1))
			}
			stmts = append(stmts, "INSERT INTO reservations (reservation_id, shop_id, idempotency_key, request_hash, state, line_count, line_items,"+
				" created_at, expires_at, finished_at, claim_kind, claimed_by, authority)"+
				" VALUES (?, ?, ?, ?, 1, ?, ?, UTC_TIMESTAMP(6), ?, UTC_TIMESTAMP(6), 'legacy', ?, ?)")
			return CommitWith(ctx, c, strings.Join(stmts, "; "),
				id, h.shop, []byte(key), make([]byte, 32), int64(len(h.lines)), encodeLines(h.lines), leg.ExpiresAt, callID, int64(AuthorityRedis))
		})
		switch {
		case err == nil || errors.Is(err, errDoneByThisCall):
			for _, k := range keys {
				e.refiller.Notify(k, 0)
			}
			return outcome, h, nil
		case errors.Is(err, errAlreadyClaimed):
			return claimDuplicate, h, nil
		case errors.Is(err, errShadowAppeared):
			return e.claimOnce(ctx, callID, id)
		case IsDBError(err, errNumDupKey) && key == leg.Key && attempt == 0:
			// The key names another reservation of the engine's (the
			// shadow reserve conflicted): record this one under its token.
			key = "legacy-claim:" + formatToken(id)
			continue
		case errors.Is(err, ErrGuardViolated):
			e.log.Error("reservation: claim of a reservation made by the legacy counter refused by the ledger guard, refund needed",
				"token_ref", TokenRef(formatToken(id)), "shop_id", h.shop, "reason", short)
		}
		return 0, nil, err
	}
}
