package config

import (
	"strings"
	"time"
)

// Redis (reservation.redis) puts a legacy Redis counter beside the engine,
// for a migration from it (docs/migration.md). The engine itself ignores
// it; package reservation/legacy runs it (its Config). An empty Address means no
// Redis: CALL holdfast.* is answered by the engine alone, as before.
//
// The legacy layout is configuration, with the layout a typical DECR-counter
// checkout uses as the default: one counter per item at a location holding
// the units available (on_hand less live reservations), and one hash per
// reservation, indexed by expiry, that a sweeper returns to the counters
// when it expires.
type Redis struct {
	// Address is host:port of the Redis server (one server; Redis Cluster
	// is not supported: the scripts touch keys of several items at once).
	Address  string `yaml:"address"`
	Password string `yaml:"password"`
	DB       int    `yaml:"db"`
	// Timeout bounds each Redis command (dial, write, read). Zero means
	// 200ms. A Redis that does not answer within it counts as failed.
	Timeout time.Duration `yaml:"timeout"`
	// PoolSize is how many connections to Redis are open at most. A
	// CALL holds one for each command's round trip; one that finds them
	// all busy waits for one, up to Timeout. Zero means 64.
	PoolSize int `yaml:"pool_size"`

	// Authority seeds the authority switch when its table is empty: "redis"
	// (the default: shadow mode, the legacy counter decides reserves) or
	// "holdfast". Once seeded, the table is authoritative (holdfastctl
	// authority, the admin API); config is not read again for it.
	Authority string `yaml:"authority"`
	// Shops and Percent seed the rollout with authority redis: the shops
	// listed, and those whose CRC32(shop_id) % 100 is below Percent, are
	// on holdfast.
	Shops   []int64 `yaml:"shops"`
	Percent int     `yaml:"percent"`
	// SwitchPollInterval is how often every instance reads the switch
	// table: a change reaches the whole fleet within it. Zero means 1s.
	SwitchPollInterval time.Duration `yaml:"switch_poll_interval"`

	// Key templates. {shop}, {item}, {location}, {token} and {key} are
	// replaced by the shop id, inventory_item_id, inventory_group_id,
	// reservation token and idempotency key.
	//
	// CounterKey holds, per item at a location, the units available.
	// Default "stock:{shop}:{item}:{location}".
	CounterKey string `yaml:"counter_key"`
	// ReservationKey is the hash recording one reservation: fields
	// shop_id, lines ("item:location:qty,..."), expires_at (Unix ms),
	// state (active, claimed, released, expired, resynced), and, written
	// by holdfast, idempotency_key, request_hash, authority, created_at.
	// Default "reservation:{token}".
	ReservationKey string `yaml:"reservation_key"`
	// IdempotencyKey maps a reserve's key to its token. Default
	// "reservation:idem:{shop}:{key}".
	IdempotencyKey string `yaml:"idempotency_key"`
	// ExpiryKey is the sorted set of live reservation tokens scored by
	// expires_at (Unix ms) that the sweeper reads. Default
	// "reservations:expiring".
	ExpiryKey string `yaml:"expiry_key"`
	// HeldKey is the set of live reservation tokens holding units of one
	// item at a location; resync-redis reads it. Default
	// "reservations:held:{shop}:{item}:{location}".
	HeldKey string `yaml:"held_key"`
	// RecordRetention is how long a finished reservation's record (and
	// its key) is kept, so repeated calls are recognised. Zero means the
	// engine's retention.
	RecordRetention time.Duration `yaml:"record_retention"`

	// SweepInterval is the pause between sweeps of expired reservations
	// on the Redis side when none were due. Zero means 1s.
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// DriftInterval is the pause between drift checks (each hot pool's
	// counter against the engine's availability). Zero means 30s;
	// negative turns the check off.
	DriftInterval time.Duration `yaml:"drift_interval"`
	// DriftAlertAfter is how many consecutive checks one pool must drift
	// before it is logged as an alert. Zero means 3.
	DriftAlertAfter int `yaml:"drift_alert_after"`
}

// Enabled reports whether a Redis is configured.
func (c Redis) Enabled() bool { return c.Address != "" }

// DefaultRedis returns the defaults of reservation.redis, written here
// once; Address empty (no Redis), and RecordRetention zero, which
// WithDefaults makes the engine's retention.
func DefaultRedis() Redis {
	return Redis{
		Timeout:            200 * time.Millisecond,
		PoolSize:           64,
		Authority:          "redis",
		SwitchPollInterval: time.Second,
		CounterKey:         "stock:{shop}:{item}:{location}",
		ReservationKey:     "reservation:{token}",
		IdempotencyKey:     "reservation:idem:{shop}:{key}",
		ExpiryKey:          "reservations:expiring",
		HeldKey:            "reservations:held:{shop}:{item}:{location}",
		SweepInterval:      time.Second,
		DriftInterval:      30 * time.Second,
		DriftAlertAfter:    3,
	}
}

// WithDefaults returns c with zero knobs replaced by DefaultRedis's;
// retention is the engine's, for RecordRetention.
func (c Redis) WithDefaults(retention time.Duration) Redis {
	d := DefaultRedis()
	orDefault(&c.Authority, d.Authority)
	orDefault(&c.CounterKey, d.CounterKey)
	orDefault(&c.ReservationKey, d.ReservationKey)
	orDefault(&c.IdempotencyKey, d.IdempotencyKey)
	orDefault(&c.ExpiryKey, d.ExpiryKey)
	orDefault(&c.HeldKey, d.HeldKey)
	orDefault(&c.Timeout, d.Timeout)
	orDefault(&c.PoolSize, d.PoolSize)
	orDefault(&c.SwitchPollInterval, d.SwitchPollInterval)
	orDefault(&c.RecordRetention, retention)
	orDefault(&c.SweepInterval, d.SweepInterval)
	orDefault(&c.DriftInterval, d.DriftInterval)
	orDefault(&c.DriftAlertAfter, d.DriftAlertAfter)
	return c
}

// Validate reports the first bad field, by its YAML name under
// reservation.redis.
func (c Redis) Validate() error {
	if !c.Enabled() {
		return nil
	}
	c = c.WithDefaults(time.Hour)
	bad := fieldError("reservation: config redis.")
	if c.Authority != "redis" && c.Authority != "holdfast" {
		return bad("authority", "must be redis or holdfast, got %q", c.Authority)
	}
	if c.Percent < 0 || c.Percent > 100 {
		return bad("percent", "must be between 0 and 100, got %d", c.Percent)
	}
	for _, s := range c.Shops {
		if s < 1 {
			return bad("shops", "shop ids must be positive, got %d", s)
		}
	}
	for _, t := range []struct {
		name, v string
		need    []string
	}{
		{"counter_key", c.CounterKey, []string{"{shop}", "{item}", "{location}"}},
		{"reservation_key", c.ReservationKey, []string{"{token}"}},
		{"idempotency_key", c.IdempotencyKey, []string{"{shop}", "{key}"}},
		{"held_key", c.HeldKey, []string{"{shop}", "{item}", "{location}"}},
	} {
		for _, n := range t.need {
			if !strings.Contains(t.v, n) {
				return bad(t.name, "%q must contain %s", t.v, n)
			}
		}
	}
	switch {
	case c.Timeout < 0:
		return bad("timeout", "must not be negative, got %v", c.Timeout)
	case c.PoolSize < 0:
		return bad("pool_size", "must not be negative, got %d", c.PoolSize)
	case c.SwitchPollInterval < 0:
		return bad("switch_poll_interval", "must not be negative, got %v", c.SwitchPollInterval)
	case c.RecordRetention < 0:
		return bad("record_retention", "must not be negative, got %v", c.RecordRetention)
	case c.SweepInterval < 0:
		return bad("sweep_interval", "must not be negative, got %v", c.SweepInterval)
	case c.DriftAlertAfter < 1:
		return bad("drift_alert_after", "must be at least 1, got %d", c.DriftAlertAfter)
	}
	return nil
}
