package proxy

import (
	"bytes"
	"fmt"
	"io"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// relayResult is what relaying one response learned.
type relayResult struct {
	status   uint16
	insertID uint64 // last non-zero insert id reported
	affected uint64
	failed   bool   // an ERR packet ended the response
	errCode  uint16 // ... with this code (first ERR of the response)
	cursor   bool   // a server-side cursor is open (COM_STMT_EXECUTE)
	started  bool   // bytes of this response reached the client
	sc       varstate.Report
}

// relay copies the backend's response to the command cmd to the client,
// packet by packet, without decoding result sets: rows stream through in
// constant memory and ERR packets pass byte-exact. OK packets are parsed
// (status, insert id, session state) and rewritten only for clients that
// did not negotiate CLIENT_SESSION_TRACK.
//
// When the client's socket fails, the rest of the response is read and
// dropped, so the backend connection stays in step, and errClientGone is
// returned; errLocalInfileAborted when it failed while sending a LOAD DATA
// LOCAL file (see localinfile.go). Any other error is a backend I/O or
// protocol error, which leaves the backend connection unusable. A deferred
// BEGIN sent ahead of the command answers first (see readBeginAhead).
func (s *session) relay(bc *backendConn, cmd byte) (_ relayResult, err error) {
	if s.state.Txn.BeginInFlight {
		if err := s.readBeginAhead(bc); err != nil {
			return relayResult{status: s.state.Status}, err
		}
	}
	// An ERR packet carries no status: until an OK or EOF says otherwise,
	// the status is what it was.
	rr := relayResult{status: s.state.Status}
	defer func() {
		if s.gone && err == nil {
			err = errClientGone
		}
	}()
	for {
		n, err := bc.r.Header()
		if err != nil {
			return rr, err
		}
		if n == 0 {
			return rr, fmt.Errorf("%w: empty packet from backend", errMalformed)
		}
		first, err := bc.r.Buf.Peek(1)
		if err != nil {
			return rr, err
		}
		switch {
		case cmd == comStatistics:
			// A single string packet.
			return rr, s.stream(bc, n)
		case first[0] == mysqlwire.HeaderErr:
			rr.sawErr(bc)
			s.srv.noteBackendErr(rr.errCode) // a 1290 (read-only): the topology is checked again at once
			s.reply.err = true
			s.state.RowCount = -1
			return rr, s.stream(bc, n)
		case first[0] == mysqlwire.HeaderOK && cmd != comFieldList:
			more, err := s.relayOK(bc, n, &rr)
			if err != nil || !more {
				return rr, err
			}
		case first[0] == mysqlwire.HeaderLocalInfile && cmd == comQuery:
			// LOAD DATA LOCAL: the backend asks for the client's file.
			if err := s.relayLocalInfile(bc, n, &rr); err != nil {
				return rr, err
			}
		case cmd == comFieldList:
			more, err := s.relayRows(bc, n, &rr)
			if err != nil || !more {
				return rr, err
			}
		default:
			more, err := s.relayResultSet(bc, n, cmd, &rr)
			if err != nil || !more {
				return rr, err
			}
		}
	}
}

// sawErr notes an ERR packet at the head of bc's reader: the statement
// failed, and errCode is the first ERR's code.
func (rr *relayResult) sawErr(bc *backendConn) {
	rr.failed = true
	if rr.errCode != 0 {
		return
	}
	if b, err := bc.r.Buf.Peek(3); err == nil {
		rr.errCode, _ = mysqlwire.ErrCode(b)
	}
}

// relayOK handles an OK packet of length n and reports whether more
// results follow.
func (s *session) relayOK(bc *backendConn, n int, rr *relayResult) (bool, error) {
	p, err := bc.readRest(n)
	if err != nil {
		return false, err
	}
	ok, good := mysqlwire.ParseOK(p, true)
	if !good {
		return false, fmt.Errorf("%w: bad OK packet", errMalformed)
	}
	rr.status = ok.Status
	rr.affected = ok.AffectedRows
	if s.txlog.hashing {
		s.txlog.hashOK(ok.AffectedRows, ok.InsertID)
	}
	s.state.RowCount = int64(ok.AffectedRows)
	if ok.InsertID != 0 {
		rr.insertID = ok.InsertID
	}
	if ok.Status&mysqlwire.StatusSessionChanged != 0 && len(ok.StateInfo) > 0 {
		n := len(rr.sc.Vars)
		if !rr.sc.AddStateInfo(ok.StateInfo) {
			return false, fmt.Errorf("%w: bad session state information", errMalformed)
		}
		if s.sessionTrack() && s.state.Kept != nil {
			// Tell the client only what its own tracking settings ask
			// for, as they stand after this statement.
			if kept := varstate.KeptOnly(rr.sc.Vars[n:]); len(kept) > 0 {
				s.state.SetKept(s.state.Kept.With(kept))
			}
			s.stateBuf = s.state.Kept.Track.Apply(s.stateBuf[:0], ok.StateInfo)
			if !bytes.Equal(s.stateBuf, ok.StateInfo) {
				ok.StateInfo = s.stateBuf
				s.out = mysqlwire.AppendOK(s.out[:0], ok, true)
				p = s.out
			}
		}
	}
	if !s.sessionTrack() {
		// No session state for this client. MariaDB still sends the info
		// text length-encoded (MySQL to the end of the packet).
		lenencInfo := false
		if bi := s.srv.primary.info.Load(); bi != nil && bi.mariaDB {
			lenencInfo = true
		}
		ok.StateInfo = nil
		s.out = mysqlwire.AppendOK(s.out[:0], ok, lenencInfo)
		p = s.out
	}
	more := ok.Status&mysqlwire.StatusMoreResults != 0
	if !more && s.reply.moreAfter {
		mysqlwire.SetOKStatus(p, ok.Status|mysqlwire.StatusMoreResults)
	}
	rr.started = true
	s.clientWrote(s.w.WritePacket(p))
	return more, nil
}

// relayResultSet relays a result set whose column-count packet has length
// n, and reports whether more results follow.
func (s *session) relayResultSet(bc *backendConn, n int, cmd byte, rr *relayResult) (bool, error) {
	p, err := bc.readRest(n)
	if err != nil {
		return false, err
	}
	ncols, _, _, ok := mysqlwire.ReadLenEnc(p)
	if !ok || ncols == 0 {
		return false, fmt.Errorf("%w: bad column count", errMalformed)
	}
	if s.txlog.hashing {
		_, _ = s.txlog.sum.Write(p)
	}
	rr.started = true
	s.clientWrote(s.w.WritePacket(p))
	for i := uint64(0); i < ncols; i++ {
		n, err := bc.r.Header()
		if err != nil {
			return false, err
		}
		if err := s.stream(bc, n); err != nil {
			return false, err
		}
	}
	n, err = bc.r.Header()
	if err != nil {
		return false, err
	}
	p, err = bc.readRest(n)
	if err != nil {
		return false, err
	}
	if !mysqlwire.IsEOF(p[0], len(p)) {
		return false, fmt.Errorf("%w: no EOF after column definitions", errMalformed)
	}
	_, st := mysqlwire.EOFStatus(p)
	s.clientEOF(p, st)
	s.clientWrote(s.w.WritePacket(p))
	if st&mysqlwire.StatusSessionChanged != 0 {
		rr.sc.NoteEOFChange()
	}
	if cmd == comStmtExecute && st&mysqlwire.StatusCursorExists != 0 {
		rr.status, rr.cursor = st, true
		return false, nil
	}
	n, err = bc.r.Header()
	if err != nil {
		return false, err
	}
	return s.relayRows(bc, n, rr)
}

// relayRows relays rows (or column definitions for COM_FIELD_LIST) until
// the closing EOF or an ERR; the first packet's header (length n) has been
// read.
func (s *session) relayRows(bc *backendConn, n int, rr *relayResult) (bool, error) {
	for {
		first, err := bc.r.Buf.Peek(1)
		if err != nil {
			return false, err
		}
		switch {
		case mysqlwire.IsEOF(first[0], n):
			p, err := bc.readRest(n)
			if err != nil {
				return false, err
			}
			_, rr.status = mysqlwire.EOFStatus(p)
			if rr.status&mysqlwire.StatusSessionChanged != 0 {
				rr.sc.NoteEOFChange()
			}
			s.state.RowCount = -1 // a result set's
			s.clientEOF(p, rr.status)
			s.clientWrote(s.w.WritePacket(p))
			return rr.status&mysqlwire.StatusMoreResults != 0, nil
		case first[0] == mysqlwire.HeaderErr:
			// After the columns, or after some rows: a statement killed
			// or failing while it runs.
			rr.sawErr(bc)
			s.reply.err = true
			s.state.RowCount = -1
			return false, s.stream(bc, n)
		}
		if err := s.stream(bc, n); err != nil {
			return false, err
		}
		if n, err = bc.r.Header(); err != nil {
			return false, err
		}
	}
}

// clientEOF adjusts the status st of EOF packet payload p for the client:
// MORE_RESULTS when more of its statement text follows (moreAfter), and no
// SERVER_SESSION_STATE_CHANGED when only variables the client's session
// tracking does not follow changed (hideChange).
func (s *session) clientEOF(p []byte, st uint16) {
	out := st
	if s.reply.moreAfter {
		out |= mysqlwire.StatusMoreResults
	}
	if s.reply.hideChange {
		out &^= mysqlwire.StatusSessionChanged
	}
	if out != st {
		mysqlwire.SetEOFStatus(p, out)
	}
}

// stream copies one logical packet (first physical length n, plus any
// continuations) from the backend to the client without buffering it whole.
func (s *session) stream(bc *backendConn, n int) error {
	for {
		s.clientWrote(s.w.WriteHeader(n))
		if err := copyN(s, bc, n); err != nil {
			return err
		}
		if n < mysqlwire.MaxPayload {
			return nil
		}
		var err error
		if n, err = bc.r.Header(); err != nil {
			return err
		}
	}
}

func copyN(s *session, bc *backendConn, n int) error {
	br := bc.r.Buf
	for n > 0 {
		b, err := br.Peek(min(n, br.Size()))
		if err != nil {
			return err
		}
		_, err = s.w.Out().Write(b)
		s.clientWrote(err)
		if s.txlog.hashing {
			_, _ = s.txlog.sum.Write(b)
		}
		_, _ = br.Discard(len(b))
		n -= len(b)
	}
	return nil
}

// clientWrote notes a failed write to the client: from then on the response
// is read and dropped (s.gone).
func (s *session) clientWrote(err error) {
	if err != nil && !s.gone {
		s.gone = true
		s.w.Out().Reset(io.Discard) // the pooled writer, now dropping what it is given
	}
}

// readRest reads the payload of a small packet whose header was read.
func (bc *backendConn) readRest(n int) ([]byte, error) {
	if n >= mysqlwire.MaxPayload {
		return nil, fmt.Errorf("%w: oversized control packet", errMalformed)
	}
	p, err := bc.r.ReadPayload(bc.scratch, n)
	bc.scratch = p[:0]
	return p, err
}

// resultSet is a small result holdfast answers without a backend
// (LAST_INSERT_ID(), CALL holdfast.*).
type resultSet struct {
	cols []mysqlwire.Column
	rows [][]any // nil, int64, uint64, float64, string, []byte, time.Time
	more bool    // another result follows (a CALL's closing OK)
}

// writeResultSet sends rs in the text protocol, or the binary one (for
// COM_STMT_EXECUTE) when binary is set.
func (s *session) writeResultSet(rs *resultSet, binaryRows bool) {
	st := s.state.Status &^ (mysqlwire.StatusMoreResults | mysqlwire.StatusSessionChanged)
	s.out = mysqlwire.AppendLenEnc(s.out[:0], uint64(len(rs.cols)))
	s.writePacket(s.out)
	for _, c := range rs.cols {
		s.out = mysqlwire.AppendColumnDef(s.out[:0], c, s.variant&varTypeInfo != 0)
		s.writePacket(s.out)
	}
	s.out = mysqlwire.AppendEOF(s.out[:0], 0, st)
	s.writePacket(s.out)
	if rs.more {
		st |= mysqlwire.StatusMoreResults
	}
	for _, row := range rs.rows {
		if binaryRows {
			s.out = mysqlwire.AppendBinaryRow(s.out[:0], rs.cols, row)
		} else {
			s.out = mysqlwire.AppendTextRow(s.out[:0], row)
		}
		s.writePacket(s.out)
	}
	s.out = mysqlwire.AppendEOF(s.out[:0], 0, st)
	s.writePacket(s.out)
	s.state.RowCount = -1
}
