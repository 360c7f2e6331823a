package varstate

// State is an immutable set of session system variables that differ from
// what a fresh backend session would have, or that holdfast must pin down
// (the character set ones always). Sessions and backend connections share
// pointers: equal pointers mean equal state, so the common case (nothing
// changed) costs one comparison per statement. Never mutate one; derive a
// new one with With.
type State struct {
	vals map[string]string // lower-case name -> value as the server reports it
}

// With returns a copy of v with changes applied.
func (v *State) With(changes []Change) *State {
	n := &State{vals: make(map[string]string, len(v.vals)+len(changes))}
	for k, val := range v.vals {
		n.vals[k] = val
	}
	for _, c := range changes {
		n.vals[c.Name] = c.Value
	}
	return n
}

// Equal reports whether v and o hold the same values.
func (v *State) Equal(o *State) bool {
	if v == o {
		return true
	}
	if len(v.vals) != len(o.vals) {
		return false
	}
	for k, a := range v.vals {
		if b, ok := o.vals[k]; !ok || a != b {
			return false
		}
	}
	return true
}

// FromValues is a State holding vals (copied): lower-case names to values
// as the server reports them (NullValue for NULL).
func FromValues(vals map[string]string) *State {
	v := &State{vals: make(map[string]string, len(vals))}
	for k, val := range vals {
		v.vals[k] = val
	}
	return v
}

// Get returns the value of name ("" when v does not hold it).
func (v *State) Get(name string) string { return v.vals[name] }

// Lookup returns the value of name and whether v holds it.
func (v *State) Lookup(name string) (string, bool) {
	val, ok := v.vals[name]
	return val, ok
}

// Change is a variable's new value.
type Change struct{ Name, Value string }

// CharsetVars are set by the handshake collation; every State carries all
// four so that restoring never depends on the server's global defaults.
var CharsetVars = [...]string{"character_set_client", "character_set_connection", "character_set_results", "collation_connection"}

// ResultsCollation is a State entry that is no session variable: the
// collation result columns are marked with. MariaDB keeps it apart from
// @@character_set_results, which names only the character set: SET NAMES
// x COLLATE y (and the handshake) give y, SET character_set_results = x
// gives x's default collation. It is restored with SET NAMES.
const ResultsCollation = "\x00results_collation"

// ParseVars are the session variables that decide what a statement text
// means when it is parsed: the character set its literals are read in,
// the collation they get (with its character set), and sql_mode
// (ANSI_QUOTES, NO_BACKSLASH_ESCAPES, PIPES_AS_CONCAT, ...). A prepared
// statement keeps the meaning it was parsed with.
var ParseVars = [...]string{"character_set_client", "character_set_connection", "collation_connection", "sql_mode"}

// ParseState returns v's values of ParseVars (nil for a nil v).
func ParseState(v *State) []Change {
	if v == nil {
		return nil
	}
	out := make([]Change, 0, len(ParseVars))
	for _, n := range ParseVars {
		if val, ok := v.vals[n]; ok {
			out = append(out, Change{n, val})
		}
	}
	return out
}

// SameParseState reports whether v has the values of parse.
func SameParseState(v *State, parse []Change) bool {
	for _, c := range parse {
		if v.vals[c.Name] != c.Value {
			return false
		}
	}
	return true
}
