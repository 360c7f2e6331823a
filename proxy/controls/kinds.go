package controls

import (
	"fmt"
	"strconv"
	"time"
)

// The kinds every holdfast knows. Each is one declaration; the data path
// carries out its effect (package proxy), the fleet validates and applies
// it by name, the admin API sets it.

// smaller orders values where the smaller is the stricter (a limit, a
// time bound).
func smaller(a, b int64) bool { return a < b }

// millis shows a value in milliseconds as a duration.
func millis(v int64) string { return (time.Duration(v) * time.Millisecond).String() }

// parseMillis reads a duration such as 30s as milliseconds.
func parseMillis(s string) (int64, error) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 30s, got %q", s)
	}
	return d.Milliseconds(), nil
}

var (
	// DrainKind refuses the key's new borrows (a shape's statements:
	// a block). Value: the grace in milliseconds after which the tag's
	// holders are closed (0: none; always 0 on a shape).
	DrainKind = Register(&Kind{
		Name: "drain", Doc: "new borrows refused (9001; a shape's statements: 9007)",
		Merge: Strictest, Effect: EffectAdmission, Shapes: true,
		Check: func(key string, v int64) error {
			switch {
			case IsShapeKey(key) && v != 0:
				return fmt.Errorf("a block of a statement shape has no grace (its running statements are not killed), got %dms", v)
			case v < 0:
				return fmt.Errorf("drain value must not be negative, got %d", v)
			}
			return nil
		},
		Parse: parseMillis,
		Show: func(v int64) string {
			if v == 0 {
				return "drained"
			}
			return "drained, grace " + millis(v)
		},
	})
	// LimitKind caps the key's backend connections (a shape's statements
	// running at once) at Value; 0 admits no one. A fleet limit is a
	// fleet-wide cap, of which Control.Value is this instance's share.
	LimitKind = Register(&Kind{
		Name: "limit", Doc: "at most N backend connections (a shape's statements running at once)",
		Merge: Strictest, Effect: EffectAdmission, Shapes: true, Stricter: smaller,
		Check: func(_ string, v int64) error {
			if v < 0 {
				return fmt.Errorf("a limit must be 0 or more connections, got %d", v)
			}
			return nil
		},
		Parse: func(s string) (int64, error) {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return 0, fmt.Errorf("want a number of connections, got %q", s)
			}
			return n, nil
		},
		Show: func(v int64) string { return "at most " + strconv.FormatInt(v, 10) },
	})
	// MaxTxnKind bounds how long a transaction of the tag may hold its
	// connection: Value milliseconds.
	MaxTxnKind = Register(&Kind{
		Name: "max_txn", Doc: "transactions holding a connection longer are rolled back (9005)",
		Merge: Strictest, Effect: EffectTxnBound, Stricter: smaller,
		Check: func(_ string, v int64) error {
			if v <= 0 {
				return fmt.Errorf("max_transaction_time must be positive, got %dms", v)
			}
			return nil
		},
		Parse: parseMillis,
		Show:  func(v int64) string { return "transactions at most " + millis(v) },
	})
	// ClassKind puts the tags matching its key in an overload class:
	// Value is a Class.
	ClassKind = Register(&Kind{
		Name: "class", Doc: "the overload class",
		Merge: Precedence, Effect: EffectClass, Pattern: true,
		Check: func(_ string, v int64) error {
			if v < 0 || v >= int64(NumClasses) {
				return fmt.Errorf("class must be one of %v, got value %d", classNames, v)
			}
			return nil
		},
		Parse: func(s string) (int64, error) {
			c, ok := ParseClass(s)
			if !ok {
				return 0, fmt.Errorf("want critical, normal or background, got %q", s)
			}
			return int64(c), nil
		},
		Show: func(v int64) string { return "class " + Class(v).String() },
	})
	// RouteKind gives the tags matching its key a routing policy for
	// reads on replicas: Value is a Route.
	RouteKind = Register(&Kind{
		Name: "route", Doc: "where reads go",
		Merge: Precedence, Effect: EffectRoute, Pattern: true,
		Check: func(_ string, v int64) error {
			if v < 0 || v >= int64(NumRoutes) {
				return fmt.Errorf("route must be one of %v, got value %d", routeNames, v)
			}
			return nil
		},
		Parse: func(s string) (int64, error) {
			r, ok := ParseRoute(s)
			if !ok {
				return 0, fmt.Errorf("want primary, replica or replica_stale_ok, got %q", s)
			}
			return int64(r), nil
		},
		Show: func(v int64) string { return "reads: " + Route(v).String() },
	})
)
