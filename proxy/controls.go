package proxy

import (
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/proxy/controls"
)

// On-call controls come from three sources: config.yaml (tags.*,
// overload.classes, routing.tags: this instance's base), this instance's
// admin API set with --local, and the fleet's table (package fleet), which
// every instance applies. They are kept, merged and looked up in one
// controls.Table (s.ctrl), each kind by its own merge rule (package
// controls). What the table cannot do itself, the data path does when it
// is told of a change (controlsChanged): drains, limits and
// max_transaction_time are put in the gates (gate.go), which admit
// borrows under them; the background cap follows the classes.

// controlsChanged puts what changed in force outside the table: the gates
// of each tag or shape whose drain, limit or max_transaction_time
// changed, and the background cap. Called by s.ctrl with its lock held,
// in the order of the changes.
func (s *Server) controlsChanged(old, cur *controls.Set) {
	keys := map[string]bool{}
	for _, k := range []*controls.Kind{controls.DrainKind, controls.LimitKind, controls.MaxTxnKind} {
		controls.Changed(old, cur, k, func(key string) { keys[key] = true })
	}
	for key := range keys {
		s.enforceLocked(key, cur)
	}
	if old.BackgroundCapped() != cur.BackgroundCapped() {
		s.applyReserve()
	}
}

// gateControl is what the gates put in force for one key.
type gateControl struct {
	drained bool
	reason  string
	grace   time.Duration
	limit   int // noLimit: none
	of      limitOf
	maxTxn  time.Duration
}

// gateControlOf reads key's admission and transaction controls in cur.
func gateControlOf(cur *controls.Set, key string) gateControl {
	eff := gateControl{limit: noLimit}
	if d, ok := cur.Lookup(controls.DrainKind, key); ok {
		eff.drained, eff.reason, eff.grace = true, d.Reason, time.Duration(d.Value)*time.Millisecond
		if eff.reason == "" && d.SetBy != "" {
			eff.reason = "drained by " + d.SetBy
		}
	}
	if l, ok := cur.Lookup(controls.LimitKind, key); ok {
		eff.limit, eff.of = int(l.Value), limitOf{fleet: l.Shared, cap: int(l.Cap)}
	}
	if m, ok := cur.Lookup(controls.MaxTxnKind, key); ok {
		eff.maxTxn = time.Duration(m.Value) * time.Millisecond
	}
	return eff
}

// enforceLocked puts key's controls in cur in force in the gates (s.ctrl's
// lock held).
func (s *Server) enforceLocked(key string, cur *controls.Set) {
	eff := gateControlOf(cur, key)
	if IsShapeKey(key) {
		s.enforceShapeLocked(key, eff)
		return
	}
	tag := key
	drained, limit, of, maxTxn := s.gates.current(tag)
	switch {
	case eff.drained && !drained:
		var kill func()
		if eff.grace > 0 {
			kill = func() { s.killHolders(tag) }
		}
		s.gates.drain(tag, eff.reason, eff.grace, kill)
		s.log.Warn("tag drained", "tag", tag, "reason", eff.reason, "grace", eff.grace)
	case !eff.drained && drained:
		s.gates.undrain(tag)
		s.log.Warn("tag undrained", "tag", tag)
	}
	if eff.limit != limit {
		s.gates.setLimit(tag, eff.limit, func(epoch uint64) (int, int) { return s.markHolders(tag, epoch) })
		switch {
		case eff.limit == noLimit:
			s.log.Info("tag connection limit lifted", "tag", tag)
		case limit == noLimit:
			s.log.Info("tag connection limit in force", "tag", tag, "max", eff.limit, "fleet_cap", eff.of.cap)
		default: // a fleet cap's share moving, every few seconds under turns
			s.log.Debug("tag connection limit changed", "tag", tag, "max", eff.limit, "fleet_cap", eff.of.cap)
		}
	}
	if eff.of != of {
		s.gates.setLimitOf(tag, eff.of)
	}
	if eff.maxTxn != maxTxn {
		s.gates.setMaxTxn(tag, eff.maxTxn)
		s.log.Warn("tag max_transaction_time in force", "tag", tag, "max", eff.maxTxn)
	}
}

// enforceShapeLocked puts a shape's merged controls in force: a drain is
// a block (its grace is never set for a shape), a limit caps the
// statements running at once, counting from now.
func (s *Server) enforceShapeLocked(key string, eff gateControl) {
	g := &s.shapeGates
	shape := strings.TrimPrefix(key, ShapePrefix)
	drained, limit, of, _ := g.current(key)
	switch {
	case eff.drained && !drained:
		g.drain(key, eff.reason, 0, nil)
		s.log.Warn("statement shape blocked", "shape", shape, "reason", eff.reason)
	case !eff.drained && drained:
		g.undrain(key)
		s.log.Warn("statement shape unblocked", "shape", shape)
	}
	if eff.limit != limit {
		g.setLimit(key, eff.limit, nil)
		switch {
		case eff.limit == noLimit:
			s.log.Info("statement shape cap lifted", "shape", shape)
		case limit == noLimit:
			s.log.Info("statement shape cap in force", "shape", shape, "max", eff.limit, "fleet_cap", eff.of.cap)
		default: // a fleet cap's share moving
			s.log.Debug("statement shape cap changed", "shape", shape, "max", eff.limit, "fleet_cap", eff.of.cap)
		}
	}
	if eff.of != of {
		g.setLimitOf(key, eff.of)
	}
}

// DrainTag refuses new borrows for tag on this instance (a local control).
// With grace > 0, sessions still holding a connection for the tag when it
// ends are closed (their transactions roll back).
func (s *Server) DrainTag(tag, reason string, grace time.Duration) {
	s.ctrl.Put(controls.Local, controls.Control{Kind: controls.DrainKind, Key: tag, Value: grace.Milliseconds(), Reason: reason})
}

// UndrainTag lifts this instance's drain of tag (its local one, and the
// configuration's until the next reload brings it back). A fleet drain
// stays: lift it through the fleet.
func (s *Server) UndrainTag(tag string) { s.ctrl.Lift(controls.Local, controls.DrainKind, tag) }

// LimitTag caps tag at n backend connections on this instance (a local
// control); n == 0 lifts the cap (the configuration's too).
func (s *Server) LimitTag(tag string, n int) {
	if n == 0 {
		s.ctrl.Lift(controls.Local, controls.LimitKind, tag)
		return
	}
	s.ctrl.Put(controls.Local, controls.Control{Kind: controls.LimitKind, Key: tag, Value: int64(n)})
}

// SetMaxTransactionTime bounds how long a transaction of tag may hold its
// backend connection on this instance (a local control; 0 lifts it, the
// configuration's too; sessions.max_transaction_time, when set, applies
// to every tag without one). Transactions past it have their statement
// interrupted and are rolled back, and their clients get error 9005 and
// are disconnected.
func (s *Server) SetMaxTransactionTime(tag string, d time.Duration) {
	if d <= 0 {
		s.ctrl.Lift(controls.Local, controls.MaxTxnKind, tag)
		return
	}
	s.ctrl.Put(controls.Local, controls.Control{Kind: controls.MaxTxnKind, Key: tag, Value: max(1, d.Milliseconds())})
}

// SetControl puts a control of the kind named kind on key (a tag, a
// pattern for a kind that takes one, or a shape's key) in force on this
// instance, replacing this instance's own of that kind on key; setBy is
// who set it (an admin credential's name). The value is checked as the
// fleet checks a row (controls.Kind.Validate).
func (s *Server) SetControl(kind, key string, value int64, reason, setBy string) error {
	k := controls.KindNamed(kind)
	if k == nil {
		return fmt.Errorf("proxy: no control kind %q (kinds: %s)", kind, controls.KindNames())
	}
	if err := k.Validate(key, value); err != nil {
		return fmt.Errorf("proxy: %s: %v", kind, err)
	}
	if k.Effect == controls.EffectRoute && s.routing == nil {
		return errNoReplicas
	}
	s.ctrl.Put(controls.Local, controls.Control{Kind: k, Key: key, Value: value, Reason: reason, SetBy: setBy})
	return nil
}

// LiftControl lifts this instance's own control of the kind named kind on
// key (and, for a kind whose strictest control wins, the configuration's
// until the next reload brings it back); a fleet control stays.
func (s *Server) LiftControl(kind, key string) error {
	k := controls.KindNamed(kind)
	if k == nil {
		return fmt.Errorf("proxy: no control kind %q (kinds: %s)", kind, controls.KindNames())
	}
	s.ctrl.Lift(controls.Local, k, key)
	return nil
}

// ControlState is one control in force on this instance.
type ControlState struct {
	Kind  string `json:"kind"`
	Tag   string `json:"tag"` // a tag, a pattern, or "shape/" and a shape
	Value int64  `json:"value"`
	// Shown is the value as on-call reads it; Source is where the
	// control in force comes from: config, local or fleet.
	Shown  string `json:"shown"`
	Source string `json:"source"`
	Reason string `json:"reason,omitempty"`
	SetBy  string `json:"set_by,omitempty"`
}

func controlState(c controls.Control) ControlState {
	return ControlState{Kind: c.Kind.Name, Tag: c.Key, Value: c.Value, Shown: c.Show(), Source: c.Source.String(),
		Reason: c.Reason, SetBy: c.SetBy}
}

// Controls lists the controls in force on this instance, from every
// source: for a kind of exact tags the one in force per tag, for a kind
// of patterns every source's (a fleet's pattern shadows this
// instance's).
func (s *Server) Controls() []ControlState {
	var out []ControlState
	for _, c := range s.ctrl.Load().InForce() {
		out = append(out, controlState(c))
	}
	return out
}

// ControlOf returns the control of the kind named kind in force for key
// on this instance now; false when none is.
func (s *Server) ControlOf(kind, key string) (ControlState, bool) {
	k := controls.KindNamed(kind)
	if k == nil {
		return ControlState{}, false
	}
	c, ok := s.ctrl.Load().Lookup(k, key)
	if !ok {
		return ControlState{}, false
	}
	return controlState(c), true
}

// ApplyFleetControls puts the fleet's controls in force (package fleet),
// replacing the set applied before. A fleet-wide cap is in force as this
// instance's share of it now (Applied.Limit).
func (s *Server) ApplyFleetControls(as []fleet.Applied) {
	var set []controls.Control
	for _, a := range as {
		for _, fc := range a.Controls {
			k := controls.KindNamed(string(fc.Kind))
			if k == nil || k == controls.LimitKind {
				continue // validated when read; a cap's share is below
			}
			set = append(set, controls.Control{Kind: k, Key: a.Tag, Value: fc.Value, Reason: fc.Reason, SetBy: fc.SetBy})
		}
		if a.Limited {
			c := controls.Control{Kind: controls.LimitKind, Key: a.Tag, Value: int64(a.Limit), Shared: true, Cap: int64(a.FleetLimit)}
			for _, fc := range a.Controls {
				if fc.Kind == fleet.KindLimit {
					c.Reason, c.SetBy = fc.Reason, fc.SetBy
				}
			}
			set = append(set, c)
		}
	}
	s.ctrl.Replace(controls.Fleet, nil, set)
}

// Demand is what tag's borrows on this instance hold under its limit now,
// and the most they held and waited for at once since the last call with
// restart (fleet.Applier).
func (s *Server) Demand(tag string, restart bool) (held, want int) {
	return s.gatesFor(tag).demand(tag, restart)
}

// SetFleetSize tells the server how many holdfast instances share the
// backend (package fleet); with backend.instances 0 they split its
// prepared statements between them.
func (s *Server) SetFleetSize(n int) { s.fleetSize.Store(int64(max(1, n))) }

// instances is how many instances share the backend's prepared
// statements: backend.instances, else the fleet's live instances, else 1.
func (s *Server) instances() int {
	if n := s.config().Backend.Instances; n > 0 {
		return n
	}
	return max(1, int(s.fleetSize.Load()))
}

// Gates lists the on-call controls in force, by tag. InUse is the number of
// backend connections the tag holds now (by the name the controls know it
// by, as heldBy counts), whether or not it
// is capped.
func (s *Server) Gates() []GateState {
	gs := s.gates.snapshot()
	if len(gs) > 0 {
		held := s.heldByKey()
		for i := range gs {
			gs[i].InUse = held[gs[i].Tag]
		}
	}
	// A shape's InUse is its statements running under its cap.
	return append(gs, s.shapeGates.snapshot()...)
}

func (s *Server) killHolders(tag string) {
	s.mu.Lock()
	var victims []*session
	for _, x := range s.sessions {
		x.mu.Lock()
		if !x.holdSince.IsZero() && x.holdKey == tag {
			victims = append(victims, x)
		}
		x.mu.Unlock()
	}
	s.mu.Unlock()
	for _, x := range victims {
		s.log.Warn("drain grace over: closing a client still holding a connection for the tag", "tag", tag, "client", x.id)
		x.terminate()
	}
}

// applyConfigGates puts the controls named in the configuration in force,
// replacing the configuration's earlier ones (on start and on reload;
// local and fleet controls stay).
func (s *Server) applyConfigGates(t config.Tags) {
	var set []controls.Control
	for _, tag := range t.Drained {
		set = append(set, controls.Control{Kind: controls.DrainKind, Key: tag, Reason: "configured"})
	}
	for tag, n := range t.Limits {
		if n > 0 {
			set = append(set, controls.Control{Kind: controls.LimitKind, Key: tag, Value: int64(n)})
		}
	}
	for tag, d := range t.MaxTransactionTime {
		if d > 0 {
			set = append(set, controls.Control{Kind: controls.MaxTxnKind, Key: tag, Value: max(1, d.Milliseconds())})
		}
	}
	s.ctrl.Replace(controls.Config, []*controls.Kind{controls.DrainKind, controls.LimitKind, controls.MaxTxnKind}, set)
	if len(t.Drained)+len(t.Limits)+len(t.MaxTransactionTime) > 0 {
		s.log.Info("configured tag controls applied", "drained", len(t.Drained), "limits", len(t.Limits),
			"max_transaction_time", len(t.MaxTransactionTime))
	}
}
