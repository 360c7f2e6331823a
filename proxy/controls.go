package proxy

import (
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/fleet"
)

// On-call controls per tag come from three sources: config.yaml
// (tags.drained, tags.limits: this instance's base), this instance's admin
// API set with --local, and the fleet's table (package fleet), which every
// instance applies. A tag's controls in force are the strictest of its
// sources': drained when any source drains it, the smallest limit and
// max_transaction_time any sets. gate.go is how borrows pass them.

// controlSource is where a control comes from.
type controlSource int

const (
	srcConfig controlSource = iota
	srcLocal
	srcFleet
	numSources
)

// tagControl is one tag's controls from one source. A local control may
// also lift the configuration's (on-call lifting a configured drain or
// limit at run time): the lift flags.
type tagControl struct {
	drained bool
	reason  string
	grace   time.Duration
	limit   int // noLimit: none
	maxTxn  time.Duration
	of      limitOf // what limit is: this instance's own, or a fleet cap's share

	undrain, unlimit, unbound bool // lift the configuration's drain, limit, max_transaction_time
}

func (c tagControl) empty() bool {
	return !c.drained && c.limit == noLimit && c.maxTxn == 0 && !c.undrain && !c.unlimit && !c.unbound
}

// controlSources holds every source's controls. The zero value is ready to use.
type controlSources struct {
	mu  sync.Mutex // guards src; held while the merged controls are put in force
	src [numSources]map[string]tagControl
}

// setControl changes tag's controls from src and puts the merged ones in
// force.
func (s *Server) setControl(src controlSource, tag string, change func(*tagControl)) {
	s.ctrl.mu.Lock()
	defer s.ctrl.mu.Unlock()
	if s.ctrl.src[src] == nil {
		s.ctrl.src[src] = map[string]tagControl{}
	}
	c, ok := s.ctrl.src[src][tag]
	if !ok {
		c = tagControl{limit: noLimit}
	}
	change(&c)
	if c.empty() {
		delete(s.ctrl.src[src], tag)
	} else {
		s.ctrl.src[src][tag] = c
	}
	s.enforceLocked(tag)
}

// replaceControls replaces every control of src with set and puts the
// merged ones in force.
func (s *Server) replaceControls(src controlSource, set map[string]tagControl) {
	s.ctrl.mu.Lock()
	defer s.ctrl.mu.Unlock()
	old := s.ctrl.src[src]
	s.ctrl.src[src] = set
	for tag := range old {
		if _, ok := set[tag]; !ok {
			s.enforceLocked(tag)
		}
	}
	for tag := range set {
		s.enforceLocked(tag)
	}
}

// enforceLocked puts tag's merged controls in force in the gates
// (s.ctrl.mu held).
func (s *Server) enforceLocked(tag string) {
	// The configuration's, as this instance's local controls leave them;
	// then the fleet's, the strictest of the two winning.
	eff := tagControl{limit: noLimit}
	if c, ok := s.ctrl.src[srcConfig][tag]; ok {
		eff = c
	}
	if l, ok := s.ctrl.src[srcLocal][tag]; ok {
		if l.undrain {
			eff.drained, eff.reason, eff.grace = false, "", 0
		}
		if l.unlimit {
			eff.limit = noLimit
		}
		if l.unbound {
			eff.maxTxn = 0
		}
		eff = stricter(eff, l)
	}
	if f, ok := s.ctrl.src[srcFleet][tag]; ok {
		eff = stricter(eff, f)
	}
	if IsShapeKey(tag) {
		s.enforceShapeLocked(tag, eff)
		return
	}
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
		s.gates.setLimit(tag, eff.limit, s.heldBy(tag))
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
func (s *Server) enforceShapeLocked(key string, eff tagControl) {
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
		g.setLimit(key, eff.limit, 0)
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

// stricter merges c into eff: drained when either is, the smaller limit
// and max_transaction_time.
func stricter(eff, c tagControl) tagControl {
	if c.drained && !eff.drained {
		eff.drained, eff.reason, eff.grace = true, c.reason, c.grace
	}
	if c.limit != noLimit && (eff.limit == noLimit || c.limit < eff.limit) {
		eff.limit, eff.of = c.limit, c.of
	}
	if c.maxTxn > 0 && (eff.maxTxn == 0 || c.maxTxn < eff.maxTxn) {
		eff.maxTxn = c.maxTxn
	}
	return eff
}

// DrainTag refuses new borrows for tag on this instance (a local control).
// With grace > 0, sessions still holding a connection for the tag when it
// ends are closed (their transactions roll back).
func (s *Server) DrainTag(tag, reason string, grace time.Duration) {
	s.setControl(srcLocal, tag, func(c *tagControl) { c.drained, c.reason, c.grace, c.undrain = true, reason, grace, false })
}

// UndrainTag lifts this instance's drain of tag (its local one, and the
// configuration's until the next reload brings it back). A fleet drain
// stays: lift it through the fleet.
func (s *Server) UndrainTag(tag string) {
	s.setControl(srcLocal, tag, func(c *tagControl) {
		c.drained, c.reason, c.grace = false, "", 0
		_, c.undrain = s.ctrl.src[srcConfig][tag]
	})
}

// LimitTag caps tag at n backend connections on this instance (a local
// control); n == 0 lifts the cap.
func (s *Server) LimitTag(tag string, n int) {
	if n == 0 {
		n = noLimit
	}
	s.setControl(srcLocal, tag, func(c *tagControl) {
		c.limit = n
		_, inConfig := s.ctrl.src[srcConfig][tag]
		c.unlimit = n == noLimit && inConfig
	})
}

// SetMaxTransactionTime bounds how long a transaction of tag may hold its
// backend connection on this instance (a local control; 0 lifts it;
// sessions.max_transaction_time, when set, applies to every tag without
// one). Transactions past it have their statement interrupted and are
// rolled back, and their clients get error 9005 and are disconnected.
func (s *Server) SetMaxTransactionTime(tag string, d time.Duration) {
	s.setControl(srcLocal, tag, func(c *tagControl) {
		c.maxTxn = d
		_, inConfig := s.ctrl.src[srcConfig][tag]
		c.unbound = d == 0 && inConfig
	})
}

// ApplyFleetControls puts the fleet's controls in force (package fleet),
// replacing the set applied before.
func (s *Server) ApplyFleetControls(cs []fleet.Applied) {
	set := make(map[string]tagControl, len(cs))
	classes := map[string]class{}
	routes := map[string]policy{}
	for _, a := range cs {
		if cl, ok := parseClass(a.Class); ok {
			classes[a.Tag] = cl
		}
		if a.Route != "" {
			routes[a.Tag] = parsePolicy(a.Route)
		}
		c := tagControl{drained: a.Drained, reason: a.Reason, grace: a.Grace, limit: noLimit, maxTxn: a.MaxTxn}
		if a.Limited {
			c.limit, c.of = a.Limit, limitOf{fleet: true, cap: a.FleetLimit}
		}
		if !c.empty() {
			set[a.Tag] = c
		}
	}
	s.replaceControls(srcFleet, set)
	s.setClasses(srcFleet, classes)
	if s.routing != nil {
		s.routing.setRoutes(srcFleet, routes)
	}
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
	set := map[string]tagControl{}
	for _, tag := range t.Drained {
		set[tag] = tagControl{drained: true, reason: "configured", limit: noLimit}
	}
	for tag, n := range t.Limits {
		c, ok := set[tag]
		if !ok {
			c = tagControl{limit: noLimit}
		}
		if n > 0 {
			c.limit = n
		}
		set[tag] = c
	}
	for tag, d := range t.MaxTransactionTime {
		c, ok := set[tag]
		if !ok {
			c = tagControl{limit: noLimit}
		}
		c.maxTxn = d
		set[tag] = c
	}
	s.replaceControls(srcConfig, set)
	if len(t.Drained)+len(t.Limits)+len(t.MaxTransactionTime) > 0 {
		s.log.Info("configured tag controls applied", "drained", len(t.Drained), "limits", len(t.Limits),
			"max_transaction_time", len(t.MaxTransactionTime))
	}
}
