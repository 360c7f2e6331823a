package main

import (
	"sync/atomic"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/proxy"
)

// readiness is what /readyz answers (admin.ReadyPath). holdfast serve is
// ready when its client listener accepts, the backend has answered once
// since start, and the fleet's controls have been read and applied (not
// asked with fleet.disabled); it is unready from SIGTERM on.
//
// The backend condition is "answered once", not "reachable now", on
// purpose: holdfast runs inside the application's pod, and a pod is
// ready only when all its containers are. A readiness that followed the
// backend would take every pod of the application out of its Services
// at once on a database blip or failover, failing requests that need no
// database and leaving nowhere to send the rest, while holdfast itself
// rides the blip out (statements wait for the primary, bounded). That is
// also what users of PgBouncer and RDS Proxy expect of them: the proxy
// stays up and answers while the database fails over. A backend that is
// down now shows in the pool's metrics and GET /api/status.
type readiness struct {
	srv *proxy.Server
	// fleetRead is closed once the fleet's controls are read and
	// applied (fleet.Fleet.Read); nil with fleet.disabled.
	fleetRead <-chan struct{}
	stopping  atomic.Bool // SIGTERM (or SIGINT) received
}

// get is the readiness now; any goroutine may call it.
func (r *readiness) get() admin.Readiness {
	var unmet []string
	stopping := r.stopping.Load()
	if stopping {
		unmet = append(unmet, "stopping: holdfast is shutting down (SIGTERM)")
	}
	fr := r.srv.Readiness()
	if !fr.Listening && !stopping {
		unmet = append(unmet, "listen: the client listener does not accept connections yet")
	}
	if !fr.BackendAnswered {
		unmet = append(unmet, "backend: no backend connection has opened since start")
	}
	if r.fleetRead != nil {
		select {
		case <-r.fleetRead:
		default:
			unmet = append(unmet, "fleet: the fleet's controls have not been read yet")
		}
	}
	return admin.Readiness{Ready: len(unmet) == 0, Unmet: unmet}
}
