package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestTagsGolden(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/tags", 200, tagsJSON)
	var out strings.Builder
	c := &CLI{Client: f.client(t, "tok"), Out: &out}
	if err := c.Tags(context.Background()); err != nil {
		t.Fatal(err)
	}
	golden(t, "tags.golden", out.String())
	if got := f.requests(); len(got) != 1 || got[0] != (request{Method: "GET", Path: "/api/tags", Auth: "Bearer tok"}) {
		t.Errorf("requests = %+v", got)
	}
}

func TestTagsEmptyFolded(t *testing.T) {
	var out strings.Builder
	var l TagList
	if err := json.Unmarshal([]byte(tagsFoldedJSON), &l); err != nil {
		t.Fatal(err)
	}
	if err := writeTags(&out, l); err != nil {
		t.Fatal(err)
	}
	want := "no tags yet: holdfast has lent no backend connection since it started\n" +
		"1734 new tag names were counted under \"other\": holdfast's tag bound was reached\n"
	if out.String() != want {
		t.Errorf("got\n%swant\n%s", out.String(), want)
	}
}

// TestTagsSorted re-sorts an answer that is not in hold order.
func TestTagsSorted(t *testing.T) {
	var out strings.Builder
	l := TagList{Tags: []Tag{{Tag: "small", HoldSeconds: 1}, {Tag: "big", HoldSeconds: 9}}}
	if err := writeTags(&out, l); err != nil {
		t.Fatal(err)
	}
	if i, j := strings.Index(out.String(), "big"), strings.Index(out.String(), "small"); i > j {
		t.Errorf("big after small:\n%s", out.String())
	}
}

func TestHoldersGolden(t *testing.T) {
	for _, tc := range []struct {
		name  string
		width int
	}{{"holders.golden", 0}, {"holders_width80.golden", 80}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t)
			f.answer("GET /api/holders", 200, holdersJSON)
			var out strings.Builder
			c := &CLI{Client: f.client(t, ""), Out: &out, Width: tc.width}
			if err := c.Holders(context.Background()); err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, out.String())
			if strings.Contains(out.String(), "\x1b") {
				t.Error("an escape sequence from a statement reached the output")
			}
			if tc.width > 0 {
				for _, ln := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
					if n := runes(ln); n > tc.width {
						t.Errorf("line of %d runes > width %d: %q", n, tc.width, ln)
					}
				}
			}
			if got := f.requests(); len(got) != 1 || got[0] != (request{Method: "GET", Path: "/api/holders"}) {
				t.Errorf("requests = %+v", got)
			}
		})
	}
}

func TestHoldersNone(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/holders", 200, `{"holders":[]}`)
	var out strings.Builder
	if err := (&CLI{Client: f.client(t, ""), Out: &out}).Holders(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out.String() != "no backend connection is held right now\n" {
		t.Errorf("got %q", out.String())
	}
}

// TestControlCommands runs drain, undrain and limit against the fake and
// checks the request and the one-line confirmation.
func TestControlCommands(t *testing.T) {
	for _, tc := range []struct {
		name  string
		route string
		body  string
		run   func(c *CLI) error
		want  request
		out   string
	}{
		{"drain", "POST /api/tags/{tag}/drain", `{"tag":"checkout","drained":true}`,
			func(c *CLI) error { return c.Drain(context.Background(), "checkout", 0, "") },
			request{Method: "POST", Path: "/api/tags/checkout/drain", Tag: "checkout", Auth: "Bearer t"},
			"drained checkout: its new borrows fail fast, current holders may finish (undo: holdfastctl undrain checkout)\n"},
		{"drain grace reason", "POST /api/tags/{tag}/drain", `{"tag":"holdfast:reserve","drained":true}`,
			func(c *CLI) error {
				return c.Drain(context.Background(), "holdfast:reserve", 30*time.Second, "incident-123")
			},
			request{Method: "POST", Path: "/api/tags/holdfast%3Areserve/drain", Query: "grace=30s&reason=incident-123", Tag: "holdfast:reserve", Auth: "Bearer t"},
			"drained holdfast:reserve (incident-123): its new borrows fail fast, holders still holding after 30s are killed (undo: holdfastctl undrain holdfast:reserve)\n"},
		{"undrain", "DELETE /api/tags/{tag}/drain", `{"tag":"checkout","drained":false}`,
			func(c *CLI) error { return c.Undrain(context.Background(), "checkout") },
			request{Method: "DELETE", Path: "/api/tags/checkout/drain", Tag: "checkout", Auth: "Bearer t"},
			"undrained checkout: its new borrows proceed\n"},
		{"limit", "PUT /api/tags/{tag}/limit", `{"tag":"checkout","limit":2}`,
			func(c *CLI) error { return c.Limit(context.Background(), "checkout", "2", "") },
			request{Method: "PUT", Path: "/api/tags/checkout/limit", Query: "max=2", Tag: "checkout", Auth: "Bearer t"},
			"limited checkout to 2 backend connections: borrowers over the cap queue (lift: holdfastctl limit checkout off)\n"},
		{"limit off", "DELETE /api/tags/{tag}/limit", `{"tag":"checkout","limit":0}`,
			func(c *CLI) error { return c.Limit(context.Background(), "checkout", "off", "") },
			request{Method: "DELETE", Path: "/api/tags/checkout/limit", Tag: "checkout", Auth: "Bearer t"},
			"lifted the limit on checkout: it may hold any number of backend connections\n"},
		{"limit 0", "DELETE /api/tags/{tag}/limit", `{"tag":"checkout","limit":0}`,
			func(c *CLI) error { return c.Limit(context.Background(), "checkout", "0", "") },
			request{Method: "DELETE", Path: "/api/tags/checkout/limit", Tag: "checkout", Auth: "Bearer t"},
			"lifted the limit on checkout: it may hold any number of backend connections\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t)
			f.answer(tc.route, http.StatusOK, tc.body)
			var out strings.Builder
			if err := tc.run(&CLI{Client: f.client(t, "t"), Out: &out}); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.out {
				t.Errorf("output\n%q\nwant\n%q", out.String(), tc.out)
			}
			if got := f.requests(); len(got) != 1 || got[0] != tc.want {
				t.Errorf("requests = %+v, want [%+v]", got, tc.want)
			}
		})
	}
}

// TestControlUsage: bad input is a *UsageError and sends nothing.
func TestControlUsage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		run  func(c *CLI) error
		want string
	}{
		{"limit N not a number", func(c *CLI) error { return c.Limit(ctx, "checkout", "two", "") }, `got "two"`},
		{"limit N negative", func(c *CLI) error { return c.Limit(ctx, "checkout", "-1", "") }, "off (or 0) to lift"},
		{"tag with a space", func(c *CLI) error { return c.Drain(ctx, "checkout v2", 0, "") }, `try "checkout_v2"`},
		{"tag with a slash", func(c *CLI) error { return c.Undrain(ctx, "a/b") }, `try "a_b"`},
		{"tag too long", func(c *CLI) error { return c.Undrain(ctx, strings.Repeat("x", 65)) }, "65 bytes long"},
		{"empty tag", func(c *CLI) error { return c.Limit(ctx, "", "2", "") }, "empty tag"},
		{"dot dot", func(c *CLI) error { return c.Drain(ctx, "..", 0, "") }, "URL path step"},
		{"negative grace", func(c *CLI) error { return c.Drain(ctx, "checkout", -time.Second, "") }, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t)
			err := tc.run(&CLI{Client: f.client(t, ""), Out: &strings.Builder{}})
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want a *UsageError containing %q", err, tc.want)
			}
			if n := len(f.requests()); n != 0 {
				t.Errorf("%d requests sent", n)
			}
		})
	}
	if err := CheckTag(strings.Repeat("x", 64)); err != nil {
		t.Errorf("64-byte tag: %v", err)
	}
}

// TestControlUnexpectedAnswer: an answer that contradicts the request fails.
func TestControlUnexpectedAnswer(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("PUT /api/tags/{tag}/limit", 200, `{"tag":"checkout","limit":3}`)
	err := (&CLI{Client: f.client(t, ""), Out: &strings.Builder{}}).Limit(context.Background(), "checkout", "2", "")
	if err == nil || !strings.Contains(err.Error(), "answered limit=3") {
		t.Errorf("err = %v", err)
	}
}

func TestControlError(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("POST /api/tags/{tag}/drain", 404, `{"error":"unknown tag \"nosuch\""}`)
	var out strings.Builder
	err := (&CLI{Client: f.client(t, ""), Out: &out}).Drain(context.Background(), "nosuch", 0, "")
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 404 || out.Len() != 0 {
		t.Errorf("err = %v, output %q", err, out.String())
	}
}

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT 1", "SELECT 1"},
		{"  SELECT\n\t a,\r\n b  ", "SELECT a, b"},
		{"x\x1b[2Jy\x07z\x7f", "x?[2Jy?z?"},
		{"bad \xff utf8", "bad ? utf8"},
		{"naïve ✓", "naïve ✓"},
		{"\u202ereversed", "?reversed"},
	} {
		if got := clean(tc.in); got != tc.want {
			t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{fmtSeconds(0), "0"}, {fmtSeconds(0.004), "0.004"}, {fmtSeconds(0.4), "0.40"}, {fmtSeconds(12.5), "12.5"},
		{fmtSeconds(3870.2), "3870.2"}, {fmtSeconds(123456.7), "123457"},
		{fmtRate(0), "0"}, {fmtRate(2.1), "2.10"}, {fmtRate(350), "350.0"}, {fmtRate(12345), "12345"},
		{fmtPerSec(0), "0"}, {fmtPerSec(0.25), "0.2"}, {fmtPerSec(5), "5.0"}, {fmtPerSec(120), "120"},
		{fmtPct(1, 4), "25"}, {fmtPct(1, 0), "-"},
		{fmtHeld(0.25), "250ms"}, {fmtHeld(0.9999), "1.00s"}, {fmtHeld(4.2), "4.20s"}, {fmtHeld(12.34), "12.3s"},
		{fmtHeld(185.4), "3m05s"}, {fmtHeld(7300), "2h01m"},
		{state(false, 0), "-"}, {state(true, 0), "drained"}, {state(false, 3), "limit 3"}, {state(true, 2), "drained, limit 2"},
		{truncate("abcdef", 4), "abc…"}, {truncate("abc", 3), "abc"}, {truncate("äöü", 2), "ä…"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestTableWidth(t *testing.T) {
	tb := table{cols: []column{{name: "N", right: true}, {name: "TEXT"}}}
	tb.add("1", strings.Repeat("a", 50))
	tb.add("22", "short")
	var b strings.Builder
	if err := tb.write(&b, 30); err != nil {
		t.Fatal(err)
	}
	want := " N  TEXT\n" +
		" 1  " + strings.Repeat("a", 25) + "…\n" +
		"22  short\n"
	if b.String() != want {
		t.Errorf("got\n%q\nwant\n%q", b.String(), want)
	}
	b.Reset()
	if err := tb.write(&b, 10); err != nil { // the last column keeps 20 runes
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), " 1  "+strings.Repeat("a", 19)+"…\n") {
		t.Errorf("got\n%s", b.String())
	}
}

// holdfastctl fleet says when holdfast's tables are still in
// backend.database.
func TestFleetLegacyTables(t *testing.T) {
	f := newFakeAdmin(t)
	const member = `{"instance_id":"a","address":"h:6033","version":"v1","pool_max":16,"started_at":"2026-01-02T03:04:05Z"}`
	for _, tc := range []struct {
		status string
		legacy bool
	}{
		{`"tables_schema":"shop","tables_legacy":true`, true},
		{`"tables_schema":"holdfast"`, false},
	} {
		f.answer("GET /api/fleet", 200, `{"fleet":true,"status":{"instance_id":"a","known":true,"members":[`+member+`],`+tc.status+`}}`)
		var out strings.Builder
		if err := (&CLI{Client: f.client(t, ""), Out: &out}).Fleet(context.Background()); err != nil {
			t.Fatal(err)
		}
		said := strings.Contains(out.String(), "holdfast's tables are in backend.database (shop)") && strings.Contains(out.String(), "-move-tables")
		if said != tc.legacy {
			t.Errorf("%s: %q", tc.status, out.String())
		}
	}
}

// holdfastctl fleet shows each instance's version and schema range, which
// controls in force an instance cannot apply, and that an instance of a
// version that records no kinds cannot be told about.
func TestFleetMixedVersions(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/fleet", 200, `{"fleet":true,"status":{"instance_id":"pod-a","known":true,"members":[
 {"instance_id":"pod-a","address":"a:6033","version":"v1.5.0","pool_max":16,"started_at":"2026-01-02T03:04:05Z","schema_min":5,"schema_max":6,"control_kinds":["drain","limit","max_txn","class","route"]},
 {"instance_id":"pod-b","address":"b:6033","version":"v1.6.0","pool_max":16,"started_at":"2026-01-02T03:04:05Z","schema_min":6,"schema_max":7,"control_kinds":["drain","limit","max_txn","class","route","readonly"]},
 {"instance_id":"pod-c","address":"c:6033","version":"v1.4.0","pool_max":16,"started_at":"2026-01-02T03:04:05Z","control_kinds":null}],
 "not_everywhere":[{"tag":"cart","kind":"readonly","not_applied_by":["pod-a","pod-c"],"live_instances":3}]}}`)
	var out strings.Builder
	if err := (&CLI{Client: f.client(t, ""), Out: &out}).Fleet(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Logf("\n%s", got)
	for _, want := range []string{"SCHEMA", "v1.5.0", " 5-6 ", " 6-7 ", " ? ",
		"CANNOT APPLY: pod-a (version v1.5.0) does not know the kind of 1 control(s) in force: readonly cart",
		"CANNOT APPLY: pod-c (version v1.4.0)",
		"unknown kinds: cannot tell: pod-c (version v1.4.0) records no schema range"} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	if strings.Contains(got, "CANNOT APPLY: pod-b") {
		t.Error("pod-b, which knows readonly, is said not to apply it")
	}
}
