package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/pool"
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
	cursors  map[uint32]bool // client statements with a cursor open on bc
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
	rewrite       []byte // a statement with CONNECTION_ID() replaced

	cw      writeClock // the client socket under w (see timeouts.go)
	buf     []byte     // command buffer
	out     []byte     // scratch for packets holdfast builds
	watch   clientWatch
	gone    bool        // a write to the client failed; responses are dropped
	holding atomic.Bool // bc != nil, for the drainer
	pinned  atomic.Bool // pinReason != "", for Stats
	// kept is the client's value of the variables holdfast keeps itself
	// (see kept.go); nil until the backend's defaults are known.
	kept        *keptVars
	interactive bool // CLIENT_INTERACTIVE: interactive_timeout applies
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

	mu        sync.Mutex   // guards the fields below
	execBC    *backendConn // backend connection running our statement now, nil if none
	execPipe  *pipe        // ... when it is a pipe's
	holdSince time.Time    // zero when no backend connection is held
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
	s.cw.conn, s.cw.srv = nc, srv
	s.connTag = srv.connTag(u, h.attrs)
	s.interactive = caps&mysql.CLIENT_INTERACTIVE != 0
	s.setKept(srv.keptBase.Load())
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
		if s.expire.Load() != 0 {
			s.expired()
			return
		}
		s.r.seq = 0
		s.writeLimit.Store(int64(s.clientWriteTimeout()))
		s.idleSince.Store(s.srv.now())
		p, err := s.r.readPacket(s.buf, s.srv.maxPacket())
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
		s.w.seq = s.r.seq
		s.w.bw = writerPool.Get().(*bufio.Writer)
		s.w.bw.Reset(&s.cw)
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
	case info.Features&sqlscan.FeatKill != 0:
		return s.killStatement(&info)
	case info.Features&sqlscan.FeatLocalInfile != 0:
		s.writeErr(newErr(codeNotAllowed, "42000", "holdfast does not relay LOAD DATA LOCAL INFILE; load from a file on the database server or use INSERT"))
		return true
	case info.LastInsertIDColumn != "" && s.bc == nil:
		s.writeSingleValue(lastInsertIDCol(info.LastInsertIDColumn), s.lastInsertID, false)
		return true
	case info.ConnectionIDColumn != "":
		// The id clients KILL by is holdfast's, not a backend thread's.
		s.writeSingleValue(connectionIDCol(info.ConnectionIDColumn), uint64(s.id), false)
		return true
	case info.Kind == sqlscan.KindCall && s.srv.procs != nil && s.maybeProcedure(sql):
		return true
	case info.Features&sqlscan.FeatConnectionID != 0:
		if q, ok := s.scanMode().AppendConnectionID(append(s.rewrite[:0], comQuery), sql, uint64(s.id)); ok {
			s.rewrite = q
			p, sql = q, q[1:]
		}
	}
	if s.pipelinable(&info, len(p)) && !readsKept(sql) {
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

// run sends one command to a backend and relays the response.
func (s *session) run(p []byte, cmd byte, info *sqlscan.Info, tag *attribution.Tag) bool {
	bc, serr := s.borrow(tag, cmd == comQuery && plainSelect(info))
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	held := s.status&statusInTrans != 0 || s.pinReason != "" || s.holdNext
	var after string // holdfast's kept values to put back after the statement
	if cmd == comQuery && (plainSelect(info) || info.Kind == sqlscan.KindShow) && readsKept(p[1:]) {
		var err error
		unbound := bc.bound(s.srv.exchangeTimeout())
		after, err = s.putKept(bc)
		unbound()
		if err != nil {
			return s.relayFailed(err, &relayResult{}, held)
		}
	}
	start := s.stmtStart(tag, p[1:])
	s.setExec(bc, nil)
	s.watch.arm()
	var rr relayResult
	err := bc.writeCommand(p)
	if err == nil {
		rr, err = s.relay(bc, cmd)
	}
	if err == nil && after != "" {
		unbound := bc.bound(s.srv.exchangeTimeout())
		_, err = bc.queryLocked(after)
		unbound()
	}
	if err == nil && cmd == comQuery && info.Features&sqlscan.FeatSetSession != 0 && readsKept(p[1:]) {
		// The session tracker does not report every kept variable (not
		// session_track_system_variables itself): read them back.
		rr.sc.vars = dropKept(rr.sc.vars)
		unbound := bc.bound(s.srv.exchangeTimeout())
		err = s.syncKept(bc, s.scanMode().SetVariables(p[1:]))
		unbound()
	}
	s.watch.disarm()
	s.setExec(nil, nil)
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
	case errors.Is(err, pool.ErrBackendDown):
		return newErr(codeConnectFailed, "HY000", "holdfast: %v", err)
	case errors.Is(err, pool.ErrTimeout), errors.Is(err, pool.ErrWaiterCap):
		return newErr(codeConCount, "08004", "holdfast: %v", err)
	case errors.Is(err, pool.ErrClosed), errors.Is(err, context.Canceled):
		return newErr(codeShutdown, "08S01", "holdfast: server shutdown in progress")
	}
	return newErr(codeConnectFailed, "HY000", "holdfast: %v", err)
}

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

// afterStatement records what the statement did to the session and returns
// the backend connection unless the session must keep it.
func (s *session) afterStatement(bc *backendConn, rr *relayResult, info *sqlscan.Info, tag *attribution.Tag) {
	prev := s.status
	s.status = rr.status & sessionStatus
	if rr.insertID != 0 {
		s.lastInsertID = rr.insertID
	}
	sc := &rr.sc
	if len(sc.vars) > 0 {
		unbound := bc.bound(s.srv.exchangeTimeout())
		err := readBackVars(bc, sc)
		unbound()
		if err != nil {
			s.srv.log.Warn("could not read session variables back after a change", "client", s.id, "err", err)
			if isIOError(err) {
				s.release(false)
				return
			}
			sc.pinVar = "unreadable"
		}
	}
	if len(sc.vars) > 0 {
		var err error
		unbound := bc.bound(s.srv.exchangeTimeout())
		sc.vars, err = s.keptChanged(bc, sc.vars)
		unbound()
		if err != nil {
			s.srv.log.Warn("could not set holdfast's session settings back after a client changed them", "client", s.id, "err", err)
			s.release(false)
			return
		}
	}
	if len(sc.vars) > 0 {
		s.noteResultsCollation(sc, info)
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
		unbound := bc.bound(s.srv.exchangeTimeout())
		st, err := bc.pingStatus()
		unbound()
		if err != nil {
			s.release(false)
			return
		}
		s.status = st & sessionStatus
	}
	s.afterTxnState(prev, tag)
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
	s.pinReason, s.holdNext = "", false
	s.pinned.Store(false)
	s.pendingBegin, s.txnTag = nil, nil
	s.beginInFlight = false
	s.forgetStmts()
	s.stmts = map[uint32]*clientStmt{}
	s.cursors = nil
	s.lastStmt = 0
	s.lastInsertID = 0
	s.vars = nil
	s.setKept(s.srv.keptBase.Load())
	s.multiStmts = s.caps&mysql.CLIENT_MULTI_STATEMENTS != 0
	s.status = statusAutocommit
}

// initialVars is the session state this client starts with.
func (s *session) initialVars() *varState {
	return s.srv.initialVars(s.coll, s.caps&mysql.CLIENT_IGNORE_SPACE != 0)
}

// setKept installs the client's kept variables and the idle limit they
// imply.
func (s *session) setKept(k *keptVars) {
	s.kept = k
	if k != nil {
		s.waitTimeout.Store(int64(k.waitTimeout(s.interactive)))
	}
}

// putKept gives bc the client's kept variables for a read-only statement
// that reads them, and returns the SET that puts holdfast's values back
// ("" when they are the same). beginInFlight is settled first.
func (s *session) putKept(bc *backendConn) (string, error) {
	hf := s.srv.hfKept.Load()
	if s.kept == nil || hf == nil {
		return "", nil
	}
	before := keptSQL(s.kept.vals, *hf, nil)
	if before == "" {
		return "", nil
	}
	if err := s.settleBegin(bc); err != nil {
		return "", err
	}
	if _, err := bc.queryLocked(before); err != nil {
		return "", err
	}
	return keptSQL(*hf, s.kept.vals, nil), nil
}

// syncKept reads the kept variables back from bc after a statement that
// may have set them, and sets bc back to holdfast's values. The values
// read of the variables the statement assigns (assigned, from its text)
// are the client's now; when the text is no plain SET (assigned nil),
// every value that differs from holdfast's is taken as the client's.
func (s *session) syncKept(bc *backendConn, assigned []string) error {
	hf := s.srv.hfKept.Load()
	if s.kept == nil || hf == nil {
		return nil
	}
	var q strings.Builder
	q.WriteString("SELECT ")
	for i, n := range keptNames {
		if i > 0 {
			q.WriteString(", ")
		}
		q.WriteString("@@session." + n)
	}
	q.WriteString(" LIMIT 1")
	res, err := bc.queryLocked(q.String())
	if err != nil {
		return err
	}
	if len(res.rows) != 1 || len(res.rows[0]) != len(keptNames) {
		return fmt.Errorf("proxy: reading back %d session variables got %d rows", len(keptNames), len(res.rows))
	}
	have := map[string]string{}
	var changes []varChange
	for i, n := range keptNames {
		v := string(res.rows[0][i])
		have[n] = v
		if assigned == nil && v != (*hf)[n] || slices.Contains(assigned, n) {
			changes = append(changes, varChange{n, v})
		}
	}
	if len(changes) > 0 {
		s.setKept(s.kept.with(changes))
	}
	if sql := keptSQL(*hf, have, nil); sql != "" {
		_, err = bc.queryLocked(sql)
	}
	return err
}

// keptChanged takes the kept variables out of changes (the session
// tracker's report, read back): they become the client's values, and the
// backend connection bc goes back to holdfast's values at once.
func (s *session) keptChanged(bc *backendConn, changes []varChange) ([]varChange, error) {
	var kept []varChange
	rest := changes[:0:0]
	for _, c := range changes {
		if isKept(c.name) {
			kept = append(kept, c)
		} else {
			rest = append(rest, c)
		}
	}
	if len(kept) == 0 {
		return changes, nil
	}
	if s.kept == nil {
		s.setKept(s.srv.keptBase.Load())
	}
	if s.kept != nil {
		s.setKept(s.kept.with(kept))
	}
	names := make([]string, len(kept))
	have := map[string]string{}
	for i, c := range kept {
		names[i] = c.name
		have[c.name] = c.value
	}
	if hf := s.srv.hfKept.Load(); hf != nil {
		if sql := keptSQL(*hf, have, names); sql != "" {
			if _, err := bc.queryLocked(sql); err != nil {
				return rest, err
			}
		}
	}
	return rest, nil
}

func (s *session) comSetOption(p []byte) bool {
	if len(p) < 3 || p[1] > 1 || p[2] != 0 {
		s.writeErr(errUnknownCommand(comSetOption))
		return true
	}
	on := p[1] == 0
	s.multiStmts = on
	if s.bc != nil {
		unbound := s.bc.bound(s.srv.exchangeTimeout())
		err := s.bc.setMultiStatements(on)
		unbound()
		if err != nil && isIOError(err) {
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
	s.forgetStmts()
	_ = s.nc.Close()
}

// returnBackend gives the held backend connection back clean: reset first
// when it carries this session's transaction or pinned state.
func (s *session) returnBackend() {
	if s.bc == nil {
		return
	}
	if s.pinReason != "" || s.status&statusInTrans != 0 || s.holdNext {
		s.release(s.bc.reset(s.srv.baseVars(), s.srv.exchangeTimeout()) == nil)
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
func (s *session) writeSingleValue(col column, v uint64, binary bool) {
	rs := resultSet{cols: []column{col}, rows: [][]any{{v}}}
	s.writeResultSet(&rs, binary)
}

// The columns of LAST_INSERT_ID() and CONNECTION_ID() as MariaDB and MySQL
// describe them.
func lastInsertIDCol(name string) column {
	return column{name: name, typ: mysql.MYSQL_TYPE_LONGLONG, length: 21,
		flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
}

func connectionIDCol(name string) column {
	return column{name: name, typ: mysql.MYSQL_TYPE_LONG, length: 10,
		flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG | mysql.BINARY_FLAG}
}

var errClientGone = errors.New("proxy: client connection gone")
