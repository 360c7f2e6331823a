package ctl

import (
	"context"
	"fmt"
	"strings"
)

// Controls of the kinds set through the admin API's routes for every
// kind (PUT and DELETE /api/tags/{tag}/{kind}), one command each:
//
//	holdfastctl KIND TAG VALUE      (VALUE off lifts it)
//	holdfastctl KIND TAG            (a kind without a value; KIND TAG off lifts it)
//
// A kind is one entry of tagControls: holdfast declares and checks the
// kind (package controls); holdfastctl only names it and says what a
// change did.

// TagControl is one such kind, as holdfastctl offers it.
type TagControl struct {
	// Kind is the kind's name, which is the command's.
	Kind string
	// Pattern: TAG may be a pattern (* for any run of characters).
	Pattern bool
	// Value names the VALUE argument in usage messages; "" for a kind
	// without a value.
	Value string
	// Set and Lifted are the line printed after a change, %s standing
	// for the tag (a fmt format with one verb).
	Set, Lifted string
	// Command is the command's name when it is not Kind's; Lift: the
	// command only lifts the kind (holdfastctl resume TAG is pause TAG
	// off).
	Command string
	Lift    bool
}

// Name is the command's name.
func (tc TagControl) Name() string {
	if tc.Command != "" {
		return tc.Command
	}
	return tc.Kind
}

// tagControls are the kinds holdfastctl offers as commands of their own,
// in the order help lists them.
var tagControls = []TagControl{
	{Kind: "readonly", Pattern: true,
		Set:    "%s is read-only: its statements but reads, SHOW, SET, USE, BEGIN, COMMIT and ROLLBACK get error 9011",
		Lifted: "%s may write again"},
	{Kind: "pause", Pattern: true,
		Set:    "%s is paused: its statements that need a new backend connection wait (open transactions go on), then get error 9010 past failover.hold",
		Lifted: "%s is no longer paused: held statements run"},
	{Kind: "pause", Command: "resume", Pattern: true, Lift: true,
		Lifted: "%s is no longer paused: held statements run"},
}

// TagControlNamed returns the kind offered as command cmd.
func TagControlNamed(cmd string) (TagControl, bool) {
	for _, tc := range tagControls {
		if tc.Name() == cmd {
			return tc, true
		}
	}
	return TagControl{}, false
}

// Args names the positional arguments the command takes, given those it
// got (a kind without a value takes an optional "off").
func (tc TagControl) Args(got []string) []string {
	switch {
	case tc.Lift:
		return []string{"TAG"}
	case tc.Value != "":
		return []string{"TAG", tc.Value}
	case len(got) == 2 && strings.EqualFold(got[1], "off"):
		return []string{"TAG", "off"}
	}
	return []string{"TAG"}
}

// Control sets (or, with value "off", lifts) a control of tc's kind on tag
// and prints one line: what it did, where, and what holds there now.
func (c *CLI) Control(ctx context.Context, tc TagControl, tag, value, reason string) error {
	check := tag
	if tc.Pattern {
		check = strings.ReplaceAll(tag, "*", "x")
	}
	if err := CheckTag(check); err != nil {
		return err
	}
	lift := tc.Lift || strings.EqualFold(value, "off")
	if lift {
		value = ""
	}
	s, err := c.Client.SetControl(ctx, tag, tc.Kind, value, !lift, reason)
	if err != nil {
		return err
	}
	name := answeredTag(s.Tag, tag)
	here := ""
	switch {
	case !lift && !s.InForceHere:
		return c.unexpected(tc.Kind, name, "not in force there")
	case lift && s.InForceHere:
		// Another source's (the fleet's, or the configuration's) holds.
		here = " (still in force there: " + clean(s.HereNow) + ", from another source)"
	}
	line := fmt.Sprintf(tc.Lifted, name)
	if !lift {
		line = fmt.Sprintf(tc.Set, name) + fmt.Sprintf(" (lift: holdfastctl %s %s off)", tc.Kind, name)
	}
	_, err = fmt.Fprintf(c.Out, "%s%s%s\n", line, c.where(s.Scope, s.Author), here)
	return err
}
