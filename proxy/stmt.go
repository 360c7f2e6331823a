package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sessionstate"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// Binary-protocol prepared statements do not pin a session. The client sees
// holdfast's own statement ids; each backend connection prepares a
// statement lazily the first time it must execute it and keeps it in an LRU
// cache shared by every session that borrows that connection. Parameter
// types are remembered per client statement, because drivers send them only
// on the first execute while the backend statement may be a different one
// each time.

// clientStmt is a statement as one client prepared it.
type clientStmt struct {
	id    uint32
	query string
	text  []byte // query, as bytes (what the lexer and policy read)
	sql   []byte // query, truncated, for holders and logs
	db    string // database it was prepared in
	// parse is the session state its text was parsed under (parseState):
	// literals keep the character set and collation of the prepare, and
	// sql_mode decides what its quotes and operators mean.
	parse    []varstate.Change
	key      string // stmtKey(db, parse, query)
	params   int
	columns  int
	types    []byte // 2 bytes per parameter, from the last execute that sent them
	longData map[uint16][]byte
	longSize int
	info     sqlscan.Info
	mode     sqlscan.Mode       // how its text was lexed (the sql_mode of the prepare)
	prot     *sqlscan.Protected // the tables it was checked against (ProtectTables)
	tag      *attribution.Tag   // its own tag, when its text carries one
	tagName  string             // ... as its text carries it (tag may be folded into other)
	call     *sqlscan.Call      // CALL holdfast.*: answered by holdfast
}

// backendStmt is a statement prepared on one backend connection, with the
// prepare response (after its first packet) kept to answer later prepares
// of the same text without a round trip.
type backendStmt struct {
	id       uint32
	params   int
	columns  int
	warnings uint16
	resp     [][]byte
}

// fitsExecute reports whether bc has cs prepared, with cs's parameter
// count, so that an execute needs no other exchange first.
func fitsExecute(bc *backendConn, cs *clientStmt) bool {
	if bc.stmts == nil {
		return false
	}
	bs, ok := bc.stmts.lru.Peek(cs.key)
	return ok && bs.params == cs.params
}

// stmtKey is the backend cache key of a statement: table names resolve in
// the database current when it is prepared, and its text is parsed under
// the session state parse (parseState).
func stmtKey(db string, parse []varstate.Change, query string) string {
	var b strings.Builder
	b.WriteString(db)
	for _, c := range parse {
		b.WriteByte(0)
		b.WriteString(c.Value)
	}
	b.WriteByte(0)
	b.WriteString(query)
	return b.String()
}

// prepareOn returns the statement prepared on bc, preparing it if needed in
// database db under the session state parse (switching there and back when
// bc's differ: a statement prepared by a client keeps the meaning its text
// had then, as on MariaDB, wherever holdfast prepares it again). A backend
// ERR reply comes back as errPkt (a copy, to relay verbatim). The cache
// keeps at most sc.size statements: it makes room first (statements no
// client holds go first), and when the server is out of statements (1461,
// max_prepared_stmt_count, shared with everyone) it gives back all it can
// and tries once more.
func (bc *backendConn) prepareOn(db string, parse []varstate.Change, query, key string, sc stmtConfig) (bs *backendStmt, errPkt []byte, err error) {
	if bc.stmts == nil {
		bc.stmts = newStmtCache(sc.count)
	}
	if bs, ok := bc.stmts.lru.Get(key); ok {
		return bs, nil, nil
	}
	if have := bc.vars; have != nil && !varstate.SameParseState(have, parse) {
		there := have.With(parse)
		if _, err := bc.queryLocked(varstate.RestoreSQL(there, have)); err != nil {
			var se *mysqlwire.SQLError
			if errors.As(err, &se) {
				return nil, mysqlwire.AppendErr(nil, se), nil
			}
			return nil, nil, err
		}
		defer func() {
			if err == nil {
				if _, berr := bc.queryLocked(varstate.RestoreSQL(have, there)); berr != nil {
					err = berr // the connection's state is unknown: not reused
				}
			}
		}()
	}
	if db != "" && bc.dbKnown && bc.db != db {
		back := bc.db
		if errPkt, err := bc.initDB(db); err != nil || errPkt != nil {
			return nil, errPkt, err
		}
		defer func() {
			if err == nil {
				var ep []byte
				if ep, err = bc.initDB(back); ep != nil {
					err = mysqlwire.ParseErr(ep)
				}
			}
		}()
	}
	bc.stmts.makeRoom(sc.size-1, sc.held)
	for try := 0; ; try++ {
		if err := bc.closeEvicted(); err != nil {
			return nil, nil, err
		}
		bs, errPkt, err = bc.prepare(query)
		if err != nil || errPkt == nil || try > 0 || !isErrCode(errPkt, codeTooManyStmts) {
			break
		}
		if bc.stmts.evictUnheld(sc.held) == 0 && bc.stmts.makeRoom(bc.stmts.lru.Len()/2, nil) == 0 {
			break // nothing of ours to give back
		}
		sc.retried.Add(1)
	}
	if err != nil || errPkt != nil {
		return nil, errPkt, err
	}
	bc.stmts.add(key, bs)
	return bs, nil, nil
}

// prepare sends COM_STMT_PREPARE and reads the reply.
func (bc *backendConn) prepare(query string) (*backendStmt, []byte, error) {
	if err := bc.writeCommandString(comStmtPrepare, query); err != nil {
		return nil, nil, err
	}
	p, err := bc.readPacket()
	if err != nil {
		return nil, nil, err
	}
	if p[0] == mysqlwire.HeaderErr {
		return nil, append([]byte(nil), p...), nil
	}
	po, valid := mysqlwire.ParsePrepareOK(p)
	if !valid {
		return nil, nil, fmt.Errorf("%w: bad prepare reply", errMalformed)
	}
	bs := &backendStmt{id: po.ID, columns: int(po.Columns), params: int(po.Params), warnings: po.Warnings}
	for _, n := range []int{bs.params, bs.columns} {
		if n == 0 {
			continue
		}
		for i := 0; i <= n; i++ { // n definitions and an EOF
			p, err := bc.readPacket()
			if err != nil {
				return nil, nil, err
			}
			bs.resp = append(bs.resp, append([]byte(nil), p...))
		}
	}
	return bs, nil, nil
}

// closeEvicted closes on the backend the statements the cache evicted
// (COM_STMT_CLOSE has no reply; the closes go out with the next command).
func (bc *backendConn) closeEvicted() error {
	c := bc.stmts
	if len(c.toClose) == 0 {
		return nil
	}
	for _, id := range c.toClose {
		var b [5]byte
		b[0] = comStmtClose
		binary.LittleEndian.PutUint32(b[1:], id)
		bc.w.Seq = 0
		if err := bc.w.WritePacket(b[:]); err != nil {
			return err
		}
	}
	c.count.Add(-int64(len(c.toClose)))
	c.toClose = c.toClose[:0]
	return nil
}

// initDB selects database db on bc; a backend ERR comes back as errPkt.
func (bc *backendConn) initDB(db string) (errPkt []byte, err error) {
	if err := bc.writeCommandString(comInitDB, db); err != nil {
		return nil, err
	}
	p, err := bc.readPacket()
	if err != nil {
		return nil, err
	}
	if p[0] == mysqlwire.HeaderErr {
		return append([]byte(nil), p...), nil
	}
	bc.db, bc.dbKnown = db, true
	return nil, nil
}

func (s *session) stmtPrepare(p []byte) bool {
	mode := s.scanMode()
	prot := s.srv.protected.Load()
	info := mode.ScanProtected(p[1:], prot)
	if s.stmtLimitReached() || s.prepareProcedure(p, &info) {
		return true
	}
	if info.Features&sqlscan.FeatKill != 0 || info.Features&plan.DynamicSQL != 0 && plan.SmuggledKill(mode, p[1:], 0) {
		s.writeErr(errPreparedKill())
		return true
	}
	if s.refuseProtected(mode, p[1:], &info, prot, s.state.DB) {
		return true
	}
	text := p[1:]
	if info.Features&sqlscan.FeatConnectionID != 0 && info.ConnectionIDColumn == "" {
		// Prepared on the backend with this client's id in place of
		// CONNECTION_ID(); the statement is this session's own.
		if q, ok := s.scanMode().AppendConnectionID(nil, text, uint64(s.id)); ok {
			text = q
		}
	}
	query := string(text)
	tag, tagged, serr := s.statementTag(p[1:], &info)
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	key := s.keyOf(tag)
	bc, serr := s.borrow(tag, key, s.srv.classOf(key), false)
	if serr != nil {
		s.writeErr(serr)
		return serr != errStateLost
	}
	s.setExec(bc, nil)
	unbound := bc.bound(s.srv.exchangeTimeout())
	parse := varstate.ParseState(s.state.Vars)
	skey := stmtKey(s.state.DB, parse, query)
	var after string
	var err error
	if plan.ReadsKept(&info) {
		// What the statement's columns are (a variable's length) depends
		// on the client's values: prepared with them in place, and
		// cached under them.
		skey = s.state.KeptKey(skey)
		after, err = s.putKept(bc)
	}
	var bs *backendStmt
	var errPkt []byte
	if err == nil {
		bs, errPkt, err = bc.prepareOn(s.state.DB, parse, query, skey, s.srv.stmtConfig())
	}
	if err == nil && after != "" {
		_, err = bc.queryLocked(after)
	}
	unbound()
	s.setExec(nil, nil)
	if err != nil {
		return s.relayFailed(err, &relayResult{}, s.state.KeepsConn())
	}
	if errPkt != nil {
		s.writePacket(errPkt)
		s.maybeRelease()
		return true
	}
	s.ps.nextStmt++
	cs := &clientStmt{id: s.ps.nextStmt, query: query, text: text, db: s.state.DB, params: bs.params, columns: bs.columns, info: info, mode: mode, prot: prot}
	cs.text = []byte(query) // not text, which may be the command buffer the next command reuses
	cs.sql = append([]byte(nil), p[1:min(len(p), 1+maxStmtCopy)]...)
	cs.parse = parse
	cs.key = skey
	s.srv.stmtRefs.add(cs.key)
	if tagged {
		cs.tag = tag
	}
	cs.tagName = string(s.tagRaw)
	s.ps.stmts[cs.id] = cs
	s.ps.lastStmt = cs.id
	s.out = mysqlwire.AppendPrepareOK(s.out[:0], mysqlwire.PrepareOK{ID: cs.id, Columns: uint16(bs.columns), Params: uint16(bs.params), Warnings: bs.warnings})
	s.writePacket(s.out)
	for _, pkt := range bs.resp {
		s.writePacket(pkt)
	}
	s.maybeRelease()
	return true
}

// stmtID reads the statement id of a COM_STMT_* packet; MariaDB's
// 0xffffffff means the statement prepared last.
func (s *session) stmtID(p []byte) uint32 {
	id := binary.LittleEndian.Uint32(p[1:])
	if id == 0xffffffff {
		id = s.ps.lastStmt
	}
	return id
}

func (s *session) lookupStmt(p []byte, cmd string) (*clientStmt, bool) {
	if len(p) < 5 {
		s.writeErr(errMalformedPacket(cmd + " without a statement id"))
		return nil, false
	}
	id := s.stmtID(p)
	cs := s.ps.stmts[id]
	if cs == nil {
		s.writeErr(newErr(codeUnknownStmt, "HY000", "Unknown prepared statement handler (%d) given to %s", id, cmd))
		return nil, false
	}
	return cs, true
}

func (s *session) stmtExecute(p []byte) bool {
	cs, ok := s.lookupStmt(p, "mysqld_stmt_execute")
	if !ok {
		return true
	}
	if len(p) < 10 {
		s.writeErr(errMalformedPacket("COM_STMT_EXECUTE shorter than 10 bytes"))
		return true
	}
	flags, iter, rest := p[5], p[6:10], p[10:]
	var nullMap, values []byte
	if cs.params > 0 {
		nb := (cs.params + 7) / 8
		if len(rest) < nb+1 {
			s.writeErr(errMalformedPacket("COM_STMT_EXECUTE parameter block truncated"))
			return true
		}
		nullMap, values = rest[:nb], rest[nb+1:]
		if rest[nb] == 1 {
			if len(values) < 2*cs.params {
				s.writeErr(errMalformedPacket("COM_STMT_EXECUTE parameter types truncated"))
				return true
			}
			cs.types = append(cs.types[:0], values[:2*cs.params]...)
			values = values[2*cs.params:]
		} else if cs.types == nil {
			s.writeErr(newErr(codeWrongArguments, "HY000", "Incorrect arguments to mysqld_stmt_execute: parameter types were never sent for statement %d", cs.id))
			return true
		}
	}
	// Long data goes with this execute, whatever becomes of it.
	defer func() { cs.longData, cs.longSize = nil, 0 }()
	if cs.longSize > s.srv.maxPacket() {
		s.writeErr(newErr(codePacketTooLarge, "08S01", "Parameter of prepared statement %d sent with COM_STMT_SEND_LONG_DATA is longer than 'max_allowed_packet' (%d bytes)", cs.id, s.srv.maxPacket()))
		return true
	}
	var check *sqlscan.Protected
	if prot := s.srv.protected.Load(); prot != cs.prot {
		// Prepared before holdfast's tables were set as they are now: its
		// text is checked again.
		check = prot
		cs.info.NamesProtected = cs.mode.ScanProtected(cs.text, prot).NamesProtected
	}
	tag, serr := s.savedTag(cs)
	if serr != nil {
		s.writeErr(serr)
		return true
	}
	tagged := tag != nil
	if tagged {
		s.noteTag(tag, true)
	} else {
		tag = s.defaultTag()
	}
	s.shape, s.mode = cs.info.Shape, cs.mode
	c := &s.exec
	c.cmdBase = cmdBase{kind: plan.Execute, info: &cs.info, tag: tag, tagged: tagged, binary: true}
	c.size, c.cs, c.flags, c.iter, c.nullMap, c.values = len(p), cs, flags, iter, nullMap, values
	pl := s.decide(c, check, false)
	if check != nil && pl.Refusal != plan.RefuseProtected {
		cs.prot = check
	}
	keep := s.execute(c, &pl)
	*c = executeCmd{}
	return keep
}

// appendExecute builds COM_STMT_EXECUTE for backend statement id, always
// with the parameter types holdfast remembers for the client statement.
func appendExecute(out []byte, id uint32, flags byte, iter []byte, cs *clientStmt, nullMap, values []byte) []byte {
	out = append(out, comStmtExecute)
	out = binary.LittleEndian.AppendUint32(out, id)
	out = append(out, flags)
	out = append(out, iter...)
	if cs.params > 0 {
		out = append(out, nullMap...)
		out = append(out, 1)
		out = append(out, cs.types...)
		out = append(out, values...)
	}
	return out
}

func (s *session) stmtSendLong(p []byte) {
	if len(p) < 7 {
		return // no reply is defined for this command
	}
	cs := s.ps.stmts[s.stmtID(p)]
	if cs == nil {
		return
	}
	param := binary.LittleEndian.Uint16(p[5:])
	if cs.longData == nil {
		cs.longData = map[uint16][]byte{}
	}
	cs.longSize += len(p) - 7
	if cs.longSize <= s.srv.maxPacket() {
		cs.longData[param] = append(cs.longData[param], p[7:]...)
	}
}

func (s *session) stmtClose(p []byte) {
	if len(p) < 5 {
		return
	}
	id := s.stmtID(p)
	if cs := s.ps.stmts[id]; cs != nil {
		s.forgetStmt(cs)
	}
	delete(s.ps.cursors, id)
}

// forgetStmt drops a client statement; its backend statements stay
// prepared (a driver that closes and prepares the same text again costs no
// round trip) but are the first to go when room is needed.
func (s *session) forgetStmt(cs *clientStmt) {
	delete(s.ps.stmts, cs.id)
	if cs.key != "" {
		s.srv.stmtRefs.drop(cs.key)
	}
}

// forgetStmts drops every client statement (reset, change of user, end).
func (s *session) forgetStmts() {
	for _, cs := range s.ps.stmts {
		s.forgetStmt(cs)
	}
}

// stmtLimitReached answers a prepare past max_prepared_stmt_count client
// statements, as MariaDB would: the limit holds per client too.
func (s *session) stmtLimitReached() bool {
	limit := s.srv.primary.maxPrepared.Load()
	if limit <= 0 || int64(len(s.ps.stmts)) < limit {
		return false
	}
	s.writeErr(newErr(codeTooManyStmts, "42000", "Can't create more than max_prepared_stmt_count statements (current value: %d)", limit))
	return true
}

func (s *session) stmtReset(p []byte) bool {
	cs, ok := s.lookupStmt(p, "mysqld_stmt_reset")
	if !ok {
		return true
	}
	cs.longData, cs.longSize = nil, 0
	if s.ps.cursors[cs.id] && s.lease.bc != nil && s.lease.bc.stmts != nil {
		delete(s.ps.cursors, cs.id)
		if bs, ok := s.lease.bc.stmts.lru.Peek(cs.key); ok {
			// The backend closes the cursor and answers for itself.
			var b [5]byte
			b[0] = comStmtReset
			binary.LittleEndian.PutUint32(b[1:], bs.id)
			if err := s.lease.bc.writeCommand(b[:]); err != nil {
				return s.relayFailed(err, &relayResult{}, true)
			}
			rr, err := s.relay(s.lease.bc, comStmtReset)
			if err != nil {
				return s.relayFailed(err, &rr, true)
			}
			s.state.Status = rr.status & sessionstate.Status
			return true
		}
	}
	s.writeOK(0, 0)
	return true
}

// stmtFetch reads rows from an open cursor; the session is pinned to the
// backend that holds it.
func (s *session) stmtFetch(p []byte) bool {
	cs, ok := s.lookupStmt(p, "mysqld_stmt_fetch")
	if !ok {
		return true
	}
	var bs *backendStmt
	if s.lease.bc != nil && s.lease.bc.stmts != nil {
		bs, _ = s.lease.bc.stmts.lru.Peek(cs.key)
	}
	if !s.ps.cursors[cs.id] || bs == nil || len(p) < 9 {
		s.writeErr(newErr(1421, "HY000", "The statement (%d) has no open cursor.", cs.id))
		return true
	}
	out := append(s.lease.bc.scratch[:0], comStmtFetch)
	out = binary.LittleEndian.AppendUint32(out, bs.id)
	out = append(out, p[5:9]...)
	s.lease.bc.scratch = out[:0]
	if err := s.lease.bc.writeCommand(out); err != nil {
		return s.relayFailed(err, &relayResult{}, true)
	}
	rr := relayResult{}
	n, err := s.lease.bc.r.Header()
	if err == nil {
		_, err = s.relayRows(s.lease.bc, n, &rr)
	}
	if err != nil {
		return s.relayFailed(err, &rr, true)
	}
	s.state.Status = rr.status & sessionstate.Status
	return true
}

// isErrCode reports whether ERR packet payload p carries error code.
func isErrCode(p []byte, code uint16) bool {
	c, ok := mysqlwire.ErrCode(p)
	return ok && c == code
}
