package ctl

import (
	"context"
	"errors"
	"strings"
	"testing"
)

const authorityJSON = `{"version":7,"authority":"redis","shops":[12,40],"percent":25,"changed_at":"2026-11-30T10:00:00Z",` +
	`"changed_by":"admin API 10.0.0.1:5000 holdfastctl","reason":"INC-9","poll_interval_seconds":1,"redis_stale":false}`

func TestAuthorityShowAndSet(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/authority", 200, authorityJSON)
	f.answer("PUT /api/authority", 200, strings.Replace(authorityJSON, `"version":7`, `"version":8`, 1))
	var out strings.Builder
	c := &CLI{Client: f.client(t, ""), Out: &out}
	if err := c.ShowAuthority(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "authority switch version 7: Redis decides reserves, except 25% of shops (CRC32(shop_id) % 100 < 25) and shops 12,40, which holdfast decides\n" +
		"changed 2026-11-30T10:00:00Z by admin API 10.0.0.1:5000 holdfastctl (INC-9)\n" +
		"every holdfast reads the switch every 1s: compare holdfast_authority_switch_version across the fleet\n"
	if out.String() != want {
		t.Fatalf("got\n%swant\n%s", out.String(), want)
	}
	ch, err := ParseAuthority("redis", "12, 40", 25)
	if err != nil {
		t.Fatal(err)
	}
	ch.Reason, ch.Force = "INC-9", true
	out.Reset()
	if err := c.SetAuthority(context.Background(), ch); err != nil || !strings.HasPrefix(out.String(), "switched: authority switch version 8") {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := f.requests()[1]
	if got.Method != "PUT" || got.Path != "/api/authority" || got.Query != "authority=redis&force=true&percent=25&reason=INC-9&shops=12%2C40" {
		t.Fatalf("request %+v", got)
	}
}

func TestParseAuthority(t *testing.T) {
	for _, tc := range []struct {
		auth, shops string
		pct         int
		bad         string
	}{
		{"mysql", "", 0, "want redis or holdfast"},
		{"redis", "", 101, "-percent"},
		{"redis", "1,x", 0, "-shops"},
		{"holdfast", "", 10, "every shop is on holdfast"},
		{"holdfast", "3", 0, "every shop is on holdfast"},
	} {
		_, err := ParseAuthority(tc.auth, tc.shops, tc.pct)
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.bad) {
			t.Errorf("ParseAuthority(%q, %q, %d) = %v, want a usage error about %s", tc.auth, tc.shops, tc.pct, err, tc.bad)
		}
	}
	if ch, err := ParseAuthority("holdfast", "", 0); err != nil || ch.Authority != "holdfast" {
		t.Fatalf("%+v %v", ch, err)
	}
}

func TestAuthorityStale(t *testing.T) {
	var out strings.Builder
	s := AuthorityState{Version: 3, Authority: "holdfast", PollIntervalSeconds: 1, RedisStale: true, RedisStaleReason: "mirror: refused"}
	if err := writeAuthority(&out, s, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "holdfast decides every shop's reserves") || !strings.Contains(out.String(), "REDIS IS STALE") {
		t.Fatal(out.String())
	}
}
