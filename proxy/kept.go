package proxy

import (
	"time"

	"github.com/holdfast-db/holdfast/proxy/varstate"
)

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
