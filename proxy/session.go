package proxy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// session is one client connection after the handshake. Its goroutine runs
// serve; other goroutines touch only the fields under mu (KILL, drain).
type session struct {
	srv     *Server
	id      uint32
	nc      net.Conn
	r       packetReader
	w       packetWriter
	remote  string
	user    User
	caps    uint32 // client capabilities (as sent)
	extCaps uint32 // MariaDB extended capabilities negotiated (see relayableExt)
	coll    uint8  // handshake collation id
	attrs   map[string]string

	// Desired session state, restored on whichever backend serves us.
	vars       *varState // nil until the first borrow learns the backend's defaults
	db         string
	multiStmts bool
	variant    variant // the backend connections this client needs

	bc           *backendConn // held backend connection, nil when none
	pinReason    string       // non-empty: keep bc for the rest of the session
	holdNext     bool         // SET TRANSACTION: keep bc through the next statement
	status       uint16       // status flags as the client last saw them
	lastInsertID uint64

	stmts    map[uint32]*clientStmt
	nextStmt uint32
	lastStmt uint32 // id of the statement prepared last

	// Attribution.
	connTag      *attribution.Tag // conn_tag attribute, else the user's default
	txnTag       *attribution.Tag // first tagged statement of the open transaction
	pendingBegin []byte           // a deferred BEGIN (see hold.go)
	// beginInFlight: the deferred BEGIN went out ahead of the statement
	// just written, and its OK is still to be read (see hold.go).
	beginInFlight bool
	closeAfter    bool // close the connection once the reply is out (see beginLost)
	h             hold
	tagBuf        []byte
	digest        []byte
	lastSQL       []byte // the last statement, truncated (for holders and logs)
	pipeBuf       []byte // a pipelined COM_STMT_EXECUTE

	buf     []byte // command buffer
	out     []byte // scratch for packets holdfast builds
	watch   clientWatch
	gone    bool        // a write to the client failed; responses are dropped
	holding atomic.Bool // bc != nil, for the drainer
	pinned  atomic.Bool // pinReason != "", for Stats

	mu        sync.Mutex // guards the fields below
	execTID   uint32     // backend thread running our statement now, 0 if none
	killed    bool
	holdSince time.Time // zero when no backend connection is held
	holdTag   string
	inTxn     bool
	stmtText  []byte
}

var writerPool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 16<<10) }}

func newSession(srv *Server, id uint32, nc net.Conn, u User, h *clientHello) *session {
	caps, db := h.caps, h.db
	if db == "" {
		// A client that names no database starts in the backend's default
		// one (a pooled connection cannot leave its database).
		db = srv.config().Backend.Database
	}
	s := &session{
		srv:        srv,
		id:         id,
		nc:         nc,
		r:          packetReader{br: bufio.NewReaderSize(nc, 4<<10)},
		remote:     nc.RemoteAddr().String(),
		user:       u,
		caps:       caps,
		extCaps:    h.extCaps,
		coll:       h.coll,
		attrs:      h.attrs,
		db:         db,
		multiStmts: caps&mysql.CLIENT_MULTI_STATEMENTS != 0,
		variant:    clientVariant(caps, h.extCaps),
		status:     statusAutocommit,
		stmts:      map[uint32]*clientStmt{},
	}
	s.watch.s = s
	s.connTag = srv.connTag(u, h.attrs)
	return s
}

func (s *session) sessionTrack() bool { return s.caps&mysql.CLIENT_SESSION_TRACK != 0 }

// serve runs the command loop until the client quits, the connection
// breaks, or the server drains.
func (s *session) serve() {
	defer s.cleanup()
	for {
		if s.srv.draining.Load() && s.bc == nil {
			return
		}
		s.r.seq = 0
		p, err := s.r.readPacket(s.buf, s.srv.maxPacket())
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
		s.w.seq = s.r.seq
		s.w.bw = writerPool.Get().(*bufio.Writer)
		s.w.bw.Reset(s.nc)
		keep := s.dispatch(p)
		ferr := s.w.bw.Flush()
		s.w.bw.Reset(nil)
		writerPool.Put(s.w.bw)
		s.w.bw = nil
		if !keep || ferr != nil || s.gone || s.closeAfter {
			return
		}
	}
}

func (s *session) readFailed(err error) {
	switch {
	case errors.Is(err, errPacketTooLarge):
		s.writeNow(errTooLarge(s.srv.maxPacket()))
	case errors.Is(err, errOutOfOrder):
		s.writeNow(newErr(codeOutOfOrder, "08S01", "Got packets out of order"))
	case s.srv.draining.Load() && s.bc == nil:
		// Woken by the drainer; just close.
	}
}

// writeNow writes one error packet outside the command loop's buffering.
func (s *session) writeNow(e *sqlError) {
	bw := bufio.NewWriterSize(s.nc, 256)
	w := packetWriter{bw: bw, seq: s.r.seq}
	_ = w.writePacket(appendErr(nil, e))
	_ = bw.Flush()
}

func (s *session) dispatch(p []byte) bool {
	s.srv.countCommand()
	switch p[0] {
	case comQuit:
		return false
	case comPing:
		s.writeOK(0, 0)
	case comQuery:
		return s.comQuery(p)
	case comInitDB:
		return s.run(p, comInitDB, &initDBInfo, s.defaultTag())
	case comFieldList, comStatistics:
		return s.run(p, p[0], nil, s.defaultTag())
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
		return s.kill(uint64(binary.LittleEndian.Uint32(p[1:])), false)
	default:
		s.writeErr(errUnknownCommand(p[0]))
	}
	return true
}

// initDBInfo classifies COM_INIT_DB like a USE statement.
var initDBInfo = sqlscan.Info{Kind: sqlscan.KindUse, Statements: 1}

func (s *session) comQuery(p []byte) bool {
	sql := p[1:]
	info := s.scanMode().Scan(sql)
	tag, tagged := s.statementTag(sql)
	s.noteTag(tag, tagged)
	switch {
	case s.deferTransaction(sql, &info, tag, tagged):
		return true
	case info.Kind == sqlscan.KindKill && info.Kill.OK:
		return s.kill(info.Kill.ID, info.Kill.Query)
	case info.Features&sqlscan.FeatLocalInfile != 0:
		s.writeErr(newErr(codeNotAllowed, "42000", "holdfast does not relay LOAD DATA LOCAL INFILE; load from a file on the database server or use INSERT"))
		return true
	case info.LastInsertIDColumn != "" && s.bc == nil:
		s.writeSingleValue(info.LastInsertIDColumn, s.lastInsertID, false)
		return true
	case info.Kind == sqlscan.KindSelect && isSelectConnectionID(sql):
		// The id clients KILL by is holdfast's, not a backend thread's.
		s.writeSingleValue(connectionIDColumn(sql), uint64(s.id), false)
		return true
	case info.Kind == sqlscan.KindCall && s.srv.procs != nil && s.maybeProcedure(sql):
		return true
	}
	if s.pipelinable(&info, len(p)) {
		if handled, keep := s.runPipelined(func(*backendConn) []byte { return p }, tag, nil, sql); handled {
			return keep
		}
	}
	return s.run(p, comQuery, &info, tag)
}

// scanMode is how the server lexes this session's statements: its
// sql_mode's ANSI_QUOTES and NO_BACKSLASH_ESCAPES (the latter also shown in
// the status flags).
func (s *session) scanMode() sqlscan.Mode {
	var m sqlscan.Mode
	if s.status&statusNoBackslash != 0 {
		m |= sqlscan.NoBackslashEscapes
	}
	if s.vars != nil {
		if mode := s.vars.vals["sql_mode"]; strings.Contains(mode, "ANSI_QUOTES") {
			m |= sqlscan.ANSIQuotes
		}
	}
	return m
}

// isSelectConnectionID matches exactly "SELECT CONNECTION_ID()" (any case,
// surrounding spaces, an optional trailing semicolon).
func isSelectConnectionID(sql []byte) bool {
	t := bytes.TrimRight(bytes.TrimSpace(sql), ";")
	t = bytes.TrimSpace(t)
	const want = "select connection_id()"
	if len(t) < len(want) || !bytes.EqualFold(t[:6], []byte("select")) {
		return false
	}
	rest := bytes.TrimSpace(t[6:])
	return len(t) > 6 && (t[6] == ' ' || t[6] == '\t' || t[6] == '\n') && bytes.EqualFold(rest, []byte("connection_id()"))
}

func connectionIDColumn(sql []byte) string {
	t := bytes.TrimSpace(bytes.TrimRight(bytes.TrimSpace(sql), ";"))
	return string(bytes.TrimSpace(t[6:]))
}

// run sends one command to a backend and relays the response.
func (s *session) run(p []byte, cmd byte, info *sqlscan.Info, tag *attribution.Tag) bool {
	bc, serr := s.borrow(tag, cmd == comQuery && plainSelect(info))
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	held := s.status&statusInTrans != 0 || s.pinReason != "" || s.holdNext
	start := s.stmtStart(tag, p[1:])
	s.setExec(bc.threadID)
	s.watch.arm()
	var rr relayResult
	err := bc.writeCommand(p)
	if err == nil {
		rr, err = s.relay(bc, cmd)
	}
	s.watch.disarm()
	s.setExec(0)
	s.stmtEnd(tag, start, err != nil || rr.failed)
	if err != nil {
		if s.beginFailed(err) {
			return true
		}
		return s.relayFailed(err, &rr, held)
	}
	s.afterStatement(bc, &rr, info, tag)
	return true
}

func poolErr(err error) *sqlError {
	switch {
	case errors.Is(err, ErrBackendDown):
		return newErr(codeConnectFailed, "HY000", "holdfast: %v", err)
	case errors.Is(err, ErrPoolTimeout), errors.Is(err, ErrPoolWaiterCap):
		return newErr(codeConCount, "08004", "holdfast: %v", err)
	case errors.Is(err, ErrPoolClosed), errors.Is(err, context.Canceled):
		return newErr(codeShutdown, "08S01", "holdfast: server shutdown in progress")
	}
	return newErr(codeConnectFailed, "HY000", "holdfast: %v", err)
}

// sync restores our database, session variables and multi-statement option
// on bc, one round trip per thing that differs.
func (s *session) sync(bc *backendConn) error {
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

// afterStatement records what the statement did to the session and returns
// the backend connection unless the session must keep it.
func (s *session) afterStatement(bc *backendConn, rr *relayResult, info *sqlscan.Info, tag *attribution.Tag) {
	prev := s.status
	s.status = rr.status &^ statusSessionChanged
	if rr.insertID != 0 {
		s.lastInsertID = rr.insertID
	}
	sc := &rr.sc
	if len(sc.vars) > 0 {
		if err := readBackVars(bc, sc); err != nil {
			s.srv.log.Warn("could not read session variables back after a change", "client", s.id, "err", err)
			if isIOError(err) {
				s.release(false)
				return
			}
			sc.pinVar = "unreadable"
		}
	}
	if len(sc.vars) > 0 {
		s.vars = s.vars.with(sc.vars)
		bc.vars = s.vars
	}
	if sc.schemaS {
		s.db, bc.db, bc.dbKnown = sc.schema, sc.schema, true
	}
	if s.pinReason == "" {
		if reason := pinReason(info, rr); reason != "" {
			s.pinReason = reason
			s.pinned.Store(true)
			s.srv.countPin(reason)
			tag.Pinned(reason)
		}
	}
	s.holdNext = info != nil && info.Kind == sqlscan.KindSetTransaction && !rr.failed
	if rr.failed && s.status&(statusInTrans|statusAutocommit) == 0 && s.pinReason == "" && !s.holdNext {
		// With autocommit off, a failed statement may still have opened a
		// transaction, and its ERR packet does not say. Ask.
		st, err := bc.pingStatus()
		if err != nil {
			s.release(false)
			return
		}
		s.status = st &^ statusSessionChanged
	}
	s.afterTxnState(prev, tag)
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

func (s *session) maybeRelease() {
	if s.bc == nil || s.pinReason != "" || s.holdNext || s.status&statusInTrans != 0 {
		return
	}
	s.release(true)
}

// pinReason names why a statement ties the session to its backend
// connection for good, or returns "".
func pinReason(info *sqlscan.Info, rr *relayResult) string {
	if rr.cursor {
		return "cursor"
	}
	switch rr.sc.pinVar {
	case "":
	case "unreadable":
		return "session_state"
	default:
		return "session_track"
	}
	if info != nil {
		f := info.Features
		switch {
		case f&sqlscan.FeatTempTable != 0:
			return "temporary_table"
		case f&sqlscan.FeatUserVarAssign != 0:
			return "user_variable"
		case f&sqlscan.FeatGetLock != 0:
			return "get_lock"
		case f&sqlscan.FeatLockTables != 0:
			return "lock_tables"
		case f&sqlscan.FeatSQLPrepare != 0:
			return "sql_prepare"
		case f&sqlscan.FeatCalcFoundRows != 0:
			return "found_rows"
		case f&sqlscan.FeatHandler != 0:
			return "handler"
		case f&sqlscan.FeatXA != 0:
			return "xa"
		}
	}
	if rr.sc.changed {
		// State changed: fine only when the tracker told us everything
		// (system variables, schema) and the statement is a SET or USE.
		explained := info != nil && (info.Kind == sqlscan.KindSet || info.Kind == sqlscan.KindUse) &&
			(len(rr.sc.vars) > 0 || rr.sc.schemaS)
		if !explained {
			return "session_state"
		}
	}
	return ""
}

// relayFailed handles an I/O error on either side during a statement.
// held says whether the session held the backend before the statement (a
// transaction or pinned state that is now lost).
func (s *session) relayFailed(err error, rr *relayResult, held bool) bool {
	if errors.Is(err, errClientGone) {
		// The response was read to its end: cleanup returns (or resets) the
		// backend connection as the session closes.
		return false
	}
	s.srv.log.Warn("backend connection lost during a statement", "client", s.id, "err", err)
	s.release(false)
	s.holdNext = false
	if rr.started || held || s.pinReason != "" {
		what := "the transaction was rolled back"
		if s.pinReason != "" {
			what = "session state (" + s.pinReason + ") was lost"
		}
		s.writeErr(newErr(codeServerLost, "HY000", "holdfast: lost the backend connection during the statement; %s. Reconnect and retry.", what))
		return false
	}
	s.status &^= statusInTrans
	s.writeErr(newErr(codeServerLost, "HY000", "holdfast: lost the backend connection during the statement; it may or may not have taken effect (holdfast never retries a statement)"))
	return true
}

func (s *session) setExec(tid uint32) {
	s.mu.Lock()
	s.execTID = tid
	s.mu.Unlock()
}

// resetSession is COM_RESET_CONNECTION: a fresh session on the same login.
func (s *session) resetSession() {
	s.returnBackend()
	s.pinReason, s.holdNext = "", false
	s.pinned.Store(false)
	s.pendingBegin, s.txnTag = nil, nil
	s.beginInFlight = false
	s.stmts = map[uint32]*clientStmt{}
	s.lastStmt = 0
	s.lastInsertID = 0
	s.vars = nil
	s.multiStmts = s.caps&mysql.CLIENT_MULTI_STATEMENTS != 0
	s.status = statusAutocommit
}

func (s *session) comSetOption(p []byte) bool {
	if len(p) < 3 || p[1] > 1 || p[2] != 0 {
		s.writeErr(errUnknownCommand(comSetOption))
		return true
	}
	on := p[1] == 0
	s.multiStmts = on
	if s.bc != nil {
		if err := s.bc.setMultiStatements(on); err != nil && isIOError(err) {
			return s.relayFailed(err, &relayResult{}, true)
		}
	}
	s.out = appendEOF(s.out[:0], 0, s.status&^statusSessionChanged)
	s.writePacket(s.out)
	return true
}

// cleanup runs when the client goes away: the backend connection returns
// clean (reset when it carries client state), the session unregisters.
func (s *session) cleanup() {
	s.returnBackend()
	_ = s.nc.Close()
}

// returnBackend gives the held backend connection back clean: reset first
// when it carries this session's transaction or pinned state.
func (s *session) returnBackend() {
	if s.bc == nil {
		return
	}
	if s.pinReason != "" || s.status&statusInTrans != 0 || s.holdNext {
		s.release(s.bc.reset(s.srv.baseVars(), 5*time.Second) == nil)
		return
	}
	s.release(true)
}

// Local replies.

func (s *session) writePacket(p []byte) {
	_ = s.w.writePacket(p)
}

func (s *session) writeErr(e *sqlError) {
	s.out = appendErr(s.out[:0], e)
	s.writePacket(s.out)
}

func (s *session) writeOK(affected, insertID uint64) {
	s.out = appendOK(s.out[:0], okPacket{affectedRows: affected, insertID: insertID, status: s.status &^ statusMoreResults}, s.sessionTrack())
	s.writePacket(s.out)
}

// writeSingleValue answers a one-row, one-column result, in the binary
// protocol for a prepared statement.
func (s *session) writeSingleValue(col string, v uint64, binary bool) {
	rs := resultSet{cols: []column{{name: col, typ: mysql.MYSQL_TYPE_LONGLONG, flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG}}, rows: [][]any{{v}}}
	s.writeResultSet(&rs, binary)
}

var errClientGone = errors.New("proxy: client connection gone")
