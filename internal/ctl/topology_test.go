package ctl

import (
	"context"
	"strings"
	"testing"
	"time"
)

const topologyJSON = `{"state":"primary","primary":"db-y:3306#2","primary_addresses":["10.0.0.2:3306"],` +
	`"since":"2026-11-30T10:00:00Z","checked_at":"2026-11-30T10:00:30Z","check_interval_seconds":0.1,` +
	`"servers":[{"address":"10.0.0.2:3306","source":"backend.address","server":"db-y:3306#2","role":"primary","reachable":true,"replicating":"no"},` +
	`{"address":"10.0.0.1:3306","source":"backend.replicas","server":"db-x:3306#1","role":"replica","reachable":true,"read_only":true,` +
	`"replicating":"yes","replicates_from":"10.0.0.2:3306 (server_id 2)","retired":true},` +
	`{"address":"10.0.0.3:3306","source":"backend.replicas","role":"unreachable","replicating":"unknown","error":"connection refused"}],` +
	`"retired":["db-x:3306#1"],"primary_changes":1,"split_brains":0,"no_primary_seconds":4.2,"read_only_answers":17,` +
	`"retired_connections":9,"retired_dials":3,` +
	`"failover":{"held_now":2,"held":40,"held_seconds":12.5,"retried":6,"refused":3,"pause_waits":11},` +
	`"hold":{"seconds":15,"max_held":1000},"pauses":[{"kind":"pause","tag":"*","source":"fleet","reason":"switchover","set_by":"oncall"}]}`

func TestTopologyCommand(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/topology", 200, topologyJSON)
	var out strings.Builder
	now := time.Date(2026, 11, 30, 10, 1, 0, 0, time.UTC)
	c := &CLI{Client: f.client(t, ""), Out: &out, Now: func() time.Time { return now }}
	if err := c.Topology(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"primary: 10.0.0.2:3306 (db-y:3306#2) for 1m0s\n",
		"10.0.0.1:3306  backend.replicas  replica",
		"db-x:3306#1 from 10.0.0.2:3306 (server_id 2)",
		"10.0.0.3:3306  backend.replicas  unreachable  -",
		"1 primary changes, 0 split brains, 4.20s without a primary, 17 read-only answers, 9 connections and 3 dials retired\n",
		"retired (no connection lent to them): db-x:3306#1\n",
		"checked every 0.1s, last 30s ago\n",
		"held: 2 statements now; since start 40 held (12.5s in all), 6 retried on the new primary, 3 refused with 9010, 11 held by a pause\n",
		"hold: up to 15s a statement (failover.hold), at most 1000 held at once (failover.max_held), then 9010\n",
		"PAUSED: * (fleet, switchover, by oncall): new statements wait; lift with holdfastctl resume\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := writeTopology(&out, Topology{State: "split_brain", Hold: &TopologyHold{}}, now); err != nil || !strings.HasPrefix(out.String(), "SPLIT BRAIN: ") ||
		!strings.Contains(out.String(), "hold: off") || strings.Contains(out.String(), "PAUSED") {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
