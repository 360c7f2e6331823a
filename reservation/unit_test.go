package reservation

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Unit tests of the pure parts: argument decoding, JSON lines, literal
// interpolation, tokens and config validation. Everything touching SQL is
// tested against MariaDB in the reservation_test package.

var testLimits = lineLimits{MaxLines: 100, MaxLocations: 16, MaxQty: 1000}

func TestParseLines(t *testing.T) {
	in := ` [ {"item": 1001, "qty": 2, "locations": [3, 1]}, {"locations":[9],"qty":1,"item":7} ] `
	if _, ok := parseLinesFast(in, testLimits); !ok {
		t.Errorf("parseLinesFast(%q) refused lines as clients write them", in)
	}
	got, err := parseLines(in, testLimits)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].item != 1001 || got[0].qty != 2 || got[0].locations[0] != 3 || got[0].locations[1] != 1 ||
		got[1].item != 7 || got[1].locations[0] != 9 {
		t.Errorf("parsed %+v", got)
	}
	for in, want := range map[string]string{
		``:                                       "not a JSON array",
		`[{"item":1,"qty":1,"locations":[1]}] x`: "data after the JSON array",
		`[null]`:                                 "line 1: must be an object",
		`[{"item":1e3,"qty":1,"locations":[1]}]`: `"item" must be a positive integer, got 1e3`,
		`[{"item":1,"qty":"2","locations":[1]}]`: `"qty" must be a positive integer, got "2"`,
		`[{"item":1,"qty":1,"locations":[0]}]`:   "location 1 must be a positive integer, got 0",
		`[{"item":1,"qty":1}]`:                   `"locations" must be an array of inventory_group_ids, got nothing`,
		`[{"item":9223372036854775808,"qty":1,"locations":[1]}]`: `"item" must be a positive integer`,
	} {
		if _, err := parseLines(in, testLimits); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseLines(%q) = %v, want error containing %q", in, err, want)
		}
	}
}

// FuzzParseLines: lines_json comes from outside; whatever it holds, the
// parser must not panic, and what it accepts must respect the limits.
func FuzzParseLines(f *testing.F) {
	for _, s := range []string{`[{"item":1,"qty":1,"locations":[1]}]`, `[]`, `{`, `[{"item":1,"qty":1,"locations":[1,1]}]`, `[null,1,"x"]`,
		` [ {"item": 1001, "qty": 2, "locations": [3, 1]}, {"locations":[9],"qty":1,"item":7} ] `, `[{"ITEM":1,"qty":1,"locations":[1]}]`,
		`[{"item":1,"item":2,"qty":1,"locations":[1]}]`, `[{"item":1,"qty":1.0,"locations":[1]}]`, `[{"item":01,"qty":1,"locations":[1]}]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if fast, ok := parseLinesFast(s, testLimits); ok {
			slow, err := parseLinesJSON(s, testLimits)
			if err != nil || !reflect.DeepEqual(fast, slow) {
				t.Fatalf("%q: the fast parser gave %+v, encoding/json %+v, %v", s, fast, slow, err)
			}
		}
		lines, err := parseLines(s, testLimits)
		if err != nil {
			return
		}
		if len(lines) == 0 || len(lines) > testLimits.MaxLines {
			t.Fatalf("accepted %d lines", len(lines))
		}
		items := map[int64]bool{}
		for _, l := range lines {
			if l.item < 1 || l.qty < 1 || l.qty > testLimits.MaxQty || len(l.locations) == 0 || len(l.locations) > testLimits.MaxLocations || items[l.item] {
				t.Fatalf("accepted bad line %+v", l)
			}
			items[l.item] = true
		}
	})
}

// FuzzCallArgs: CALL arguments come from outside; Call must answer any of
// them with a result or an error, never a panic, and must reject them
// before touching the database (the engine here has no connections).
func FuzzCallArgs(f *testing.F) {
	f.Add("reserve", "1", "k", `[{"item":1,"qty":1,"locations":[1]}]`, "0")
	f.Add("claim", "rsv_0000000000000001", "", "", "")
	f.Add("extend", "rsv_zz", "60", "", "")
	f.Add("adjust", "1", "1", "1", "-1")
	cfg := DefaultConfig()
	e, err := New(cfg, Options{Conns: noConns{}, Refiller: noRefiller{}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name, a, b, c, d string) {
		args := []any{a, b, c, d}
		if p, ok := procedures[name]; ok {
			args = args[:min(len(p.params), 4)]
		}
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("Call(%q, %q) panicked: %v", name, args, r)
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, _, _ = e.Call(ctx, name, args)
	})
}

type noConns struct{}

func (noConns) Borrow(context.Context, string) (Conn, error) {
	return nil, context.DeadlineExceeded
}

type noRefiller struct{}

func (noRefiller) RefillNow(context.Context, PoolKey) error { return nil }
func (noRefiller) Notify(PoolKey, int)                      {}

func TestInterpolate(t *testing.T) {
	at := time.Date(2026, 5, 4, 3, 2, 1, 123456000, time.FixedZone("x", 3600))
	got, err := Interpolate("SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, '?'", nil, 7, int64(-8), uint64(9), 1.5, "a'b\\c", []byte{0, 1}, true, at)
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT NULL, 7, -8, 9, 1.5, X'6127625C63', X'0001', 1, '2026-05-04 02:02:01.123456', '?'`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if _, err := Interpolate("SELECT ?", 1, 2); err == nil {
		t.Error("extra argument accepted")
	}
	if _, err := Interpolate("SELECT ?, ?", 1); err == nil {
		t.Error("missing argument accepted")
	}
	if _, err := Interpolate("SELECT ?", struct{}{}); err == nil {
		t.Error("unsupported type accepted")
	}
}

func TestTokens(t *testing.T) {
	for _, id := range []uint64{1, 0xdeadbeef, 1<<63 - 1} {
		tok := formatToken(id)
		if got, ok := parseToken(tok); !ok || got != id {
			t.Errorf("parseToken(%s) = %d, %v", tok, got, ok)
		}
	}
	for _, bad := range []string{"", "rsv_", "rsv_000000000000000g", "xyz_0000000000000001", "rsv_0000000000000000", "rsv_00000000000000001"} {
		if _, ok := parseToken(bad); ok {
			t.Errorf("parseToken(%q) accepted", bad)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for _, c := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.DefaultTTL = 16 * time.Minute }, "config default_ttl: 16m0s must exceed payment_timeout + callback_retry_window + clock_skew = 10m0s + 5m0s + 1m0s = 16m0s"},
		{func(c *Config) { c.DefaultTTL = 0 }, "config default_ttl: must be positive"},
		{func(c *Config) { c.DefaultTTL = 20*time.Minute + time.Millisecond }, "config default_ttl: must be whole seconds"},
		{func(c *Config) { c.ClockSkew = -time.Second }, "config clock_skew: must not be negative"},
		{func(c *Config) { c.MaxTTL = time.Minute }, "config max_ttl: 1m0s is below default_ttl"},
		{func(c *Config) { c.Retention = time.Hour }, "config retention: 1h0m0s must exceed max_ttl"},
		{func(c *Config) { c.PoolCap = -1 }, "config pool_cap"},
		{func(c *Config) { c.MaxBatch = -3 }, "config max_batch"},
		{func(c *Config) { c.SecondBatchMin = -1 }, "config second_batch_min"},
		{func(c *Config) { c.SweepRate = -1 }, "config sweep_rate"},
		{func(c *Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Millisecond }, "config backoff_max"},
		{func(c *Config) { c.ReconcileAlertAfter = -1 }, "config reconcile_alert_after"},
	} {
		cfg := DefaultConfig()
		c.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate() = %v, want %q", err, c.want)
		}
	}
}
