package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/proxy"
)

// GET /api/topology and the status page show the one server as the
// primary, with its identity and the address it was reached at; a write
// is refused on the read-only route's scope like every request.
func TestTopologyRoute(t *testing.T) {
	h := startHoldfast(t)
	addr := dbtest.Config(t).Addr
	var tp proxy.Topology
	deadline := time.Now().Add(20 * time.Second)
	for {
		h.get(t, "/api/topology", &tp)
		if tp.State == "primary" || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tp.State != "primary" || len(tp.PrimaryAddresses) != 1 || tp.PrimaryAddresses[0] != addr || !strings.Contains(tp.Primary, "#") {
		t.Fatalf("topology %+v: want %s the primary", tp, addr)
	}
	if len(tp.Servers) != 1 || tp.Servers[0].Role != "primary" || tp.Servers[0].Source != "backend.address" || tp.Servers[0].Retired || tp.Checks == 0 {
		t.Fatalf("servers %+v", tp.Servers)
	}
	var st struct {
		Topology *proxy.Topology `json:"topology"`
	}
	h.get(t, "/api/status", &st)
	if st.Topology == nil || st.Topology.State != "primary" {
		t.Fatalf("the status answer's topology: %+v", st.Topology)
	}
	if b := dbtest.Fetch(t, http.MethodGet, h.admin.URL+"/"); !strings.Contains(string(b), "card-topology") {
		t.Fatal("the status page has no topology panel")
	}
}

// topologyAnswer is the part of GET /api/topology the hold's test reads.
type topologyAnswer struct {
	State    string              `json:"state"`
	Failover proxy.FailoverStats `json:"failover"`
	Hold     *struct {
		Seconds float64 `json:"seconds"`
		MaxHeld int     `json:"max_held"`
	} `json:"hold"`
	Pauses []proxy.ControlState `json:"pauses"`
}

// A pause in force and the statement it holds show in GET /api/topology
// and the status answer: the pause, the statement held now, then, once
// the pause is lifted and the statement ran, the counts since start; and
// the hold's settings throughout.
func TestTopologyShowsHeldStatements(t *testing.T) {
	h := startHoldfast(t, func(c *config.Config) { c.Failover.Hold, c.Failover.MaxHeld = 30*time.Second, 7 })
	db := h.open(t)
	var tp topologyAnswer
	h.get(t, "/api/topology", &tp)
	if tp.Hold == nil || tp.Hold.Seconds != 30 || tp.Hold.MaxHeld != 7 || tp.Pauses == nil || len(tp.Pauses) != 0 || tp.Failover != (proxy.FailoverStats{}) {
		t.Fatalf("before a pause: %+v hold %+v", tp, tp.Hold)
	}
	h.call(t, http.MethodPut, "/api/tags/checkout/pause?local=1&reason=switchover")
	done := execAsync(db, "/* conn_tag:checkout */ SELECT 1")
	deadline := time.Now().Add(20 * time.Second)
	for h.get(t, "/api/topology", &tp); tp.Failover.HeldNow != 1; h.get(t, "/api/topology", &tp) {
		if time.Now().After(deadline) {
			t.Fatalf("the paused statement is not shown held: %+v", tp)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(tp.Pauses) != 1 || tp.Pauses[0].Tag != "checkout" || tp.Pauses[0].Reason != "switchover" || tp.Pauses[0].Source != "local" ||
		tp.Failover.Held != 1 || tp.Failover.PauseWaits != 1 {
		t.Fatalf("while paused: %+v", tp)
	}
	var st struct {
		Topology *topologyAnswer `json:"topology"`
	}
	h.get(t, "/api/status", &st)
	if st.Topology == nil || len(st.Topology.Pauses) != 1 || st.Topology.Failover.HeldNow != 1 || st.Topology.Hold == nil {
		t.Fatalf("the status answer's topology while paused: %+v", st.Topology)
	}
	h.call(t, http.MethodDelete, "/api/tags/checkout/pause?local=1")
	if err := <-done; err != nil {
		t.Fatalf("the held statement after the pause was lifted: %v", err)
	}
	h.get(t, "/api/topology", &tp)
	if len(tp.Pauses) != 0 || tp.Failover.HeldNow != 0 || tp.Failover.Held != 1 || tp.Failover.PauseWaits != 1 || tp.Failover.Refused != 0 ||
		tp.Failover.HeldSeconds <= 0 {
		t.Fatalf("after the pause: %+v", tp)
	}
}
