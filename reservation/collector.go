package reservation

import "github.com/prometheus/client_golang/prometheus"

// Collector turns Engine.Stats into Prometheus metrics at scrape time.
// Register it on an injected (non-global) registry.
type Collector struct {
	e *Engine

	reserves, claims, ops, lateClaims, recoveries, held                 *prometheus.Desc
	backoffs, inlineRefills, rejected, stallEscapes, batches, txRetries *prometheus.Desc
	swept, sweepCycles, pruned, oneTrip, claimOneTrip                   *prometheus.Desc
	reconCycles, reconErrors, reconViolating                            *prometheus.Desc
	reconAlerting, reconAlerts                                          *prometheus.Desc
	reserveDur, claimDur, batchSize                                     *prometheus.Desc
}

// NewCollector returns a collector for e's metrics, all named
// holdfast_reservation_*.
func NewCollector(e *Engine) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("holdfast_reservation_"+name, help, labels, nil)
	}
	return &Collector{
		e:              e,
		reserves:       d("reserves_total", "CALL holdfast.reserve answers, by outcome.", "outcome"),
		claims:         d("claims_total", "CALL holdfast.claim answers, by outcome.", "outcome"),
		ops:            d("operations_total", "Other CALL holdfast.* answers, by procedure and outcome.", "procedure", "outcome"),
		recoveries:     d("recoveries_total", "Times a CALL lost its backend connection (or the answer to its COMMIT) and the engine found out on a fresh connection what the call had done, and finished it, by procedure.", "procedure"),
		held:           d("held_calls_total", "CALLs held through a switchover of the primary (a read-only refusal, a lost connection, or no connection while there was no usable primary): their deadline moved from call_timeout out to the hold, by procedure.", "procedure"),
		lateClaims:     d("late_claims_total", "Claims after the reservation expired (each one is alerted): held = units still held, forced = forced deduction succeeded, failed = ledger short, refund needed.", "result"),
		backoffs:       d("backoffs_total", "Jittered retries after a shortfall caused by rows other transactions held."),
		inlineRefills:  d("inline_refills_total", "Reserves that had to wait for an inline refill because their pool was really short; the leading indicator of reserve p99."),
		rejected:       d("rejected_total", "Reserves refused at once because too many waited on one pool."),
		stallEscapes:   d("stall_escapes_total", "Reserves that stopped waiting for a reserve transaction of their item/location that had run longer than 100 ms (a connection that stopped answering, or an overloaded database) and started one of their own beside it."),
		batches:        d("reserve_transactions_total", "Reserve transactions run (each may carry several coalesced reserves)."),
		oneTrip:        d("reserve_one_trip_total", "Reserve transactions of one pool sent in one round trip: committed, or fell_back (the pool had fewer free units than the batch wanted, or the database refused the statement, and it ran again in two).", "result"),
		claimOneTrip:   d("claim_one_trip_total", "Claims of an active reservation sent in one round trip after its read: committed, or fell_back (a guard found the reservation expired, released or claimed meanwhile, or the ledger short, and the claim ran again in two).", "result"),
		txRetries:      d("tx_retries_total", "Transactions retried after a deadlock (1213) or lock-wait timeout (1205).", "reason"),
		swept:          d("swept_lines_total", "Expired reserved lines deleted by the sweeper."),
		sweepCycles:    d("sweep_cycles_total", "Sweeper cycles run by this instance (one instance of a fleet holds the sweeper duty)."),
		pruned:         d("pruned_reservations_total", "Finished reservations deleted after the retention window."),
		reconCycles:    d("reconcile_cycles_total", "Reconciler cycles completed by this instance (one instance of a fleet holds the reconciler duty)."),
		reconErrors:    d("reconcile_errors_total", "Reconciler cycles that failed to read."),
		reconViolating: d("reconcile_violating_pools", "Pools where pool rows + reserved > on_hand in the last reconciler cycle."),
		reconAlerting:  d("reconcile_alerting_pools", "Pools that broke the invariant for reconcile_alert_after cycles in a row."),
		reconAlerts:    d("reconcile_alerts_total", "Pools that entered the alerting state."),
		reserveDur:     d("reserve_duration_seconds", "Time to answer CALL holdfast.reserve."),
		claimDur:       d("claim_duration_seconds", "Time to answer CALL holdfast.claim."),
		batchSize:      d("reserve_batch_size", "Reserves carried by one reserve transaction."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.reserves, c.claims, c.ops, c.recoveries, c.held, c.lateClaims, c.backoffs, c.inlineRefills,
		c.rejected, c.stallEscapes, c.batches, c.oneTrip, c.claimOneTrip, c.txRetries, c.swept, c.sweepCycles, c.pruned, c.reconCycles, c.reconErrors, c.reconViolating,
		c.reconAlerting, c.reconAlerts, c.reserveDur, c.claimDur, c.batchSize} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v))
	}
	for _, o := range reserveOutcomes {
		counter(c.reserves, s.Reserves[o], o)
	}
	for _, o := range claimOutcomes {
		counter(c.claims, s.Claims[o], o)
	}
	for _, op := range opNames {
		for _, o := range opOutcomes {
			counter(c.ops, s.Ops[op][o], op, o)
		}
	}
	for _, p := range procNames {
		counter(c.recoveries, s.Recoveries[p], p)
		counter(c.held, s.Held[p], p)
	}
	counter(c.lateClaims, s.Claims["late"], "held")
	counter(c.lateClaims, s.Claims["forced"], "forced")
	counter(c.lateClaims, s.Claims["forced_failed"], "failed")
	counter(c.backoffs, s.Backoffs)
	counter(c.inlineRefills, s.InlineRefills)
	counter(c.rejected, s.Rejected)
	counter(c.stallEscapes, s.StallEscapes)
	counter(c.batches, s.Batches)
	counter(c.oneTrip, s.OneTrip, "committed")
	counter(c.oneTrip, s.OneTripFallbacks, "fell_back")
	counter(c.claimOneTrip, s.ClaimOneTrip, "committed")
	counter(c.claimOneTrip, s.ClaimOneTripFallbacks, "fell_back")
	counter(c.txRetries, s.Deadlocks, "deadlock")
	counter(c.txRetries, s.LockWaitTimeouts, "lock_wait_timeout")
	counter(c.swept, s.Swept)
	counter(c.sweepCycles, s.SweepCycles)
	counter(c.pruned, s.Pruned)
	counter(c.reconCycles, s.ReconcileCycles)
	counter(c.reconErrors, s.ReconcileErrors)
	gauge(c.reconViolating, s.ReconcileViolations)
	gauge(c.reconAlerting, s.ReconcileAlerting)
	counter(c.reconAlerts, s.ReconcileAlerts)
	ch <- s.ReserveDuration.Metric(c.reserveDur)
	ch <- s.ClaimDuration.Metric(c.claimDur)
	ch <- s.BatchSize.Metric(c.batchSize)
}
