package proxy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// Session state restore: bringing a borrowed backend connection's
// database, session variables and multi-statement option in line with the
// session's, and learning what a statement changed.

// sync restores our database, session variables and multi-statement option
// on bc, one round trip per thing that differs.
func (s *session) sync(bc *backendConn) error {
	defer bc.bound(s.srv.exchangeTimeout())()
	return syncConn(bc, s.state.db, s.state.vars, s.state.multiStmts)
}

func syncConn(bc *backendConn, db string, vars *varstate.State, multiStmts bool) error {
	if db != "" && (!bc.dbKnown || bc.db != db) {
		if err := bc.writeCommandString(comInitDB, db); err != nil {
			return err
		}
		if _, err := bc.readOK(); err != nil {
			return err
		}
		bc.db, bc.dbKnown = db, true
	}
	if !vars.Equal(bc.vars) {
		if sql := varstate.RestoreSQL(vars, bc.vars); sql != "" {
			if _, err := bc.queryLocked(sql); err != nil {
				var se *mysqlwire.SQLError
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
// with (see varstate.ResultsCollation) when the statement changed the character set:
// SET NAMES ... gives the connection collation, any other change of
// character_set_results that character set's default collation.
func (s *session) noteResultsCollation(sc *varstate.Report, info *sqlscan.Info) {
	var results, conn string
	var resultsSet, connSet bool
	for _, c := range sc.Vars {
		switch c.Name {
		case "character_set_results":
			results, resultsSet = c.Value, true
		case "collation_connection":
			conn, connSet = c.Value, true
		}
	}
	switch {
	case info != nil && info.Features&sqlscan.FeatSetNames != 0 && connSet && (resultsSet || conn != s.state.vars.Get(varstate.ResultsCollation)):
		sc.Vars = append(sc.Vars, varstate.Change{Name: varstate.ResultsCollation, Value: conn})
	case resultsSet:
		coll := ""
		if b := s.srv.primary.base.Load(); b != nil {
			coll = b.DefaultCollation(results)
		}
		sc.Vars = append(sc.Vars, varstate.Change{Name: varstate.ResultsCollation, Value: coll})
	}
}

// readBackVars replaces the values the session tracker reported with the
// values the server now has. The tracker tells which variables changed, but
// MariaDB 10.11 can report a stale value (time_zone after a second SET
// reports the previous zone) and reports SET NAMES ... COLLATE without
// collation_connection; one SELECT on the same connection is exact.
func readBackVars(bc *backendConn, sc *varstate.Report) error {
	names := make([]string, 0, len(sc.Vars)+1)
	seen := map[string]bool{}
	charset := false
	for _, v := range sc.Vars {
		if !seen[v.Name] {
			seen[v.Name] = true
			names = append(names, v.Name)
		}
		if strings.HasPrefix(v.Name, "character_set_") {
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
	sc.Vars = sc.Vars[:0]
	for i, n := range names {
		v := res.rows[0][i]
		val := string(v)
		if v == nil {
			val = varstate.NullValue
		}
		sc.Vars = append(sc.Vars, varstate.Change{Name: n, Value: val})
	}
	return nil
}

// initialVars is the session state this client starts with.
func (s *session) initialVars() *varstate.State {
	return s.srv.primary.base.Load().InitialVars(s.coll, s.caps&mysql.CLIENT_IGNORE_SPACE != 0)
}
