package admin

import (
	"net/http"

	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/controls"
)

// TopologyServer is what the topology's route and panel need of the
// server; *proxy.Server satisfies it. A Server without it serves neither.
type TopologyServer interface {
	// Topology is which server is the primary and each candidate's role
	// at the last check, with the statements held, retried and answered
	// 9010 (Topology.Failover).
	Topology() proxy.Topology
}

// topologyJSON is the answer of GET /api/topology and the status
// answer's topology: the server's view, the hold's settings, and the
// pauses in force.
type topologyJSON struct {
	proxy.Topology
	// Hold is failover.hold and failover.max_held in force; null when
	// Options.Failover is nil.
	Hold *holdJSON `json:"hold"`
	// Pauses are the pause controls in force on this instance, from
	// every source (a fleet's and this instance's own): the tags whose
	// new borrows wait. Empty: none.
	Pauses []proxy.ControlState `json:"pauses"`
}

// holdJSON is config.Failover as the API shows it.
type holdJSON struct {
	// Seconds is failover.hold: how long a statement is held before 9010
	// (0: not held, 9010 at once). MaxHeld is failover.max_held: the
	// statements held at once on this instance (0: none).
	Seconds float64 `json:"seconds"`
	MaxHeld int     `json:"max_held"`
}

// topologyOf is the server's topology, when it has one.
func (a *Admin) topologyOf() (topologyJSON, bool) {
	ts, ok := a.srv.(TopologyServer)
	if !ok {
		return topologyJSON{}, false
	}
	out := topologyJSON{Topology: ts.Topology(), Pauses: []proxy.ControlState{}}
	if a.o.Failover != nil {
		f := a.o.Failover()
		out.Hold = &holdJSON{Seconds: f.Hold.Seconds(), MaxHeld: f.MaxHeld}
	}
	for _, c := range a.srv.Controls() {
		if c.Kind == controls.PauseKind.Name {
			out.Pauses = append(out.Pauses, c)
		}
	}
	return out, true
}

// apiTopology answers GET /api/topology: the primary, each server's role,
// the servers retired, the switchovers seen, the statements held,
// retried and answered 9010, the hold's settings and the pauses in force.
func (a *Admin) apiTopology(w http.ResponseWriter, _ *http.Request) {
	t, ok := a.topologyOf()
	if !ok {
		writeError(w, http.StatusNotFound, "this holdfast does not check the topology")
		return
	}
	writeJSON(w, http.StatusOK, t)
}
