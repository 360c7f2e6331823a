package proxy

import (
	"errors"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// Session state restore: bringing a borrowed backend connection's
// database, session variables and multi-statement option in line with the
// session's, and learning what a statement changed.

// sync restores our database, session variables and multi-statement option
// on bc, one round trip per thing that differs.
func (s *session) sync(bc *backendConn) error {
	defer bc.bound(s.srv.exchangeTimeout())()
	return syncConn(bc, s.state.DB, s.state.Vars, s.state.MultiStmts)
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

// initialVars is the session state this client starts with.
func (s *session) initialVars() *varstate.State {
	return s.srv.primary.base.Load().InitialVars(s.coll, s.caps&mysql.CLIENT_IGNORE_SPACE != 0)
}
