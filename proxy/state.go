package proxy

import (
	"slices"
	"strings"

	"github.com/holdfast-db/holdfast/attribution"
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

// assignment is one part of a restoring SET: SET NAMES value COLLATE
// collate (names), or SESSION name = value, or = DEFAULT (dflt).
type assignment struct {
	names       bool
	name, value string
	collate     string
	dflt        bool
}

// restoreSQL returns the SET statement that turns backend state have into
// want, or "" when they are equal (see restoreAssignments).
func restoreSQL(want, have *varState) string {
	if want.equal(have) {
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
func restoreAssignments(want, have *varState) []assignment {
	var as []assignment
	// The results' collation can only be set by SET NAMES ... COLLATE:
	// when it or the results' character set must change, SET NAMES goes
	// first, and the others are compared with what it leaves.
	after := have
	rc, rcoll := want.vals["character_set_results"], want.vals[resultsCollation]
	if rc != "" && rc != nullValue && rcoll != "" &&
		(rc != have.vals["character_set_results"] || rcoll != have.vals[resultsCollation]) {
		as = append(as, assignment{names: true, value: rc, collate: rcoll})
		after = have.with([]varChange{{"character_set_client", rc}, {"character_set_connection", rc},
			{"character_set_results", rc}, {"collation_connection", rcoll}, {resultsCollation, rcoll}})
	}
	var names []string
	for k, v := range want.vals {
		if hv, ok := after.vals[k]; (!ok || hv != v) && k != resultsCollation {
			names = append(names, k)
		}
	}
	for k := range after.vals {
		if _, ok := want.vals[k]; !ok && k != resultsCollation {
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

// parseVars are the session variables that decide what a statement text
// means when it is parsed: the character set its literals are read in,
// the collation they get (with its character set), and sql_mode
// (ANSI_QUOTES, NO_BACKSLASH_ESCAPES, PIPES_AS_CONCAT, ...). A prepared
// statement keeps the meaning it was parsed with.
var parseVars = [...]string{"character_set_client", "character_set_connection", "collation_connection", "sql_mode"}

// parseState returns v's values of parseVars (nil for a nil v).
func parseState(v *varState) []varChange {
	if v == nil {
		return nil
	}
	out := make([]varChange, 0, len(parseVars))
	for _, n := range parseVars {
		if val, ok := v.vals[n]; ok {
			out = append(out, varChange{n, val})
		}
	}
	return out
}

// sameParseState reports whether v has the values of parse.
func sameParseState(v *varState, parse []varChange) bool {
	for _, c := range parse {
		if v.vals[c.name] != c.value {
			return false
		}
	}
	return true
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

// stateChanges is what one statement's response reported about the
// session: its OK packets' session state information and the status flags
// of its OK and EOF packets.
type stateChanges struct {
	vars    []varChange // restored variables reported changed (trackRestore)
	schema  string
	schemaS bool // schema was reported
	changed bool // the server said session state changed
	// eofChanged: an EOF packet said session state changed. An EOF carries
	// no tracker data (backend connections do not negotiate DEPRECATE_EOF):
	// MariaDB reports the variables with the next OK that reports a change
	// of its own.
	eofChanged bool
	lastGTID   string // last_gtid reported (trackRecord)
	// kept: the statement set variables holdfast keeps for the client
	// (trackKept), now taken out of vars and handled (kept.go).
	kept bool
	// pin is the pin reason a reported variable implies (trackPin), and
	// pinVar names that variable.
	pin    string
	pinVar string
}

// noteEOF notes an EOF packet's status flags.
func (sc *stateChanges) noteEOF(status uint16) {
	if status&statusSessionChanged != 0 {
		sc.changed, sc.eofChanged = true, true
	}
}

// trackClass is what holdfast does with a system variable the backend's
// session tracker reports changed. Backend connections track every
// variable (session_track_system_variables = '*'), so the class decides
// which client state moves between connections and which must not:
//
//   - trackRestore (every variable not named below): the client's value,
//     read back from the connection after a change and set on every
//     connection the session uses next (restoreSQL);
//   - trackKept: holdfast keeps the client's value itself and never puts
//     it on a pooled connection (kept.go): wait_timeout,
//     interactive_timeout and the session_track_* settings;
//   - trackRecord: a read-only value the server changes: last_gtid, the
//     GTID of the client's last commit on a server with binary logging
//     on, reported with every commit's OK. It is recorded per client
//     (session.lastGTID, what read-your-writes needs) and never set on a
//     connection: SET last_gtid fails (1238, read-only variable);
//   - trackPin: a value that acts once or cannot be read back exactly, so
//     moving it would be wrong. insert_id and gtid_seq_no are consumed by
//     the next INSERT or the next GTID; last_insert_id (and its alias
//     identity) is what LAST_INSERT_ID() returns until the connection's
//     next INSERT changes it; timestamp set back to DEFAULT reads back as
//     the running clock, which no SET can reproduce; rand_seed1 and
//     rand_seed2 read back as 0. The session keeps its connection
//     (session_state). session_track_transaction_info pins too
//     (session_track): only the backend can report transaction state.
//
// A SET STATEMENT ... FOR statement reports its variables though they are
// back to their values when it ends: those reports are dropped whatever
// their class (see statementScoped).
type trackClass uint8

const (
	trackRestore trackClass = iota
	trackKept
	trackRecord
	trackPin
)

func classifyTracked(name string) trackClass {
	switch name {
	case "last_gtid":
		return trackRecord
	case "insert_id", "gtid_seq_no", "last_insert_id", "identity", "timestamp", "rand_seed1", "rand_seed2",
		"session_track_transaction_info":
		return trackPin
	}
	if isKept(name) {
		return trackKept
	}
	return trackRestore
}

// parseStateInfo decodes session state information from an OK packet and
// adds it to sc, each variable as its class says (see trackClass).
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
			switch classifyTracked(lname) {
			case trackRecord:
				sc.lastGTID = string(val)
			case trackPin:
				sc.pin, sc.pinVar = attribution.PinSessionState, lname
				if lname == "session_track_transaction_info" {
					sc.pin = attribution.PinSessionTrack
				}
			default: // restored and kept: kept ones are taken out by keptChanged
				sc.vars = append(sc.vars, varChange{name: lname, value: string(val)})
			}
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
