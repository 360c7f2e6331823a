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

// resultsCollation is a varState entry that is no session variable: the
// collation result columns are marked with. MariaDB keeps it apart from
// @@character_set_results, which names only the character set: SET NAMES
// x COLLATE y (and the handshake) give y, SET character_set_results = x
// gives x's default collation. It is restored with SET NAMES.
const resultsCollation = "\x00results_collation"

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
	var sb strings.Builder
	sb.WriteString("SET ")
	n := 0
	sep := func() {
		if n > 0 {
			sb.WriteString(", ")
		}
		n++
	}
	scoped := false
	// The character set: SET NAMES first when the results' collation or
	// character set must change (it sets the client and connection ones
	// too), then whatever it did not set as want has it.
	after := have
	charsets := false
	for _, k := range names {
		charsets = charsets || isCharsetVar(k)
	}
	rc, rcoll := want.vals["character_set_results"], want.vals[resultsCollation]
	if charsets && rc != "" && rc != nullValue && rcoll != "" &&
		(rc != have.vals["character_set_results"] || rcoll != have.vals[resultsCollation]) {
		sep()
		sb.WriteString("NAMES ")
		writeSetValue(&sb, "", rc)
		sb.WriteString(" COLLATE ")
		writeSetValue(&sb, "", rcoll)
		after = have.with([]varChange{{"character_set_client", rc}, {"character_set_connection", rc},
			{"character_set_results", rc}, {"collation_connection", rcoll}, {resultsCollation, rcoll}})
	}
	// character_set_connection resets collation_connection, so collations
	// go after character sets; the rest in a stable order.
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := setRank(a), setRank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	for _, k := range names {
		if k == resultsCollation {
			continue
		}
		v, ok := want.vals[k]
		if isCharsetVar(k) && ok && after.vals[k] == v {
			continue // SET NAMES did it
		}
		sep()
		if !scoped {
			sb.WriteString("SESSION ") // the scope of every assignment after it
			scoped = true
		}
		sb.WriteString(k)
		sb.WriteString(" = ")
		if !ok {
			sb.WriteString("DEFAULT")
			continue
		}
		writeSetValue(&sb, k, v)
	}
	if n == 0 {
		return ""
	}
	return sb.String()
}

func isCharsetVar(name string) bool {
	return strings.HasPrefix(name, "character_set_") || name == "collation_connection" || name == resultsCollation
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

// appendStateEntry appends one session state entry: its type and its
// length-encoded data.
func appendStateEntry(b []byte, typ byte, data []byte) []byte {
	return appendLenEncString(append(b, typ), data)
}

// stateChanges is what one statement's OK packets reported.
type stateChanges struct {
	vars    []varChange
	schema  string
	schemaS bool // schema was reported
	changed bool // the server said session state changed
	pinVar  string
}

// parseStateInfo decodes session state information from an OK packet and
// adds it to sc. session_track_transaction_info, which holdfast cannot
// keep for a client (see kept.go), is reported in pinVar instead.
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
			if lname == "session_track_transaction_info" {
				// Only the backend can report transaction state: pin.
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
