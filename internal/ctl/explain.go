package ctl

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// Explanation is the plan a statement would get now (GET /api/explain):
// where it goes and why, restated from the admin API's contract.
type Explanation struct {
	SQL      string   `json:"sql"`
	User     string   `json:"user"`
	Tag      string   `json:"tag"`
	TagFrom  string   `json:"tag_from"`
	Key      string   `json:"key"`
	Kind     string   `json:"kind"`
	Shape    string   `json:"shape"`
	Action   string   `json:"action"`
	Refusal  *Refusal `json:"refusal"`
	Backend  string   `json:"backend"`
	Route    string   `json:"route"`
	Class    string   `json:"class"`
	Controls []string `json:"controls"`
	Pin      string   `json:"pin"`
	Steps    []string `json:"steps"`
}

// Refusal is the error a refused statement would get.
type Refusal struct {
	Code    int    `json:"code"`
	State   string `json:"sqlstate"`
	Message string `json:"message"`
}

// Explain asks the plan sql would get as the first statement of a session
// of user, carrying tag ("" for the text's own, else the user's default).
func (c *Client) Explain(ctx context.Context, user, tag, sql string) (Explanation, error) {
	q := url.Values{"sql": {sql}}
	if user != "" {
		q.Set("user", user)
	}
	if tag != "" {
		q.Set("tag", tag)
	}
	var out Explanation
	err := c.do(ctx, http.MethodGet, "/api/explain", q, &out, "action")
	return out, err
}

// Explain prints the plan sql would get: which backend, pipe or not,
// class, the key the controls know it by and the controls it meets, the
// pin it would cause, the refusal it would get.
func (c *CLI) Explain(ctx context.Context, user, tag, sql string) error {
	e, err := c.Client.Explain(ctx, user, tag, sql)
	if err != nil {
		return err
	}
	var b strings.Builder
	line := func(k, v string) { fmt.Fprintf(&b, "%-10s %s\n", k, v) }
	or := func(v, none string) string {
		if v == "" {
			return none
		}
		return clean(v)
	}
	line("statement", clean(truncate(e.SQL, 200)))
	line("user", or(e.User, "(none)"))
	tagLine := clean(e.Tag) + " (" + or(e.TagFrom, "?") + ")"
	if e.Key != "" && e.Key != e.Tag {
		tagLine += "; the controls know it as " + clean(e.Key)
	}
	line("tag", tagLine)
	line("kind", or(e.Kind, "?")+", shape "+or(e.Shape, "?"))
	line("action", or(e.Action, "?"))
	if e.Refusal != nil {
		line("refused", fmt.Sprintf("error %d (%s): %s", e.Refusal.Code, clean(e.Refusal.State), clean(e.Refusal.Message)))
	}
	if e.Backend != "" {
		line("backend", clean(e.Backend))
	}
	line("route", or(e.Route, "primary"))
	line("class", or(e.Class, "normal"))
	if len(e.Controls) == 0 {
		line("controls", "none in force for it")
	}
	for i, ctl := range e.Controls {
		k := ""
		if i == 0 {
			k = "controls"
		}
		line(k, clean(ctl))
	}
	line("pin", or(e.Pin, "none by its text"))
	for i, s := range e.Steps {
		k := ""
		if i == 0 {
			k = "steps"
		}
		line(k, fmt.Sprintf("%d. %s", i+1, clean(s)))
	}
	_, err = fmt.Fprint(c.Out, b.String())
	return err
}
