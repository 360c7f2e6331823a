package pool

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// Options are fixed for the pool's life.
type Options[K comparable, C Conn[K]] struct {
	// Dial opens a connection of the given key. Required. ctx ends when
	// the borrower that needs the connection gives up or the pool closes;
	// a Dial that ignores ctx must bound itself (a dial timeout).
	Dial func(ctx context.Context, key K) (C, error)
	// OnFirstDial, when set, runs once, after the first successful dial
	// and before that connection is used (to learn about the backend).
	// Dials that complete meanwhile wait for it. An error closes the
	// connection and counts as a dial error; the next dial runs it again.
	OnFirstDial func(C) error
	// OnFree, when set, runs after a connection goes idle or a slot frees
	// up and no queued borrower takes it: callers that wait elsewhere for
	// a connection (pipelined statements) may try again. It runs without
	// the pool's lock, on the goroutine that freed the connection, and may
	// call the pool.
	OnFree func()
	// Now is the pool's clock, for lifetimes, idle times, ping-after-idle
	// and wait-time stats (nil: time.Now). Timeouts and back-off use real
	// timers.
	Now func() time.Time
	// Log receives failed dials at Warn (nil: they are not logged).
	Log *slog.Logger
	// MaintainEvery is the period of the maintenance loop that Start runs
	// (0: one second).
	MaintainEvery time.Duration
	// PingTimeout bounds the ping before lending a connection idle longer
	// than Limits.PingAfterIdle (0: one second).
	PingTimeout time.Duration
	// DialBackoff is a borrower's first pause after a failed dial, doubled
	// after each further failure up to MaxDialBackoff, each with up to as
	// much again of random jitter (0: 50 ms and 1 s).
	DialBackoff, MaxDialBackoff time.Duration
}

// Limits are the pool's settings that SetLimits may change at run time.
// Zero means what each field says; only Max has no useful zero.
type Limits[K comparable] struct {
	// Min connections are kept open (counting every key) by maintenance,
	// which opens missing ones with key MinKey after each key's own Min;
	// idle ones are not closed for idleness below it.
	Min    int
	MinKey K
	// Max caps open connections, including those being dialed, over all
	// keys. At least 1.
	Max int
	// MaxIdle caps idle connections; a connection returned past it closes
	// the one idle longest. 0 keeps none idle. At least Min.
	MaxIdle int
	// IdleTimeout closes connections idle longer than this, down to Min
	// (0: never for idleness).
	IdleTimeout time.Duration
	// MaxLifetime closes connections older than this when they are
	// returned or found idle, each one's lifetime shortened by a random
	// fraction up to LifetimeJitter ([0, 1)) so that they do not expire
	// together (0: no limit).
	MaxLifetime    time.Duration
	LifetimeJitter float64
	// AcquireTimeout bounds Acquire's wait, dials and back-off included,
	// besides its ctx (0: only ctx).
	AcquireTimeout time.Duration
	// MaxWaiters caps borrowers queued; past it Acquire fails at once with
	// ErrWaiterCap. 0: nobody queues.
	MaxWaiters int
	// PingAfterIdle pings a connection idle longer than this before
	// lending it (0: never; Alive runs on every lend regardless).
	PingAfterIdle time.Duration
	// Keys are per-key limits under the global ones (nil, or a key not
	// in it: the global limits alone). SetLimits copies the map.
	Keys map[K]KeyLimits
}

// KeyLimits bound one key's connections within the pool's.
type KeyLimits struct {
	// Min connections of this key are kept open by maintenance (within
	// the global Max).
	Min int
	// Max caps this key's open connections, including those being dialed
	// (0: only the global Max).
	Max int
}

func (l *Limits[K]) validate() error {
	switch {
	case l.Max < 1:
		return fmt.Errorf("pool: Max must be at least 1, got %d", l.Max)
	case l.Min < 0 || l.Min > l.Max:
		return fmt.Errorf("pool: Min must be between 0 and Max (%d), got %d", l.Max, l.Min)
	case l.MaxIdle < l.Min:
		return fmt.Errorf("pool: MaxIdle must be at least Min (%d), got %d", l.Min, l.MaxIdle)
	case l.IdleTimeout < 0 || l.MaxLifetime < 0 || l.AcquireTimeout < 0 || l.PingAfterIdle < 0:
		return fmt.Errorf("pool: durations must not be negative")
	case l.LifetimeJitter < 0 || l.LifetimeJitter >= 1:
		return fmt.Errorf("pool: LifetimeJitter must be in [0, 1), got %v", l.LifetimeJitter)
	case l.MaxWaiters < 0:
		return fmt.Errorf("pool: MaxWaiters must not be negative, got %d", l.MaxWaiters)
	}
	for k, kl := range l.Keys {
		if kl.Min < 0 || kl.Max < 0 || (kl.Max > 0 && kl.Min > kl.Max) || kl.Min > l.Max {
			return fmt.Errorf("pool: key %v: limits min %d, max %d do not fit (global max %d)", k, kl.Min, kl.Max, l.Max)
		}
	}
	return nil
}

// CloseReason says why the pool closed a connection.
type CloseReason uint8

const (
	CloseBroken    CloseReason = iota // released as not reusable, or an Unhold said so
	CloseUnhealthy                    // failed Alive or Ping before a lend, or Alive in maintenance
	CloseLifetime                     // past its lifetime
	CloseIdle                         // idle past IdleTimeout, or past MaxIdle
	CloseSwap                         // made room for a connection of another key
	CloseShrink                       // over Max or its key's Max after SetLimits lowered them
	CloseShutdown                     // the pool closed
	CloseRetired                      // open to a server Retire took out of service
	NumCloseReasons
)

var closeReasonNames = [NumCloseReasons]string{"broken", "unhealthy", "lifetime", "idle", "swap", "shrink", "shutdown", "retired"}

// String returns the reason as a metric label value.
func (r CloseReason) String() string {
	if r < NumCloseReasons {
		return closeReasonNames[r]
	}
	return fmt.Sprintf("CloseReason(%d)", uint8(r))
}

// Stats is a snapshot of the pool. Open counts established connections
// (Idle + InUse), not those being dialed (Dialing), so that at every
// snapshot Dials - DialErrors - ClosedTotal() == Open.
type Stats struct {
	Open    int // established connections: Idle + InUse
	Dialing int // dials in progress (their slots count against Max)
	InUse   int // lent, being vetted, or Held
	Idle    int
	Held    int // returned while held (Hold): out of circulation until Unhold
	Waiting int // borrowers queued
	Max     int

	// Counters since New.
	Acquired   uint64        // connections lent
	Waited     uint64        // acquisitions that queued
	WaitTime   time.Duration // their total time from Acquire to the lend
	Timeouts   uint64        // acquisitions that ran out of time (not counting cancellations)
	Rejected   uint64        // acquisitions refused at MaxWaiters
	Dials      uint64        // dials completed, successful or not (not those cut short by their borrower or Close)
	DialErrors uint64        // ... that failed, RetiredDials included
	// RetiredDials counts dials that reached a retired server (see
	// Retire): closed at once, and failed with ErrRetired.
	RetiredDials uint64
	Closed       [NumCloseReasons]uint64 // connections closed, by reason
}

// ClosedTotal sums Closed.
func (s Stats) ClosedTotal() uint64 {
	var n uint64
	for _, c := range s.Closed {
		n += c
	}
	return n
}
