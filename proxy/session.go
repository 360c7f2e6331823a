package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/sessionstate"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// session is one client connection after the handshake.
//
// Its own goroutine runs serve and is the only one to touch the fields
// above killMu, and bc's I/O. Other goroutines touch a session only so:
//   - the janitor (timeouts.go) reads the atomics (idleSince, waitTimeout,
//     writeLimit, holding, cw.since), reads holdSince, inTxn, holdTag and
//     connTag under mu, and ends the session with expireNow;
//   - another session's KILL, a drain's grace, the client watch and
//     expireNow call interrupt (killMu, then mu) and may close nc;
//   - Holders, Stats and KILL's permission check read the fields under mu
//     and the atomics.
//
// The session's goroutine takes mu for the fields under it, and killMu
// only as a barrier (waitKills).
type session struct {
	srv     *Server
	id      uint32
	nc      net.Conn
	raw     syscall.RawConn       // nc's socket when it has one: see readCommand
	ready   func(fd uintptr) bool // s.socketReady, for raw.Read
	waited  bool                  // socketReady found nothing and Read waited
	r       mysqlwire.Reader      // r.Buf is nil between commands when raw is set
	w       mysqlwire.Writer
	remote  string
	user    User
	caps    uint32 // client capabilities (as sent)
	extCaps uint32 // MariaDB extended capabilities negotiated (see relayableExt)
	coll    uint8  // handshake collation id
	attrs   map[string]string

	// state is the client's session as holdfast keeps it between
	// statements: what it set (restored on whichever backend connection
	// serves it), what holdfast keeps for it, its transaction, its
	// read-your-writes positions, what ties it to its connection.
	state sessionstate.State
	// variant is the backend connections this client needs.
	variant variant
	// conn is the connection a statement ran on as state reads it after
	// the statement (set for the call: passing it allocates nothing).
	conn stateConn

	// ps is the client's prepared statements (stmt.go).
	ps preparedStmts
	// txlog records the open transaction for a replay on a new primary
	// (failover.transaction_replay, replay.go).
	txlog txnLog

	// Attribution.
	// connTag is the conn_tag attribute, else the user's default (see
	// tagRules): written under mu after the session is registered, for
	// the janitor.
	connTag *attribution.Tag
	// rules are the user's bounds connTag was decided under, and tagMemo
	// the last tag checked against them (tag.go).
	rules      *userRules
	tagMemo    tagMemo
	closeAfter bool // close the connection once the reply is out (see beginLost)
	// lease is the session's borrow of a backend connection (lease.bc nil:
	// none held); turnLease its pipelined statement's turn on a shared
	// one, and callLease its CALL holdfast.*'s admission (lease.go).
	lease     lease
	turnLease lease
	callLease lease
	tagBuf    []byte
	tagRaw    []byte // the current statement's tag as it carries it (in tagBuf); nil when untagged
	lastSQL   []byte // the last statement, truncated (for holders and logs)
	shape     uint64 // the shape of the statement running now (sqlscan.Info.Shape)
	// mode is how the statement running now was lexed (its session's
	// sql_mode; a prepared statement's, the prepare's), lastMode
	// lastSQL's: the digests holders and logs show are made under it.
	mode, lastMode sqlscan.Mode
	// route is the replica the statement running now was routed to (nil:
	// the primary).
	route *replica
	// turn signals the session's pipelined statement that its response is
	// next to read (see joinPipe). Made at the first pipelined statement
	// and reused: each statement on a pipe takes exactly the one signal
	// it is sent.
	turn    chan struct{}
	rewrite []byte // a statement with CONNECTION_ID() replaced

	// The commands on their way to a backend (execute.go), one of each
	// kind, reused: query is the client's COM_QUERY (or COM_INIT_DB, ...),
	// part a run of statements of a text split around a KILL (in amongBuf),
	// exec a COM_STMT_EXECUTE.
	query    packetCmd
	part     packetCmd
	amongBuf []byte
	exec     executeCmd

	cw      writeClock    // the client socket under w (see timeouts.go)
	sock    io.ReadWriter // the client's bytes (mysqlwire.SockIO over a TCP socket)
	buf     []byte        // command buffer
	out     []byte        // scratch for packets holdfast builds
	watch   clientWatch
	gone    bool        // a write to the client failed; responses are dropped
	holding atomic.Bool // bc != nil, for the drainer
	pinned  atomic.Bool // pinReason != "", for Stats
	// idleSince is when the session began waiting for the client's next
	// command (UnixNano from Server.now; 0 while a command runs), and
	// waitTimeout the client's idle limit in nanoseconds (0: none); the
	// janitor reads both.
	idleSince   atomic.Int64
	waitTimeout atomic.Int64
	writeLimit  atomic.Int64 // clientWriteTimeout in nanoseconds (0: none), for the janitor
	expire      atomic.Int32 // an expireReason: the janitor ends the session
	stateBuf    []byte       // filtered session state information

	// killMu is held while a kill aimed at this session is delivered: the
	// session sends nothing more on the connection it keeps until then
	// (see waitKills), so a late kill cannot hit its next statement.
	killMu sync.Mutex
	// interrupted: a kill was sent for the statement running now.
	interrupted atomic.Bool
	// uploading: the session is reading a LOAD DATA LOCAL file from the
	// client; a kill wakes that read (localinfile.go).
	uploading atomic.Bool
	// lingerOnClose: the client may still be sending when the session
	// ends (see lingerClose). Session goroutine only.
	lingerOnClose bool
	// reply shapes the answer being written (relay.go).
	reply replyShape

	mu       sync.Mutex   // guards the fields below
	execBC   *backendConn // backend connection running our statement now, nil if none
	execPipe *pipe        // ... when it is a pipe's
	// execCall cancels the CALL holdfast.* the session runs now (nil: none).
	execCall  context.CancelCauseFunc
	holdSince time.Time // zero when no backend connection is held
	holdTag   string    // the hold's tag, as accounted
	holdKey   string    // ... and as the on-call controls know it (see policy.Key)
	// gatedKey mirrors the lease's gated key (the limit it entered).
	// preGated is the key of a limit that came into force while this
	// hold was under way, which counted it in (markHolders), preEpoch
	// that limit's epoch: the hold's end gives that slot back
	// (endHoldMirror).
	gatedKey, preGated string
	preEpoch           uint64
	inTxn              bool
	stmtText           []byte
	stmtShape          uint64       // stmtText's shape
	stmtMode           sqlscan.Mode // stmtText's lexing mode
}

// preparedStmts is a client's binary-protocol prepared statements, by
// holdfast's ids (stmt.go). Session goroutine only.
type preparedStmts struct {
	stmts    map[uint32]*clientStmt
	cursors  map[uint32]bool // client statements with a cursor open on the held connection
	nextStmt uint32
	lastStmt uint32 // id of the statement prepared last
	pipeBuf  []byte // a pipelined COM_STMT_EXECUTE
}

// replyShape is how the answer being written is shaped (relay.go).
// Session goroutine only.
type replyShape struct {
	// moreAfter: more results of the client's statement text follow the
	// response being relayed (a multi-statement text split around a KILL),
	// so its last OK or EOF carries MORE_RESULTS.
	moreAfter bool
	// err: an ERR packet was written to the client since it was cleared.
	err bool
	// hideChange: the response being relayed is a SET STATEMENT's whose
	// variables the client's session tracking does not follow; its EOFs
	// say no state changed, as MariaDB's would for this client (see
	// hidesStatementChange).
	hideChange bool
}

// clientReadBuffer is the size of a session's read buffer. Most commands
// fit; longer ones are read through it in more than one read. A session on
// a plain socket holds it only from the moment a command arrives until the
// command is answered and nothing more is buffered (readerPool); one on a
// connection without a socket of its own (TLS) holds it for its life.
const clientReadBuffer = 1 << 10

// A session takes its write buffer from writerPool when a reply starts
// (mysqlwire.Writer.Pool), so a session queued for a connection holds none, and
// gives it back once the reply is out.
var (
	writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}
	readerPool = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, clientReadBuffer) }}
)

func newSession(srv *Server, id uint32, nc net.Conn, u User, h *mysqlwire.HandshakeResponse) *session {
	caps, db := h.Caps, h.DB
	if db == "" {
		// A client that names no database starts in the backend's default
		// one (a pooled connection cannot leave its database).
		db = srv.config().Backend.Database
	}
	s := &session{
		srv:     srv,
		id:      id,
		nc:      nc,
		remote:  nc.RemoteAddr().String(),
		user:    u,
		caps:    caps,
		extCaps: h.ExtCaps,
		coll:    h.Collation,
		attrs:   h.Attrs,
		variant: clientVariant(caps, h.ExtCaps),
		ps:      preparedStmts{stmts: map[uint32]*clientStmt{}},
	}
	s.state = sessionstate.New(db, caps&mysql.CLIENT_MULTI_STATEMENTS != 0, caps&mysql.CLIENT_INTERACTIVE != 0, srv.keptBase(), s.keptSet)
	if sc, ok := nc.(syscall.Conn); ok {
		s.raw, _ = sc.SyscallConn()
	}
	if s.raw == nil {
		s.r.Buf = bufio.NewReaderSize(nc, clientReadBuffer)
	} else {
		s.ready = s.socketReady
	}
	s.watch.s = s
	s.sock = mysqlwire.NewSockIO(nc)
	s.cw.conn, s.cw.srv = s.sock, srv
	s.w.Dst, s.w.Pool = &s.cw, &writerPool
	s.rules = u.entry.rules.Load()
	s.connTag = srv.connTag(h.Attrs, s.rules)
	s.keptSet(s.state.Kept)
	return s
}

func (s *session) sessionTrack() bool { return s.caps&mysql.CLIENT_SESSION_TRACK != 0 }

// serve runs the command loop until the client quits, the connection
// breaks, or the server drains.
func (s *session) serve() {
	defer s.cleanup()
	for {
		if s.srv.draining.Load() && s.lease.bc == nil {
			return
		}
		if s.expire.Load() != 0 {
			s.expired()
			return
		}
		s.r.Seq = 0
		s.writeLimit.Store(int64(s.clientWriteTimeout()))
		s.idleSince.Store(s.srv.now())
		p, err := s.readCommand()
		s.idleSince.Store(0)
		if s.expire.Load() != 0 {
			s.expired()
			return
		}
		if cap(p) <= 1<<20 {
			s.buf = p[:0]
		} else {
			s.buf = nil
		}
		if err != nil {
			s.readFailed(err)
			return
		}
		if len(p) == 0 {
			s.writeNow(errMalformedPacket("empty command packet"))
			return
		}
		s.w.Seq = s.r.Seq
		keep := s.dispatch(p)
		ferr := s.w.Release()
		if s.raw != nil && s.r.Buf.Buffered() == 0 {
			s.r.Buf.Reset(nil)
			readerPool.Put(s.r.Buf)
			s.r.Buf = nil
		}
		if !keep || ferr != nil || s.gone || s.closeAfter {
			return
		}
	}
}

// readCommand reads the next command packet. A session on a plain socket
// waits for it without a read buffer (an idle client costs that much less)
// and takes one from readerPool once the socket is readable; serve gives it
// back after the answer. A read deadline (a drain, a kill, a timeout) ends
// the wait as it ends a read.
func (s *session) readCommand() ([]byte, error) {
	if s.r.Buf == nil {
		s.waited = false
		if err := s.raw.Read(s.ready); err != nil {
			return nil, err
		}
		s.r.Buf = readerPool.Get().(*bufio.Reader)
		s.r.Buf.Reset(s.sock)
	}
	return s.r.ReadPacket(s.buf, s.srv.maxPacket())
}

// socketReady is readCommand's probe of the client socket, called by
// s.raw.Read (as s.ready, made once per session). It reports whether a
// read would not block: bytes queued, the end of the stream or an error,
// found by a non-blocking peek. Only a peek that found nothing (EAGAIN)
// lets Read wait for the socket to become readable, so no bytes already
// queued wait for a readiness event that came before them; called again
// after that wait, it reports ready (a spurious wake-up only makes the
// reader's own read wait).
func (s *session) socketReady(fd uintptr) bool {
	if s.waited {
		return true
	}
	if _, err := peekSocket(fd); err == syscall.EAGAIN { // a bare Errno: compared, not unwrapped
		s.waited = true
		return false
	}
	return true
}

func (s *session) readFailed(err error) {
	switch {
	case errors.Is(err, mysqlwire.ErrPacketTooLarge):
		s.writeNow(errTooLarge(s.srv.maxPacket()))
	case errors.Is(err, mysqlwire.ErrOutOfOrder):
		s.writeNow(newErr(codeOutOfOrder, "08S01", "Got packets out of order"))
	case s.srv.draining.Load() && s.lease.bc == nil:
		// Woken by the drainer; just close.
	}
}

// userName is the session's user, for other goroutines (COM_CHANGE_USER
// changes it).
func (s *session) userName() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.user.Name
}

// writeNow writes one error packet outside the command loop's buffering.
func (s *session) writeNow(e *mysqlwire.SQLError) {
	bw := bufio.NewWriterSize(s.nc, 256)
	w := mysqlwire.Writer{Buf: bw, Seq: s.r.Seq}
	_ = w.WritePacket(mysqlwire.AppendErr(nil, e))
	_ = bw.Flush()
}

func (s *session) dispatch(p []byte) bool {
	s.srv.countCommand()
	s.shape = 0 // a command with a statement sets its own
	switch p[0] {
	case comQuit:
		return false
	case comPing:
		s.writeOK(0, 0)
	case comQuery:
		return s.comQuery(p)
	case comInitDB, comFieldList, comStatistics:
		return s.comPacket(p)
	case comSetOption:
		return s.comSetOption(p)
	case comResetConnection:
		s.resetSession()
		s.writeOK(0, 0)
	case comChangeUser:
		return s.comChangeUser(p)
	case comStmtPrepare:
		return s.stmtPrepare(p)
	case comStmtExecute:
		return s.stmtExecute(p)
	case comStmtSendLong:
		s.stmtSendLong(p)
	case comStmtClose:
		s.stmtClose(p)
	case comStmtReset:
		return s.stmtReset(p)
	case comStmtFetch:
		return s.stmtFetch(p)
	case comProcessKill:
		if len(p) < 5 {
			s.writeErr(errMalformedPacket("COM_PROCESS_KILL needs a 4-byte id"))
			return true
		}
		return s.kill(uint64(binary.LittleEndian.Uint32(p[1:])), false, false)
	default:
		s.writeErr(errUnknownCommand(p[0]))
	}
	return true
}

// setExec records the backend connection (and pipe) that runs the
// session's statement from now on (nil: none), for kills.
func (s *session) setExec(bc *backendConn, p *pipe) {
	if bc != nil {
		s.interrupted.Store(false)
	}
	s.mu.Lock()
	s.execBC, s.execPipe = bc, p
	s.mu.Unlock()
}

// waitKills returns once no kill aimed at this session is in flight.
func (s *session) waitKills() {
	s.killMu.Lock()
	s.killMu.Unlock() //nolint:staticcheck // an empty critical section: a barrier
}

// resetSession is COM_RESET_CONNECTION: a fresh session on the same login.
func (s *session) resetSession() {
	s.returnBackend()
	s.txlog.stop()
	s.pinned.Store(false)
	s.forgetStmts()
	s.ps.stmts = map[uint32]*clientStmt{}
	s.ps.cursors = nil
	s.ps.lastStmt = 0
	s.state.Reset(s.caps&mysql.CLIENT_MULTI_STATEMENTS != 0, s.srv.keptBase())
}

func (s *session) comSetOption(p []byte) bool {
	if len(p) < 3 || p[1] > 1 || p[2] != 0 {
		s.writeErr(errUnknownCommand(comSetOption))
		return true
	}
	on := p[1] == 0
	s.state.MultiStmts = on
	if s.lease.bc != nil {
		unbound := s.lease.bc.bound(s.srv.exchangeTimeout())
		err := s.lease.bc.setMultiStatements(on)
		unbound()
		if err != nil && isIOError(err) {
			return s.relayFailed(err, &relayResult{}, true)
		}
	}
	s.out = mysqlwire.AppendEOF(s.out[:0], 0, s.state.Status&^mysqlwire.StatusSessionChanged)
	s.writePacket(s.out)
	return true
}

// cleanup runs when the client goes away: the backend connection returns
// clean (reset when it carries client state), the session unregisters.
func (s *session) cleanup() {
	s.returnBackend()
	s.forgetStmts()
	if s.lingerOnClose {
		s.lingerClose()
	}
	_ = s.nc.Close()
}

// lingerClose ends a connection whose client may still be sending (the
// rest of a LOAD DATA LOCAL file after its statement ended): the write
// side is shut after the last answer, and what the client still sends is
// read and dropped for up to a second, so that the close does not reset
// the connection and lose that answer on its way.
func (s *session) lingerClose() {
	if cw, ok := s.nc.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = s.nc.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(s.nc, 64<<20))
}

// returnBackend gives the held backend connection back clean: reset first
// when it carries this session's transaction or pinned state.
func (s *session) returnBackend() {
	if s.lease.bc == nil {
		return
	}
	if s.state.KeepsConn() {
		s.release(s.lease.bc.reset(s.srv.baseVars(), s.srv.exchangeTimeout()) == nil)
		return
	}
	s.release(true)
}

// Local replies.

func (s *session) writePacket(p []byte) {
	_ = s.w.WritePacket(p)
}

func (s *session) writeErr(e *mysqlwire.SQLError) {
	s.reply.err = true
	s.state.RowCount = -1
	s.out = mysqlwire.AppendErr(s.out[:0], e)
	s.writePacket(s.out)
}

func (s *session) writeOK(affected, insertID uint64) { s.writeOKMore(affected, insertID, false) }

// writeOKMore is writeOK for a result that more results of the same
// statement text follow when more is set.
func (s *session) writeOKMore(affected, insertID uint64, more bool) {
	st := s.state.Status &^ mysqlwire.StatusMoreResults
	if more {
		st |= mysqlwire.StatusMoreResults
	}
	s.out = mysqlwire.AppendOK(s.out[:0], mysqlwire.OK{AffectedRows: affected, InsertID: insertID, Status: st}, s.sessionTrack())
	s.writePacket(s.out)
	s.state.RowCount = int64(affected)
}

// writeSingleValue answers a one-row, one-column result, in the binary
// protocol for a prepared statement.
func (s *session) writeSingleValue(col mysqlwire.Column, v uint64, binary bool) {
	rs := resultSet{cols: []mysqlwire.Column{col}, rows: [][]any{{v}}}
	s.writeResultSet(&rs, binary)
}

var errClientGone = errors.New("proxy: client connection gone")
