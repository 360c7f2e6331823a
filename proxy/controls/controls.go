// Package controls is what on-call and the configuration put in force on
// the data path, by tag (or statement shape): drains, connection caps,
// transaction bounds, overload classes and replica routing policies, from
// every source (config.yaml, this instance, the fleet). It decides what is
// in force for a key; it does no I/O, knows nothing of sessions or
// connections, and is safe for concurrent use.
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
