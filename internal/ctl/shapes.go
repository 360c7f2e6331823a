package ctl

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Shape is one statement shape (GET /api/shapes): the statements of it
// held now, and the controls on it in force on the instance asked.
type Shape struct {
	Shape       string   `json:"shape"`
	Statement   string   `json:"statement"`
	Holders     int      `json:"holders"`
	LongestHeld float64  `json:"longest_held_seconds"`
	Tags        []string `json:"tags"`
	Blocked     bool     `json:"blocked"`
	Limited     bool     `json:"limited"`
	Limit       int      `json:"limit"`       // in force on the instance asked: its share of a fleet cap
	FleetLimit  *int     `json:"fleet_limit"` // the fleet-wide cap (nil: Limit is the instance's own)
	Running     int      `json:"running"`
}

// Shapes returns the shapes of the statements held now and those with a
// control (GET /api/shapes).
func (c *Client) Shapes(ctx context.Context) ([]Shape, error) {
	var r struct {
		Shapes []Shape `json:"shapes"`
	}
	err := c.do(ctx, http.MethodGet, "/api/shapes", nil, &r, "shapes")
	return r.Shapes, err
}

// ShapeState is the answer to a change of a shape's controls.
type ShapeState struct {
	Shape       string `json:"shape"`
	Blocked     bool   `json:"blocked"`
	Limit       int    `json:"limit"`
	InForceHere *int   `json:"in_force_here"`
	Scope       string `json:"scope"`
	Author
}

// SetShape blocks (what "block") or caps (what "limit", n > 0) a shape, or
// lifts that control (set false).
func (c *Client) SetShape(ctx context.Context, shape, what string, set bool, n int, reason string) (ShapeState, error) {
	var s ShapeState
	method, q := http.MethodDelete, url.Values(nil)
	if set {
		method, q = http.MethodPut, url.Values{}
		if what == "limit" {
			q.Set("max", strconv.Itoa(n))
		}
		if reason != "" {
			q.Set("reason", reason)
		}
	}
	err := c.do(ctx, method, "/api/shapes/"+escapeSegment(shape)+"/"+what, c.Scope.query(q), &s, "shape", "scope")
	return s, err
}

// CheckShape accepts a shape as the holders view shows it: 16 hex digits.
func CheckShape(s string) error {
	if len(s) != 16 {
		return usagef("a SHAPE is the 16 hex digits the holders view shows (holdfastctl shapes), got %q", s)
	}
	if _, err := strconv.ParseUint(s, 16, 64); err != nil {
		return usagef("a SHAPE is the 16 hex digits the holders view shows (holdfastctl shapes), got %q", s)
	}
	return nil
}

// Shapes prints the shapes of the statements held now, most held first,
// and the controls on shapes.
func (c *CLI) Shapes(ctx context.Context) error {
	ss, err := c.Client.Shapes(ctx)
	if err != nil {
		return err
	}
	if len(ss) == 0 {
		_, err = fmt.Fprintln(c.Out, "no statement holds a backend connection now, and no shape has a control")
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s  %7s  %8s  %-14s  %s\n", "SHAPE", "HOLDERS", "LONGEST", "CONTROL", "TAGS / STATEMENT")
	for _, s := range ss {
		control := "-"
		switch {
		case s.Blocked:
			control = "blocked"
		case s.Limited && s.FleetLimit != nil:
			control = fmt.Sprintf("cap %d of %d (%d run)", s.Limit, *s.FleetLimit, s.Running)
		case s.Limited:
			control = fmt.Sprintf("cap %d (%d run)", s.Limit, s.Running)
		}
		fmt.Fprintf(&b, "%-16s  %7d  %8s  %-14s  %s: %s\n", s.Shape, s.Holders, fmtSeconds(s.LongestHeld), control,
			clean(strings.Join(s.Tags, ",")), clean(s.Statement))
	}
	_, err = fmt.Fprint(c.Out, b.String())
	return err
}

// Shape blocks, unblocks, caps or uncaps a statement shape: action is
// block, unblock or limit (max: a number, or off / 0 to lift the cap).
func (c *CLI) Shape(ctx context.Context, action, shape, max, reason string) error {
	shape = strings.ToLower(shape)
	if err := CheckShape(shape); err != nil {
		return err
	}
	switch action {
	case "block", "unblock":
		s, err := c.Client.SetShape(ctx, shape, "block", action == "block", 0, reason)
		if err != nil {
			return err
		}
		if s.Blocked != (action == "block") {
			return c.unexpected("shape "+action, shape, fmt.Sprintf("blocked=%v (another source may block it: holdfastctl controls)", s.Blocked))
		}
		if action == "unblock" {
			_, err = fmt.Fprintf(c.Out, "unblocked shape %s%s\n", shape, c.where(s.Scope, s.Author))
			return err
		}
		_, err = fmt.Fprintf(c.Out, "blocked shape %s: its statements get error 9007, running ones finish%s (undo: holdfastctl shape unblock %s)\n", shape, c.where(s.Scope, s.Author), shape)
		return err
	case "limit":
		n, err := ParseLimit(max)
		if err != nil {
			return err
		}
		s, err := c.Client.SetShape(ctx, shape, "limit", n > 0, n, reason)
		if err != nil {
			return err
		}
		if n == 0 {
			_, err = fmt.Fprintf(c.Out, "lifted the cap on shape %s%s\n", shape, c.where(s.Scope, s.Author))
			return err
		}
		if s.Limit != n {
			return c.unexpected("shape limit", shape, fmt.Sprintf("limit=%d", s.Limit))
		}
		here := ""
		if s.Scope == "fleet" && s.InForceHere != nil {
			here = fmt.Sprintf(" (this instance's share now: %d)", *s.InForceHere)
		}
		_, err = fmt.Fprintf(c.Out, "capped shape %s at %d statements running at once: the others wait, then get error 9008%s%s (lift: holdfastctl shape limit %s off)\n",
			shape, n, c.where(s.Scope, s.Author), here, shape)
		return err
	}
	return usagef("shape: want block, unblock or limit, got %q", action)
}
