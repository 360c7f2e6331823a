package proxy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// Explain: the plan a statement would get now, for on-call's first
// question in an incident ("where does this go, and why"), as ProxySQL
// shows its rules' hits. It runs the statement path's own decision
// (policy.Decide) over a session that has just logged in as the user and
// sends the statement as its first, under the controls in force now; it
// runs nothing and changes nothing (no tag is counted).

// Explanation is the plan a statement would get (GET /api/explain,
// holdfastctl explain).
type Explanation struct {
	SQL  string `json:"sql"`
	User string `json:"user"`
	// Tag is the tag it runs under, and TagFrom where that comes from:
	// "statement" (its comment, or the tag asked for), "default_tag" (the
	// user's), "untagged". Key is the name the controls know it by.
	Tag     string `json:"tag"`
	TagFrom string `json:"tag_from"`
	Key     string `json:"key"`
	// Kind is the statement's kind; Shape its shape (the controls' and
	// the holders view's 16 hex digits).
	Kind  string `json:"kind"`
	Shape string `json:"shape"`
	// Action is what happens: "run", "refuse", "answer locally", "call a
	// procedure", "kill", "defer BEGIN", "end a deferred BEGIN".
	Action string `json:"action"`
	// Refusal is the error a refused statement gets (code, SQLSTATE and
	// text), when Action is "refuse".
	Refusal *ExplainedError `json:"refusal,omitempty"`
	// Backend says where it runs (Action "run"): "primary", "pipe" (a
	// place on a connection of the primary's shared with other reads, or a
	// connection of its own when no pipe has room) or "replica" (one under
	// Route that has what Route asks, else the primary).
	Backend string `json:"backend,omitempty"`
	Route   string `json:"route"`
	// Class is its overload class.
	Class string `json:"class"`
	// Controls are the on-call controls it meets on its way (drains,
	// limits, classes, routes, shapes, max_transaction_time), as on-call
	// reads them.
	Controls []string `json:"controls"`
	// Pin is the pin its text alone causes ("": none; its answer may still
	// report session state that pins).
	Pin string `json:"pin,omitempty"`
	// Steps are what holdfast does around it, in order, as sentences.
	Steps []string `json:"steps"`
}

// ExplainedError is an error a client would get.
type ExplainedError struct {
	Code    uint16 `json:"code"`
	State   string `json:"sqlstate"`
	Message string `json:"message"`
}

// Explain returns the plan sql would get as the first statement of a
// session that user just opened, carrying tag (its own when the text has
// none; "" for the text's, else the user's default). It runs nothing.
func (s *Server) Explain(user, tag, sql string) (Explanation, error) {
	if strings.TrimSpace(sql) == "" {
		return Explanation{}, errors.New("proxy: explain: no statement")
	}
	text := []byte(sql)
	var mode sqlscan.Mode
	if b := s.primary.base.Load(); b != nil && strings.Contains(b.Vars.Get("sql_mode"), "ANSI_QUOTES") {
		mode |= sqlscan.ANSIQuotes
	}
	prot := s.protected.Load()
	info := mode.ScanProtected(text, prot)
	e := Explanation{SQL: sql, User: user, Kind: info.Kind.String(), Shape: FormatShape(info.Shape), Controls: []string{}, Steps: []string{}}

	// The tag, as statementTag and connTag would decide it.
	s.userTable.mu.Lock()
	rules := s.userTable.rulesForLocked(user)
	s.userTable.mu.Unlock()
	var carried []byte
	if tag != "" {
		carried, _ = attribution.AppendSanitized(nil, []byte(tag))
	} else if b, ok := appendStatementTag(nil, text, &info, mode); ok {
		carried = b
	}
	if carried != nil && rules.tags != nil && !rules.tags.allows(carried) {
		if rules.tags.refuse {
			e.Action, e.Tag, e.TagFrom = plan.Refuse.String(), string(carried), "statement"
			e.Refusal = explained(errTagRefused(user, carried, rules.tags))
			return e, nil
		}
		e.Steps = append(e.Steps, fmt.Sprintf("tag %q is not among user %q's tags: it runs as if it carried none", carried, user))
		carried = nil
	}
	switch {
	case carried != nil:
		e.Tag, e.TagFrom = string(carried), "statement"
	case rules.defaultTag != "":
		d, _ := attribution.AppendSanitized(nil, []byte(rules.defaultTag))
		e.Tag, e.TagFrom = string(d), "default_tag"
	default:
		e.Tag, e.TagFrom = attribution.Untagged, "untagged"
	}

	in := plan.Input{
		Command: plan.Query, Info: &info, SQL: text, Mode: mode, Size: len(text) + 1,
		// Accounted under its own name (explain counts no tag, so it cannot
		// tell whether attribution.max_tags would fold a new one).
		Tag:  plan.Tag{Name: e.Tag, Raw: carried, Accounting: s.attr, ByTag: s.controlsByTag()},
		User: user,
		// A session just logged in: its variables known once the
		// backend's are.
		Session:       plan.Session{VarsKnown: s.primary.base.Load() != nil, Autocommit: true},
		Controls:      &s.ctrl,
		Protected:     prot,
		DB:            s.config().Backend.Database,
		Procedures:    s.procs != nil,
		Routing:       s.routing != nil,
		PipelineDepth: s.pipelineDepth(),
		ShapesInForce: s.shapeGates.active.Load() != 0,
	}
	p := plan.Decide(&in)
	e.Key, e.Class, e.Action = p.Key, p.Class.String(), p.Action.String()
	e.Route = controls.RoutePrimary.String()
	if s.routing != nil {
		e.Route = s.ctrl.Route(p.Key).String()
	}
	e.Controls = s.controlsMet(&p, &info)
	e.Pin = plan.FeaturePin(&info)
	switch p.Action {
	case plan.Refuse:
		e.Refusal = explained(refusalErr(&p))
	case plan.AnswerLocal:
		e.Steps = append(e.Steps, "holdfast answers with the session's own value (a pooled connection holds another client's)")
	case plan.Procedure:
		e.Steps = append(e.Steps, "the reservation engine answers it on connections of its own, under holdfast:* tags; the call passes "+p.Key+"'s controls first")
	case plan.Kill:
		e.Steps = append(e.Steps, "holdfast runs the KILL itself: its ids are holdfast's connection ids")
	case plan.DeferBegin:
		e.Steps = append(e.Steps, "answered at once; BEGIN is sent with the transaction's first statement, which decides its tag")
	case plan.EndDeferred:
		e.Steps = append(e.Steps, "answered at once: nothing of the transaction reached the backend")
	case plan.Run:
		e.Backend = "primary"
		switch {
		case p.Route != controls.RoutePrimary:
			e.Backend = "replica"
			e.Steps = append(e.Steps, "a replica under "+p.Route.String()+" that has what it asks; none: the primary")
		case p.Pipe:
			e.Backend = "pipe"
		}
		if p.Pipe {
			e.Steps = append(e.Steps, fmt.Sprintf("a place on a connection of the primary's shared with other reads (up to %d each), taking no lease and passing no control; no room: a connection of its own", in.PipelineDepth))
		} else {
			e.Steps = append(e.Steps, "a lease of a connection of its own: admitted by "+p.Key+"'s controls, queued as "+p.Class.String())
		}
		if p.RewriteConnectionID {
			e.Steps = append(e.Steps, "CONNECTION_ID() is replaced by the client's id")
		}
		if p.PutKept {
			e.Steps = append(e.Steps, "the client's kept variables (wait_timeout, session_track_*) are put in place around it")
		}
		if p.SyncKept {
			e.Steps = append(e.Steps, "the kept variables are read back after it")
		}
		if e.Pin != "" {
			e.Steps = append(e.Steps, "it pins the session to its connection ("+e.Pin+")")
		}
	}
	return e, nil
}

// controlsMet lists the on-call controls a statement of plan p (scanned
// as info) meets now.
func (s *Server) controlsMet(p *plan.Plan, info *sqlscan.Info) []string {
	out := []string{}
	drained, limit, of, maxTxn := s.gates.current(p.Key)
	switch {
	case drained:
		out = append(out, fmt.Sprintf("tag %s drained: error %d", p.Key, codeTagDrained))
	case limit != noLimit && of.fleet:
		out = append(out, fmt.Sprintf("tag %s capped at %d connections across the fleet (%d on this instance now)", p.Key, of.cap, max(limit, 0)))
	case limit != noLimit:
		out = append(out, fmt.Sprintf("tag %s limited to %d connections", p.Key, max(limit, 0)))
	}
	if maxTxn > 0 {
		out = append(out, fmt.Sprintf("tag %s max_transaction_time %v", p.Key, maxTxn.Round(time.Millisecond)))
	}
	hold := s.config().Failover.Hold
	if c, ok := s.ctrl.Paused(p.Key); ok {
		out = append(out, fmt.Sprintf("%s: it waits, holding no connection, until the pause is lifted; past failover.hold (%v), error %d",
			pausedBy(c, p.Key), hold, codePrimarySwitching))
	}
	if p.Action == plan.Run && p.Route == controls.RoutePrimary && s.topo.badSince.Load() != 0 {
		out = append(out, fmt.Sprintf("no usable primary now (%s): it waits, holding no connection, for one; past failover.hold (%v), error %d",
			s.Topology().State, hold, codePrimarySwitching))
	}
	if p.Class != controls.Normal || s.ctrl.Load() != nil {
		c := "class " + p.Class.String()
		if p.Class == controls.Background && s.ctrl.BackgroundCapped() {
			c += " (capped at pool.max - overload.reserve, not pipelined, shed after overload.background_wait)"
		}
		out = append(out, c)
	}
	if s.routing != nil {
		out = append(out, "route "+s.ctrl.Route(p.Key).String())
	}
	if s.shapeGates.active.Load() != 0 {
		key := ShapeKey(info.Shape)
		switch blocked, limit, _, _ := s.shapeGates.current(key); {
		case !p.Shape:
		case blocked:
			out = append(out, fmt.Sprintf("shape %s blocked: error %d", FormatShape(info.Shape), codeShapeBlocked))
		case limit != noLimit:
			out = append(out, fmt.Sprintf("shape %s capped at %d running at once", FormatShape(info.Shape), max(limit, 0)))
		}
	}
	if p.Refusal == plan.RefuseControl {
		out = append(out, "a statement-level control refuses it")
	}
	return out
}

func explained(e *mysqlwire.SQLError) *ExplainedError {
	return &ExplainedError{Code: e.Code, State: e.State, Message: e.Msg}
}
