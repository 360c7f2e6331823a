package config

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestRedisConfig: reservation.redis from YAML, with each bad field named.
func TestRedisConfig(t *testing.T) {
	for _, tc := range []struct {
		yaml, bad string
	}{
		{"", ""}, // no Redis: nothing checked
		{"address: 127.0.0.1:6379", ""},
		{"address: r:6379\nauthority: holdfast\nswitch_poll_interval: 250ms", ""},
		{"address: r:6379\nauthority: mysql", "redis.authority"},
		{"address: r:6379\npercent: 101", "redis.percent"},
		{"address: r:6379\nshops: [3, 0]", "redis.shops"},
		{"address: r:6379\ncounter_key: 'stock:{item}'", "redis.counter_key"},
		{"address: r:6379\nreservation_key: 'reservation'", "redis.reservation_key"},
		{"address: r:6379\ntimeout: -1s", "redis.timeout"},
		{"address: r:6379\npool_size: 8", ""},
		{"address: r:6379\npool_size: -1", "redis.pool_size"},
		{"address: r:6379\ndrift_alert_after: -2", "redis.drift_alert_after"},
	} {
		var c Redis
		if err := yaml.Unmarshal([]byte(tc.yaml), &c); err != nil {
			t.Fatalf("%q: %v", tc.yaml, err)
		}
		err := c.Validate()
		switch {
		case tc.bad == "" && err != nil:
			t.Errorf("%q: %v", tc.yaml, err)
		case tc.bad != "" && (err == nil || !strings.Contains(err.Error(), "config "+tc.bad+":")):
			t.Errorf("%q: %v, want an error naming %s", tc.yaml, err, tc.bad)
		}
	}
	d := Redis{Address: "x"}.WithDefaults(0)
	if d.Authority != "redis" || d.CounterKey != "stock:{shop}:{item}:{location}" || d.SwitchPollInterval.Seconds() != 1 || d.PoolSize != 64 {
		t.Fatalf("defaults: %+v", d)
	}
}
