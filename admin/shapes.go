package admin

import (
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/proxy"
)

// Controls on statement shapes: on-call finds a runaway statement's shape
// in the holders view (GET /api/holders, GET /api/shapes, holdfastctl
// shapes) and blocks or caps it, for the whole fleet unless local=1, with
// for=DUR to lift it by itself:
//
//	PUT    /api/shapes/{shape}/block?reason=...&for=30m
//	DELETE /api/shapes/{shape}/block
//	PUT    /api/shapes/{shape}/limit?max=N&reason=...&for=30m
//	DELETE /api/shapes/{shape}/limit
//
// The controls are kept as the tags' are, under the key "shape/{shape}".

// shapeParam reads the {shape} path value as a control key.
func shapeParam(w http.ResponseWriter, r *http.Request) (key, shape string, ok bool) {
	h, ok := proxy.ParseShape(strings.ToLower(r.PathValue("shape")))
	if !ok {
		writeError(w, http.StatusBadRequest, "%q is not a statement shape: want the 16 hex digits the holders view shows", r.PathValue("shape"))
		return "", "", false
	}
	return proxy.ShapeKey(h), proxy.FormatShape(h), true
}

func (a *Admin) apiShapeBlock(w http.ResponseWriter, r *http.Request) {
	key, shape, ok := shapeParam(w, r)
	if !ok {
		return
	}
	reason := r.URL.Query().Get("reason")
	fleetWide, scope, exp, ok := a.scopeFor(w, r)
	if !ok {
		return
	}
	if fleetWide {
		if !a.setFleet(w, r, fleet.Control{Tag: key, Kind: fleet.KindDrain, Reason: reason}, exp) {
			return
		}
	} else {
		a.srv.DrainTag(key, reason, 0)
	}
	a.o.Log.Warn("admin: statement shape blocked", "shape", shape, "reason", reason, "for", exp, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	writeJSON(w, http.StatusOK, changed(r, map[string]any{"shape": shape, "blocked": a.inForce(key).Drained, "scope": scope,
		"expires_in_seconds": rounded(exp.Seconds())}))
}

func (a *Admin) apiShapeUnblock(w http.ResponseWriter, r *http.Request) {
	key, shape, ok := shapeParam(w, r)
	if !ok {
		return
	}
	fleetWide, scope := a.scope(r)
	if fleetWide {
		if _, ok := a.removeFleet(w, r, key, fleet.KindDrain); !ok {
			return
		}
	} else {
		a.srv.UndrainTag(key)
	}
	a.o.Log.Warn("admin: statement shape unblocked", "shape", shape, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	writeJSON(w, http.StatusOK, changed(r, map[string]any{"shape": shape, "blocked": a.inForce(key).Drained, "scope": scope}))
}

func (a *Admin) apiShapeLimit(w http.ResponseWriter, r *http.Request) {
	key, shape, ok := shapeParam(w, r)
	if !ok {
		return
	}
	v := r.URL.Query().Get("max")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, "max: want a number of statements running at once (0 lifts the cap), got %q", v)
		return
	}
	a.setShapeLimit(w, r, key, shape, n)
}

func (a *Admin) apiShapeUnlimit(w http.ResponseWriter, r *http.Request) {
	if key, shape, ok := shapeParam(w, r); ok {
		a.setShapeLimit(w, r, key, shape, 0)
	}
}

func (a *Admin) setShapeLimit(w http.ResponseWriter, r *http.Request, key, shape string, n int) {
	a.setCap(w, r, key, n, r.URL.Query().Get("reason"), capped{field: "shape", name: shape, noun: "statement shape cap"})
}

// shapeJSON is one statement shape: the statements of it held now, and
// the controls on it in force here.
type shapeJSON struct {
	Shape       string   `json:"shape"`
	Statement   string   `json:"statement"` // the digest of one of its statements
	Holders     int      `json:"holders"`   // connections held now whose current or last statement has it
	LongestHeld float64  `json:"longest_held_seconds"`
	Tags        []string `json:"tags"`
	Blocked     bool     `json:"blocked"`
	Limited     bool     `json:"limited"`
	Limit       int      `json:"limit"`                 // in force here: this instance's share of a fleet cap
	FleetLimit  *int     `json:"fleet_limit,omitempty"` // the fleet-wide cap (absent: limit is this instance's own)
	Running     int      `json:"running"`               // under its cap
}

// apiShapes lists the shapes of the statements held now, most held
// first, and the shapes with a control in force here.
func (a *Admin) apiShapes(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"shapes": shapesNow(a.srv.Holders(), a.srv.Gates())})
}

func shapesNow(hs []proxy.HolderInfo, gs []proxy.GateState) []shapeJSON {
	by := map[string]*shapeJSON{}
	get := func(shape string) *shapeJSON {
		s := by[shape]
		if s == nil {
			s = &shapeJSON{Shape: shape, Tags: []string{}}
			by[shape] = s
		}
		return s
	}
	for _, h := range hs {
		if h.Shape == "" {
			continue
		}
		s := get(h.Shape)
		s.Holders++
		s.LongestHeld = max(s.LongestHeld, h.HeldFor)
		if s.Statement == "" {
			s.Statement = h.Statement
		}
		if !slices.Contains(s.Tags, h.Tag) {
			s.Tags = append(s.Tags, h.Tag)
		}
	}
	for _, g := range gs {
		if !proxy.IsShapeKey(g.Tag) {
			continue
		}
		s := get(strings.TrimPrefix(g.Tag, proxy.ShapePrefix))
		s.Blocked, s.Limited, s.Limit, s.Running = g.Drained, g.Limited, g.Limit, g.InUse
		if g.Fleet {
			s.FleetLimit = &g.FleetLimit
		}
	}
	out := make([]shapeJSON, 0, len(by))
	for _, s := range by {
		slices.Sort(s.Tags)
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y shapeJSON) int {
		if x.Holders != y.Holders {
			return y.Holders - x.Holders
		}
		return strings.Compare(x.Shape, y.Shape)
	})
	return out
}
