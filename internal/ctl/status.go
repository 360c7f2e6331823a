package ctl

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/holdfast-db/holdfast/internal/version"
)

// Status is the part of GET /api/status that holdfastctl status prints.
type Status struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Readiness struct {
		Ready bool     `json:"ready"`
		Unmet []string `json:"unmet"`
	} `json:"readiness"`
	Pool struct {
		Open    int `json:"open"`
		InUse   int `json:"in_use"`
		Max     int `json:"max"`
		Clients int `json:"clients"`
	} `json:"pool"`
	Fleet *struct { // nil: fleet.disabled
		Instance  string `json:"instance_id"`
		Instances int    `json:"instances"`
	} `json:"fleet"`
}

// Status returns the instance's build, readiness and pool (GET
// /api/status).
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	err := c.do(ctx, http.MethodGet, "/api/status", nil, &out, "version", "readiness")
	return out, err
}

// ReloadResult is the answer of POST /api/reload.
type ReloadResult struct {
	Reloaded        bool     `json:"reloaded"`
	File            string   `json:"file"`
	Changed         []string `json:"changed"`
	RestartRequired []string `json:"restart_required"`
	Refused         []string `json:"refused"`
}

// Reload makes holdfast read its configuration file again and apply it,
// as SIGHUP does (POST /api/reload). A file that does not load is an
// error (422) saying why; nothing changed then.
func (c *Client) Reload(ctx context.Context) (ReloadResult, error) {
	var out ReloadResult
	err := c.do(ctx, http.MethodPost, "/api/reload", nil, &out, "reloaded")
	return out, err
}

// Status prints which build the instance runs, whether it is ready (and
// if not, what it waits for), its place in the fleet and its pool.
func (c *CLI) Status(ctx context.Context) error {
	st, err := c.Client.Status(ctx)
	if err != nil {
		return err
	}
	w := c.Out
	commit := st.Commit
	if len(commit) > 12 {
		commit = commit[:12]
	}
	fmt.Fprintf(w, "holdfast %s (commit %s) at %s\n", clean(st.Version), clean(commit), c.Client.Addr())
	if st.Readiness.Ready {
		fmt.Fprintln(w, "ready")
	} else {
		unmet := make([]string, len(st.Readiness.Unmet))
		for i, u := range st.Readiness.Unmet {
			unmet[i] = clean(u)
		}
		fmt.Fprintf(w, "NOT READY: %s\n", strings.Join(unmet, "; "))
	}
	if st.Fleet == nil {
		fmt.Fprintln(w, "not part of a fleet (fleet.disabled)")
	} else {
		fmt.Fprintf(w, "instance %s, one of %s (holdfastctl fleet lists them with their versions)\n",
			clean(st.Fleet.Instance), plural(st.Fleet.Instances, "live instance"))
	}
	_, err = fmt.Fprintf(w, "pool: %d of %d in use, %d open; %s\nholdfastctl %s\n", st.Pool.InUse, st.Pool.Max, st.Pool.Open,
		plural(st.Pool.Clients, "client"), version.Get().Version)
	return err
}

// Reload prints what reloading the configuration changed.
func (c *CLI) Reload(ctx context.Context) error {
	r, err := c.Client.Reload(ctx)
	if err != nil {
		return err
	}
	list := func(ps []string) string {
		if len(ps) == 0 {
			return "none"
		}
		out := make([]string, len(ps))
		for i, p := range ps {
			out[i] = clean(p)
		}
		return strings.Join(out, ", ")
	}
	file := r.File
	if file == "" {
		file = "(no file: built-in defaults)"
	}
	fmt.Fprintf(c.Out, "reloaded %s\nchanged: %s\nwaiting for a restart: %s\n", clean(file), list(r.Changed), list(r.RestartRequired))
	if len(r.Refused) > 0 {
		_, err = fmt.Fprintf(c.Out, "NOT APPLIED: %s\n", list(r.Refused))
	}
	return err
}
