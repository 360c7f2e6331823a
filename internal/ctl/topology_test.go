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
	`"retired_connections":9,"retired_dials":3}`

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
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := writeTopology(&out, Topology{State: "split_brain"}, now); err != nil || !strings.HasPrefix(out.String(), "SPLIT BRAIN: ") {
		t.Fatalf("%v\n%s", err, out.String())
	}
}
