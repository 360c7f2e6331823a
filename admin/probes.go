package admin

import "net/http"

// The probe routes, for a kubelet, a load balancer or a supervisor: served
// on admin.listen outside the guard (no credential, on loopback or not,
// like the status page's shell), GET or HEAD. Their answers name the
// conditions unmet, never an error's text, an address or the version
// (those are in the log and GET /api/status, behind the guard).
const (
	// LivePath answers 200 whenever the admin listener answers: the
	// process serves. It does not depend on the backend, so a database
	// outage restarts nothing.
	LivePath = "/livez"
	// ReadyPath answers 200 when Options.Ready says the instance is
	// ready, else 503 with the conditions unmet.
	ReadyPath = "/readyz"
)

// Readiness is an instance's readiness, as ReadyPath answers it.
type Readiness struct {
	Ready bool `json:"ready"`
	// Unmet are the conditions not met, each a word and a sentence
	// ("backend: no backend connection has opened since start"); empty
	// when Ready.
	Unmet []string `json:"unmet"`
}

// probeJSON is the probes' answer.
type probeJSON struct {
	Status string   `json:"status"` // "ok", or "unready"
	Unmet  []string `json:"unmet,omitempty"`
}

func (a *Admin) probeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+LivePath, a.serveLive)
	mux.HandleFunc("GET "+ReadyPath, a.serveReady)
}

func (a *Admin) serveLive(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, probeJSON{Status: "ok"})
}

func (a *Admin) serveReady(w http.ResponseWriter, _ *http.Request) {
	rd := a.readiness()
	if !rd.Ready {
		writeJSON(w, http.StatusServiceUnavailable, probeJSON{Status: "unready", Unmet: rd.Unmet})
		return
	}
	writeJSON(w, http.StatusOK, probeJSON{Status: "ok"})
}

// readiness is Options.Ready's answer (ready when it is nil), with Unmet
// never nil.
func (a *Admin) readiness() Readiness {
	rd := Readiness{Ready: true}
	if a.o.Ready != nil {
		rd = a.o.Ready()
	}
	if rd.Unmet == nil {
		rd.Unmet = []string{}
	}
	return rd
}
