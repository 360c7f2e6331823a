package pool

import (
	"context"
	"time"
)

// Conn is what the pool needs of a connection. K is the connection's
// session variant (see the package comment).
//
// The pool calls these methods only while it owns the connection (idle,
// being vetted before a lend, or being closed), never while a borrower
// holds it, and never under its lock.
type Conn[K comparable] interface {
	// Key returns the connection's session variant. It must not change.
	Key() K
	// Alive is a cheap check that does not block (a non-blocking read
	// that must find nothing, say) that the connection is still usable.
	// It runs before every lend and on idle connections in maintenance.
	Alive() bool
	// Ping checks the connection with a round trip, bounded by ctx. It
	// runs before lending a connection idle longer than PingAfterIdle.
	Ping(ctx context.Context) error
	// Close closes the connection. The pool calls it exactly once.
	Close()
	// PoolSlot returns the pool's bookkeeping for this connection: a
	// pointer to a Slot stored in the connection, which only the pool
	// reads or writes. A connection belongs to one pool.
	PoolSlot() *Slot
}

// Slot is the pool's bookkeeping for one connection, kept inside the
// connection so that lending and returning need no map and no wrapper. Its
// zero value is what a new connection carries; the pool fills it in when
// the dial completes. Only the pool touches it; its fields are guarded by
// the owning pool's lock, except that ID and Created are fixed before the
// first lend and may then be read by whoever holds the connection.
type Slot struct {
	id        uint64
	created   time.Time
	expires   time.Time // zero: no lifetime limit
	idleSince time.Time // when it last went idle (set while idle)
	state     slotState
	holds     int  // Hold calls not yet matched by Unhold
	reusable  bool // parked: what Release said
	spoiled   bool // an Unhold said the connection must not be reused
}

type slotState uint8

const (
	stateNew      slotState = iota // dialed, not yet counted
	stateLent                      // a borrower holds it
	stateParked                    // released while held: out of circulation until the last Unhold
	stateIdle                      // in an idle list
	stateChecking                  // taken out of the idle list by maintenance for a health check
	stateClosed                    // closed (or about to be, outside the lock)
)

// ID is the connection's number in its pool, from 1, in dial order.
func (s *Slot) ID() uint64 { return s.id }

// Created is when the dial completed, on the pool's clock.
func (s *Slot) Created() time.Time { return s.created }
