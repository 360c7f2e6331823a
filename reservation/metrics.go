package reservation

import (
	"sync/atomic"

	"github.com/holdfast-db/holdfast/attribution"
)

// Outcome labels. Each list is fixed, so every label set is bounded.
const (
	reserveReserved = iota
	reserveReplayed
	reserveConflict
	reserveInsufficient
	reserveBadArgument
	reserveBusy
	reserveUnknown
	reserveUnavailable
	reserveError
)

var reserveOutcomes = []string{"reserved", "replayed", "conflict", "insufficient", "bad_argument", "busy", "outcome_unknown", "unavailable", "error"}

func reserveOutcomeOf(err error) int {
	if _, ok := err.(*UnavailableError); ok {
		return reserveUnavailable
	}
	if e, ok := err.(*Error); ok {
		switch e.Code {
		case CodeOutcomeUnknown:
			return reserveUnknown
		case CodeInsufficientStock:
			return reserveInsufficient
		case CodeIdempotencyConflict:
			return reserveConflict
		case CodeBadArgument:
			return reserveBadArgument
		case CodeBusy:
			return reserveBusy
		}
	}
	return reserveError
}

// Claim outcomes: claimed (normal), duplicate (already claimed), late (expired
// but its units still held), forced (expired, forced deduction succeeded),
// forced_failed (expired, ledger short: refund), guard_refused (held, but
// the ledger no longer covers it: refund), unknown_token, bad_argument,
// outcome_unknown (9108), unavailable (nothing done: no database), error.
const (
	claimClaimed = iota
	claimDuplicate
	claimLate
	claimForced
	claimForcedFailed
	claimGuardRefused
	claimUnknown
	claimBadArgument
	claimOutcomeUnknown
	claimUnavailable
	claimError
)

var claimOutcomes = []string{"claimed", "duplicate", "late", "forced", "forced_failed", "guard_refused", "unknown_token", "bad_argument", "outcome_unknown", "unavailable", "error"}

// Outcomes of release, extend and the stock procedures.
const (
	opOK = iota
	opDuplicate
	opExpired
	opClaimed
	opUnknown
	opBadArgument
	opGuardViolated
	opOutcomeUnknown
	opUnavailable
	opError
)

var opOutcomes = []string{"ok", "duplicate", "expired", "claimed", "unknown_token", "bad_argument", "guard_violated", "outcome_unknown", "unavailable", "error"}

func opOutcomeOf(err error) int {
	if _, ok := err.(*UnavailableError); ok {
		return opUnavailable
	}
	if e, ok := err.(*Error); ok {
		switch e.Code {
		case CodeOutcomeUnknown:
			return opOutcomeUnknown
		case CodeUnknownToken:
			return opUnknown
		case CodeExpired:
			return opExpired
		case CodeBadArgument:
			return opBadArgument
		case CodeGuardViolated:
			return opGuardViolated
		}
	}
	return opError
}

var opNames = []string{"release", "extend", "receive", "set_on_hand", "adjust", "availability"}

const (
	opRelease = iota
	opExtend
	opReceive
	opSetOnHand
	opAdjust
	opAvailability
)

// procNames are the procedures, for metrics by procedure: reserve, claim,
// then opNames in their order (procOp).
var procNames = append([]string{"reserve", "claim"}, opNames...)

const (
	procReserve = iota
	procClaim
)

// procOp is the procNames index of op.
func procOp(op int) int { return 2 + op }

type counterVec []atomic.Uint64

func newCounterVec(n int) counterVec { return make(counterVec, n) }
func (c counterVec) inc(i int)       { c[i].Add(1) }
func (c counterVec) snapshot(names []string) map[string]uint64 {
	m := make(map[string]uint64, len(names))
	for i, n := range names {
		m[n] = c[i].Load()
	}
	return m
}

// metrics are the engine's counters; Stats copies them.
type metrics struct {
	reserves              counterVec
	claims                counterVec
	ops                   []counterVec // by op, then outcome
	recoveries            counterVec   // by procNames
	held                  counterVec   // by procNames: calls held through a switchover (hold.go)
	backoffs              atomic.Uint64
	inlineRefills         atomic.Uint64
	rejected              atomic.Uint64
	stallEscapes          atomic.Uint64
	batches               atomic.Uint64
	oneTrip               atomic.Uint64
	oneTripFallbacks      atomic.Uint64
	claimOneTrip          atomic.Uint64
	claimOneTripFallbacks atomic.Uint64
	deadlocks             atomic.Uint64
	lockWaits             atomic.Uint64
	swept                 atomic.Uint64
	sweepCycles           atomic.Uint64
	pruned                atomic.Uint64
	reserveDur            *attribution.Histogram
	claimDur              *attribution.Histogram
	batchSize             *attribution.Histogram

	reconCycles     atomic.Uint64
	reconErrors     atomic.Uint64
	reconAlerts     atomic.Uint64
	reconViolations atomic.Int64
	reconAlerting   atomic.Int64
}

func (m *metrics) init() {
	m.reserves = newCounterVec(len(reserveOutcomes))
	m.claims = newCounterVec(len(claimOutcomes))
	m.recoveries = newCounterVec(len(procNames))
	m.held = newCounterVec(len(procNames))
	m.ops = make([]counterVec, len(opNames))
	for i := range m.ops {
		m.ops[i] = newCounterVec(len(opOutcomes))
	}
	m.reserveDur = attribution.NewHistogram(DurationBuckets)
	m.claimDur = attribution.NewHistogram(DurationBuckets)
	m.batchSize = attribution.NewHistogram(batchSizeBuckets)
}

func (m *metrics) countRetry(code uint16) {
	if code == errNumDeadlock {
		m.deadlocks.Add(1)
	} else {
		m.lockWaits.Add(1)
	}
}

// Stats is a snapshot of the engine's counters.
type Stats struct {
	Reserves map[string]uint64            // by outcome
	Claims   map[string]uint64            // by outcome
	Ops      map[string]map[string]uint64 // by procedure, then outcome
	// Recoveries counts, by procedure, the times a call lost its backend
	// connection (or a commit's answer) and went on on a fresh connection:
	// finding out what it had done, and finishing it.
	Recoveries map[string]uint64
	// Held counts, by procedure, the calls held through a switchover of
	// the primary (their deadline moved out to the hold: hold.go).
	Held map[string]uint64
	// Backoffs counts jittered sleeps after a shortfall caused by rows other
	// transactions held.
	Backoffs uint64
	// InlineRefills counts reserves that waited for an inline refill because
	// the pool was really short (concurrent waiters share one refill
	// transaction): the leading indicator of reserve p99.
	InlineRefills uint64
	// Rejected counts reserves refused because too many waited on one pool.
	Rejected uint64
	// Batches counts reserve transactions (coalesced or not).
	Batches uint64
	// StallEscapes counts reserves that stopped waiting for a batch of
	// their pool that had run longer than 100 ms and led one of their own
	// beside it.
	StallEscapes uint64
	// OneTrip counts reserve transactions committed in one round trip (a
	// batch of one pool whose every reserve fitted); OneTripFallbacks those
	// that tried, found the pool short (or the statement refused), and ran
	// again in two.
	OneTrip, OneTripFallbacks uint64
	// ClaimOneTrip counts claims committed in one round trip after the
	// reservation's read (it was active); ClaimOneTripFallbacks those whose
	// guards found it otherwise (expired, released, claimed meanwhile, the
	// ledger short) and that ran the two-round-trip transaction instead.
	ClaimOneTrip, ClaimOneTripFallbacks uint64
	// Deadlocks and LockWaitTimeouts count transactions retried after 1213
	// and 1205.
	Deadlocks, LockWaitTimeouts uint64
	// Swept counts reserved lines the sweeper deleted; Pruned counts
	// finished reservations deleted after the retention window.
	Swept, Pruned uint64
	// SweepCycles counts sweeper cycles run (on the instance holding the
	// sweeper duty).
	SweepCycles uint64

	ReconcileCycles uint64
	ReconcileErrors uint64
	// ReconcileViolations is the number of pools that broke the invariant in
	// the last cycle; ReconcileAlerting those that did so for
	// ReconcileAlertAfter cycles in a row. ReconcileAlerts counts pools
	// entering the alerting state.
	ReconcileViolations, ReconcileAlerting int64
	ReconcileAlerts                        uint64

	ReserveDuration, ClaimDuration attribution.HistogramSnapshot
	// BatchSize is the number of reserves per reserve transaction.
	BatchSize attribution.HistogramSnapshot
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	m := &e.m
	s := Stats{
		Reserves:              m.reserves.snapshot(reserveOutcomes),
		Claims:                m.claims.snapshot(claimOutcomes),
		Ops:                   map[string]map[string]uint64{},
		Recoveries:            m.recoveries.snapshot(procNames),
		Held:                  m.held.snapshot(procNames),
		Backoffs:              m.backoffs.Load(),
		InlineRefills:         m.inlineRefills.Load(),
		Rejected:              m.rejected.Load(),
		Batches:               m.batches.Load(),
		StallEscapes:          m.stallEscapes.Load(),
		OneTrip:               m.oneTrip.Load(),
		OneTripFallbacks:      m.oneTripFallbacks.Load(),
		ClaimOneTrip:          m.claimOneTrip.Load(),
		ClaimOneTripFallbacks: m.claimOneTripFallbacks.Load(),
		Deadlocks:             m.deadlocks.Load(),
		LockWaitTimeouts:      m.lockWaits.Load(),
		Swept:                 m.swept.Load(),
		SweepCycles:           m.sweepCycles.Load(),
		Pruned:                m.pruned.Load(),
		ReconcileCycles:       m.reconCycles.Load(),
		ReconcileErrors:       m.reconErrors.Load(),
		ReconcileViolations:   m.reconViolations.Load(),
		ReconcileAlerting:     m.reconAlerting.Load(),
		ReconcileAlerts:       m.reconAlerts.Load(),
		ReserveDuration:       m.reserveDur.Snapshot(),
		ClaimDuration:         m.claimDur.Snapshot(),
		BatchSize:             m.batchSize.Snapshot(),
	}
	for i, n := range opNames {
		s.Ops[n] = m.ops[i].snapshot(opOutcomes)
	}
	return s
}

// DurationBuckets are the buckets of the engine's _seconds histograms (and
// the refiller's and the legacy counter's).
var DurationBuckets = attribution.DurationBounds(.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5)

// batchSizeBuckets are the buckets of the combiner's batch sizes.
var batchSizeBuckets = attribution.CountBounds(1, 2, 4, 8, 16, 32, 64, 128, 256)
