package proxy

import (
	"slices"
	"strings"
)

// varState is an immutable set of session system variables that differ from
// what a fresh backend session would have, or that holdfast must pin down
// (the character set ones always). Sessions and backend connections share
// pointers: equal pointers mean equal state, so the common case (nothing
// changed) costs one comparison per statement. Never mutate one; derive a
// new one with with().
type varState struct {
	vals map[string]string // lower-case name -> value as the server reports it
}

// with returns a copy of v with the given name/value pairs applied.
func (v *varState) with(changes []varChange) *varState {
	n := &varState{vals: make(map[string]string, len(v.vals)+len(changes))}
	for k, val := range v.vals {
		n.vals[k] = val
	}
	for _, c := range changes {
		n.vals[c.name] = c.value
	}
	return n
}

func (v *varState) equal(o *varState) bool {
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

type varChange struct{ name, value string }

// charsetVars are set by the handshake collation; every varState carries all
// four so that restoring never depends on the server's global defaults.
var charsetVars = [...]string{"character_set_client", "character_set_connection", "character_set_results", "collation_connection"}

// restoreSQL returns the SET statement that turns backend state have into
// want, or "" when they are equal. Variables want lacks but have sets go
// back to DEFAULT (the global value a fresh session starts with).
func restoreSQL(want, have *varState) string {
	if want.equal(have) {
		return ""
	}
	var names []string
	for k, v := range want.vals {
		if hv, ok := have.vals[k]; !ok || hv != v {
			names = append(names, k)
		}
	}
	for k := range have.vals {
		if _, ok := want.vals[k]; !ok {
			names = append(names, k)
		}
	}
	if len(names) == 0 {
		return ""
	}
	// character_set_connection resets collation_connection, so collations
	// go after character sets; the rest in a stable order.
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := setRank(a), setRank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	var sb strings.Builder
	sb.WriteString("SET SESSION ")
	for i, k := range names {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(k)
		sb.WriteString(" = ")
		v, ok := want.vals[k]
		if !ok {
			sb.WriteString("DEFAULT")
			continue
		}
		writeSetValue(&sb, k, v)
	}
	return sb.String()
}

func setRank(name string) int {
	switch {
	case strings.HasPrefix(name, "character_set_"):
		return 0
	case strings.HasPrefix(name, "collation_"):
		return 1
	default:
		return 2
	}
}

// nullValue stands for SQL NULL in a varState.
const nullValue = "\x00NULL"

// writeSetValue writes a value as SELECT @@var returned it in a form SET
// accepts: numbers bare (MariaDB rejects quoted numbers for numeric
// variables), NULL as NULL, the rest quoted.
func writeSetValue(sb *strings.Builder, name, v string) {
	if isNumeric(v) {
		sb.WriteString(v)
		return
	}
	if v == nullValue || (v == "" && name == "character_set_results") {
		sb.WriteString("NULL")
		return
	}
	sb.WriteByte('\'')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\'':
			sb.WriteString("''")
		case '\\':
			sb.WriteString("\\\\")
		case 0:
			sb.WriteString("\\0")
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('\'')
}

func isNumeric(v string) bool {
	if v == "" {
		return false
	}
	i := 0
	if v[0] == '-' {
		i = 1
	}
	digits, dot := 0, false
	for ; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			digits++
		case c == '.' && !dot:
			dot = true
		default:
			return false
		}
	}
	return digits > 0
}

// Session-state tracking entry types (OK packet, CLIENT_SESSION_TRACK).
const (
	trackSystemVariables = 0x00
	trackSchema          = 0x01
	trackStateChange     = 0x02
)

// stateChanges is what one statement's OK packets reported.
type stateChanges struct {
	vars    []varChange
	schema  string
	schemaS bool // schema was reported
	changed bool // the server said session state changed
	pinVar  string
}

// parseStateInfo decodes session state information from an OK packet and
// adds it to sc. Variables holdfast must never restore on other connections
// (the tracker's own settings) are reported in pinVar instead.
func parseStateInfo(info []byte, sc *stateChanges) bool {
	for len(info) > 0 {
		typ := info[0]
		data, n, ok := readLenEncString(info[1:])
		if !ok {
			return false
		}
		info = info[1+n:]
		switch typ {
		case trackSystemVariables:
			name, k, ok := readLenEncString(data)
			if !ok {
				return false
			}
			val, _, ok := readLenEncString(data[k:])
			if !ok {
				return false
			}
			lname := strings.ToLower(string(name))
			if strings.HasPrefix(lname, "session_track_") {
				sc.pinVar = lname
				continue
			}
			sc.vars = append(sc.vars, varChange{name: lname, value: string(val)})
		case trackSchema:
			name, _, ok := readLenEncString(data)
			if !ok {
				return false
			}
			sc.schema, sc.schemaS = string(name), true
		case trackStateChange:
			sc.changed = true
		}
	}
	return true
}
