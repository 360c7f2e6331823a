package proxy

import (
	"errors"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// The session's state on a backend connection: its database, variables
// and multi-statement option restored on a borrowed connection before a
// statement, the kept variables put in place around one that reads them,
// and the connection the state reads back through after a statement
// (sessionstate.State.After).

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

// The variables holdfast keeps for a client (see varstate.KeptVars) on a
// borrowed connection: put in place around a statement that reads them,
// and read back after one that sets them (sessionstate.State keeps them
// and does the reading back; here the connection side).

// keptSet is told of every change of the session's kept variables: the
// idle limit follows them.
func (s *session) keptSet(k *varstate.KeptVars) {
	if k != nil {
		s.waitTimeout.Store(int64(k.WaitTimeout(s.state.Interactive)))
	}
}

// putKept gives bc the client's kept variables for a read-only statement
// that reads them, and returns the SET that puts holdfast's values back
// ("" when they are the same). beginInFlight is settled first.
func (s *session) putKept(bc *backendConn) (string, error) {
	before, after := s.state.KeptSQL(s.srv.hfKept())
	if before == "" {
		return "", nil
	}
	if err := s.settleBegin(bc); err != nil {
		return "", err
	}
	if _, err := bc.queryLocked(before); err != nil {
		return "", err
	}
	return after, nil
}

// stateConn is the connection a statement ran on, as the session's state
// reads and sets it after the statement (sessionstate.Conn): each
// exchange bounded by the backend's exchange timeout.
type stateConn struct {
	bc      *backendConn
	timeout time.Duration
}

func (c *stateConn) Exchange(sql string) ([][][]byte, error) {
	unbound := c.bc.bound(c.timeout)
	defer unbound()
	res, err := c.bc.queryLocked(sql)
	if res == nil {
		return nil, err
	}
	return res.rows, err
}

func (c *stateConn) PingStatus() (uint16, error) {
	unbound := c.bc.bound(c.timeout)
	defer unbound()
	return c.bc.pingStatus()
}
