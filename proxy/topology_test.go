package proxy

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
)

// Servers of the tables below: identities as the check reads them.
const (
	srvX serverID = "db-x:3306#1"
	srvY serverID = "db-y:3306#2"
	srvZ serverID = "db-z:3306#3"
)

// Observations: w writable and replicating from no one, ro read-only and
// replicating from no one, repl a replica (read-only, a thread running),
// down unreachable; noGrant without the replication status.
func w(id serverID) serverObs {
	return serverObs{addr: addrOf(id), reachable: true, id: id, replKnown: true}
}
func ro(id serverID) serverObs   { o := w(id); o.readOnly = true; return o }
func repl(id serverID) serverObs { o := ro(id); o.replicating = true; return o }
func down(id serverID) serverObs { return serverObs{addr: addrOf(id), err: "connection refused"} }
func noGrant(o serverObs) serverObs {
	o.replKnown, o.replicating = false, false
	return o
}
func at(o serverObs, addr string) serverObs { o.addr = addr; return o }
func addrOf(id serverID) string {
	h, _, _ := strings.Cut(string(id), ":")
	return h + ":3306"
}

func TestDecideRoles(t *testing.T) {
	writableReplica := repl(srvY)
	writableReplica.readOnly = false
	for _, tc := range []struct {
		name    string
		obs     []serverObs
		state   topoState
		primary serverID
		roles   []role
	}{
		{"nothing to check", nil, topoUnknown, "", []role{}},
		{"one writable server", []serverObs{w(srvX)}, topoPrimary, srvX, []role{rolePrimary}},
		{"a primary and its replica", []serverObs{w(srvX), repl(srvY)}, topoPrimary, srvX, []role{rolePrimary, roleReplica}},
		{"the primary turned read-only, the replica not yet promoted",
			[]serverObs{ro(srvX), repl(srvY)}, topoNoPrimary, "", []role{roleReadOnly, roleReplica}},
		{"the replica promoted, the old primary still read-only",
			[]serverObs{ro(srvX), w(srvY)}, topoPrimary, srvY, []role{roleReadOnly, rolePrimary}},
		{"the old primary replicates from the new one",
			[]serverObs{repl(srvX), w(srvY)}, topoPrimary, srvY, []role{roleReplica, rolePrimary}},
		{"two writable servers replicating from no one",
			[]serverObs{w(srvX), w(srvY), repl(srvZ)}, topoSplitBrain, "", []role{roleSplit, roleSplit, roleReplica}},
		{"the primary killed, its replica's IO thread connecting",
			[]serverObs{down(srvX), repl(srvY)}, topoNoPrimary, "", []role{roleUnreachable, roleReplica}},
		{"everything down", []serverObs{down(srvX), down(srvY)}, topoNoPrimary, "", []role{roleUnreachable, roleUnreachable}},
		{"one server through a VIP and its own address",
			[]serverObs{at(w(srvX), "10.0.0.100:3306"), w(srvX), repl(srvY)}, topoPrimary, srvX, []role{rolePrimary, rolePrimary, roleReplica}},
		{"no grant to read replication: the writable server is the primary",
			[]serverObs{noGrant(w(srvX)), noGrant(repl(srvY))}, topoPrimary, srvX, []role{rolePrimary, roleReadOnly}},
		{"a writable replica is a replica", []serverObs{w(srvX), writableReplica}, topoPrimary, srvX, []role{rolePrimary, roleReplica}},
		{"a server reached but not identified", []serverObs{{addr: "a:1", reachable: true}, w(srvX)}, topoPrimary, srvX, []role{roleUnreachable, rolePrimary}},
		{"a read-only server alone (no primary ever)", []serverObs{ro(srvX)}, topoNoPrimary, "", []role{roleReadOnly}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := decide(tc.obs)
			if d.state != tc.state || d.primary != tc.primary || !slices.Equal(d.roles, tc.roles) {
				t.Fatalf("decide: state %v primary %q roles %v; want %v %q %v", d.state, d.primary, d.roles, tc.state, tc.primary, tc.roles)
			}
		})
	}
}

func TestRetireAfter(t *testing.T) {
	set := func(ids ...serverID) map[serverID]bool {
		m := map[serverID]bool{}
		for _, id := range ids {
			m[id] = true
		}
		return m
	}
	for _, tc := range []struct {
		name string
		prev map[serverID]bool
		last serverID
		obs  []serverObs
		want map[serverID]bool
	}{
		{"first check: the primary's pool must not use the replica", set(), "", []serverObs{w(srvX), repl(srvY)}, set(srvY)},
		{"the primary turns read-only: retired at once", set(srvY), srvX, []serverObs{ro(srvX), repl(srvY)}, set(srvX, srvY)},
		{"the primary replicates (demoted in one step)", set(srvY), srvX, []serverObs{repl(srvX), repl(srvY)}, set(srvX, srvY)},
		{"the primary is unreachable: not retired (it may come back)", set(srvY), srvX, []serverObs{down(srvX), repl(srvY)}, set(srvY)},
		{"a new primary: the former one retired though unreachable", set(srvY), srvX, []serverObs{down(srvX), w(srvY)}, set(srvX)},
		{"a new primary, the former seen read-only", set(srvX, srvY), srvX, []serverObs{ro(srvX), w(srvY)}, set(srvX)},
		{"split brain: both retired", set(srvY), srvX, []serverObs{w(srvX), w(srvY)}, set(srvX, srvY)},
		{"the split ends: the one left writable is used again", set(srvX, srvY), srvX, []serverObs{w(srvX), ro(srvY)}, set(srvY)},
		{"switched back: the former primary is the primary again", set(srvX), srvY, []serverObs{w(srvX), repl(srvY)}, set(srvY)},
		{"read-only from the start: nothing retired", set(), "", []serverObs{ro(srvX)}, set()},
		{"a retired server out of sight stays retired", set(srvZ), srvX, []serverObs{w(srvX)}, set(srvZ)},
		{"nothing reachable: as before", set(srvY), srvX, []serverObs{down(srvX), down(srvY)}, set(srvY)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.prev)
			got := retireAfter(tc.prev, tc.last, decide(tc.obs), tc.obs)
			if !sameSet(got, tc.want) {
				t.Fatalf("retired %s; want %s", setString(got), setString(tc.want))
			}
			if !sameSet(tc.prev, before) {
				t.Fatal("retireAfter changed its input")
			}
		})
	}
}

// The replication status of both servers' flavours: a thread running is
// replicating (a replica whose source is down keeps connecting), stopped
// threads are not, and the source is read from either's column names.
func TestReplicationOf(t *testing.T) {
	maria := &textResult{columns: []string{"Connection_name", "Master_Host", "Master_Port", "Slave_IO_Running", "Slave_SQL_Running", "Master_Server_Id"}}
	mysql := &textResult{columns: []string{"Source_Host", "Source_Port", "Replica_IO_Running", "Replica_SQL_Running", "Source_Server_Id"}}
	row := func(v ...string) [][]byte {
		out := make([][]byte, len(v))
		for i, s := range v {
			out[i] = []byte(s)
		}
		return out
	}
	for _, tc := range []struct {
		name     string
		r        *textResult
		rows     [][][]byte
		repl     bool
		num, src string
		linked   bool
	}{
		{"no source configured", maria, nil, false, "", "", false},
		{"running", maria, [][][]byte{row("", "10.0.0.1", "3306", "Yes", "Yes", "1")}, true, "1", "10.0.0.1:3306", true},
		{"source down: IO connecting", maria, [][][]byte{row("", "10.0.0.1", "3306", "Connecting", "Yes", "1")}, true, "1", "10.0.0.1:3306", false},
		{"stopped (STOP SLAVE without RESET)", maria, [][][]byte{row("", "10.0.0.1", "3306", "No", "No", "1")}, false, "", "", false},
		{"multi-source: the second runs", maria, [][][]byte{row("a", "h1", "1", "No", "No", "7"), row("b", "h2", "2", "Yes", "Yes", "8")}, true, "8", "h2:2", true},
		{"started, not connected yet: source not known", maria, [][][]byte{row("", "10.0.0.1", "3306", "Connecting", "Yes", "0")}, true, "", "10.0.0.1:3306", false},
		{"MySQL channel", mysql, [][][]byte{row("10.0.0.2", "3307", "Yes", "Yes", "2")}, true, "2", "10.0.0.2:3307", true},
	} {
		r := *tc.r
		r.rows = tc.rows
		got := replicationOf(&r)
		if got.replicating != tc.repl || got.num != tc.num || got.addr != tc.src || got.linked != tc.linked {
			t.Errorf("%s: %+v; want %v %q %q linked %v", tc.name, got, tc.repl, tc.num, tc.src, tc.linked)
		}
	}
}

// waitPrimary returns at once before the first check and while a primary
// is known; with none it waits until one is, or its context ends.
func TestWaitPrimary(t *testing.T) {
	tp := newTopology(time.Second)
	ctx := context.Background()
	if err := tp.waitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	tp.setPrimary(true)
	if err := tp.waitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	tp.setPrimary(false)
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := tp.waitPrimary(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("with no primary: %v, want the context's end", err)
	}
	done := make(chan error, 1)
	go func() { done <- tp.waitPrimary(ctx) }()
	time.Sleep(10 * time.Millisecond)
	tp.setPrimary(false) // still none: nothing happens
	tp.setPrimary(true)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiter was not woken when the primary became known")
	}
}

// A replica follows the primary by identity: its connected IO thread's
// source server_id; while it is not connected, its source's address, one
// the primary was reached at or the primary's own hostname:port. A server
// that replicates from no one, from a former primary or from another
// replica, or whose status cannot be read, does not.
func TestFollowsPrimary(t *testing.T) {
	p := serverObs{addr: "10.0.0.2:3306", reachable: true, id: "db-b:3306#2", serverNum: "2"}
	vip := serverObs{addr: "10.0.0.9:3306", fromName: true, reachable: true, id: "db-b:3306#2", serverNum: "2"}
	obs := []serverObs{vip, p}
	r := func(linked bool, num, src string) serverObs {
		return serverObs{addr: "10.0.0.3:3306", reachable: true, id: "db-c:3306#3", serverNum: "3", readOnly: true,
			replKnown: true, replicating: true, sourceLinked: linked, sourceNum: num, sourceAddr: src}
	}
	for _, tc := range []struct {
		name string
		o    serverObs
		want bool
	}{
		{"connected to the primary", r(true, "2", "db-b:3306"), true},
		{"connected to the primary through the VIP", r(true, "2", "10.0.0.9:3306"), true},
		{"connected to the former primary", r(true, "1", "10.0.0.1:3306"), false},
		{"connected to the former primary, which now sits behind the VIP's old address", r(true, "1", "10.0.0.9:3306"), false},
		{"connecting to the primary's address", r(false, "", "10.0.0.2:3306"), true},
		{"connecting to the VIP", r(false, "", "10.0.0.9:3306"), true},
		{"connecting to the primary's hostname:port", r(false, "", "DB-B:3306"), true},
		{"connecting to a retired server, server_id of the primary shown from before", r(false, "2", "10.0.0.1:3306"), false},
		{"connecting to an unknown source", r(false, "", ""), false},
		{"replicates from no one", serverObs{reachable: true, id: "db-a:3306#1", readOnly: true, replKnown: true}, false},
		{"status not readable (no grant)", serverObs{reachable: true, id: "db-a:3306#1", readOnly: true}, false},
	} {
		got, why := followsPrimary(tc.o, p, obs)
		if got != tc.want || (got == (why != "")) {
			t.Errorf("%s: %v (%q); want %v", tc.name, got, why, tc.want)
		}
	}
}

// With replicas configured, the addresses backend.address's name resolves
// to are replicas too (those not configured already); a name of one
// address (the primary's, or a VIP) or an address adds none.
func TestNameReplicas(t *testing.T) {
	lookup := func(host string) ([]string, error) {
		switch host {
		case "db-all":
			return []string{"10.0.0.3", "10.0.0.1", "10.0.0.2", "10.0.0.1"}, nil
		case "db-vip":
			return []string{"10.0.0.9"}, nil
		}
		return nil, errors.New("no such host")
	}
	for _, tc := range []struct {
		addr     string
		replicas []string
		want     []string
	}{
		{"db-all:3306", []string{"10.0.0.2:3306"}, []string{"10.0.0.1:3306", "10.0.0.3:3306"}},
		{"db-all:3306", nil, []string{"10.0.0.1:3306", "10.0.0.2:3306", "10.0.0.3:3306"}},
		{"db-vip:3306", []string{"10.0.0.2:3306"}, nil},
		{"10.0.0.9:3306", []string{"10.0.0.2:3306"}, nil},
		{"nowhere:3306", []string{"10.0.0.2:3306"}, nil},
	} {
		b := config.Backend{Address: tc.addr}
		for _, r := range tc.replicas {
			b.Replicas = append(b.Replicas, config.Replica{Address: r})
		}
		if got := nameReplicas(b, lookup); !slices.Equal(got, tc.want) {
			t.Errorf("%s with %v: %v; want %v", tc.addr, tc.replicas, got, tc.want)
		}
	}
}
