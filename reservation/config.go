package reservation

import (
	"fmt"
	"time"
)

// Config configures the engine. Start from DefaultConfig. Knob fields whose
// comment says "zero means N" are filled in by New; the TTL rule fields are
// taken literally, because zero is a legitimate value there.
type Config struct {
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

	// Redis is the legacy Redis counter kept beside the engine during a
	// migration from it (redisconfig.go, docs/migration.md). The engine
	// ignores it; the zero value means none.
	Redis RedisConfig `yaml:"redis"`
}

// DefaultConfig returns the documented defaults: a 20-minute TTL against a
// 10-minute payment timeout, 5 minutes of callback retries and 1 minute of
// clock skew.
func DefaultConfig() Config {
	c := Config{
		PaymentTimeout:      10 * time.Minute,
		CallbackRetryWindow: 5 * time.Minute,
		ClockSkew:           time.Minute,
		DefaultTTL:          20 * time.Minute,
	}
	c.fillDefaults()
	return c
}

// MinTTL is the payment-side sum every TTL must exceed.
func (c Config) MinTTL() time.Duration {
	return c.PaymentTimeout + c.CallbackRetryWindow + c.ClockSkew
}

func (c *Config) fillDefaults() {
	orDefault(&c.MaxTTL, 24*time.Hour)
	orDefault(&c.PoolCap, 1000)
	orDefault(&c.MaxLines, 100)
	orDefault(&c.MaxLocations, 16)
	orDefault(&c.CallTimeout, 5*time.Second)
	orDefault(&c.BackoffMin, time.Millisecond)
	orDefault(&c.BackoffMax, 40*time.Millisecond)
	orDefault(&c.MaxTxRetries, 5)
	orDefault(&c.MaxBatch, 128)
	orDefault(&c.BatchesPerPool, 2)
	orDefault(&c.SecondBatchMin, 32)
	orDefault(&c.MaxWaitersPerPool, 4096)
	orDefault(&c.MaxSessions, 8)
	orDefault(&c.SweepInterval, time.Second)
	orDefault(&c.SweepBatch, 500)
	orDefault(&c.SweepRate, 10)
	orDefault(&c.Retention, 72*time.Hour)
	orDefault(&c.ReconcileInterval, time.Minute)
	orDefault(&c.ReconcileAlertAfter, 3)
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
// config as New will use it, zero knobs replaced by their defaults.
func (c Config) Validate() error {
	c.fillDefaults()
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("reservation: config %s: %s", field, fmt.Sprintf(format, a...))
	}
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
	case c.PoolCap < 1 || c.PoolCap > 100000:
		return bad("pool_cap", "must be between 1 and 100000, got %d", c.PoolCap)
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
	return c.Redis.Validate()
}
