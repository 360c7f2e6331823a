package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// Transaction replay (failover.transaction_replay, off by default). A
// transaction open on a former primary when the primary switched is lost
// there: its connection is closed, which rolls it back, and without replay
// the client is answered 9010 (lostToSwitch). With replay on, holdfast
// records each transaction that began with a deferred BEGIN as it runs:
// the BEGIN, each statement's text, and a checksum of each answer as it
// went to the client. When the switch meets the transaction (a statement
// answered 1290 by a server since confirmed read-only, or the session's
// connection retired before its next statement), the former primary's
// connection is closed, and on the session's next borrow, on the new
// primary, holdfast sends the BEGIN and every recorded statement again,
// reading their answers itself. When each answer's checksum is the one
// the client saw, the transaction is where the client believes it is, on
// the new primary, and the statement that met the switch runs there (once
// more, for one refused with 1290). Else the connection is closed (rolling
// the replay back) and the answer is 9010 as without replay.
//
// Nothing runs twice: the former primary never committed the transaction
// (it was refused or never sent the statement that would have), and its
// rollback there is certain once the connection is closed. Every answer
// the client saw is checked, so the client cannot tell the replayed
// transaction from one that ran on the new primary from the start, but
// for one case holdfast cannot see: a write to a non-transactional table
// (MyISAM, Aria) inside the transaction stays on the former primary, may
// replicate, and is made again by the replay. The statements a recorded
// transaction may run are policy.NotReplayable's.
//
// The checksum covers an answer's result sets (column count, column
// definitions, rows), its error packets, and each OK's affected rows and
// insert id; not the status flags, warnings count, info text or session
// state, which say nothing of the data.

// replaySeed seeds every transaction log's checksum: a recorded answer and
// its replay are hashed alike.
var replaySeed = maphash.MakeSeed()

// txnLog is the record of the session's open transaction (session.txlog).
type txnLog struct {
	on      bool   // recording the transaction open on the session's lease
	broken  string // why the transaction cannot be replayed ("": it can)
	begin   []byte // the deferred BEGIN (a COM_QUERY)
	buf     []byte // the statements' packets, back to back (see logStmt)
	stmts   []logStmt
	hashing bool // the answer being relayed goes into sum
	sum     maphash.Hash
	// next is why the statement being relayed cannot be recorded ("": it
	// can); it breaks the record once it ran (recordStmt), not before: a
	// COMMIT the former primary refused still finds the record whole.
	next string
	// pending: the transaction's connection was closed for a switch, and
	// it is replayed on the session's next borrow; rerun: the statement
	// that met the switch was refused, and is sent again after it.
	pending, rerun bool
}

// logStmt is one recorded statement: a text's COM_QUERY packet, or a
// prepared statement's execute (exec), whose packet in buf is the part
// after the statement id (flags, iteration count, parameters), the id
// being the one the replay's connection gives its prepare. sum is the
// checksum of its answer.
type logStmt struct {
	end  int // where its packet ends in buf
	sum  uint64
	exec *logExec
}

// logExec is what a recorded execute's statement is prepared from.
type logExec struct {
	db, query, key string
	parse          []varstate.Change
	params         int
}

// replayLogCap is the most buffer capacity a log keeps between
// transactions; larger buffers are let go.
const replayLogCap = 64 << 10

// start begins recording a transaction whose deferred BEGIN is begin.
func (l *txnLog) start(begin []byte) {
	l.stop()
	l.on = true
	l.begin = append(l.begin[:0], begin...)
	l.sum.SetSeed(replaySeed)
}

// stop ends the record.
func (l *txnLog) stop() {
	l.on, l.broken, l.next, l.hashing, l.pending, l.rerun = false, "", "", false, false, false
	clear(l.stmts) // the executes' statements
	l.stmts = l.stmts[:0]
	if cap(l.buf) > replayLogCap {
		l.buf = nil
	} else {
		l.buf = l.buf[:0]
	}
}

// packet is the i-th recorded statement's packet in buf.
func (l *txnLog) packet(i int) []byte {
	from := 0
	if i > 0 {
		from = l.stmts[i-1].end
	}
	return l.buf[from:l.stmts[i].end]
}

// hashOK adds an OK packet's affected rows and insert id to the sum.
func (l *txnLog) hashOK(affected, insertID uint64) {
	var b [17]byte
	b[0] = mysqlwire.HeaderOK
	binary.LittleEndian.PutUint64(b[1:], affected)
	binary.LittleEndian.PutUint64(b[9:], insertID)
	_, _ = l.sum.Write(b[:])
}

// beforeStmt is called before statement c goes out on the session's
// lease while a transaction is recorded: a statement the record may hold
// is hashed as it is relayed. It reports whether c is to be recorded
// (recordStmt) once it ran: held, or, for one the record may not hold,
// ending the transaction's chance of a replay.
func (s *session) beforeStmt(c command) bool {
	l := &s.txlog
	if l.broken != "" {
		return false
	}
	b := c.base()
	l.next = plan.NotReplayable(b.kind, b.info)
	if ec, ok := c.(*executeCmd); ok && l.next == "" && (ec.flags != 0 || ec.cs.longData != nil || ec.cs.db != s.state.DB) {
		l.next = "it ran a prepared statement with a cursor, long data or another database"
	}
	if l.hashing = l.next == ""; l.hashing {
		l.sum.Reset()
	}
	return true
}

// recordStmt adds statement c, relayed whole with answer rr, to the record
// (beforeStmt said to), unless it may not be replayed, its answer changed
// session state (which the replay's connection would not start from), or
// the record grew past failover.transaction_replay_max_size.
func (s *session) recordStmt(c command, rr *relayResult) {
	l := &s.txlog
	switch {
	case !l.on || l.broken != "":
		return
	case l.next != "":
		l.broken = l.next
		return
	case len(rr.sc.Vars) > 0 || rr.sc.SchemaSet || rr.sc.KeptSet || rr.sc.Pin != "":
		l.broken = "a statement changed session state"
		return
	}
	at := len(l.buf)
	var exec *logExec
	switch c := c.(type) {
	case *packetCmd:
		l.buf = append(l.buf, c.p...)
	case *executeCmd:
		cs := c.cs
		exec = &logExec{db: cs.db, query: cs.query, key: cs.key, parse: cs.parse, params: cs.params}
		l.buf = appendExecute(l.buf, 0, c.flags, c.iter, cs, c.nullMap, c.values)
		l.buf = append(l.buf[:at], l.buf[at+5:]...) // the command byte and the id
	default:
		l.broken = "it ran a command holdfast cannot send again"
		return
	}
	if limit := int(s.srv.config().Failover.TransactionReplayMaxSize); len(l.begin)+len(l.buf) > limit {
		l.broken = fmt.Sprintf("it is larger than failover.transaction_replay_max_size (%d bytes)", limit)
		l.buf = l.buf[:at]
		return
	}
	l.stmts = append(l.stmts, logStmt{end: len(l.buf), sum: l.sum.Sum64(), exec: exec})
}

// replayable reports whether the session's open transaction, which a
// switch met, may be replayed: recorded whole from its deferred BEGIN, on
// a session neither pinned nor holding its connection for SET
// TRANSACTION.
func (s *session) replayable() bool {
	l := &s.txlog
	return l.on && l.broken == "" && !l.pending && s.state.InTxn() && s.state.PinReason == "" && !s.state.Txn.HoldNext &&
		s.state.Txn.PendingBegin == nil && s.srv.config().Failover.TransactionReplay
}

// replayLater closes the session's connection to a former primary (the
// transaction is rolled back there) and marks its transaction to be
// replayed on the next borrow; false, changing nothing, when it may not be
// (replayable).
func (s *session) replayLater() bool {
	if !s.replayable() {
		if s.txlog.on && s.txlog.broken != "" {
			s.srv.log.Info("a transaction the primary switch met cannot be replayed", "client", s.id, "why", s.txlog.broken)
		}
		return false
	}
	s.txlog.pending = true
	s.release(false)
	return true
}

// replayOn replays the session's transaction on bc, a new primary's
// connection brought to the session's state: its BEGIN and each recorded
// statement, their answers read here and checked against the client's.
// A replay that fails closes bc and ends the transaction (replayLost).
func (s *session) replayOn(bc *backendConn) *mysqlwire.SQLError {
	l := &s.txlog
	l.pending = false
	s.setExec(bc, nil) // a kill of the session reaches the replay
	err := s.replayStmts(bc)
	s.setExec(nil, nil)
	// A kill that found the replay's connection registered ends it, even
	// one that landed after its last statement (runStmt clears the mark
	// as it sends the client's statement). One that comes between here
	// and that statement finds nothing to kill, as between any borrow and
	// its statement.
	s.waitKills()
	if err == nil && s.interrupted.Load() {
		err = errors.New("the session's statement was killed")
	}
	if err != nil {
		return s.replayLost(err.Error(), false)
	}
	s.srv.fo.replayed.Add(1)
	if l.rerun {
		s.srv.fo.retried.Add(1)
		l.rerun = false
	}
	s.srv.log.Info("a transaction the primary switch met was replayed on the new primary", "client", s.id, "statements", len(l.stmts))
	return nil
}

// errReplayDiffers is a replayed statement whose answer is not the one the
// client saw.
var errReplayDiffers = errors.New("answered differently than it did on the former primary")

// replayStmts sends l's BEGIN and statements on bc, each exchange bounded
// by the backend exchange timeout.
func (s *session) replayStmts(bc *backendConn) error {
	l := &s.txlog
	d := s.srv.exchangeTimeout()
	defer bc.bound(d)() // the BEGIN's exchange; each statement's below
	if err := bc.writeCommand(l.begin); err != nil {
		return fmt.Errorf("BEGIN: %w", err)
	}
	if _, err := bc.readOK(); err != nil {
		return fmt.Errorf("BEGIN: %w", err)
	}
	n := len(l.stmts)
	for i, st := range l.stmts {
		bc.bound(d)
		if err := s.sendRecorded(bc, st, l.packet(i)); err != nil {
			return fmt.Errorf("statement %d of %d: %w", i+1, n, err)
		}
		l.sum.Reset()
		if err := s.readReplayed(bc); err != nil {
			return fmt.Errorf("statement %d of %d: %w", i+1, n, err)
		}
		if l.sum.Sum64() != st.sum {
			return fmt.Errorf("statement %d of %d %w", i+1, n, errReplayDiffers)
		}
	}
	return nil
}

// sendRecorded sends recorded statement st, whose packet in the log is p,
// on bc: a text as it is, an execute after its statement is prepared on
// bc (once per connection, as any execute's).
func (s *session) sendRecorded(bc *backendConn, st logStmt, p []byte) error {
	e := st.exec
	if e == nil {
		return bc.writeCommand(p)
	}
	bs, errPkt, err := bc.prepareOn(e.db, e.parse, e.query, e.key, s.srv.stmtConfig())
	switch {
	case err != nil:
		return err
	case errPkt != nil:
		return fmt.Errorf("its prepare failed: %w", mysqlwire.ParseErr(errPkt))
	case bs.params != e.params:
		return errors.New("its prepare has another parameter count now")
	}
	out := append(bc.scratch[:0], comStmtExecute)
	out = binary.LittleEndian.AppendUint32(out, bs.id)
	out = append(out, p...)
	bc.scratch = out[:0]
	return bc.writeCommand(out)
}

// readReplayed reads the answer to a replayed statement, hashing it as
// relay hashed the answer the client saw: result sets' column counts,
// column definitions and rows, error packets whole, OKs' affected rows and
// insert ids; not EOFs.
func (s *session) readReplayed(bc *backendConn) error {
	l := &s.txlog
	for {
		p, err := bc.readPacket()
		if err != nil {
			return err
		}
		switch p[0] {
		case mysqlwire.HeaderErr:
			_, _ = l.sum.Write(p)
			return nil
		case mysqlwire.HeaderOK:
			ok, good := mysqlwire.ParseOK(p, true)
			if !good {
				return fmt.Errorf("%w: bad OK packet", errMalformed)
			}
			l.hashOK(ok.AffectedRows, ok.InsertID)
			if ok.Status&mysqlwire.StatusMoreResults == 0 {
				return nil
			}
			continue
		case mysqlwire.HeaderLocalInfile:
			return fmt.Errorf("%w: unexpected LOCAL INFILE request", errMalformed)
		}
		ncols, _, _, good := mysqlwire.ReadLenEnc(p)
		if !good || ncols == 0 {
			return fmt.Errorf("%w: bad column count", errMalformed)
		}
		_, _ = l.sum.Write(p)
		for range ncols {
			if p, err = bc.readPacket(); err != nil {
				return err
			}
			_, _ = l.sum.Write(p)
		}
		if p, err = bc.readPacket(); err != nil {
			return err
		} else if !mysqlwire.IsEOF(p[0], len(p)) {
			return fmt.Errorf("%w: no EOF after column definitions", errMalformed)
		}
		more := false
	rows:
		for {
			if p, err = bc.readPacket(); err != nil {
				return err
			}
			switch {
			case mysqlwire.IsEOF(p[0], len(p)):
				_, st := mysqlwire.EOFStatus(p)
				more = st&mysqlwire.StatusMoreResults != 0
				break rows
			case p[0] == mysqlwire.HeaderErr:
				_, _ = l.sum.Write(p)
				return nil
			}
			_, _ = l.sum.Write(p)
		}
		if !more {
			return nil
		}
	}
}

// replayLost ends a transaction whose replay did not take place: its
// connection, if any, is closed (rolling what was replayed back), the
// session is outside a transaction, and the answer is 9010 saying why
// (1317 when the session was killed meanwhile); counted: the 9010 that
// ended it was counted already.
func (s *session) replayLost(why string, counted bool) *mysqlwire.SQLError {
	s.txlog.pending = false
	s.release(false)
	s.txlog.stop() // with or without a connection to release
	s.state.Status &^= mysqlwire.StatusInTrans
	s.state.Txn.PendingBegin = nil
	s.state.Txn.HoldNext = false
	s.setTxnTag(nil)
	s.srv.fo.replayFailed.Add(1)
	s.srv.log.Warn("a transaction the primary switch met could not be replayed on the new primary: rolled back", "client", s.id, "why", why)
	if s.interrupted.Load() {
		return newErr(codeQueryInterrupted, "70100",
			"Query execution was interrupted (holdfast: while its transaction, which the primary switch met, was replayed on the new primary; the transaction was rolled back, and the session is outside a transaction now)")
	}
	if !counted {
		s.srv.fo.refused.Add(1)
	}
	return newErr(codePrimarySwitching, statePrimarySwitching,
		"holdfast: the primary switched during this transaction: it was rolled back on the former primary and could not be replayed on the new one (%s); the session is outside a transaction now; retry the transaction", why)
}
