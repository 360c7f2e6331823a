package fleet

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
)

// Kind is what a control does to its tag.
type Kind string

// Control kinds.
const (
	// KindDrain refuses the tag's new borrows; Value is the grace in
	// milliseconds after which the tag's holders are closed (0: none).
	KindDrain Kind = "drain"
	// KindLimit caps the tag's backend connections across the fleet at
	// Value.
	KindLimit Kind = "limit"
	// KindMaxTxn bounds how long a transaction of the tag may hold its
	// connection: Value milliseconds.
	KindMaxTxn Kind = "max_txn"
	// KindClass puts the tags matching Tag (a tag, or a pattern with *)
	// in an overload class: Value is an index of Classes.
	KindClass Kind = "class"
	// KindRoute gives the tags matching Tag (a tag, or a pattern with *)
	// a routing policy for reads on replicas: Value is an index of Routes.
	KindRoute Kind = "route"
)

// KnownKinds are the kinds of control this version applies: Validate
// accepts these and no others, and each instance's heartbeat records
// them (Member.Kinds), so that the others can tell which controls it
// cannot apply.
func KnownKinds() []Kind { return []Kind{KindDrain, KindLimit, KindMaxTxn, KindClass, KindRoute} }

// Routes are the routing policies, by the Value of a KindRoute control.
var Routes = []string{"primary", "replica", "replica_stale_ok"}

// RouteValue returns the Value of a KindRoute control for policy name.
func RouteValue(name string) (int64, bool) {
	for i, r := range Routes {
		if r == name {
			return int64(i), true
		}
	}
	return 0, false
}

// Classes are the overload classes, by the Value of a KindClass control.
var Classes = []string{"critical", "normal", "background"}

// ClassValue returns the Value of a KindClass control for class name.
func ClassValue(name string) (int64, bool) {
	for i, c := range Classes {
		if c == name {
			return int64(i), true
		}
	}
	return 0, false
}

// ShapePrefix starts the Tag of a control on a statement shape, not a tag:
// "shape/" and the shape's 16 hex digits. Such a control is a KindDrain
// (a block; Value 0) or a KindLimit (a cap on its statements running at
// once across the fleet).
const ShapePrefix = "shape/"

// validShape reports whether tag names a shape well: ShapePrefix and 16
// lower-case hex digits.
func validShape(tag string) bool {
	h, ok := strings.CutPrefix(tag, ShapePrefix)
	if !ok || len(h) != 16 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// MaxTagLen is the longest tag a control names.
const MaxTagLen = attribution.MaxTagLen

// Control is one row of holdfast_controls.
type Control struct {
	Tag    string    `json:"tag"`
	Kind   Kind      `json:"kind"`
	Value  int64     `json:"value"`
	SetBy  string    `json:"set_by"`
	Reason string    `json:"reason"`
	SetAt  time.Time `json:"set_at"`
	// Expires is when the control lifts itself, by the database's clock
	// (zero: never).
	Expires time.Time `json:"expires_at,omitzero"`
}

// ErrInvalid is wrapped by the error of a control that makes no sense.
var ErrInvalid = errors.New("fleet: invalid control")

// Validate says what is wrong with c, naming the field.
func (c Control) Validate() error {
	switch {
	case c.Tag == "" || len(c.Tag) > MaxTagLen:
		return fmt.Errorf("%w: tag must be 1..%d bytes, got %q", ErrInvalid, MaxTagLen, c.Tag)
	case c.Kind != KindDrain && c.Kind != KindLimit && c.Kind != KindMaxTxn && c.Kind != KindClass && c.Kind != KindRoute:
		return fmt.Errorf("%w: kind must be drain, limit, max_txn, class or route, got %q", ErrInvalid, c.Kind)
	case strings.HasPrefix(c.Tag, ShapePrefix) && !validShape(c.Tag):
		return fmt.Errorf("%w: a shape is 16 lower-case hex digits after %q, got %q", ErrInvalid, ShapePrefix, c.Tag)
	case strings.HasPrefix(c.Tag, ShapePrefix) && c.Kind != KindDrain && c.Kind != KindLimit:
		return fmt.Errorf("%w: a statement shape can be blocked (drain) or capped (limit), not given a %s", ErrInvalid, c.Kind)
	case strings.HasPrefix(c.Tag, ShapePrefix) && c.Kind == KindDrain && c.Value != 0:
		return fmt.Errorf("%w: a block of a statement shape has no grace (its running statements are not killed), got %dms", ErrInvalid, c.Value)
	case c.Kind == KindRoute && c.Value >= int64(len(Routes)):
		return fmt.Errorf("%w: route must be one of %v, got value %d", ErrInvalid, Routes, c.Value)
	case c.Kind == KindClass && c.Value >= int64(len(Classes)):
		return fmt.Errorf("%w: class must be one of %v, got value %d", ErrInvalid, Classes, c.Value)
	case c.Kind == KindLimit && c.Value < 0:
		return fmt.Errorf("%w: a limit must be 0 or more connections, got %d", ErrInvalid, c.Value)
	case c.Kind == KindMaxTxn && c.Value <= 0:
		return fmt.Errorf("%w: max_transaction_time must be positive, got %dms", ErrInvalid, c.Value)
	case c.Value < 0:
		return fmt.Errorf("%w: %s value must not be negative, got %d", ErrInvalid, c.Kind, c.Value)
	case len(c.SetBy) > 255 || len(c.Reason) > 255:
		return fmt.Errorf("%w: set_by and reason are at most 255 bytes", ErrInvalid)
	}
	return nil
}

// Applied is what one instance puts in force for one tag, merged from the
// tag's controls: Applier.ApplyFleetControls gets one per tag with any.
type Applied struct {
	Tag     string
	Drained bool
	Reason  string        // the drain's
	Grace   time.Duration // the drain's grace
	// Limited: the tag has a fleet-wide cap of FleetLimit; Limit is what
	// this instance may hold of it now, its share (0: none now).
	Limited    bool
	Limit      int
	FleetLimit int
	MaxTxn     time.Duration // 0: none
	// Class is the overload class of the tags Tag matches (a pattern when
	// it holds *), "" when the fleet sets none.
	Class string
	// Route is their routing policy for reads on replicas ("" when the
	// fleet sets none).
	Route string
}

// Applier is what fleet tells of the controls in force: the proxy.
type Applier interface {
	// ApplyFleetControls replaces the fleet's controls in force with cs,
	// one per tag (tags absent have none from the fleet).
	ApplyFleetControls(cs []Applied)
	// Demand is what tag's borrows on this instance hold under its limit
	// now (held), and the most they held and waited for at once (want)
	// since the last call with restart, or now when that is more. restart
	// begins a new such window.
	Demand(tag string, restart bool) (held, want int)
	// SetFleetSize tells how many instances are live (this one included).
	SetFleetSize(n int)
}
