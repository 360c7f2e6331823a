package legacy

import "github.com/holdfast-db/holdfast/reservation"

// Which authority finishes a reservation. Each reserve is decided by one
// authority, the engine or the legacy counter (with the engine running the
// same reserve in shadow), and the reservation records which, in two
// places: the reservations.authority column (schema version 4), and one bit
// of its reservation_id (reservation.CallerIDBit), so that a claim, release
// or extend holding only the token is routed without a read.

// authorityBit, set in a reservation id, says the legacy counter decided it.
const authorityBit = reservation.CallerIDBit

// NewReservationID returns a random reservation id whose token says a.
func NewReservationID(a reservation.Authority) uint64 {
	id := reservation.NewReservationID()
	if a == reservation.AuthorityRedis {
		id |= authorityBit
	}
	return id
}

// TokenAuthority reports what a token's id says: AuthorityRedis when the
// legacy counter decided it, AuthorityHoldfast otherwise. ok is false for
// a string that is not a token. Tokens made before schema version 4 may say
// either (their id was random): a caller that finds no record of such a
// token in the legacy store must treat it as the engine's.
func TokenAuthority(token string) (a reservation.Authority, ok bool) {
	id, ok := reservation.ParseToken(token)
	if !ok {
		return reservation.AuthorityNone, false
	}
	if id&authorityBit != 0 {
		return reservation.AuthorityRedis, true
	}
	return reservation.AuthorityHoldfast, true
}
