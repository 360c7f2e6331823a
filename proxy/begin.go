package proxy

import (
	"errors"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/sessionstate"
)

// Deferred BEGIN: a plain BEGIN outside a transaction (typed, or a prepared
// statement) is answered at once and sent to the backend when the
// transaction's first real statement borrows a connection: in the same
// write when that statement is a SELECT, else just before it. InnoDB takes
// its snapshot at the first read anyway, so nothing observable changes,
// while the transaction's first statement (usually tagged, unlike the BEGIN
// a driver sends) decides its tag before a connection is borrowed, and hold
// time starts when work does.

// deferBegin answers a plain BEGIN (typed, or a prepared statement's
// text) locally, and keeps it as the COM_QUERY to send with the
// transaction's first statement; a tagged BEGIN's tag is the
// transaction's.
func (s *session) deferBegin(sql []byte, tag *attribution.Tag, tagged bool) {
	s.state.Txn.PendingBegin = append(append(s.state.Txn.PendingBegin[:0], comQuery), sql...)
	s.state.Status |= mysqlwire.StatusInTrans
	if tagged {
		s.setTxnTag(tag)
	}
	s.writeOK(0, 0)
}

// endDeferred answers a plain COMMIT or ROLLBACK of a transaction whose
// deferred BEGIN was never sent: nothing reached the backend.
func (s *session) endDeferred() {
	s.state.Txn.PendingBegin = nil
	s.state.Status &^= mysqlwire.StatusInTrans
	s.setTxnTag(nil)
	s.writeOK(0, 0)
}

// startDeferredBegin sends the deferred BEGIN on a freshly borrowed
// connection. With ahead, it only buffers it: the statement written next
// goes out in the same write (one round trip for both), and readBeginAhead
// reads BEGIN's OK before that statement's response. Only a single SELECT
// may ride along so (see policy.PlainSelect): should BEGIN fail (a plain
// BEGIN practically never does), the SELECT has run on its own, which for
// a read changes nothing (a locking read's locks end with it), and the
// transaction is lost (see beginLost).
func (s *session) startDeferredBegin(bc *backendConn, ahead bool) error {
	begin := s.state.Txn.PendingBegin
	s.state.Txn.PendingBegin, s.state.Txn.SentBegin = nil, begin
	if s.srv.config().Failover.TransactionReplay {
		s.txlog.start(begin)
	}
	if ahead {
		bc.w.Seq = 0
		if err := bc.w.WritePacket(begin); err != nil {
			return err
		}
		s.state.Txn.BeginInFlight = true
		s.srv.beginsAhead.Add(1)
		return nil
	}
	if err := bc.writeCommand(begin); err != nil {
		return err
	}
	ok, err := bc.readOK()
	if err != nil {
		return err
	}
	s.state.Status = ok.Status & sessionstate.Status
	return nil
}

// beginLost ends a transaction whose deferred BEGIN the backend did not
// run. The client was told BEGIN succeeded, so its next statements would
// each commit on their own, outside the transaction it believes it has: it
// gets an error instead and the connection closes after it, as when a
// backend connection is lost inside a transaction.
func (s *session) beginLost(err error) *mysqlwire.SQLError {
	s.state.Status &^= mysqlwire.StatusInTrans
	s.state.Txn.PendingBegin, s.closeAfter = nil, true
	s.setTxnTag(nil)
	var se *mysqlwire.SQLError
	if errors.As(err, &se) {
		return newErr(se.Code, se.State, "holdfast: the transaction could not start on the backend (BEGIN failed: %s); nothing in it took effect. The connection is closed; reconnect and retry.", se.Msg)
	}
	return newErr(codeServerLost, "HY000", "holdfast: lost the backend connection while starting the transaction; nothing in it took effect. The connection is closed; reconnect and retry.")
}

// readBeginAhead reads the OK of a BEGIN sent ahead of the statement just
// written; the statement's response follows it. A failed BEGIN comes back
// as *beginError.
func (s *session) readBeginAhead(bc *backendConn) error {
	s.state.Txn.BeginInFlight = false
	// BEGIN's OK is packet 1 of its exchange; the statement's response
	// numbers on from the statement's last packet (more than one when it
	// is 16 MiB or longer).
	seq := bc.r.Seq
	bc.r.Seq = 1
	ok, err := bc.readOK()
	if err != nil {
		var se *mysqlwire.SQLError
		if errors.As(err, &se) {
			return &beginError{se}
		}
		return err
	}
	bc.r.Seq = seq
	s.state.Status = ok.Status & sessionstate.Status
	return nil
}

// settleBegin reads the OK of a BEGIN buffered ahead before some other
// exchange (preparing a statement) uses the connection.
func (s *session) settleBegin(bc *backendConn) error {
	if !s.state.Txn.BeginInFlight {
		return nil
	}
	if err := bc.w.Flush(); err != nil {
		return err
	}
	return s.readBeginAhead(bc)
}

// beginError is a deferred BEGIN that the backend refused.
type beginError struct{ *mysqlwire.SQLError }

func (e *beginError) Unwrap() error { return e.SQLError }

// beginFailed handles err when it is a refused BEGIN sent ahead of a
// statement: the statement's response is still unread, so the backend
// connection is closed, and the transaction is lost (see beginLost; the
// SELECT, having run outside it, changed nothing).
func (s *session) beginFailed(err error) bool {
	var be *beginError
	if !errors.As(err, &be) {
		return false
	}
	s.release(false)
	s.writeErr(s.beginLost(be.SQLError))
	return true
}
