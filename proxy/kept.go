package proxy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
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
var keptNames = [...]string{
	"wait_timeout", "interactive_timeout",
	"session_track_system_variables", "session_track_schema", "session_track_state_change",
}

// keptVars is an immutable set of kept variable values (as the server
// reports them), shared like varState.
type keptVars struct {
	vals   map[string]string
	filter trackFilter // derived from the session_track_* values
}

func newKept(vals map[string]string) *keptVars {
	k := &keptVars{vals: vals}
	k.filter = trackFilter{
		schema:      isOn(vals["session_track_schema"]),
		stateChange: isOn(vals["session_track_state_change"]),
	}
	list := strings.ToLower(strings.TrimSpace(vals["session_track_system_variables"]))
	if list == "*" {
		k.filter.allVars = true
	} else {
		k.filter.vars = map[string]int{}
		for _, n := range strings.Split(list, ",") {
			if n = strings.TrimSpace(n); n != "" {
				if _, dup := k.filter.vars[n]; !dup {
					k.filter.vars[n] = len(k.filter.vars)
				}
			}
		}
	}
	return k
}

func (k *keptVars) with(changes []varChange) *keptVars {
	vals := make(map[string]string, len(k.vals))
	for n, v := range k.vals {
		vals[n] = v
	}
	for _, c := range changes {
		vals[c.name] = c.value
	}
	return newKept(vals)
}

// waitTimeout is the idle time after which the client is disconnected
// (0: never).
func (k *keptVars) waitTimeout(interactive bool) time.Duration {
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

// dropKept returns changes without the kept variables.
func dropKept(changes []varChange) []varChange {
	out := changes[:0]
	for _, c := range changes {
		if !isKept(c.name) {
			out = append(out, c)
		}
	}
	return out
}

// keptOnly returns the changes to kept variables among changes.
func keptOnly(changes []varChange) []varChange {
	var out []varChange
	for _, c := range changes {
		if isKept(c.name) {
			out = append(out, c)
		}
	}
	return out
}

func isKept(name string) bool {
	for _, k := range keptNames {
		if k == name {
			return true
		}
	}
	return false
}

// trackFilter is what a client's session-tracking settings ask to be told.
type trackFilter struct {
	allVars     bool
	vars        map[string]int // tracked variable -> its place in the client's list
	schema      bool
	stateChange bool
}

// filterStateInfo appends to dst the entries of session state information
// the client's settings ask for. Variables come first, in the order of the
// client's list (with "*", as the server sent them), then the other
// entries in the server's order, as MariaDB sends them.
func (f *trackFilter) filterStateInfo(dst, info []byte) []byte {
	type entry struct {
		b    []byte
		rank int
	}
	var vars [8]entry
	sysvars := vars[:0]
	rest := len(dst)
	for len(info) > 0 {
		typ := info[0]
		data, n, ok := readLenEncString(info[1:])
		if !ok {
			return dst
		}
		e := info[:1+n]
		info = info[1+n:]
		switch typ {
		case trackSystemVariables:
			name, _, ok := readLenEncString(data)
			if !ok {
				continue
			}
			rank, tracked := f.vars[strings.ToLower(string(name))]
			if f.allVars {
				rank, tracked = len(sysvars), true
			}
			if tracked {
				sysvars = append(sysvars, entry{e, rank})
			}
			continue
		case trackSchema:
			if !f.schema {
				continue
			}
		case trackStateChange:
			if !f.stateChange {
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

// holdfastKept is the kept variables' values on holdfast's backend
// connections: tracking of everything, and the server's global timeouts.
func holdfastKept(global map[string]string) map[string]string {
	return map[string]string{
		"wait_timeout":                   global["wait_timeout"],
		"interactive_timeout":            global["interactive_timeout"],
		"session_track_system_variables": "*",
		"session_track_schema":           "ON",
		"session_track_state_change":     "ON",
	}
}

// keptSQL returns the SET that gives a backend connection the values of
// want for the kept variables in names (all when names is nil) where they
// differ from have; "" when none does.
func keptSQL(want, have map[string]string, names []string) string {
	if names == nil {
		names = keptNames[:]
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

// setKept installs the client's kept variables and the idle limit they
// imply.
func (s *session) setKept(k *keptVars) {
	s.kept = k
	if k != nil {
		s.waitTimeout.Store(int64(k.waitTimeout(s.interactive)))
	}
}

// putKept gives bc the client's kept variables for a read-only statement
// that reads them, and returns the SET that puts holdfast's values back
// ("" when they are the same). beginInFlight is settled first.
func (s *session) putKept(bc *backendConn) (string, error) {
	hf := s.srv.hfKept.Load()
	if s.kept == nil || hf == nil {
		return "", nil
	}
	before := keptSQL(s.kept.vals, *hf, nil)
	if before == "" {
		return "", nil
	}
	if err := s.settleBegin(bc); err != nil {
		return "", err
	}
	if _, err := bc.queryLocked(before); err != nil {
		return "", err
	}
	return keptSQL(*hf, s.kept.vals, nil), nil
}

// selectKept is a SELECT of the kept variables in scope ("session" or
// "global"), one column each in keptNames' order.
func selectKept(scope string) string {
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range keptNames {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("@@" + scope + "." + n)
	}
	return q.String()
}

// syncKept reads the kept variables back from bc after a statement that
// may have set them, and sets bc back to holdfast's values. The values
// read of the variables the statement assigns (assigned, from its text)
// are the client's now; when the text is no plain SET (assigned nil),
// every value that differs from holdfast's is taken as the client's.
func (s *session) syncKept(bc *backendConn, assigned []string) error {
	hf := s.srv.hfKept.Load()
	if s.kept == nil || hf == nil {
		return nil
	}
	res, err := bc.queryLocked(selectKept("session") + " LIMIT 1")
	if err != nil {
		return err
	}
	if len(res.rows) != 1 || len(res.rows[0]) != len(keptNames) {
		return fmt.Errorf("proxy: reading back %d session variables got %d rows", len(keptNames), len(res.rows))
	}
	have := map[string]string{}
	var changes []varChange
	for i, n := range keptNames {
		v := string(res.rows[0][i])
		have[n] = v
		if assigned == nil && v != (*hf)[n] || slices.Contains(assigned, n) {
			changes = append(changes, varChange{n, v})
		}
	}
	if len(changes) > 0 {
		s.setKept(s.kept.with(changes))
	}
	if sql := keptSQL(*hf, have, nil); sql != "" {
		_, err = bc.queryLocked(sql)
	}
	return err
}

// keptChanged takes the kept variables out of changes (the session
// tracker's report, read back): they become the client's values, and the
// backend connection bc goes back to holdfast's values at once.
func (s *session) keptChanged(bc *backendConn, changes []varChange) ([]varChange, error) {
	var kept []varChange
	rest := changes[:0:0]
	for _, c := range changes {
		if isKept(c.name) {
			kept = append(kept, c)
		} else {
			rest = append(rest, c)
		}
	}
	if len(kept) == 0 {
		return changes, nil
	}
	if s.kept == nil {
		s.setKept(s.srv.keptBase.Load())
	}
	if s.kept != nil {
		s.setKept(s.kept.with(kept))
	}
	names := make([]string, len(kept))
	have := map[string]string{}
	for i, c := range kept {
		names[i] = c.name
		have[c.name] = c.value
	}
	if hf := s.srv.hfKept.Load(); hf != nil {
		if sql := keptSQL(*hf, have, names); sql != "" {
			if _, err := bc.queryLocked(sql); err != nil {
				return rest, err
			}
		}
	}
	return rest, nil
}
