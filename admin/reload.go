package admin

import (
	"context"
	"net/http"
)

// ReloadResult is the answer of POST /api/reload: what reading the
// configuration file again did. It is the reload SIGHUP and the file
// watch (reload_watch) run.
type ReloadResult struct {
	// Reloaded: the file was read and applied, but for what Refused
	// lists. false: nothing was applied, and Error says why.
	Reloaded bool   `json:"reloaded"`
	File     string `json:"file"` // the configuration file ("": built-in defaults)
	// Changed are the settings whose value this reload changed, as
	// dotted paths ("pool.max", "users"); a secret by its path only.
	Changed []string `json:"changed"`
	// RestartRequired are the settings whose value in the file differs
	// from the one in force, which apply only after a restart.
	RestartRequired []string `json:"restart_required"`
	// Refused are the parts not applied, each with why.
	Refused []string `json:"refused"`
	Error   string   `json:"error,omitempty"`
}

// Reloader reads the configuration file again and applies it; by is who
// asked (a credential's name, "SIGHUP", "reload_watch"). Calls may come
// from any goroutine; the Reloader serializes them.
type Reloader func(ctx context.Context, by string) ReloadResult

// apiReload runs Options.Reload: 200 with what changed, 422 when the
// configuration was refused (nothing changed).
func (a *Admin) apiReload(w http.ResponseWriter, r *http.Request) {
	setBy, _ := author(r)
	res := a.o.Reload(r.Context(), setBy)
	for _, s := range []*[]string{&res.Changed, &res.RestartRequired, &res.Refused} {
		if *s == nil {
			*s = []string{}
		}
	}
	if !res.Reloaded {
		writeJSON(w, http.StatusUnprocessableEntity, res)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
