package ctl

import (
	"context"
	"strings"
	"testing"
)

// holdfastctl explain asks GET /api/explain with the statement, user and
// tag, and prints the plan, a refusal with its code, and nothing the
// server sent raw.
func TestExplain(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/explain", 200, `{"sql":"SELECT 1","user":"app","tag":"other","tag_from":"statement","key":"report_x",
		"kind":"select","shape":"00ff00ff00ff00ff","action":"run","backend":"primary","route":"primary","class":"background",
		"controls":["tag report_x limited to 2 connections","class background\u001b[2J"],"steps":["a lease of a connection of its own"]}`)
	var out strings.Builder
	c := &CLI{Client: f.client(t, ""), Out: &out}
	if err := c.Explain(context.Background(), "app", "report_x", "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	if r.Path != "/api/explain" || !strings.Contains(r.Query, "sql=SELECT+1") || !strings.Contains(r.Query, "user=app") || !strings.Contains(r.Query, "tag=report_x") {
		t.Fatalf("request %+v", r)
	}
	for _, want := range []string{"backend    primary", "class      background", "the controls know it as report_x",
		"controls   tag report_x limited to 2 connections", "steps      1. a lease"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "\x1b") {
		t.Errorf("an escape sequence reached the terminal:\n%q", out.String())
	}
	f.answer("GET /api/explain", 200, `{"sql":"DELETE FROM holdfast.t","action":"refuse","refusal":{"code":9009,"sqlstate":"42000","message":"holdfast: no"},"controls":[],"steps":[]}`)
	out.Reset()
	if err := c.Explain(context.Background(), "", "", "DELETE FROM holdfast.t"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "refused    error 9009 (42000): holdfast: no") {
		t.Errorf("refusal:\n%s", out.String())
	}
}
