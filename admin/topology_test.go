package admin_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

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
