package varstate

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Kept variables are session variables whose client value holdfast keeps
// itself instead of restoring it on backend connections, because on a
// pooled connection it would act on the wrong party:
//
//   - wait_timeout and interactive_timeout: MariaDB would close the pooled
//     connection (not the idle client) once it sat in the pool that long;
//     holdfast closes the idle client instead (see Server.janitor);
//   - session_track_system_variables, session_track_schema and
//     session_track_state_change: holdfast's backend connections track every
//     change (it needs them to restore state); what a client is told in its
//     OK packets is filtered down to what its own settings ask for.
//
// A client's SET of one of them is answered by the backend as usual and
// the connection is set back to holdfast's value at once. A read-only
// statement that reads them (SELECT @@wait_timeout, SHOW VARIABLES ...)
// runs with the client's values put in place around it.
// session_track_transaction_info is not kept: a client that turns it on
// is pinned (reason session_track), since only the backend can report
// transaction state.
var KeptNames = [...]string{
	"wait_timeout", "interactive_timeout",
	"session_track_system_variables", "session_track_schema", "session_track_state_change",
}

// KeptVars is an immutable set of kept variable values (as the server
// reports them), shared like State.
type KeptVars struct {
	vals map[string]string
	// Track is what the client's session-tracking settings ask to be
	// told, derived from the session_track_* values.
	Track Filter
}

// Get returns the value of kept variable name.
func (k *KeptVars) Get(name string) string { return k.vals[name] }

// Values returns the kept variables' values. The map must not be changed.
func (k *KeptVars) Values() map[string]string { return k.vals }

func NewKept(vals map[string]string) *KeptVars {
	k := &KeptVars{vals: vals}
	k.Track = Filter{
		Schema:      isOn(vals["session_track_schema"]),
		StateChange: isOn(vals["session_track_state_change"]),
	}
	list := strings.ToLower(strings.TrimSpace(vals["session_track_system_variables"]))
	if list == "*" {
		k.Track.AllVars = true
	} else {
		k.Track.Vars = map[string]int{}
		for _, n := range strings.Split(list, ",") {
			if n = strings.TrimSpace(n); n != "" {
				if _, dup := k.Track.Vars[n]; !dup {
					k.Track.Vars[n] = len(k.Track.Vars)
				}
			}
		}
	}
	return k
}

func (k *KeptVars) With(changes []Change) *KeptVars {
	vals := make(map[string]string, len(k.vals))
	for n, v := range k.vals {
		vals[n] = v
	}
	for _, c := range changes {
		vals[c.Name] = c.Value
	}
	return NewKept(vals)
}

// WaitTimeout is the idle time after which the client is disconnected
// (0: never).
func (k *KeptVars) WaitTimeout(interactive bool) time.Duration {
	name := "wait_timeout"
	if interactive {
		name = "interactive_timeout"
	}
	n, err := strconv.ParseFloat(k.vals[name], 64)
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n * float64(time.Second))
}

func isOn(v string) bool {
	switch strings.ToUpper(v) {
	case "ON", "1", "TRUE", "YES":
		return true
	}
	return false
}

// DropKept returns changes without the kept variables.
func DropKept(changes []Change) []Change {
	out := changes[:0]
	for _, c := range changes {
		if !IsKept(c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// KeptOnly returns the changes to kept variables among changes.
func KeptOnly(changes []Change) []Change {
	var out []Change
	for _, c := range changes {
		if IsKept(c.Name) {
			out = append(out, c)
		}
	}
	return out
}

func IsKept(name string) bool {
	for _, k := range KeptNames {
		if k == name {
			return true
		}
	}
	return false
}

// Filter is what a client's session-tracking settings ask to be told.
type Filter struct {
	AllVars     bool           // session_track_system_variables = '*'
	Vars        map[string]int // tracked variable -> its place in the client's list
	Schema      bool           // session_track_schema
	StateChange bool           // session_track_state_change
}

// Apply appends to dst the entries of session state information
// the client's settings ask for. Variables come first, in the order of the
// client's list (with "*", as the server sent them), then the other
// entries in the server's order, as MariaDB sends them.
func (f *Filter) Apply(dst, info []byte) []byte {
	type entry struct {
		b    []byte
		rank int
	}
	var vars [8]entry
	sysvars := vars[:0]
	rest := len(dst)
	for len(info) > 0 {
		typ := info[0]
		data, n, ok := mysqlwire.ReadLenEncString(info[1:])
		if !ok {
			return dst
		}
		e := info[:1+n]
		info = info[1+n:]
		switch typ {
		case TrackSystemVariables:
			name, _, ok := mysqlwire.ReadLenEncString(data)
			if !ok {
				continue
			}
			rank, tracked := f.Vars[strings.ToLower(string(name))]
			if f.AllVars {
				rank, tracked = len(sysvars), true
			}
			if tracked {
				sysvars = append(sysvars, entry{e, rank})
			}
			continue
		case TrackSchema:
			if !f.Schema {
				continue
			}
		case TrackStateChange:
			if !f.StateChange {
				continue
			}
		default:
			// Transaction state and characteristics: only a session that
			// turned them on (and is pinned) gets them from the backend.
		}
		dst = append(dst, e...)
	}
	if len(sysvars) == 0 {
		return dst
	}
	slices.SortStableFunc(sysvars, func(a, b entry) int { return a.rank - b.rank })
	others := append([]byte(nil), dst[rest:]...)
	dst = dst[:rest]
	for _, e := range sysvars {
		dst = append(dst, e.b...)
	}
	return append(dst, others...)
}

// HoldfastKept is the kept variables' values on holdfast's backend
// connections: tracking of everything, and the server's global timeouts.
func HoldfastKept(global map[string]string) map[string]string {
	return map[string]string{
		"wait_timeout":                   global["wait_timeout"],
		"interactive_timeout":            global["interactive_timeout"],
		"session_track_system_variables": "*",
		"session_track_schema":           "ON",
		"session_track_state_change":     "ON",
	}
}

// KeptSQL returns the SET that gives a backend connection the values of
// want for the kept variables in names (all when names is nil) where they
// differ from have; "" when none does.
func KeptSQL(want, have map[string]string, names []string) string {
	if names == nil {
		names = KeptNames[:]
	}
	var sb strings.Builder
	for _, n := range names {
		w, ok := want[n]
		if !ok || w == have[n] {
			continue
		}
		if sb.Len() == 0 {
			sb.WriteString("SET SESSION ")
		} else {
			sb.WriteString(", ")
		}
		sb.WriteString(n)
		sb.WriteString(" = ")
		writeSetValue(&sb, n, w)
	}
	return sb.String()
}

// SelectKept is a SELECT of the kept variables in scope ("session" or
// "global"), one column each in KeptNames' order.
func SelectKept(scope string) string {
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range KeptNames {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("@@" + scope + "." + n)
	}
	return q.String()
}
