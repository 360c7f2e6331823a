package admin

import (
	"net/http"

	"github.com/holdfast-db/holdfast/proxy"
)

// TopologyServer is what the topology's route and panel need of the
// server; *proxy.Server satisfies it. A Server without it serves neither.
type TopologyServer interface {
	// Topology is which server is the primary and each candidate's role
	// at the last check.
	Topology() proxy.Topology
}

// topologyOf is the server's topology, when it has one.
func (a *Admin) topologyOf() (proxy.Topology, bool) {
	ts, ok := a.srv.(TopologyServer)
	if !ok {
		return proxy.Topology{}, false
	}
	return ts.Topology(), true
}

// apiTopology answers GET /api/topology: the primary, each server's role,
// the servers retired, and the switchovers seen.
func (a *Admin) apiTopology(w http.ResponseWriter, _ *http.Request) {
	t, ok := a.topologyOf()
	if !ok {
		writeError(w, http.StatusNotFound, "this holdfast does not check the topology")
		return
	}
	writeJSON(w, http.StatusOK, t)
}
