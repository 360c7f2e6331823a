// Package controls is what on-call and the configuration put in force on
// the data path, by tag, tag pattern or statement shape: drains,
// connection caps, transaction bounds, overload classes, replica routing
// policies and statement refusals, from every source (config.yaml, this
// instance, the fleet), behind one type, Table.
//
// A kind of control (Kind) is one declaration: its name, how its value is
// checked, read and shown, its merge rule (Strictest: drain, limit,
// max_txn; Precedence, fleet over instance over configuration: class,
// route), whether it names patterns or shapes, and its effect. The fleet
// validates rows and the admin API sets controls through the same
// registry (KindNamed), so a new kind is one Kind and, for a kind that
// refuses statements, one Refuse rule.
//
// What is in force is an immutable Set, merged from every source and
// published atomically on each change: the data path's questions (Free,
// Class, BackgroundCapped, Route, Refuse) take no lock and cost one
// atomic load while no control is in force; pattern lookups are cached,
// bounded. The package does no I/O and knows nothing of sessions or
// connections: admission under a drain or a limit (waiting, counting)
// is the data path's (proxy/gate.go), told of each change by
// Table.OnChange. It imports only leaves (proxy/sqlscan).
package controls

// Class is an overload class: while the pool is saturated, borrowers queue
// by class (see proxy/classes.go).
type Class uint8

// The overload classes, most urgent first.
const (
	Critical Class = iota
	Normal
	Background
	NumClasses
)

// classNames are the classes' names, in Class order.
var classNames = [NumClasses]string{"critical", "normal", "background"}

func (c Class) String() string {
	if c >= NumClasses {
		return "invalid"
	}
	return classNames[c]
}

// ParseClass returns the class named s.
func ParseClass(s string) (Class, bool) {
	for i, n := range classNames {
		if n == s {
			return Class(i), true
		}
	}
	return 0, false
}

// Route is a routing policy for a tag's reads: where an autocommit read
// outside a transaction may go.
type Route uint8

// The routing policies.
const (
	// RoutePrimary: every statement goes to the primary (the default).
	RoutePrimary Route = iota
	// RouteReplica: to a replica within the lag bound that has applied
	// the session's own writes, else to the primary.
	RouteReplica
	// RouteReplicaStaleOK: to a replica within the lag bound.
	RouteReplicaStaleOK
	NumRoutes
)

var routeNames = [NumRoutes]string{"primary", "replica", "replica_stale_ok"}

func (r Route) String() string {
	if r >= NumRoutes {
		return "invalid"
	}
	return routeNames[r]
}

// ParseRoute returns the policy named s; anything else is RoutePrimary,
// reported as not ok.
func ParseRoute(s string) (Route, bool) {
	for i, n := range routeNames {
		if n == s {
			return Route(i), true
		}
	}
	return RoutePrimary, false
}
