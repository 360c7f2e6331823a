package main

import (
	"strings"
	"testing"
)

func TestAuthorityCommand(t *testing.T) {
	a := newAdmin(t)
	env := map[string]string{"HOLDFAST_ADMIN_ADDR": a.addr(), "HOLDFAST_ADMIN_TOKEN": "tok", "HOLDFAST_CTL_BY": "alice"}
	code, out, errOut := holdfastctl(env, "authority")
	if code != 0 || !strings.Contains(out, "version 4: Redis decides every shop's reserves") {
		t.Fatalf("show: %d %q %q", code, out, errOut)
	}
	code, out, errOut = holdfastctl(env, "authority", "redis", "-percent", "50", "-shops", "3", "-reason", "x")
	if code != 0 || !strings.Contains(out, "switched: authority switch version 5") {
		t.Fatalf("set: %d %q %q", code, out, errOut)
	}
	if got := a.requests(); got[1] != "PUT /api/authority?authority=redis&by=alice&percent=50&reason=x&shops=3 Bearer tok" {
		t.Fatalf("requests %q", got)
	}
	for _, args := range [][]string{
		{"authority", "mysql"},
		{"authority", "holdfast", "-percent", "10"},
		{"authority", "redis", "holdfast"},
		{"authority", "redis", "-percent", "x"},
	} {
		if code, _, errOut := holdfastctl(env, args...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage): %s", args, code, errOut)
		}
	}
	if n := len(a.requests()); n != 2 {
		t.Fatalf("%d requests; usage errors must send none", n)
	}
}
