package admin

import (
	"net/http"
	"strings"

	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/controls"
)

// Controls of every kind (package controls declares them), through one
// pair of routes, for the whole fleet unless local=1:
//
//	PUT    /api/tags/{tag}/{kind}?value=V&reason=...&for=30m&by=name
//	DELETE /api/tags/{tag}/{kind}
//
// {tag} is a tag, or a pattern for a kind that takes one. A kind without
// a value takes no value=. The kinds older than these routes keep theirs
// (drain, limit, max_transaction_time, class, route, and the shapes'), and
// are not set through them: their parameters differ.

// ownRoutes are the kinds with routes of their own, and the path they are
// lifted by (DELETE), "{tag}" standing for the tag.
var ownRoutes = map[string]string{
	"drain":   "/api/tags/{tag}/drain",
	"limit":   "/api/tags/{tag}/limit",
	"max_txn": "/api/tags/{tag}/max_transaction_time",
	"class":   "/api/tags/{tag}/class",
	"route":   "/api/tags/{tag}/route",
}

// liftPath is where a control of kind on key is lifted (DELETE).
func liftPath(kind, key string) string {
	if h, ok := strings.CutPrefix(key, proxy.ShapePrefix); ok {
		what := "limit"
		if kind == "drain" {
			what = "block"
		}
		return "/api/shapes/" + h + "/" + what
	}
	p, ok := ownRoutes[kind]
	if !ok {
		p = "/api/tags/{tag}/" + kind
	}
	return strings.Replace(p, "{tag}", escapePath(key), 1)
}

// escapePath writes a tag or pattern as one path segment.
func escapePath(s string) string { return strings.ReplaceAll(s, "*", "%2A") }

// controlKind reads the {kind} of a control route: a kind without routes
// of its own.
func controlKind(w http.ResponseWriter, r *http.Request) (*controls.Kind, bool) {
	name := r.PathValue("kind")
	k := controls.KindNamed(name)
	if k == nil {
		writeError(w, http.StatusNotFound, "no such request: %s %s: %q is not a kind of control (kinds: %s; README.md, \"Admin API\", lists the requests)",
			r.Method, r.URL.Path, name, controls.KindNames())
		return nil, false
	}
	if p, own := ownRoutes[k.Name]; own {
		writeError(w, http.StatusNotFound, "no such request: %s %s: a %s is set and lifted through %s", r.Method, r.URL.Path, k.Name, p)
		return nil, false
	}
	return k, true
}

// controlKey reads the {tag} of a control route: a tag, or a pattern for
// a kind that takes one.
func controlKey(w http.ResponseWriter, r *http.Request, k *controls.Kind) (string, bool) {
	if k.Pattern {
		return patternParam(w, r)
	}
	return tagParam(w, r)
}

// apiSetControl puts a control of any kind in force.
func (a *Admin) apiSetControl(w http.ResponseWriter, r *http.Request) {
	k, ok := controlKind(w, r)
	if !ok {
		return
	}
	key, ok := controlKey(w, r, k)
	if !ok {
		return
	}
	v, err := k.ParseValue(key, r.URL.Query().Get("value"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "value: %v (nothing changed)", err)
		return
	}
	fleetWide, scope, exp, ok := a.scopeFor(w, r)
	if !ok {
		return
	}
	reason := r.URL.Query().Get("reason")
	if fleetWide {
		if !a.setFleet(w, r, fleet.Control{Tag: key, Kind: fleet.Kind(k.Name), Value: v, Reason: reason}, exp) {
			return
		}
	} else {
		setBy, _ := author(r)
		if err := a.srv.SetControl(k.Name, key, v, reason, setBy); err != nil {
			writeError(w, http.StatusBadRequest, "%v (nothing changed)", err)
			return
		}
	}
	a.o.Log.Warn("admin: control set", "kind", k.Name, "tag", key, "value", k.ShowValue(v), "reason", reason, "for", exp,
		"scope", scope, "remote", r.RemoteAddr, "by", by(r))
	a.controlAnswer(w, r, k, key, scope, map[string]any{"value": v, "shown": k.ShowValue(v), "expires_in_seconds": rounded(exp.Seconds())})
}

// apiLiftControl lifts a control of any kind.
func (a *Admin) apiLiftControl(w http.ResponseWriter, r *http.Request) {
	k, ok := controlKind(w, r)
	if !ok {
		return
	}
	key, ok := controlKey(w, r, k)
	if !ok {
		return
	}
	fleetWide, scope := a.scope(r)
	if fleetWide {
		if _, ok := a.removeFleet(w, r, key, fleet.Kind(k.Name)); !ok {
			return
		}
	} else if err := a.srv.LiftControl(k.Name, key); err != nil {
		writeError(w, http.StatusBadRequest, "%v (nothing changed)", err)
		return
	}
	a.o.Log.Warn("admin: control lifted", "kind", k.Name, "tag", key, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	a.controlAnswer(w, r, k, key, scope, map[string]any{})
}

// controlAnswer answers a change with what holds for key here now (a
// local control may lose to the fleet's; the fleet's change was read back
// before this answer): in_force_here, and here_now, its value as shown.
func (a *Admin) controlAnswer(w http.ResponseWriter, r *http.Request, k *controls.Kind, key, scope string, ans map[string]any) {
	ans["tag"], ans["kind"], ans["scope"] = key, k.Name, scope
	c, ok := a.srv.ControlOf(k.Name, key)
	ans["in_force_here"], ans["here_now"] = ok, ""
	if ok {
		ans["here_now"] = c.Shown
	}
	writeJSON(w, http.StatusOK, changed(r, ans))
}

// controlJSON is a fleet control as the admin API answers it: with its
// value as on-call reads it (shown; "" for a kind this version does not
// know).
type controlJSON struct {
	fleet.Control
	Shown string `json:"shown,omitempty"`
}

func controlsJSON(cs []fleet.Control) []controlJSON {
	out := make([]controlJSON, len(cs))
	for i, c := range cs {
		out[i].Control = c
		if k := controls.KindNamed(string(c.Kind)); k != nil {
			out[i].Shown = k.ShowValue(c.Value)
		}
	}
	return out
}

// hereJSON is a control in force on this instance, from any source, and
// where it is lifted.
type hereJSON struct {
	proxy.ControlState
	Lift string `json:"lift"` // DELETE this path (with local=1 for a local one)
}

func (a *Admin) hereJSON() []hereJSON {
	cs := a.srv.Controls()
	out := make([]hereJSON, len(cs))
	for i, c := range cs {
		out[i] = hereJSON{ControlState: c, Lift: liftPath(c.Kind, c.Tag)}
	}
	return out
}
