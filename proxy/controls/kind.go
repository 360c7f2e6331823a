package controls

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// Source is where a control comes from.
type Source uint8

// The sources, from the weakest to the strongest where a kind's controls
// take precedence (Precedence): the fleet's win.
const (
	// Config is config.yaml (tags.*, overload.classes, routing.tags):
	// this instance's base, replaced whole on a reload.
	Config Source = iota
	// Local is this instance's run-time controls (the admin API's
	// local=1, holdfastctl -local).
	Local
	// Fleet is the fleet's table (package fleet), which every instance
	// applies.
	Fleet
	NumSources
)

var sourceNames = [NumSources]string{"config", "local", "fleet"}

func (s Source) String() string {
	if s >= NumSources {
		return "invalid"
	}
	return sourceNames[s]
}

// Merge is how one kind's controls on a key from several sources combine.
type Merge uint8

const (
	// Strictest: the strictest of the sources' controls is in force (any
	// drain drains; the smallest limit caps). Kind.Stricter orders them;
	// between equals, the weaker source's stays (Config, then Local,
	// then Fleet). A local control may lift the configuration's
	// (Control.Lift): on-call lifting a configured drain at run time.
	Strictest Merge = iota
	// Precedence: the fleet's control wins over this instance's, which
	// wins over the configuration's; within a source an exact key before
	// patterns, patterns in the order of their values (classes: critical
	// first; routes: primary first).
	Precedence
)

func (m Merge) String() string {
	if m == Precedence {
		return "precedence"
	}
	return "strictest"
}

// Effect is what a kind does on the data path. The controls decide what
// is in force; the effect is carried out by the data path (package proxy)
// once for every kind of that effect.
type Effect uint8

const (
	// EffectAdmission: a borrow for the key (or a statement of the
	// shape) passes it before it runs: drain, limit (proxy/gate.go).
	EffectAdmission Effect = iota + 1
	// EffectTxnBound bounds how long a transaction of the key holds its
	// connection: max_txn (the janitor).
	EffectTxnBound
	// EffectClass is the key's overload class (Table.Class).
	EffectClass
	// EffectRoute is where the key's reads go (Table.Route).
	EffectRoute
	// EffectRefusal refuses statements of the key before they run, by
	// Kind.Refuse (Table.Refuse).
	EffectRefusal
	// EffectPause holds the key's new borrows, holding no connection,
	// until it is lifted or failover.hold passes (Table.Paused;
	// proxy/failover.go).
	EffectPause
)

// Kind declares one control kind: its name, its value, its merge rule,
// what it may name and its effect. A kind is registered once (Register,
// from a package variable) and never changed afterwards; the fleet's
// table, the admin API and the data path all find it by name (KindNamed).
type Kind struct {
	// Name is the kind's name in holdfast_controls.kind, the admin API
	// (PUT /api/tags/{tag}/{name}) and holdfastctl; at most 16 bytes.
	Name string
	// Doc says in a few words what the kind does, for lists of kinds.
	Doc    string
	Merge  Merge
	Effect Effect
	// Pattern: the kind may name tag patterns (* for any run of
	// characters), not only exact tags. Shapes: it may name a statement
	// shape (ShapePrefix and 16 hex digits).
	Pattern bool
	Shapes  bool
	// Stricter reports whether value a is stricter than value b (kinds
	// that merge Strictest). nil: every value is as strict as any other,
	// so which source's is in force follows the source order.
	Stricter func(a, b int64) bool
	// Check says what is wrong with value v on key (nil: v is valid).
	// nil accepts 0 only: a kind without a value.
	Check func(key string, v int64) error
	// Parse reads a value as on-call types it (the admin API's value=
	// parameter); nil: a kind without a value ("" only, read as 0).
	Parse func(s string) (int64, error)
	// Show writes value v as on-call reads it (nil: the kind's name).
	Show func(v int64) string
	// Refuse (EffectRefusal kinds) returns the refusal, a *Refusal, of
	// a statement of key that c, in force for key, refuses; nil when the
	// statement passes. Called on the statement path: it must not
	// allocate for a statement that passes. info is a copy of the
	// statement's scan, so that the statement's own stays on its
	// caller's stack.
	Refuse func(c Control, key string, info sqlscan.Info) error

	id int // index in the registry
}

// registry is every kind, in registration order. Written only by
// Register while the package's variables are initialized.
var registry []*Kind

// Register adds k to the kinds every source, the fleet and the admin API
// know, and returns it. Call it from a package variable's initializer
// only; a second kind of the same name panics.
func Register(k *Kind) *Kind {
	if k.Name == "" || len(k.Name) > 16 || KindNamed(k.Name) != nil {
		panic(fmt.Sprintf("controls: kind %q registered twice, or with a bad name", k.Name))
	}
	if k.Effect == EffectRefusal && k.Refuse == nil {
		panic(fmt.Sprintf("controls: kind %q refuses statements without a Refuse rule", k.Name))
	}
	if (k.Effect == EffectAdmission || k.Effect == EffectTxnBound) && (k.Pattern || k.Merge != Strictest) {
		panic(fmt.Sprintf("controls: kind %q: admission and transaction bounds merge strictest, on exact keys", k.Name))
	}
	k.id = len(registry)
	registry = append(registry, k)
	return k
}

// Kinds returns every kind, in registration order. The slice is the
// caller's; the kinds are shared and must not be changed.
func Kinds() []*Kind { return append([]*Kind(nil), registry...) }

// KindNamed returns the kind named name, nil when there is none (a kind
// of a newer holdfast, or a typo).
func KindNamed(name string) *Kind {
	for _, k := range registry {
		if k.Name == name {
			return k
		}
	}
	return nil
}

// KindNames lists the kinds' names, "drain, limit, ...", for messages.
func KindNames() string {
	names := make([]string, len(registry))
	for i, k := range registry {
		names[i] = k.Name
	}
	return strings.Join(names, ", ")
}

func (k *Kind) String() string { return k.Name }

// ShowValue writes v as on-call reads it.
func (k *Kind) ShowValue(v int64) string {
	if k.Show == nil {
		return k.Name
	}
	return k.Show(v)
}

// ParseValue reads a value as on-call types it ("" for a kind without a
// value), checked for key.
func (k *Kind) ParseValue(key, s string) (int64, error) {
	if k.Parse == nil {
		if s != "" {
			return 0, fmt.Errorf("%s takes no value, got %q", k.Name, s)
		}
		return 0, nil
	}
	v, err := k.Parse(s)
	if err != nil {
		return 0, err
	}
	return v, k.checkValue(key, v)
}

// MaxKeyLen is the longest key a control names (attribution.MaxTagLen;
// holdfast_controls.tag).
const MaxKeyLen = 64

// ShapePrefix starts the key of a control on a statement shape, not a
// tag: "shape/" and the shape's 16 lower-case hex digits. A '/' is never
// in a tag, so the keys of shapes and tags never meet.
const ShapePrefix = "shape/"

// IsShapeKey reports whether key names a statement shape, not a tag.
func IsShapeKey(key string) bool { return strings.HasPrefix(key, ShapePrefix) }

// validShape reports whether key names a shape well.
func validShape(key string) bool {
	h, ok := strings.CutPrefix(key, ShapePrefix)
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

// IsPattern reports whether key is a tag pattern: it holds a *.
func IsPattern(key string) bool { return strings.IndexByte(key, '*') >= 0 }

// Match reports whether tag matches pattern, * standing for any run of
// characters (tags hold no other character path.Match treats specially).
func Match(pattern, tag string) bool {
	ok, _ := path.Match(pattern, tag)
	return ok
}

// Validate says what is wrong with a control of kind k on key with value
// v, naming the field: a phrase without the package's name, for the
// caller (the fleet reading a row, the admin API) to wrap. nil: valid.
func (k *Kind) Validate(key string, v int64) error {
	switch {
	case key == "" || len(key) > MaxKeyLen:
		return fmt.Errorf("tag must be 1..%d bytes, got %q", MaxKeyLen, key)
	case IsShapeKey(key) && !validShape(key):
		return fmt.Errorf("a shape is 16 lower-case hex digits after %q, got %q", ShapePrefix, key)
	case IsShapeKey(key) && !k.Shapes:
		return fmt.Errorf("a statement shape can be blocked (drain) or capped (limit), not given a %s", k.Name)
	case IsPattern(key) && !k.Pattern:
		return fmt.Errorf("a %s names one tag, not a pattern, got %q", k.Name, key)
	}
	return k.checkValue(key, v)
}

func (k *Kind) checkValue(key string, v int64) error {
	if k.Check == nil {
		if v != 0 {
			return fmt.Errorf("%s takes no value, got %d", k.Name, v)
		}
		return nil
	}
	return k.Check(key, v)
}

// errNoKind is the start of the error of a kind not known.
var errNoKind = errors.New("kind must be one of")

// ValidateNamed is Validate for the kind named name: an unknown kind (of
// a newer holdfast, say) is an error too.
func ValidateNamed(name, key string, v int64) error {
	k := KindNamed(name)
	if k == nil {
		return fmt.Errorf("%w %s, got %q", errNoKind, KindNames(), name)
	}
	return k.Validate(key, v)
}
