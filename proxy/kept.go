package proxy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// The variables holdfast keeps for a client (see varstate.KeptVars) on a
// borrowed connection: put in place around a statement that reads them,
// and read back after one that sets them.

// setKept installs the client's kept variables and the idle limit they
// imply.
func (s *session) setKept(k *varstate.KeptVars) {
	s.state.kept = k
	if k != nil {
		s.waitTimeout.Store(int64(k.WaitTimeout(s.state.interactive)))
	}
}

// putKept gives bc the client's kept variables for a read-only statement
// that reads them, and returns the SET that puts holdfast's values back
// ("" when they are the same). beginInFlight is settled first.
func (s *session) putKept(bc *backendConn) (string, error) {
	hf := s.srv.hfKept()
	if s.state.kept == nil || len(hf) == 0 {
		return "", nil
	}
	before := varstate.KeptSQL(s.state.kept.Values(), hf, nil)
	if before == "" {
		return "", nil
	}
	if err := s.settleBegin(bc); err != nil {
		return "", err
	}
	if _, err := bc.queryLocked(before); err != nil {
		return "", err
	}
	return varstate.KeptSQL(hf, s.state.kept.Values(), nil), nil
}

// keptKey is a backend statement cache key for a statement that reads
// the kept variables: key with the client's values of them, which decide
// the statement's columns (a variable's length).
func (s *session) keptKey(key string) string {
	if s.state.kept == nil {
		return key
	}
	var b strings.Builder
	b.WriteString(key)
	for _, n := range varstate.KeptNames {
		b.WriteByte(0)
		b.WriteString(s.state.kept.Get(n))
	}
	return b.String()
}

// syncKept reads the kept variables back from bc after a statement that
// may have set them, and sets bc back to holdfast's values. The values
// read of the variables the statement assigns (assigned, from its text)
// are the client's now; when the text is no plain SET (assigned nil),
// every value that differs from holdfast's is taken as the client's.
func (s *session) syncKept(bc *backendConn, assigned []string) error {
	hf := s.srv.hfKept()
	if s.state.kept == nil || len(hf) == 0 {
		return nil
	}
	res, err := bc.queryLocked(varstate.SelectKept("session") + " LIMIT 1")
	if err != nil {
		return err
	}
	if len(res.rows) != 1 || len(res.rows[0]) != len(varstate.KeptNames) {
		return fmt.Errorf("proxy: reading back %d session variables got %d rows", len(varstate.KeptNames), len(res.rows))
	}
	have := map[string]string{}
	var changes []varstate.Change
	for i, n := range varstate.KeptNames {
		v := string(res.rows[0][i])
		have[n] = v
		if assigned == nil && v != (hf)[n] || slices.Contains(assigned, n) {
			changes = append(changes, varstate.Change{Name: n, Value: v})
		}
	}
	if len(changes) > 0 {
		s.setKept(s.state.kept.With(changes))
	}
	if sql := varstate.KeptSQL(hf, have, nil); sql != "" {
		_, err = bc.queryLocked(sql)
	}
	return err
}

// keptChanged takes the kept variables out of changes (the session
// tracker's report, read back): they become the client's values, and the
// backend connection bc goes back to holdfast's values at once.
func (s *session) keptChanged(bc *backendConn, changes []varstate.Change) ([]varstate.Change, error) {
	var kept []varstate.Change
	rest := changes[:0:0]
	for _, c := range changes {
		if varstate.IsKept(c.Name) {
			kept = append(kept, c)
		} else {
			rest = append(rest, c)
		}
	}
	if len(kept) == 0 {
		return changes, nil
	}
	if s.state.kept == nil {
		s.setKept(s.srv.keptBase())
	}
	if s.state.kept != nil {
		s.setKept(s.state.kept.With(kept))
	}
	names := make([]string, len(kept))
	have := map[string]string{}
	for i, c := range kept {
		names[i] = c.Name
		have[c.Name] = c.Value
	}
	if hf := s.srv.hfKept(); len(hf) != 0 {
		if sql := varstate.KeptSQL(hf, have, names); sql != "" {
			if _, err := bc.queryLocked(sql); err != nil {
				return rest, err
			}
		}
	}
	return rest, nil
}
