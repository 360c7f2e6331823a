package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/controls"
)

// The admin API's JSON answers (README.md, "Admin API"). Field names are
// a contract with holdfastctl (internal/ctl) and with users' scripts.

// rounded is a number written with three decimals: an age or a span in
// seconds to the millisecond (1.750, not 1.7504622699999999), shares and
// rates likewise.
type rounded float64

func (r rounded) MarshalJSON() ([]byte, error) {
	v := float64(r)
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	if v > -0.0005 && v < 0.0005 {
		return []byte("0"), nil
	}
	return strconv.AppendFloat(nil, v, 'f', 3, 64), nil
}

// total is a sum of seconds, written to the microsecond (shortest form):
// counters that clients subtract from one another to get rates over a few
// seconds keep their precision, without float noise.
type total float64

func (t total) MarshalJSON() ([]byte, error) {
	v := math.Round(float64(t)*1e6) / 1e6
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return strconv.AppendFloat(nil, v, 'f', -1, 64), nil
}

type tagJSON struct {
	Tag              string `json:"tag"`
	HoldSeconds      total  `json:"hold_seconds"`
	ExecSeconds      total  `json:"exec_seconds"`
	IdleInTxnSeconds total  `json:"idle_in_transaction_seconds"`
	WaitSeconds      total  `json:"wait_seconds"`
	Borrows          uint64 `json:"borrows"`
	Statements       uint64 `json:"statements"`
	Errors           uint64 `json:"errors"`
	Transactions     uint64 `json:"transactions"`
	SlowTransactions uint64 `json:"slow_transactions"`
	HeldNow          int    `json:"held_now"`
	Drained          bool   `json:"drained"`
	Limit            int    `json:"limit"`
}

type holderJSON struct {
	ClientID      uint32  `json:"client_id"`
	User          string  `json:"user"`
	Tag           string  `json:"tag"`
	HeldFor       rounded `json:"held_for_seconds"`
	InTransaction bool    `json:"in_transaction"`
	Statement     string  `json:"statement"`
	Shape         string  `json:"shape,omitempty"` // the statement's shape (GET /api/shapes)
}

type gateJSON struct {
	Tag         string    `json:"tag"`
	Drained     bool      `json:"drained"`
	DrainedAt   time.Time `json:"drained_at,omitzero"`
	Reason      string    `json:"reason,omitempty"` // the drain's
	Limit       int       `json:"limit"`            // the limit in force here (with limited)
	Limited     bool      `json:"limited"`          // a limit is in force (limit 0 then admits no one)
	LimitReason string    `json:"limit_reason,omitempty"`
	// FleetLimit is the fleet-wide cap limit is this instance's share of
	// now (absent: limit is this instance's own); Grants are every live
	// instance's grant of it, demand (held plus queued, at its last
	// renewal) and fair share, as this instance last read them.
	FleetLimit *int          `json:"fleet_limit,omitempty"`
	Grants     []fleet.Grant `json:"grants,omitempty"`
	InUse      int           `json:"in_use"`  // connections the tag holds now
	Waiting    int           `json:"waiting"` // borrowers queued under its limit
	// MaxTransactionSeconds is the tag's own max_transaction_time (0: none).
	MaxTransactionSeconds float64 `json:"max_transaction_seconds,omitempty"`
}

type poolJSON struct {
	Open            int               `json:"open"`
	InUse           int               `json:"in_use"`
	Idle            int               `json:"idle"`
	Waiting         int               `json:"waiting"` // the sum of the three below
	WaitingPool     int               `json:"waiting_pool"`
	WaitingTagLimit int               `json:"waiting_tag_limit"`
	WaitingPipeline int               `json:"waiting_pipeline"`
	Max             int               `json:"max"`
	Acquired        uint64            `json:"acquired"`
	Waited          uint64            `json:"waited"`
	WaitSeconds     total             `json:"wait_seconds"`
	Timeouts        uint64            `json:"timeouts"`
	Rejected        uint64            `json:"rejected"`
	Dials           uint64            `json:"dials"`
	DialErrors      uint64            `json:"dial_errors"`
	Clients         int               `json:"clients"`
	PinnedSessions  int               `json:"pinned_sessions"`
	Pins            map[string]uint64 `json:"pins"`
	Pipelined       uint64            `json:"pipelined"`
}

func tagsJSON(ts []proxy.TagInfo) []tagJSON {
	out := make([]tagJSON, len(ts))
	for i, t := range ts {
		out[i] = tagJSON{Tag: t.Tag, HoldSeconds: total(t.HoldSeconds), ExecSeconds: total(t.ExecSeconds),
			IdleInTxnSeconds: total(t.IdleInTxnSeconds), WaitSeconds: total(t.WaitSeconds), Borrows: t.Borrows,
			Statements: t.Statements, Errors: t.Errors, Transactions: t.Transactions,
			SlowTransactions: t.SlowTransactions, HeldNow: t.HeldNow, Drained: t.Drained, Limit: t.Limit}
	}
	return out
}

func holdersJSON(hs []proxy.HolderInfo) []holderJSON {
	out := make([]holderJSON, len(hs))
	for i, h := range hs {
		out[i] = holderJSON{ClientID: h.ClientID, User: h.User, Tag: h.Tag, HeldFor: rounded(h.HeldFor),
			InTransaction: h.InTransaction, Statement: h.Statement, Shape: h.Shape}
	}
	return out
}

func (a *Admin) gatesJSON(gs []proxy.GateState, w proxy.Waiting) []gateJSON {
	out := make([]gateJSON, len(gs))
	// A fleet cap's reason is in its control, the same on every instance;
	// its split among the instances in the fleet's last renewal.
	fleetReasons := map[string]string{}
	grants := map[string][]fleet.Grant{}
	if a.o.Fleet != nil {
		st := a.o.Fleet.Status()
		for _, c := range st.Controls {
			if c.Kind == fleet.KindLimit {
				fleetReasons[c.Tag] = c.Reason
			}
		}
		for _, c := range st.Caps {
			grants[c.Tag] = c.Grants
		}
	}
	for i, g := range gs {
		out[i] = gateJSON{Tag: g.Tag, Drained: g.Drained, DrainedAt: g.DrainedAt, Reason: g.Reason, Limit: g.Limit, Limited: g.Limited,
			InUse: g.InUse, Waiting: w.ByTag[g.Tag], MaxTransactionSeconds: g.MaxTransactionTime.Seconds()}
		if !g.Limited {
			continue
		}
		if g.Fleet {
			out[i].FleetLimit, out[i].Grants = &g.FleetLimit, grants[g.Tag]
		}
		if r, ok := fleetReasons[g.Tag]; ok {
			out[i].LimitReason = r
		} else {
			out[i].LimitReason = a.limits.get(g.Tag)
		}
	}
	return out
}

func poolAnswer(st proxy.ServerStats, w proxy.Waiting) poolJSON {
	p := st.Pool
	return poolJSON{Open: p.Open, InUse: p.InUse, Idle: p.Idle, Waiting: w.Total(), WaitingPool: w.Pool,
		WaitingTagLimit: w.TagLimit, WaitingPipeline: w.Pipeline, Max: p.Max, Acquired: p.Acquired,
		Waited: p.Waited, WaitSeconds: total(p.WaitTime.Seconds()), Timeouts: p.Timeouts, Rejected: p.Rejected,
		Dials: p.Dials, DialErrors: p.DialErrors, Clients: st.ClientsActive, PinnedSessions: st.PinnedSessions,
		Pins: st.Pins, Pipelined: st.Pipelined}
}

func (a *Admin) apiTags(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"tags": tagsJSON(a.srv.Tags()), "folded": a.srv.TagsFolded()})
}

func (a *Admin) apiHolders(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"holders": holdersJSON(a.srv.Holders())})
}

// apiReplicas lists backend.replicas: in service or why not, lag, GTID
// position, reads routed and fallen back, connections.
func (a *Admin) apiReplicas(w http.ResponseWriter, _ *http.Request) {
	rs := a.srv.Replicas()
	if rs == nil {
		rs = []proxy.ReplicaState{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"replicas": rs})
}

func (a *Admin) apiPool(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, poolAnswer(a.srv.Stats(), a.srv.Waiting()))
}

func (a *Admin) apiGates(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"gates": a.gatesJSON(a.srv.Gates(), a.srv.Waiting())})
}

// Controls are set for the whole fleet (Options.Fleet) unless the request
// says local=1, or the fleet's tables are missing (then for this instance,
// and the answer says so). for=DUR lifts a fleet control that long after,
// by the database's clock. Every answer reports the tag's controls in force
// on this instance after the change, and where the change went (scope).

// scope decides where a control change goes: "fleet", or "local" with why.
func (a *Admin) scope(r *http.Request) (fleetWide bool, note string) {
	switch {
	case r.URL.Query().Get("local") == "1" || r.URL.Query().Get("local") == "true":
		return false, "local (this instance only, as asked)"
	case a.o.Fleet == nil:
		return false, "local (this holdfast shares no controls: fleet.disabled)"
	case a.o.Fleet.Status().NoSchema:
		return false, "local (the fleet's tables are missing: run `holdfast migrate`; set on this instance only)"
	}
	return true, "fleet"
}

// scopeFor is scope with for=DUR read (0: none). Only fleet controls
// expire: for= with a local scope is refused (400) rather than ignored.
func (a *Admin) scopeFor(w http.ResponseWriter, r *http.Request) (fleetWide bool, scope string, exp time.Duration, ok bool) {
	fleetWide, scope = a.scope(r)
	v := r.URL.Query().Get("for")
	if v == "" {
		return fleetWide, scope, 0, true
	}
	d, err := time.ParseDuration(v)
	switch {
	case err != nil || d <= 0:
		writeError(w, http.StatusBadRequest, "for: want a positive duration such as 30m, got %q", v)
		return false, "", 0, false
	case !fleetWide:
		writeError(w, http.StatusBadRequest, "for: only the fleet's controls expire, and this change is %s; lift it by hand instead (nothing changed)", scope)
		return false, "", 0, false
	}
	return fleetWide, scope, d, true
}

// by is who made a change, for its log line (see author).
func by(r *http.Request) string {
	setBy, _ := author(r)
	return setBy
}

// setFleet writes a fleet control. It answers 400 for a control that
// makes no sense and 503 when the write failed: nothing was changed when
// the fleet's tables are missing, else the write may or may not have
// reached the table, and the answer says how to find out.
func (a *Admin) setFleet(w http.ResponseWriter, r *http.Request, c fleet.Control, expires time.Duration) bool {
	c.SetBy, _ = author(r)
	if err := a.o.Fleet.Set(r.Context(), c, expires); err != nil {
		a.fleetWriteFailed(w, "set", c.Kind, c.Tag, err)
		return false
	}
	return true
}

// removeFleet lifts a fleet control (see setFleet for its failures).
func (a *Admin) removeFleet(w http.ResponseWriter, r *http.Request, tag string, kind fleet.Kind) (bool, bool) {
	had, err := a.o.Fleet.Remove(r.Context(), tag, kind)
	if err != nil {
		a.fleetWriteFailed(w, "lifted", kind, tag, err)
		return false, false
	}
	return had, true
}

func (a *Admin) fleetWriteFailed(w http.ResponseWriter, did string, kind fleet.Kind, tag string, err error) {
	switch {
	case errors.Is(err, fleet.ErrInvalid):
		writeError(w, http.StatusBadRequest, "the %s of %s was not %s: %v (nothing changed)", kind, tag, did, err)
	case errors.Is(err, fleet.ErrNoSchema):
		writeError(w, http.StatusServiceUnavailable, "the %s of %s was not %s: %v (nothing changed; local=1 acts on this instance only)", kind, tag, did, err)
	default:
		writeError(w, http.StatusServiceUnavailable, "the %s of %s may not have been %s: %v (GET /api/controls or holdfastctl controls shows whether it was; local=1 acts on this instance only)", kind, tag, did, err)
	}
}

// inForce is tag's gate on this instance now (the zero GateState when it
// has no control).
func (a *Admin) inForce(tag string) proxy.GateState {
	for _, g := range a.srv.Gates() {
		if g.Tag == tag {
			return g
		}
	}
	return proxy.GateState{Tag: tag}
}

func (a *Admin) apiDrain(w http.ResponseWriter, r *http.Request) {
	tag, ok := tagParam(w, r)
	if !ok {
		return
	}
	var grace time.Duration
	if v := r.URL.Query().Get("grace"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, "grace: want a duration such as 30s, got %q", v)
			return
		}
		grace = d
	}
	reason := r.URL.Query().Get("reason")
	fleetWide, scope, exp, ok := a.scopeFor(w, r)
	if !ok {
		return
	}
	if fleetWide {
		if !a.setFleet(w, r, fleet.Control{Tag: tag, Kind: fleet.KindDrain, Value: grace.Milliseconds(), Reason: reason}, exp) {
			return
		}
	} else {
		a.srv.DrainTag(tag, reason, grace)
	}
	a.o.Log.Warn("admin: tag drained", "tag", tag, "reason", reason, "grace", grace, "for", exp, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	g := a.inForce(tag)
	writeJSON(w, http.StatusOK, changed(r, map[string]any{"tag": tag, "drained": g.Drained, "grace_seconds": rounded(grace.Seconds()),
		"scope": scope, "expires_in_seconds": rounded(exp.Seconds())}))
}

func (a *Admin) apiUndrain(w http.ResponseWriter, r *http.Request) {
	tag, ok := tagParam(w, r)
	if !ok {
		return
	}
	fleetWide, scope := a.scope(r)
	if fleetWide {
		if _, ok := a.removeFleet(w, r, tag, fleet.KindDrain); !ok {
			return
		}
	} else {
		a.srv.UndrainTag(tag)
	}
	a.o.Log.Warn("admin: tag undrained", "tag", tag, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	// Still drained here when another source drains it (this instance's
	// local drain, or its configuration's): the answer says so.
	writeJSON(w, http.StatusOK, changed(r, map[string]any{"tag": tag, "drained": a.inForce(tag).Drained, "scope": scope}))
}

func (a *Admin) apiLimit(w http.ResponseWriter, r *http.Request) {
	tag, ok := tagParam(w, r)
	if !ok {
		return
	}
	v := r.URL.Query().Get("max")
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, "max: want a connection count (0 lifts the limit), got %q", v)
		return
	}
	a.setLimit(w, r, tag, n, r.URL.Query().Get("reason"))
}

// apiMaxTxn bounds how long a transaction of the tag may hold its backend
// connection: PUT /api/tags/{tag}/max_transaction_time?max=2s.
func (a *Admin) apiMaxTxn(w http.ResponseWriter, r *http.Request) {
	tag, ok := tagParam(w, r)
	if !ok {
		return
	}
	v := r.URL.Query().Get("max")
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		writeError(w, http.StatusBadRequest, "max: want a duration such as 2s (0 lifts the tag's bound), got %q", v)
		return
	}
	a.setMaxTxn(w, r, tag, d)
}

func (a *Admin) apiUnMaxTxn(w http.ResponseWriter, r *http.Request) {
	if tag, ok := tagParam(w, r); ok {
		a.setMaxTxn(w, r, tag, 0)
	}
}

func (a *Admin) setMaxTxn(w http.ResponseWriter, r *http.Request, tag string, d time.Duration) {
	fleetWide, scope, exp, ok := a.scopeFor(w, r)
	if !ok {
		return
	}
	switch {
	case fleetWide && d == 0:
		if _, ok := a.removeFleet(w, r, tag, fleet.KindMaxTxn); !ok {
			return
		}
	case fleetWide:
		c := fleet.Control{Tag: tag, Kind: fleet.KindMaxTxn, Value: max(1, d.Milliseconds()), Reason: r.URL.Query().Get("reason")}
		if !a.setFleet(w, r, c, exp) {
			return
		}
	default:
		a.srv.SetMaxTransactionTime(tag, d)
	}
	if d == 0 {
		a.o.Log.Warn("admin: tag max_transaction_time lifted", "tag", tag, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	} else {
		a.o.Log.Warn("admin: tag max_transaction_time set", "tag", tag, "max", d, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	}
	writeJSON(w, http.StatusOK, changed(r, map[string]any{"tag": tag, "max_transaction_seconds": a.inForce(tag).MaxTransactionTime.Seconds(), "scope": scope}))
}

// Controls on a tag or a pattern of tags (* for any run of characters):
// an overload class and a routing policy. Both are set and lifted alike.
type patternControl struct {
	kind  fleet.Kind
	param string // the query parameter naming the value: "class", "policy"
	word  string // the answer's and the log's word: "class", "route"
	want  string // the values, for a refusal
	value func(name string) (int64, bool)
	// setLocal sets the value on this instance ("" lifts it); a refusal
	// is answered with status.
	setLocal func(pattern, name string) error
	status   int
	hereNow  func(tag string) string // what holds for tag here now
}

func (a *Admin) classControl() patternControl {
	return patternControl{kind: fleet.KindClass, param: "class", word: "class", want: "critical, normal or background",
		value: kindValue(controls.ClassKind), setLocal: a.srv.SetTagClass, status: http.StatusBadRequest, hereNow: a.srv.ClassOf}
}

func (a *Admin) routeControl() patternControl {
	return patternControl{kind: fleet.KindRoute, param: "policy", word: "route", want: "primary, replica or replica_stale_ok",
		value: kindValue(controls.RouteKind), setLocal: a.srv.SetTagRoute, status: http.StatusConflict, hereNow: a.srv.RouteOf}
}

// kindValue reads a value of kind k as on-call names it.
func kindValue(k *controls.Kind) func(string) (int64, bool) {
	return func(name string) (int64, bool) {
		v, err := k.Parse(name)
		return v, err == nil
	}
}

// apiClass puts a tag, or the tags matching a pattern, in an overload
// class: PUT /api/tags/{tag}/class?class=critical.
func (a *Admin) apiClass(w http.ResponseWriter, r *http.Request) {
	a.setPatternFrom(w, r, a.classControl())
}

func (a *Admin) apiUnclass(w http.ResponseWriter, r *http.Request) {
	if pat, ok := patternParam(w, r); ok {
		a.setPattern(w, r, a.classControl(), pat, "", -1)
	}
}

// apiRoute gives a tag, or the tags matching a pattern, a routing policy
// for reads on replicas: PUT /api/tags/{tag}/route?policy=replica.
func (a *Admin) apiRoute(w http.ResponseWriter, r *http.Request) {
	a.setPatternFrom(w, r, a.routeControl())
}

func (a *Admin) apiUnroute(w http.ResponseWriter, r *http.Request) {
	if pat, ok := patternParam(w, r); ok {
		a.setPattern(w, r, a.routeControl(), pat, "", -1)
	}
}

// setPatternFrom reads the pattern and the value of a PUT and sets it.
func (a *Admin) setPatternFrom(w http.ResponseWriter, r *http.Request, pc patternControl) {
	pat, ok := patternParam(w, r)
	if !ok {
		return
	}
	name := r.URL.Query().Get(pc.param)
	v, ok := pc.value(name)
	if !ok {
		writeError(w, http.StatusBadRequest, "%s: want %s, got %q", pc.param, pc.want, name)
		return
	}
	a.setPattern(w, r, pc, pat, name, v)
}

// setPattern sets (v >= 0) or lifts (v < 0) a pattern control, for the
// fleet or this instance.
func (a *Admin) setPattern(w http.ResponseWriter, r *http.Request, pc patternControl, pat, name string, v int64) {
	fleetWide, scope, exp, ok := a.scopeFor(w, r)
	if !ok {
		return
	}
	switch {
	case fleetWide && v < 0:
		if _, ok := a.removeFleet(w, r, pat, pc.kind); !ok {
			return
		}
	case fleetWide:
		if !a.setFleet(w, r, fleet.Control{Tag: pat, Kind: pc.kind, Value: v, Reason: r.URL.Query().Get("reason")}, exp) {
			return
		}
	default:
		if err := pc.setLocal(pat, name); err != nil {
			writeError(w, pc.status, "%v (nothing changed)", err)
			return
		}
	}
	if v < 0 {
		a.o.Log.Warn("admin: tag "+pc.word+" lifted", "tag", pat, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	} else {
		a.o.Log.Warn("admin: tag "+pc.word+" set", "tag", pat, pc.word, name, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	}
	// What was asked, and what holds here now (a local value loses to the
	// fleet's; a fleet change was read back before this answer).
	writeJSON(w, http.StatusOK, changed(r, map[string]any{"tag": pat, pc.word: name, pc.word + "_here_now": pc.hereNow(pat), "scope": scope}))
}

// patternParam is tagParam for a tag pattern: a tag in which * stands for
// any run of characters.
func patternParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	pat := r.PathValue("tag")
	if err := checkTag(strings.ReplaceAll(pat, "*", "x")); err != nil || pat == "" {
		writeError(w, http.StatusBadRequest, "%q is not a tag or a tag pattern (letters, digits and _ . : - only, * for any run of them, at most %d)", pat, attribution.MaxTagLen)
		return "", false
	}
	return pat, true
}

func (a *Admin) apiUnlimit(w http.ResponseWriter, r *http.Request) {
	if tag, ok := tagParam(w, r); ok {
		a.setLimit(w, r, tag, 0, "")
	}
}

func (a *Admin) setLimit(w http.ResponseWriter, r *http.Request, tag string, n int, reason string) {
	a.setCap(w, r, tag, n, reason, capped{field: "tag", name: tag, noun: "tag connection limit"})
}

// capped names what a cap is on, in its answer and log: a tag, or a
// statement shape (whose control key is not its name).
type capped struct{ field, name, noun string }

// setCap sets (n > 0) or lifts a cap on the control key key, for the fleet
// or this instance, and answers what holds here now.
func (a *Admin) setCap(w http.ResponseWriter, r *http.Request, key string, n int, reason string, c capped) {
	fleetWide, scope, exp, ok := a.scopeFor(w, r)
	if !ok {
		return
	}
	switch {
	case fleetWide && n == 0:
		if _, ok := a.removeFleet(w, r, key, fleet.KindLimit); !ok {
			return
		}
	case fleetWide:
		if !a.setFleet(w, r, fleet.Control{Tag: key, Kind: fleet.KindLimit, Value: int64(n), Reason: reason}, exp) {
			return
		}
	default:
		a.srv.LimitTag(key, n)
		a.limits.set(key, n, reason)
	}
	if n == 0 {
		a.o.Log.Warn("admin: "+c.noun+" lifted", c.field, c.name, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	} else {
		a.o.Log.Warn("admin: "+c.noun+" set", c.field, c.name, "max", n, "reason", reason, "scope", scope, "remote", r.RemoteAddr, "by", by(r))
	}
	ans := changed(r, map[string]any{c.field: c.name, "limit": n, "scope": scope})
	if g := a.inForce(key); g.Limited {
		ans["in_force_here"] = g.Limit // this instance's share of a fleet-wide cap, or its own limit
	}
	writeJSON(w, http.StatusOK, ans)
}

// apiControls lists the fleet's controls in force, with who set them, when,
// why and until when, and this instance's view of them.
func (a *Admin) apiControls(w http.ResponseWriter, _ *http.Request) {
	if a.o.Fleet == nil {
		writeJSON(w, http.StatusOK, map[string]any{"fleet": false, "controls": []fleet.Control{}, "gates": a.gatesJSON(a.srv.Gates(), a.srv.Waiting()),
			"here": a.hereJSON()})
		return
	}
	st := a.o.Fleet.Status()
	if st.Controls == nil {
		st.Controls = []fleet.Control{}
	}
	if st.Ignored == nil {
		st.Ignored = []fleet.Ignored{}
	}
	if st.Caps == nil {
		st.Caps = []fleet.CapShares{}
	}
	if st.NotEverywhere == nil {
		st.NotEverywhere = []fleet.Unapplied{}
	}
	// controls are the fleet's in force here; ignored are rows this
	// instance does not apply (invalid, or of a kind it does not know),
	// never in force; caps are the fleet-wide caps' splits among the
	// instances; not_everywhere the controls some live instances cannot
	// apply; here is every control in force on this instance, from every
	// source (config.yaml, local, the fleet).
	writeJSON(w, http.StatusOK, map[string]any{"fleet": true, "instance_id": st.Instance, "known": st.Known, "stale": st.Stale, "no_schema": st.NoSchema,
		"error": st.Error, "last_read": st.LastRead, "controls": controlsJSON(st.Controls), "ignored": st.Ignored, "truncated": st.Truncated,
		"caps": st.Caps, "not_everywhere": st.NotEverywhere, "gates": a.gatesJSON(a.srv.Gates(), a.srv.Waiting()), "here": a.hereJSON()})
}

// apiFleet lists the live instances and what this one knows of the fleet.
func (a *Admin) apiFleet(w http.ResponseWriter, _ *http.Request) {
	if a.o.Fleet == nil {
		writeJSON(w, http.StatusOK, map[string]any{"fleet": false})
		return
	}
	st := a.o.Fleet.Status()
	if st.Members == nil {
		st.Members = []fleet.Member{}
	}
	if st.NotEverywhere == nil {
		st.NotEverywhere = []fleet.Unapplied{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"fleet": true, "status": st})
}

// limitReasons remembers the reason given with each local limit set
// through this listener (the proxy keeps reasons for drains only; a fleet
// limit's is in its control).
type limitReasons struct {
	mu sync.Mutex // guards m
	m  map[string]string
}

func (l *limitReasons) set(tag string, n int, reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n == 0 || reason == "" {
		delete(l.m, tag)
		return
	}
	if l.m == nil {
		l.m = map[string]string{}
	}
	l.m[tag] = reason
}

func (l *limitReasons) get(tag string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[tag]
}

func tagParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	tag := r.PathValue("tag")
	if err := checkTag(tag); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return "", false
	}
	return tag, true
}

// checkTag accepts what can name a tag: 1 to attribution.MaxTagLen bytes of
// [A-Za-z0-9_.:-].
func checkTag(t string) error {
	ok := t != "" && len(t) <= attribution.MaxTagLen
	for i := 0; ok && i < len(t); i++ {
		c := t[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%q is not a tag (letters, digits and _ . : - only, at most %d)", t, attribution.MaxTagLen)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// writeError answers {"error": "admin: ..."}: every error text of the
// admin API starts with that one prefix.
func writeError(w http.ResponseWriter, code int, format string, a ...any) {
	writeJSON(w, code, map[string]string{"error": "admin: " + fmt.Sprintf(format, a...)})
}
