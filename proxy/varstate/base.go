package varstate

import (
	"strings"
	"sync"
)

// Base is what a fresh connection to one backend has, and what holdfast
// keeps on its connections there. Each backend has its own: servers differ
// in their defaults, collations and globals. The caller reads them from
// the backend's first connection (NewBase); a Base is read-only after
// that, and safe for concurrent use.
type Base struct {
	// Vars is a fresh connection's session state: its character set
	// variables, the results' collation and sql_mode.
	Vars *State
	// Kept is the kept variables a client session starts with: the
	// server's global values.
	Kept *KeptVars
	// Holdfast is the kept variables' values on holdfast's own
	// connections (tracking of everything, the server's timeouts).
	Holdfast map[string]string

	charsets map[uint8][2]string // collation id -> character set, collation
	defaults map[string]string   // character set -> its default collation
	initial  sync.Map            // InitialVars' answers, by collation id (and 1<<8 for IGNORE_SPACE)
}

// Collation is one row of a server's collation table.
type Collation struct {
	ID               int
	Charset, Name    string
	DefaultOfCharset bool
}

// NewBase is the Base of a backend whose fresh connection has the
// character set variables (CharsetVars) and sql_mode in fresh, whose
// globals of the kept variables (KeptNames) are globals, and whose
// collations are collations.
func NewBase(fresh, globals map[string]string, collations []Collation) *Base {
	vals := map[string]string{}
	for _, n := range CharsetVars {
		vals[n] = fresh[n]
	}
	// A fresh connection's results are in its handshake collation.
	vals[ResultsCollation] = fresh["collation_connection"]
	vals["sql_mode"] = fresh["sql_mode"]
	b := &Base{
		Vars:     FromValues(vals),
		Kept:     NewKept(globals),
		Holdfast: HoldfastKept(globals),
		charsets: map[uint8][2]string{},
		defaults: map[string]string{},
	}
	for _, c := range collations {
		if c.ID > 0 && c.ID < 256 {
			b.charsets[uint8(c.ID)] = [2]string{c.Charset, c.Name}
		}
		if c.DefaultOfCharset {
			b.defaults[c.Charset] = c.Name
		}
	}
	return b
}

// DefaultCollation is the default collation of character set cs ("" when
// unknown): what SET character_set_results = cs marks result columns with.
func (b *Base) DefaultCollation(cs string) string { return b.defaults[cs] }

// InitialVars is the session state a client starts with: the backend's
// base, with the character set its handshake collation coll asks for, and
// IGNORE_SPACE in sql_mode when its capabilities ask for it (as MariaDB and
// MySQL do).
func (b *Base) InitialVars(coll uint8, ignoreSpace bool) *State {
	key := int(coll)
	if ignoreSpace {
		key |= 1 << 8
	}
	if v, ok := b.initial.Load(key); ok {
		return v.(*State)
	}
	var changes []Change
	if cs, ok := b.charsets[coll]; ok && cs[1] != b.Vars.Get("collation_connection") {
		changes = append(changes, Change{"character_set_client", cs[0]}, Change{"character_set_connection", cs[0]},
			Change{"character_set_results", cs[0]}, Change{"collation_connection", cs[1]},
			Change{ResultsCollation, cs[1]})
	}
	if mode := b.Vars.Get("sql_mode"); ignoreSpace && !strings.Contains(mode, "IGNORE_SPACE") {
		if mode != "" {
			mode += ","
		}
		changes = append(changes, Change{"sql_mode", mode + "IGNORE_SPACE"})
	}
	v := b.Vars
	if len(changes) > 0 {
		v = b.Vars.With(changes)
	}
	b.initial.Store(key, v)
	return v
}
