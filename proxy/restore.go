package proxy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// Session state restore: bringing a borrowed backend connection's
// database, session variables and multi-statement option in line with the
// session's, and learning what a statement changed.

// sync restores our database, session variables and multi-statement option
// on bc, one round trip per thing that differs.
func (s *session) sync(bc *backendConn) error {
	defer bc.bound(s.srv.exchangeTimeout())()
	return syncConn(bc, s.db, s.vars, s.multiStmts)
}

func syncConn(bc *backendConn, db string, vars *varState, multiStmts bool) error {
	if db != "" && (!bc.dbKnown || bc.db != db) {
		if err := bc.writeCommandString(comInitDB, db); err != nil {
			return err
		}
		if _, err := bc.readOK(); err != nil {
			return err
		}
		bc.db, bc.dbKnown = db, true
	}
	if !vars.equal(bc.vars) {
		if sql := restoreSQL(vars, bc.vars); sql != "" {
			if _, err := bc.queryLocked(sql); err != nil {
				var se *sqlError
				if errors.As(err, &se) {
					return newErr(se.Code, se.State, "holdfast could not restore session variables on a pooled connection (%s): %s", sql, se.Msg)
				}
				return err
			}
		}
	}
	bc.vars = vars
	if bc.multiStmts != multiStmts {
		if err := bc.setMultiStatements(multiStmts); err != nil {
			return err
		}
	}
	return nil
}

// noteResultsCollation adds to sc the collation results are now marked
// with (see resultsCollation) when the statement changed the character set:
// SET NAMES ... gives the connection collation, any other change of
// character_set_results that character set's default collation.
func (s *session) noteResultsCollation(sc *stateChanges, info *sqlscan.Info) {
	var results, conn string
	var resultsSet, connSet bool
	for _, c := range sc.vars {
		switch c.name {
		case "character_set_results":
			results, resultsSet = c.value, true
		case "collation_connection":
			conn, connSet = c.value, true
		}
	}
	switch {
	case info != nil && info.Features&sqlscan.FeatSetNames != 0 && connSet && (resultsSet || conn != s.vars.vals[resultsCollation]):
		sc.vars = append(sc.vars, varChange{resultsCollation, conn})
	case resultsSet:
		coll := ""
		if d := s.srv.defaultColl.Load(); d != nil {
			coll = (*d)[results]
		}
		sc.vars = append(sc.vars, varChange{resultsCollation, coll})
	}
}

// readBackVars replaces the values the session tracker reported with the
// values the server now has. The tracker tells which variables changed, but
// MariaDB 10.11 can report a stale value (time_zone after a second SET
// reports the previous zone) and reports SET NAMES ... COLLATE without
// collation_connection; one SELECT on the same connection is exact.
func readBackVars(bc *backendConn, sc *stateChanges) error {
	names := make([]string, 0, len(sc.vars)+1)
	seen := map[string]bool{}
	charset := false
	for _, v := range sc.vars {
		if !seen[v.name] {
			seen[v.name] = true
			names = append(names, v.name)
		}
		if strings.HasPrefix(v.name, "character_set_") {
			charset = true
		}
	}
	if charset && !seen["collation_connection"] {
		names = append(names, "collation_connection")
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range names {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("@@session.`")
		q.WriteString(n)
		q.WriteString("`")
	}
	q.WriteString(" LIMIT 1") // an explicit LIMIT overrides sql_select_limit
	res, err := bc.queryLocked(q.String())
	if err != nil {
		return err
	}
	if len(res.rows) != 1 || len(res.rows[0]) != len(names) {
		return fmt.Errorf("proxy: reading back %d session variables got %d rows", len(names), len(res.rows))
	}
	sc.vars = sc.vars[:0]
	for i, n := range names {
		v := res.rows[0][i]
		val := string(v)
		if v == nil {
			val = nullValue
		}
		sc.vars = append(sc.vars, varChange{name: n, value: val})
	}
	return nil
}

// initialVars is the session state this client starts with.
func (s *session) initialVars() *varState {
	return s.srv.initialVars(s.coll, s.caps&mysql.CLIENT_IGNORE_SPACE != 0)
}
