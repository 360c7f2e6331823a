package reservation

import (
	"context"
	"time"
)

// What a caller that routes CALLs beside the engine uses (CallWith; package
// reservation/legacy, during a migration from a legacy Redis counter,
// docs/migration.md): per-call options, the requests decoded as Call
// would, and the authority recorded with a reservation.

// Authority says who decided a reservation, as reservations.authority
// records it (schema version 4). The engine records what CallOptions says
// and treats every reservation alike; the caller of CallWith routes by it.
type Authority uint8

const (
	// AuthorityNone: no other store in the picture (reservations.authority
	// NULL), as for every reservation before schema version 4.
	AuthorityNone Authority = iota
	// AuthorityHoldfast: the engine decided; the legacy store was written
	// after it (dual write).
	AuthorityHoldfast
	// AuthorityRedis: the legacy counter decided; the engine ran the same
	// reserve in shadow.
	AuthorityRedis
)

func (a Authority) String() string {
	switch a {
	case AuthorityHoldfast:
		return "holdfast"
	case AuthorityRedis:
		return "redis"
	}
	return "none"
}

// CallerIDBit is the bit of a reservation id (and so of its token) that
// belongs to the caller of CallWith: the engine's own ids leave it clear,
// and when an id chosen with CallOptions.ReservationID collides with
// another reservation's, the id the engine takes instead keeps it.
// Package reservation/legacy records in it that the legacy counter
// decided, so that whoever holds only the token can tell, without a read.
const CallerIDBit = uint64(1) << 62

// NewReservationID returns a random reservation id, CallerIDBit clear, for
// CallOptions.ReservationID.
func NewReservationID() uint64 { return newID() }

// newIDLike returns a new random id with id's CallerIDBit.
func newIDLike(id uint64) uint64 {
	return newID() | id&CallerIDBit
}

// FormatToken is the token of reservation id.
func FormatToken(id uint64) string { return formatToken(id) }

// ParseToken is the reservation id of a token.
func ParseToken(token string) (uint64, bool) { return parseToken(token) }

// CallOptions adjust one CallWith. The zero value is Call.
type CallOptions struct {
	// ReservationID, when non-zero, is the reservation_id (and so the
	// token) of the reservation a reserve makes; see CallerIDBit. A
	// reserve replayed from its key answers the original reservation
	// whatever this says.
	ReservationID uint64
	// Authority is recorded with the reservation a reserve makes
	// (reservations.authority). AuthorityNone records NULL and works on
	// schema version 3; any other value needs version 4.
	Authority Authority
	// Locations, when not nil, pins each line of a reserve to one location:
	// Locations[i] must be one of line i's locations, and the line is taken
	// from there or not at all. The request is still identified, for
	// replays and conflicts, by the lines as the caller sent them. A shadow
	// reserve uses it to hold exactly what the legacy counter promised.
	Locations []int64
	// Legacy is, for claim, the reservation as the legacy store recorded
	// it. When the engine has no reservation with the token (its shadow
	// reserve failed), the claim deducts these lines from the ledger, each
	// guarded by on_hand >= qty, and records the reservation as claimed in
	// the same transaction, so that it is deducted once however often it
	// is claimed. Nil: an unknown token is error 9103.
	Legacy *LegacyReservation
	// Changed, when not nil, is told what a claim deducted or a stock
	// procedure changed, after its transaction committed and before
	// CallWith returns. It is not called when nothing changed (a duplicate
	// claim, a failed call) nor when the outcome is unknown (9108).
	Changed func(Change)
}

// Line is one line of a reservation as held: a quantity of one item at one
// location.
type Line struct{ Item, Group, Qty int64 }

// LegacyReservation is a reservation as the legacy store recorded it.
type LegacyReservation struct {
	Shop      int64
	Key       string // its idempotency key
	Lines     []Line
	ExpiresAt time.Time
}

// Change is what CallOptions.Changed is told.
type Change struct {
	// Shop and Lines: for a claim, the reservation's lines deducted from
	// the ledger now.
	Shop  int64
	Lines []Line
	// Pool and OnHandDelta: for receive, set_on_hand and adjust, the
	// change of the pool's on_hand.
	Pool        PoolKey
	OnHandDelta int64
}

func (o *CallOptions) changed(c Change) {
	if o != nil && o.Changed != nil {
		o.Changed(c)
	}
}

func heldToLines(hs []heldLine) []Line {
	out := make([]Line, len(hs))
	for i, h := range hs {
		out[i] = Line{Item: h.item, Group: h.group, Qty: h.qty}
	}
	return out
}

// ReserveRequest is a reserve's arguments, decoded and validated as the
// engine does.
type ReserveRequest struct {
	Shop  int64
	Key   string
	Lines []RequestLine
	// TTL is ttl_seconds, or the default for NULL.
	TTL time.Duration
	// Hash identifies the request: the same key with another hash is a
	// conflict (9102).
	Hash [32]byte
}

// RequestLine is one line of a reserve: Qty of Item from the first of
// Locations that can supply all of it.
type RequestLine struct {
	Item, Qty int64
	Locations []int64
}

// ParseReserve decodes reserve's arguments as Call would. Its errors are
// the ones Call answers (9105); it counts nothing.
func (e *Engine) ParseReserve(args []any) (*ReserveRequest, error) {
	if len(args) != 4 {
		return nil, newError(CodeWrongArgCount, "42000",
			"Incorrect number of arguments for PROCEDURE holdfast.reserve; expected 4, got %d", len(args))
	}
	req, err := e.parseReserve(args)
	if err != nil {
		return nil, err
	}
	out := &ReserveRequest{Shop: req.shop, Key: req.key, TTL: req.ttl, Hash: req.hash, Lines: make([]RequestLine, len(req.lines))}
	for i, l := range req.lines {
		out.Lines[i] = RequestLine{Item: l.item, Qty: l.qty, Locations: append([]int64(nil), l.locations...)}
	}
	return out, nil
}

// Available reads, for each key that has a ledger row, what the ledger
// can still promise: on_hand less the quantity of live reservations (not
// the units in the pool, which is capped). One lock-free statement.
func (e *Engine) Available(ctx context.Context, keys []PoolKey) (map[PoolKey]int64, error) {
	stats, err := e.poolStats(ctx, e.reader(TagRead), keys)
	if err != nil {
		return nil, err
	}
	out := make(map[PoolKey]int64, len(stats))
	for k, s := range stats {
		out[k] = s.available()
	}
	return out, nil
}

// ParseExtend decodes extend's arguments as Call would: the token and the
// TTL. Its errors are the ones Call answers (9105); it counts nothing.
func (e *Engine) ParseExtend(args []any) (token string, ttl time.Duration, err error) {
	if len(args) != 2 {
		return "", 0, newError(CodeWrongArgCount, "42000",
			"Incorrect number of arguments for PROCEDURE holdfast.extend; expected 2, got %d", len(args))
	}
	id, err := tokenArg("extend", args, 0)
	if err != nil {
		return "", 0, err
	}
	if args[1] == nil {
		return "", 0, badArg("extend", 2, "ttl_seconds", "must be a positive integer, got NULL")
	}
	if ttl, err = e.ttlArg("extend", args, 1); err != nil {
		return "", 0, err
	}
	return formatToken(id), ttl, nil
}

// TokenArg decodes the token argument of claim and release (args[0]) as
// Call would.
func TokenArg(proc string, args []any) (string, error) {
	if len(args) < 1 {
		return "", newError(CodeWrongArgCount, "42000", "Incorrect number of arguments for PROCEDURE holdfast.%s; expected 1, got 0", proc)
	}
	id, err := tokenArg(proc, args, 0)
	if err != nil {
		return "", err
	}
	return formatToken(id), nil
}
