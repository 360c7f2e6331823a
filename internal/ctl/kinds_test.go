package ctl

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// A kind offered as a command of its own goes through the routes for
// every kind: PUT with value= and reason= to set, DELETE to lift; the
// line printed says what it did and, lifted, what another source still
// holds there.
func TestTagControlCommand(t *testing.T) {
	quiet := TagControl{Kind: "quiet", Pattern: true, Set: "%s is quiet", Lifted: "%s may speak again"}
	level := TagControl{Kind: "level", Value: "N", Set: "%s is levelled", Lifted: "%s is not levelled"}
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		route string
		body  string
		run   func(c *CLI) error
		want  request
		out   string
	}{
		{"set", "PUT /api/tags/{tag}/{kind}", `{"tag":"report_*","kind":"quiet","scope":"fleet","in_force_here":true,"here_now":"quiet","set_by":"oncall"}`,
			func(c *CLI) error { return c.Control(ctx, quiet, "report_*", "", "INC-4") },
			request{Method: "PUT", Path: "/api/tags/report_%2A/quiet", Query: "reason=INC-4", Tag: "report_*", Auth: "Bearer t"},
			"report_* is quiet (lift: holdfastctl quiet report_* off); on every holdfast instance; set by oncall\n"},
		{"lift", "DELETE /api/tags/{tag}/{kind}", `{"tag":"report_*","kind":"quiet","scope":"fleet","in_force_here":false,"here_now":""}`,
			func(c *CLI) error { return c.Control(ctx, quiet, "report_*", "off", "") },
			request{Method: "DELETE", Path: "/api/tags/report_%2A/quiet", Tag: "report_*", Auth: "Bearer t"},
			"report_* may speak again; on every holdfast instance\n"},
		{"lift, another source holds", "DELETE /api/tags/{tag}/{kind}", `{"tag":"x","kind":"quiet","scope":"local (this instance only, as asked)","in_force_here":true,"here_now":"quiet"}`,
			func(c *CLI) error { return c.Control(ctx, quiet, "x", "OFF", "") },
			request{Method: "DELETE", Path: "/api/tags/x/quiet", Tag: "x", Auth: "Bearer t"},
			"x may speak again; local (this instance only, as asked) (still in force there: quiet, from another source)\n"},
		{"value", "PUT /api/tags/{tag}/{kind}", `{"tag":"x","kind":"level","scope":"fleet","in_force_here":true,"here_now":"3"}`,
			func(c *CLI) error { return c.Control(ctx, level, "x", "3", "") },
			request{Method: "PUT", Path: "/api/tags/x/level", Query: "value=3", Tag: "x", Auth: "Bearer t"},
			"x is levelled (lift: holdfastctl level x off); on every holdfast instance\n"},
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

	// A set that the instance does not show in force (a holdfast that does
	// not know the kind would refuse it; one that answers so is wrong).
	f := newFakeAdmin(t)
	f.answer("PUT /api/tags/{tag}/{kind}", 200, `{"tag":"x","kind":"quiet","scope":"fleet","in_force_here":false}`)
	if err := (&CLI{Client: f.client(t, ""), Out: &strings.Builder{}}).Control(ctx, quiet, "x", "", ""); err == nil || !strings.Contains(err.Error(), "not in force there") {
		t.Errorf("a set not in force: %v", err)
	}
	if got := quiet.Args([]string{"x", "off"}); len(got) != 2 || got[1] != "off" {
		t.Errorf("quiet x off takes %q", got)
	}
	if got := level.Args([]string{"x"}); len(got) != 2 || got[1] != "N" {
		t.Errorf("level x takes %q", got)
	}
}
