package varstate

import (
	"slices"
	"strings"
)

// assignment is one part of a restoring SET: SET NAMES value COLLATE
// collate (names), or SESSION name = value, or = DEFAULT (dflt).
type assignment struct {
	names       bool
	name, value string
	collate     string
	dflt        bool
}

// RestoreSQL returns the SET statement that turns backend state have into
// want, or "" when they are equal (see restoreAssignments).
func RestoreSQL(want, have *State) string {
	if want.Equal(have) {
		return ""
	}
	as := restoreAssignments(want, have)
	if len(as) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteString("SET ")
	scoped := false
	for i, a := range as {
		if i > 0 {
			sb.WriteString(", ")
		}
		if a.names {
			sb.WriteString("NAMES ")
			writeSetValue(&sb, "", a.value)
			sb.WriteString(" COLLATE ")
			writeSetValue(&sb, "", a.collate)
			continue
		}
		if !scoped {
			sb.WriteString("SESSION ") // the scope of every assignment after it
			scoped = true
		}
		sb.WriteString(a.name)
		sb.WriteString(" = ")
		if a.dflt {
			sb.WriteString("DEFAULT")
			continue
		}
		writeSetValue(&sb, a.name, a.value)
	}
	return sb.String()
}

// restoreAssignments returns the assignments, in order, that turn backend
// state have into want. Variables want lacks but have sets go back to
// DEFAULT (the global value a fresh session starts with). Only the
// variables that differ are set, and every variable that an assignment
// moves as a side effect is set back to want's value after it: SET NAMES
// sets the client, connection and results character sets and the
// connection collation together, and character_set_connection resets
// collation_connection.
func restoreAssignments(want, have *State) []assignment {
	var as []assignment
	// The results' collation can only be set by SET NAMES ... COLLATE:
	// when it or the results' character set must change, SET NAMES goes
	// first, and the others are compared with what it leaves.
	after := have
	rc, rcoll := want.vals["character_set_results"], want.vals[ResultsCollation]
	if rc != "" && rc != NullValue && rcoll != "" &&
		(rc != have.vals["character_set_results"] || rcoll != have.vals[ResultsCollation]) {
		as = append(as, assignment{names: true, value: rc, collate: rcoll})
		after = have.With([]Change{{"character_set_client", rc}, {"character_set_connection", rc},
			{"character_set_results", rc}, {"collation_connection", rcoll}, {ResultsCollation, rcoll}})
	}
	var names []string
	for k, v := range want.vals {
		if hv, ok := after.vals[k]; (!ok || hv != v) && k != ResultsCollation {
			names = append(names, k)
		}
	}
	for k := range after.vals {
		if _, ok := want.vals[k]; !ok && k != ResultsCollation {
			names = append(names, k)
		}
	}
	if slices.Contains(names, "character_set_connection") && !slices.Contains(names, "collation_connection") {
		// Setting the connection's character set resets its collation.
		if _, ok := want.vals["collation_connection"]; ok {
			names = append(names, "collation_connection")
		}
	}
	// Collations go after character sets; the rest in a stable order.
	slices.SortFunc(names, func(a, b string) int {
		if ra, rb := setRank(a), setRank(b); ra != rb {
			return ra - rb
		}
		return strings.Compare(a, b)
	})
	for _, k := range names {
		v, ok := want.vals[k]
		as = append(as, assignment{name: k, value: v, dflt: !ok})
	}
	return as
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

// NullValue stands for SQL NULL in a State.
const NullValue = "\x00NULL"

// writeSetValue writes a value as SELECT @@var returned it in a form SET
// accepts: numbers bare (MariaDB rejects quoted numbers for numeric
// variables), NULL as NULL, the rest quoted.
func writeSetValue(sb *strings.Builder, name, v string) {
	if isNumeric(v) {
		sb.WriteString(v)
		return
	}
	if v == NullValue || (v == "" && name == "character_set_results") {
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
