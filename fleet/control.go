package fleet

import (
	"errors"
	"fmt"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/controls"
)

// Kind is what a control does to its tag: the name of a kind of
// package controls, where every kind is declared (its value, its merge
// rule, whether it names patterns or shapes). A row of a kind this
// version does not declare is ignored, visibly (Ignored).
type Kind string

// The kinds the admin API writes by name (package controls declares them
// and any other).
const (
	// KindDrain refuses the tag's new borrows; Value is the grace in
	// milliseconds after which the tag's holders are closed (0: none).
	KindDrain = Kind("drain")
	// KindLimit caps the tag's backend connections across the fleet at
	// Value (split among the instances: caps.go).
	KindLimit = Kind("limit")
	// KindMaxTxn bounds how long a transaction of the tag may hold its
	// connection: Value milliseconds.
	KindMaxTxn = Kind("max_txn")
	// KindClass puts the tags matching Tag (a tag, or a pattern with *)
	// in an overload class: Value is a controls.Class.
	KindClass = Kind("class")
	// KindRoute gives the tags matching Tag (a tag, or a pattern with *)
	// a routing policy for reads on replicas: Value is a controls.Route.
	KindRoute = Kind("route")
)

// KnownKinds are the kinds of control this version applies, as package
// controls declares them: Validate accepts these and no others, and each
// instance's heartbeat records them (Member.Kinds), so that the others
// can tell which controls it cannot apply.
func KnownKinds() []Kind {
	ks := controls.Kinds()
	out := make([]Kind, len(ks))
	for i, k := range ks {
		out[i] = Kind(k.Name)
	}
	return out
}

// ShapePrefix starts the Tag of a control on a statement shape, not a tag:
// "shape/" and the shape's 16 hex digits. Such a control is a KindDrain
// (a block; Value 0) or a KindLimit (a cap on its statements running at
// once across the fleet).
const ShapePrefix = controls.ShapePrefix

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

// Validate says what is wrong with c, naming the field: its kind, tag and
// value are checked by the kind's declaration (controls.Kind.Validate),
// so a kind this version does not know is invalid here.
func (c Control) Validate() error {
	if len(c.SetBy) > 255 || len(c.Reason) > 255 {
		return fmt.Errorf("%w: set_by and reason are at most 255 bytes", ErrInvalid)
	}
	if err := controls.ValidateNamed(string(c.Kind), c.Tag, c.Value); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// Applied is what one instance puts in force for one tag (or pattern, or
// shape): Applier.ApplyFleetControls gets one per tag with any.
type Applied struct {
	Tag string
	// Controls are the tag's rows in force, one per kind, as read (a
	// limit's Value is the fleet-wide cap).
	Controls []Control
	// Limited: the tag has a fleet-wide cap of FleetLimit; Limit is what
	// this instance may hold of it now, its share (0: none now).
	Limited    bool
	Limit      int
	FleetLimit int
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
