package proxy

import (
	"errors"
	"fmt"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// LOAD DATA LOCAL INFILE. The backend answers such a statement with a file
// request (a 0xFB packet naming the file) wherever it comes in a response,
// a multi-statement text included; holdfast passes the request to the
// client and the client's file to the backend, physical packet by physical
// packet through the connections' fixed buffers (constant memory, however
// large the file), up to the empty packet that ends it, and the backend's
// answer then follows as any other. holdfast never opens a file itself.
//
// A client that did not negotiate CLIENT_LOCAL_FILES is served by backend
// connections that did not either (a pool variant), so the backend refuses
// the statement with its own error. A client that has no such file, or
// refuses, sends the empty packet at once, as a direct client does, and
// the backend answers for an empty file: the connection stays in step for
// its next borrower. A client that fails while sending (disconnects, stops
// sending for sessions.client_write_timeout, sends a packet over
// max_allowed_packet or out of order) leaves the backend with part of a
// file: that connection is closed, so the server aborts the statement as
// it would for a direct client, and nothing of the file is committed.
//
// A bound (max_transaction_time, the janitor's) or a KILL that reaches the
// statement while the client is still sending ends the upload the same
// way, at the next packet or at once if the session is waiting for one:
// the client's steady stream of packets does not keep the statement
// alive. The client is told why (its bound's error, or 1317) and its
// connection is closed, since the rest of its file cannot be taken.

// errLocalInfileAborted is an upload ended before the client's file did
// (the client failed, or a kill or bound ended the statement); the backend
// connection holds part of the file and must be closed.
var errLocalInfileAborted = errors.New("proxy: a LOAD DATA LOCAL upload ended mid-file")

// errUploadKilled and errUploadExpired are uploads ended by a KILL and by
// a session bound.
var (
	errUploadKilled  = errors.New("proxy: the statement was killed while its LOAD DATA LOCAL file was being sent")
	errUploadExpired = errors.New("proxy: a session bound ended the statement while its LOAD DATA LOCAL file was being sent")
)

// uploadStopped reports whether a kill or a bound has ended the upload.
func (s *session) uploadStopped() error {
	switch {
	case s.expire.Load() != 0:
		return errUploadExpired
	case s.interrupted.Load():
		return errUploadKilled
	}
	return nil
}

// relayLocalInfile handles the backend's file request, a packet of length
// n whose header was read.
func (s *session) relayLocalInfile(bc *backendConn, n int, rr *relayResult) error {
	if s.caps&mysql.CLIENT_LOCAL_FILES == 0 || s.gone {
		// Not negotiated (so not expected), or nobody to ask: an empty file.
		if err := bc.r.Discard(n); err != nil {
			return err
		}
		bc.w.Seq = bc.r.Seq
		return bc.endLocalFile()
	}
	rr.started = true
	if err := s.stream(bc, n); err != nil {
		return err
	}
	s.clientWrote(s.w.Flush())
	bc.w.Seq = bc.r.Seq
	if s.gone {
		return bc.endLocalFile()
	}
	// The session reads the client itself now, not the client watch.
	s.watch.disarm()
	defer s.watch.arm()
	s.r.Seq = s.w.Seq
	bound := s.clientWriteTimeout()
	s.uploading.Store(true)
	defer func() {
		// Under s.mu, as interrupt looks at the flag and sets its deadline:
		// a kill that saw the flag has set its deadline by now, and the
		// deadline is cleared after it.
		s.mu.Lock()
		s.uploading.Store(false)
		s.mu.Unlock()
		_ = s.nc.SetReadDeadline(time.Time{})
		_ = bc.nc.SetWriteDeadline(time.Time{})
	}()
	limit, logical := s.srv.maxPacket(), 0
	for {
		if bound > 0 {
			dl := time.Now().Add(bound)
			_ = s.nc.SetReadDeadline(dl)
			_ = bc.nc.SetWriteDeadline(dl)
		}
		// After the deadline is set: a kill or bound that set its own
		// (in the past) before ours is seen here.
		if err := s.uploadStopped(); err != nil {
			return s.localInfileFailed(err)
		}
		m, err := s.r.Header()
		if err != nil {
			return s.localInfileFailed(err)
		}
		if logical == 0 && m == 0 {
			break // the end of the file
		}
		if logical += m; logical > limit {
			return s.localInfileFailed(mysqlwire.ErrPacketTooLarge)
		}
		if err := bc.w.WriteHeader(m); err != nil {
			return err
		}
		if cerr, berr := s.copyToBackend(bc, m); berr != nil {
			return berr
		} else if cerr != nil {
			return s.localInfileFailed(cerr)
		}
		if m < mysqlwire.MaxPayload {
			logical = 0
		}
	}
	s.w.Seq = s.r.Seq // the answer follows the client's last packet
	return bc.endLocalFile()
}

// endLocalFile sends the empty packet that ends a file, and expects the
// backend's answer next.
func (bc *backendConn) endLocalFile() error {
	if err := bc.w.WriteHeader(0); err != nil {
		return err
	}
	return bc.w.FlushTurn(&bc.r)
}

// copyToBackend copies m payload bytes of the client's current packet to
// the backend, reading straight into the backend writer's buffer.
// clientErr is a failed read from the client, backendErr a failed write to
// the backend.
func (s *session) copyToBackend(bc *backendConn, m int) (clientErr, backendErr error) {
	bw := bc.w.Buf
	for m > 0 {
		if bw.Available() == 0 {
			if err := bw.Flush(); err != nil {
				return nil, err
			}
		}
		buf := bw.AvailableBuffer()[:min(m, bw.Available())]
		k, err := s.r.Buf.Read(buf)
		if k > 0 {
			_, _ = bw.Write(buf[:k]) // fits: no flush, no error
			m -= k
		}
		if err != nil {
			return err, nil
		}
	}
	return nil, nil
}

// localInfileFailed answers a client whose upload ended mid-file, when it
// can still be told (killed, a packet too large or out of order; a bound's
// error is sent by the session's expired), and returns
// errLocalInfileAborted.
func (s *session) localInfileFailed(err error) error {
	if stop := s.uploadStopped(); stop != nil {
		err = stop // a read woken by the kill or bound
	}
	switch {
	case errors.Is(err, errUploadKilled):
		s.w.Seq = s.r.Seq
		s.writeErr(newErr(codeQueryInterrupted, "70100", "Query execution was interrupted; holdfast closed the connection, as the client was still sending its LOAD DATA LOCAL file (a transactional table such as InnoDB keeps none of it; a MyISAM table keeps the rows read before the end)"))
	case errors.Is(err, mysqlwire.ErrPacketTooLarge):
		s.w.Seq = s.r.Seq
		s.writeErr(errTooLarge(s.srv.maxPacket()))
	case errors.Is(err, mysqlwire.ErrOutOfOrder):
		s.w.Seq = s.r.Seq
		s.writeErr(newErr(codeOutOfOrder, "08S01", "Got packets out of order"))
	}
	return fmt.Errorf("%w: %w", errLocalInfileAborted, err)
}
