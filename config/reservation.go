package config

import (
	"time"
)

// Reservation configures the inventory-reservation engine behind
// CALL holdfast.* and its background work: the engine's settings inline,
// the refiller's and the legacy Redis counter's in their own sections. The
// engine (package reservation), the refiller and reservation/legacy take
// these structs as their Config; their defaults are written here, once.
type Reservation struct {
	// Enabled answers CALL holdfast.* and runs the refiller, sweeper and
	// reconciler. Disabled, CALL holdfast.* reaches the backend like any
	// other CALL.
	Enabled bool `yaml:"enabled"`
	// ReplicaDSN (a go-sql-driver DSN) is where the reconciler reads; empty
	// means the primary, through the pool. Its database is replaced by the
	// schema holding holdfast's tables (fleet.database, or backend.database
	// until they are moved there).
	ReplicaDSN string `yaml:"replica_dsn"`
	// Engine settings (TTL rule, pool cap, coalescing, sweeper, reconciler).
	Engine `yaml:",inline"`
	// Refiller settings (watermark, intervals).
	Refiller Refiller `yaml:"refiller"`
	// Redis is the legacy Redis counter kept beside the engine during a
	// migration from it (docs/migration.md). The engine ignores it; the
	// zero value means none.
	Redis Redis `yaml:"redis"`
}

// Engine configures the reservation engine (package reservation, whose
// Config it is). Start from DefaultEngine. Knob fields whose comment says
// "zero means N" are filled in by WithDefaults (reservation.New calls it);
// the TTL rule fields are taken literally, because zero is a legitimate
// value there.
type Engine struct {
	// The reservation TTL rule:
	//
	//	TTL > PaymentTimeout + CallbackRetryWindow + ClockSkew
	//
	// A reservation must outlive the slowest successful payment: the
	// gateway's maximum timeout, plus the window in which it retries its
	// success callback, plus the clock skew between the payment system and
	// the database. Otherwise a paid order finds its reservation expired and
	// falls back to the forced deduction (and an alert). Whoever changes the
	// payment timeout must review DefaultTTL. Validate enforces the rule for
	// DefaultTTL, and reserve enforces it for every ttl_seconds argument.
	PaymentTimeout      time.Duration `yaml:"payment_timeout"`
	CallbackRetryWindow time.Duration `yaml:"callback_retry_window"`
	ClockSkew           time.Duration `yaml:"clock_skew"`
	// DefaultTTL is used when reserve's ttl_seconds is NULL.
	DefaultTTL time.Duration `yaml:"default_ttl"`
	// MaxTTL bounds ttl_seconds and extend. Zero means 24h.
	MaxTTL time.Duration `yaml:"max_ttl"`

	// PoolCap is the most reservation_units rows one item/location holds,
	// and so the largest quantity one line may reserve. Zero means 1000. The
	// refiller must be configured with the same cap.
	PoolCap int `yaml:"pool_cap"`
	// MaxLines bounds the lines of one reserve. Zero means 100.
	MaxLines int `yaml:"max_lines"`
	// MaxLocations bounds the candidate locations of one line. Zero means 16.
	MaxLocations int `yaml:"max_locations"`

	// CallTimeout is the one deadline of every CALL holdfast.*, from the
	// moment the engine gets it to its answer, shared by everything the
	// call does: waiting for a backend connection, retries after lock
	// contention (backoff, inline refill, deadlock and lock-wait retries)
	// and recovery after a lost backend connection (finding out on a fresh
	// connection what the call did, and finishing it). When it passes, the
	// call answers what is known: 9107 "busy" if it did nothing because of
	// contention, 2003 if it did nothing because the database could not be
	// reached, and 9108 "outcome unknown" if its connection was lost while
	// it committed and the database stayed unreachable since (repeating the
	// same CALL is then safe). Zero means 5s.
	CallTimeout time.Duration `yaml:"call_timeout"`
	// BackoffMin and BackoffMax bound the jittered sleep between retries.
	// Zero means 1ms and 40ms.
	BackoffMin time.Duration `yaml:"backoff_min"`
	BackoffMax time.Duration `yaml:"backoff_max"`
	// MaxTxRetries bounds the retries of a transaction that hit a deadlock
	// (1213) or a lock-wait timeout (1205). Zero means 5.
	MaxTxRetries int `yaml:"max_tx_retries"`

	// DisableCoalescing turns off the per-pool combiner, so every reserve
	// runs its own transaction. The zero value coalesces concurrent
	// single-line reserves of one item/location into one transaction.
	DisableCoalescing bool `yaml:"disable_coalescing"`
	// MaxBatch bounds the reserves coalesced into one transaction. Zero
	// means 128.
	MaxBatch int `yaml:"max_batch"`
	// BatchesPerPool is how many coalesced transactions may run at once on
	// one pool in this process. Zero means 2.
	BatchesPerPool int `yaml:"batches_per_pool"`
	// SecondBatchMin is how many reserves must wait before a pool's next
	// coalesced transaction starts beside one already running, while the
	// pool's recent transactions carried at least half that many each.
	// Every transaction costs the database the same fixed work (a commit,
	// the statements' overhead) before its first reserve, so on a busy
	// pool fewer, larger transactions reserve more per CPU second; a quiet
	// pool (small recent transactions) overlaps at once, as round trips,
	// not the database, bound it. 1 overlaps whenever a reserve waits.
	// Zero means 32.
	SecondBatchMin int `yaml:"second_batch_min"`
	// MaxSessions bounds the connections the combiners keep across
	// consecutive batches (see session.go), engine-wide, so the engine never
	// holds more than this many backend connections between transactions.
	// A batch that finds none free borrows for its own transaction. Zero
	// means 8.
	MaxSessions int `yaml:"max_sessions"`
	// DisableSessions makes every coalesced batch borrow a connection for its
	// own transaction (SET TRANSACTION + START TRANSACTION sent with its
	// SELECT) instead of keeping one in session mode (autocommit off, READ
	// COMMITTED for the borrow, restored before release). Sessions save the
	// borrow. For a Conns whose connections must not see session variables
	// change.
	DisableSessions bool `yaml:"disable_sessions"`
	// DisableOneTrip makes every coalesced batch take two round trips (the
	// SKIP LOCKED select; then the DELETE, INSERTs and COMMIT) instead of
	// one while its pool has units to spare (see batchOneTrip, which keeps
	// the locked ids in user variables between its statements), and every
	// claim's transaction two (the locking reads; then the writes and
	// COMMIT) instead of one for an active reservation (claimOneTrip).
	DisableOneTrip bool `yaml:"disable_one_trip"`
	// MaxWaitersPerPool caps the reserves queued on one pool; beyond it a
	// reserve fails fast with 9107 and is counted as rejected. Zero means 4096.
	MaxWaitersPerPool int `yaml:"max_waiters_per_pool"`

	// SweepInterval is the pause between sweeps when nothing is expired.
	// Zero means 1s.
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// SweepBatch is the number of expired lines deleted per transaction.
	// Zero means 500.
	SweepBatch int `yaml:"sweep_batch"`
	// SweepRate is the most sweep transactions per second. Zero means 10.
	SweepRate float64 `yaml:"sweep_rate"`
	// Retention is how long a finished reservation (claimed, released or
	// expired) is kept so replays and repeated claims are recognised. Zero
	// means 72h. It must exceed MaxTTL.
	Retention time.Duration `yaml:"retention"`

	// ReconcileInterval is the pause between reconciler cycles. Zero means 1m.
	ReconcileInterval time.Duration `yaml:"reconcile_interval"`
	// ReconcileAlertAfter is how many consecutive failing cycles one pool
	// must show before it is alerted on (replicas lag). Zero means 3.
	ReconcileAlertAfter int `yaml:"reconcile_alert_after"`
}

// DefaultEngine returns the documented defaults, every knob's written here
// once: a 20-minute TTL against a 10-minute payment timeout, 5 minutes of
// callback retries and 1 minute of clock skew.
func DefaultEngine() Engine {
	return Engine{
		PaymentTimeout:      10 * time.Minute,
		CallbackRetryWindow: 5 * time.Minute,
		ClockSkew:           time.Minute,
		DefaultTTL:          20 * time.Minute,
		MaxTTL:              24 * time.Hour,
		PoolCap:             1000,
		MaxLines:            100,
		MaxLocations:        16,
		CallTimeout:         5 * time.Second,
		BackoffMin:          time.Millisecond,
		BackoffMax:          40 * time.Millisecond,
		MaxTxRetries:        5,
		MaxBatch:            128,
		BatchesPerPool:      2,
		SecondBatchMin:      32,
		MaxWaitersPerPool:   4096,
		MaxSessions:         8,
		SweepInterval:       time.Second,
		SweepBatch:          500,
		SweepRate:           10,
		Retention:           72 * time.Hour,
		ReconcileInterval:   time.Minute,
		ReconcileAlertAfter: 3,
	}
}

// MinTTL is the payment-side sum every TTL must exceed.
func (c Engine) MinTTL() time.Duration {
	return c.PaymentTimeout + c.CallbackRetryWindow + c.ClockSkew
}

// WithDefaults returns c with its zero knobs replaced by DefaultEngine's
// (not the TTL rule's fields, taken literally), as reservation.New uses it.
func (c Engine) WithDefaults() Engine {
	d := DefaultEngine()
	orDefault(&c.MaxTTL, d.MaxTTL)
	orDefault(&c.PoolCap, d.PoolCap)
	orDefault(&c.MaxLines, d.MaxLines)
	orDefault(&c.MaxLocations, d.MaxLocations)
	orDefault(&c.CallTimeout, d.CallTimeout)
	orDefault(&c.BackoffMin, d.BackoffMin)
	orDefault(&c.BackoffMax, d.BackoffMax)
	orDefault(&c.MaxTxRetries, d.MaxTxRetries)
	orDefault(&c.MaxBatch, d.MaxBatch)
	orDefault(&c.BatchesPerPool, d.BatchesPerPool)
	orDefault(&c.SecondBatchMin, d.SecondBatchMin)
	orDefault(&c.MaxWaitersPerPool, d.MaxWaitersPerPool)
	orDefault(&c.MaxSessions, d.MaxSessions)
	orDefault(&c.SweepInterval, d.SweepInterval)
	orDefault(&c.SweepBatch, d.SweepBatch)
	orDefault(&c.SweepRate, d.SweepRate)
	orDefault(&c.Retention, d.Retention)
	orDefault(&c.ReconcileInterval, d.ReconcileInterval)
	orDefault(&c.ReconcileAlertAfter, d.ReconcileAlertAfter)
	return c
}

// orDefault sets *knob to v when it is zero: the "zero means v" of the
// knobs' docs.
func orDefault[T comparable](knob *T, v T) {
	var zero T
	if *knob == zero {
		*knob = v
	}
}

// Validate reports the first bad field, by its YAML name. It checks the
// config as reservation.New will use it, zero knobs replaced by their
// defaults.
func (c Engine) Validate() error {
	c = c.WithDefaults()
	bad := fieldError("reservation: config ")
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"payment_timeout", c.PaymentTimeout},
		{"callback_retry_window", c.CallbackRetryWindow},
		{"clock_skew", c.ClockSkew},
	} {
		if d.v < 0 {
			return bad(d.name, "must not be negative, got %v", d.v)
		}
	}
	switch {
	case c.DefaultTTL <= 0:
		return bad("default_ttl", "must be positive, got %v", c.DefaultTTL)
	case c.DefaultTTL%time.Second != 0:
		return bad("default_ttl", "must be whole seconds, got %v", c.DefaultTTL)
	case c.DefaultTTL <= c.MinTTL():
		return bad("default_ttl", "%v must exceed payment_timeout + callback_retry_window + clock_skew = %v + %v + %v = %v",
			c.DefaultTTL, c.PaymentTimeout, c.CallbackRetryWindow, c.ClockSkew, c.MinTTL())
	case c.MaxTTL < c.DefaultTTL:
		return bad("max_ttl", "%v is below default_ttl %v", c.MaxTTL, c.DefaultTTL)
	case c.Retention <= c.MaxTTL:
		return bad("retention", "%v must exceed max_ttl %v, or replays of live reservations would be forgotten", c.Retention, c.MaxTTL)
	case c.PoolCap < 1 || c.PoolCap > maxPoolCap:
		return bad("pool_cap", "must be between 1 and %d, got %d", maxPoolCap, c.PoolCap)
	case c.MaxLines < 1 || c.MaxLines > 1000:
		return bad("max_lines", "must be between 1 and 1000, got %d", c.MaxLines)
	case c.MaxLocations < 1 || c.MaxLocations > 256:
		return bad("max_locations", "must be between 1 and 256, got %d", c.MaxLocations)
	case c.CallTimeout < 0:
		return bad("call_timeout", "must not be negative, got %v", c.CallTimeout)
	case c.BackoffMin < 0 || c.BackoffMax < c.BackoffMin:
		return bad("backoff_max", "%v must be at least backoff_min %v", c.BackoffMax, c.BackoffMin)
	case c.MaxTxRetries < 0:
		return bad("max_tx_retries", "must not be negative, got %d", c.MaxTxRetries)
	case c.MaxBatch < 1:
		return bad("max_batch", "must be positive, got %d", c.MaxBatch)
	case c.BatchesPerPool < 1:
		return bad("batches_per_pool", "must be positive, got %d", c.BatchesPerPool)
	case c.SecondBatchMin < 1:
		return bad("second_batch_min", "must be positive, got %d", c.SecondBatchMin)
	case c.MaxSessions < 0:
		return bad("max_sessions", "must not be negative, got %d", c.MaxSessions)
	case c.MaxWaitersPerPool < 1:
		return bad("max_waiters_per_pool", "must be positive, got %d", c.MaxWaitersPerPool)
	case c.SweepInterval < 0:
		return bad("sweep_interval", "must not be negative, got %v", c.SweepInterval)
	case c.SweepBatch < 1:
		return bad("sweep_batch", "must be positive, got %d", c.SweepBatch)
	case c.SweepRate <= 0:
		return bad("sweep_rate", "must be positive, got %v", c.SweepRate)
	case c.ReconcileInterval < 0:
		return bad("reconcile_interval", "must not be negative, got %v", c.ReconcileInterval)
	case c.ReconcileAlertAfter < 1:
		return bad("reconcile_alert_after", "must be at least 1, got %d", c.ReconcileAlertAfter)
	}
	return nil
}

// Refiller configures the refiller (package refiller, whose Config it
// is; reservation.refiller). Zero fields take the defaults given, which
// DefaultRefiller holds.
type Refiller struct {
	// PoolCap is the most units one pool holds. Zero means the engine's
	// default pool_cap (1000); holdfast sets it to reservation.pool_cap. It
	// must equal the engine's Engine.PoolCap.
	PoolCap int `yaml:"pool_cap"`
	// Watermark is the fraction of PoolCap under which the background loop
	// refills a pool. Zero means 0.3.
	Watermark float64 `yaml:"watermark"`
	// Lead makes the watermark demand-aware: the background loop also
	// refills a pool that would run dry within Lead at the rate reserves in
	// this process have been taking from it (a hot pool is refilled well
	// above Watermark). It should cover a check and a refill transaction
	// with room to spare. Zero means 50ms; negative disables it.
	Lead time.Duration `yaml:"lead"`
	// Interval is how often the background loop looks at the pools reserves
	// took units from, besides looking (at most every 5ms) whenever a
	// reserve notifies it. Zero means 100ms.
	Interval time.Duration `yaml:"interval"`
	// ScanInterval is how often it also scans every ledger row for pools
	// under the watermark that no reserve here touched (stock received,
	// other instances). Zero means 30s; negative disables the scan.
	ScanInterval time.Duration `yaml:"scan_interval"`
	// MaxTxRetries bounds retries after a deadlock or lock-wait timeout.
	// Zero means 5.
	MaxTxRetries int `yaml:"max_tx_retries"`
	// HotPools is how many pools the pool-depth metric reports (the most
	// reserved from). Zero means 20.
	HotPools int `yaml:"hot_pools"`
}

// DefaultRefiller returns the refiller's defaults, written here once.
func DefaultRefiller() Refiller {
	return Refiller{
		PoolCap:      DefaultEngine().PoolCap,
		Watermark:    0.3,
		Lead:         50 * time.Millisecond,
		Interval:     100 * time.Millisecond,
		ScanInterval: 30 * time.Second,
		MaxTxRetries: 5,
		HotPools:     20,
	}
}

// WithDefaults returns c with its zero settings replaced by
// DefaultRefiller's, as refiller.New uses it.
func (c Refiller) WithDefaults() Refiller {
	d := DefaultRefiller()
	orDefault(&c.PoolCap, d.PoolCap)
	orDefault(&c.Watermark, d.Watermark)
	orDefault(&c.Lead, d.Lead)
	orDefault(&c.Interval, d.Interval)
	orDefault(&c.ScanInterval, d.ScanInterval)
	orDefault(&c.MaxTxRetries, d.MaxTxRetries)
	orDefault(&c.HotPools, d.HotPools)
	return c
}

// maxPoolCap bounds pool_cap, the engine's and the refiller's alike.
const maxPoolCap = 100000

// Validate reports the first bad field, by its YAML name.
func (c Refiller) Validate() error {
	c = c.WithDefaults()
	bad := fieldError("refiller: config ")
	switch {
	case c.PoolCap < 1 || c.PoolCap > maxPoolCap:
		return bad("pool_cap", "must be between 1 and %d, got %d", maxPoolCap, c.PoolCap)
	case c.Watermark <= 0 || c.Watermark > 1:
		return bad("watermark", "must be in (0, 1], got %v", c.Watermark)
	case c.Interval < 0:
		return bad("interval", "must not be negative, got %v", c.Interval)
	case c.MaxTxRetries < 0:
		return bad("max_tx_retries", "must not be negative, got %d", c.MaxTxRetries)
	case c.HotPools < 1 || c.HotPools > 1000:
		return bad("hot_pools", "must be between 1 and 1000, got %d", c.HotPools)
	}
	return nil
}
