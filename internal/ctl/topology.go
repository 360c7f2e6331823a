package ctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Topology is the answer of GET /api/topology: which server is the
// primary, and each candidate server's role at holdfast's last check.
type Topology struct {
	State                string           `json:"state"` // primary, no_primary, split_brain or unknown
	Primary              string           `json:"primary"`
	PrimaryAddresses     []string         `json:"primary_addresses"`
	Since                time.Time        `json:"since"`
	CheckedAt            time.Time        `json:"checked_at"`
	CheckIntervalSeconds float64          `json:"check_interval_seconds"`
	Servers              []TopologyServer `json:"servers"`
	Retired              []string         `json:"retired"`
	PrimaryChanges       uint64           `json:"primary_changes"`
	SplitBrains          uint64           `json:"split_brains"`
	NoPrimarySeconds     float64          `json:"no_primary_seconds"`
	ReadOnlyAnswers      uint64           `json:"read_only_answers"`
	RetiredConnections   uint64           `json:"retired_connections"`
	RetiredDials         uint64           `json:"retired_dials"`
	Failover             TopologyFailover `json:"failover"`
	// Hold is the hold's settings in force; nil when the answer has none.
	Hold *TopologyHold `json:"hold"`
	// Pauses are the pause controls in force on the instance.
	Pauses []TopologyPause `json:"pauses"`
}

// TopologyFailover is the statements held while there was no usable
// primary or a pause was in force, since start but HeldNow.
type TopologyFailover struct {
	HeldNow     int64   `json:"held_now"`
	Held        uint64  `json:"held"`
	HeldSeconds float64 `json:"held_seconds"`
	Retried     uint64  `json:"retried"`
	Refused     uint64  `json:"refused"` // answered 9010
	PauseWaits  uint64  `json:"pause_waits"`
}

// TopologyHold is failover.hold (seconds; 0: 9010 at once) and
// failover.max_held (0: none held).
type TopologyHold struct {
	Seconds float64 `json:"seconds"`
	MaxHeld int     `json:"max_held"`
}

// TopologyPause is a pause control in force.
type TopologyPause struct {
	Tag    string `json:"tag"`
	Source string `json:"source"`
	Reason string `json:"reason"`
	SetBy  string `json:"set_by"`
}

// TopologyServer is one candidate server.
type TopologyServer struct {
	Address        string `json:"address"`
	Source         string `json:"source"`
	Server         string `json:"server"`
	Role           string `json:"role"`
	Reachable      bool   `json:"reachable"`
	ReadOnly       bool   `json:"read_only"`
	Replicating    string `json:"replicating"`
	ReplicatesFrom string `json:"replicates_from"`
	Retired        bool   `json:"retired"`
	Error          string `json:"error"`
}

// Topology reads GET /api/topology.
func (c *Client) Topology(ctx context.Context) (Topology, error) {
	var t Topology
	err := c.do(ctx, http.MethodGet, "/api/topology", nil, &t, "state", "servers")
	return t, err
}

// Topology prints which server is the primary, every candidate server's
// role, and the switchovers holdfast has seen.
func (c *CLI) Topology(ctx context.Context) error {
	t, err := c.Client.Topology(ctx)
	if err != nil {
		return err
	}
	return writeTopology(c.Out, t, c.now())
}

func (c *CLI) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func writeTopology(w io.Writer, t Topology, now time.Time) error {
	var b strings.Builder
	since := ""
	if !t.Since.IsZero() {
		since = " for " + fmtAge(now.Sub(t.Since))
	}
	switch t.State {
	case "primary":
		fmt.Fprintf(&b, "primary: %s (%s)%s\n", clean(strings.Join(t.PrimaryAddresses, ", ")), clean(t.Primary), since)
	case "no_primary":
		fmt.Fprintf(&b, "NO PRIMARY%s: no server is writable and replicates from no one; writes fail until the HA tool promotes one\n", since)
	case "split_brain":
		fmt.Fprintf(&b, "SPLIT BRAIN%s: more than one server is writable and replicates from no one; holdfast writes to none of them\n", since)
	default:
		b.WriteString("not checked yet\n")
	}
	tb := table{cols: []column{{name: "ADDRESS"}, {name: "SOURCE"}, {name: "ROLE"}, {name: "READ-ONLY"}, {name: "REPLICATING"},
		{name: "RETIRED"}, {name: "SERVER / ERROR"}}}
	yes := func(v bool) string {
		if v {
			return "yes"
		}
		return "no"
	}
	for _, s := range t.Servers {
		who := s.Server
		if s.ReplicatesFrom != "" {
			who += " from " + s.ReplicatesFrom
		}
		if s.Error != "" {
			who = strings.TrimSpace(who + " " + s.Error)
		}
		ro := yes(s.ReadOnly)
		if !s.Reachable {
			ro = "-"
		}
		tb.add(clean(s.Address), clean(s.Source), clean(s.Role), ro, clean(s.Replicating), yes(s.Retired), clean(who))
	}
	if err := tb.write(&b, 0); err != nil {
		return err
	}
	fmt.Fprintf(&b, "since start: %d primary changes, %d split brains, %s without a primary, %d read-only answers, %d connections and %d dials retired\n",
		t.PrimaryChanges, t.SplitBrains, fmtSeconds(t.NoPrimarySeconds)+"s", t.ReadOnlyAnswers, t.RetiredConnections, t.RetiredDials)
	f := t.Failover
	fmt.Fprintf(&b, "held: %d statements now; since start %d held (%ss in all), %d retried on the new primary, %d refused with 9010, %d held by a pause\n",
		f.HeldNow, f.Held, fmtSeconds(f.HeldSeconds), f.Retried, f.Refused, f.PauseWaits)
	if h := t.Hold; h != nil {
		if h.Seconds == 0 || h.MaxHeld == 0 {
			b.WriteString("hold: off (failover.hold or failover.max_held is 0): statements needing the primary get 9010 at once while there is none\n")
		} else {
			fmt.Fprintf(&b, "hold: up to %ss a statement (failover.hold), at most %d held at once (failover.max_held), then 9010\n",
				strconv.FormatFloat(h.Seconds, 'f', -1, 64), h.MaxHeld)
		}
	}
	for _, p := range t.Pauses {
		fmt.Fprintf(&b, "PAUSED: %s (%s", clean(p.Tag), clean(p.Source))
		if p.Reason != "" {
			fmt.Fprintf(&b, ", %s", clean(p.Reason))
		}
		if p.SetBy != "" {
			fmt.Fprintf(&b, ", by %s", clean(p.SetBy))
		}
		b.WriteString("): new statements wait; lift with holdfastctl resume\n")
	}
	if len(t.Retired) > 0 {
		fmt.Fprintf(&b, "retired (no connection lent to them): %s\n", clean(strings.Join(t.Retired, ", ")))
	}
	fmt.Fprintf(&b, "checked every %s", strconv.FormatFloat(t.CheckIntervalSeconds, 'f', -1, 64)+"s")
	if !t.CheckedAt.IsZero() {
		fmt.Fprintf(&b, ", last %s ago", fmtAge(now.Sub(t.CheckedAt)))
	}
	b.WriteString("\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtAge is a duration for people: 850ms, 12s, 4m10s.
func fmtAge(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}
