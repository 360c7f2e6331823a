package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// killText answers a statement text that holds a KILL, also as the
// literal text of EXECUTE IMMEDIATE or PREPARE (see killIn). The KILL
// forms holdfast can translate run in holdfast: their ids are holdfast's
// connection ids, and every client reaches the database as the one
// backend account, so no KILL may reach the database as written. In a
// multi-statement text each KILL runs in its place and the statements
// around it run on the backend, as MariaDB runs such a text (see
// killAmong).
func (s *session) killText(c *packetCmd) bool {
	switch info := c.info; {
	case info.Statements <= 1:
		k, serr := s.killIn(c.p[1:], info)
		if serr != nil {
			s.writeErr(serr)
			return true
		}
		return s.killStatement(k, false)
	case !s.state.MultiStmts:
		// Multi-statements are off: the server refuses the whole text
		// (1064) before running any of it, as MariaDB would.
		pl := s.decide(c, nil, true)
		return s.run(c, &pl)
	}
	return s.killAmong(c.p[1:], c.tag)
}

// errKillForm is the answer to a KILL holdfast cannot translate.
func errKillForm() *mysqlwire.SQLError {
	return newErr(codeNotSupported, "42000", "holdfast: KILL must be KILL [CONNECTION|QUERY] <connection id> or KILL [CONNECTION|QUERY] USER <name>, with a literal id, as a statement of its own or among plain statements (holdfast translates its connection ids; with an expression, or inside a compound statement, the database would read them as its own)")
}

// killStatement answers one KILL statement; more says that statements of
// the same text follow it (its OK then carries MORE_RESULTS).
func (s *session) killStatement(info *sqlscan.Info, more bool) bool {
	k := info.Kill
	switch {
	case info.Kind != sqlscan.KindKill || !k.OK:
		s.writeErr(errKillForm())
		return true
	case k.QueryID:
		s.writeErr(newErr(codeNotSupported, "42000", "holdfast: KILL QUERY ID is not supported (query ids are the database's, and a pooled connection runs many clients' queries); use KILL QUERY <connection id>"))
		return true
	case k.User != "":
		return s.killUser(k.User, k.Query, more)
	}
	return s.kill(k.ID, k.Query, more)
}

// killAmong runs a multi-statement text that holds KILL statements: each
// KILL is answered by holdfast in its place, and each run of other
// statements between them goes to the backend as one text, its last result
// marked as followed by more. Like MariaDB, the first error ends the text.
// A text with a KILL holdfast cannot translate, or with a compound
// statement (whose body a split at ';' would cut), is refused before any
// of it runs.
func (s *session) killAmong(sql []byte, tag *attribution.Tag) bool {
	mode := s.scanMode()
	spans, compound := mode.Split(sql, nil)
	if compound {
		s.writeErr(errKillForm())
		return true
	}
	type part struct {
		kill       *sqlscan.Info // a KILL, or nil for statements from start to end
		start, end int
	}
	var parts []part
	for _, sp := range spans {
		text := sql[sp.Start:sp.End]
		one := mode.Scan(text)
		if one.Features&sqlscan.FeatKill == 0 && (one.Features&plan.DynamicSQL == 0 || !plan.SmuggledKill(mode, text, 0)) {
			if n := len(parts); n > 0 && parts[n-1].kill == nil {
				parts[n-1].end = sp.End // the run of plain statements goes on
			} else {
				parts = append(parts, part{start: sp.Start, end: sp.End})
			}
			continue
		}
		k, serr := s.killIn(text, &one)
		if serr == nil && (k.Kind != sqlscan.KindKill || !k.Kill.OK) {
			serr = errKillForm()
		}
		if serr != nil {
			s.writeErr(serr)
			return true
		}
		parts = append(parts, part{kill: k})
	}
	for i, pt := range parts {
		more := i < len(parts)-1
		s.reply.err = false
		var keep bool
		if pt.kill != nil {
			keep = s.killStatement(pt.kill, more)
		} else {
			keep = s.runAmong(sql[pt.start:pt.end], tag, more)
		}
		if !keep || s.reply.err || s.gone || s.closeAfter {
			return keep
		}
	}
	return true
}

// runAmong runs statements of a multi-statement text on the backend, as
// they are; more says that further results of the text follow theirs.
func (s *session) runAmong(text []byte, tag *attribution.Tag, more bool) bool {
	c := &s.part
	c.scan = s.scanMode().Scan(text)
	s.amongBuf = append(append(s.amongBuf[:0], comQuery), text...)
	c.set(plan.Query, s.amongBuf, &c.scan, tag, false)
	s.reply.moreAfter = more
	defer func() { s.reply.moreAfter = false }()
	pl := s.decide(c, nil, true)
	return s.execute(c, &pl)
}

// killUser implements KILL [CONNECTION|QUERY] USER name: it acts on
// holdfast's own clients logged in as name, never on the database's
// connections (which all belong to the backend account). The OK counts the
// connections (or statements) killed, as MariaDB's does.
func (s *session) killUser(name string, queryOnly, more bool) bool {
	if name != s.user.Name && !s.user.Admin {
		s.writeErr(newErr(codeKillDenied, "HY000", "holdfast: you may KILL USER only your own user's connections ('%s' is not yours)", name))
		return true
	}
	s.srv.mu.Lock()
	var victims []*session
	self := false
	for _, x := range s.srv.sessions {
		if x.userName() != name {
			continue
		}
		if x == s {
			self = true
			continue
		}
		victims = append(victims, x)
	}
	s.srv.mu.Unlock()
	for _, x := range victims {
		if queryOnly {
			x.interrupt()
		} else {
			x.terminate()
		}
	}
	n := uint64(len(victims))
	if self && !queryOnly {
		n++
		s.closeAfter = true // its own connection goes too, after the answer
	}
	s.writeOKMore(n, 0, more)
	return true
}

// kill implements KILL [QUERY] id and COM_PROCESS_KILL, where id is a
// holdfast client connection id; more as for killStatement.
func (s *session) kill(id uint64, queryOnly, more bool) bool {
	t := s.srv.session(id)
	if t == nil {
		s.writeErr(newErr(codeNoSuchThread, "HY000", "Unknown thread id: %d", id))
		return true
	}
	if t.userName() != s.user.Name && !s.user.Admin {
		s.writeErr(newErr(codeKillDenied, "HY000", "You are not owner of thread %d", id))
		return true
	}
	if t == s {
		if queryOnly {
			// The statement interrupted is the KILL itself (and with it
			// the rest of its text), as MariaDB answers.
			s.writeErr(newErr(codeQueryInterrupted, "70100", "Query execution was interrupted"))
			return true
		}
		s.writeErr(newErr(1927, "70100", "Connection was killed"))
		return false
	}
	if queryOnly {
		t.interrupt()
	} else {
		t.terminate()
	}
	s.writeOKMore(0, 0, more)
	return true
}

// interrupt stops the statement the session runs now, if any. It is the
// one path every kill takes: KILL QUERY and KILL CONNECTION, KILL USER, a
// client that disconnects mid-statement, a drain's grace running out.
//
// A MySQL KILL QUERY stops whatever the backend thread runs when it
// arrives, and holdfast's backend connections serve one client after
// another. So while the kill is in flight, the connection is held (the
// pool lends it to nobody, even if the session releases it), the session
// sends nothing more on it (killMu), and a pipe takes no newcomers;
// statements already queued on a pipe behind the target that the kill hits
// anyway are run again (see runPipelined).
func (s *session) interrupt() {
	s.killMu.Lock()
	defer s.killMu.Unlock()
	s.mu.Lock()
	bc, p := s.execBC, s.execPipe
	if s.execCall != nil {
		// A CALL holdfast.*: the engine runs it on connections of its
		// own; cancelling its context ends it, and its answer says what
		// it did.
		s.execCall(errCallInterrupted)
		s.interrupted.Store(true)
	}
	held := bc != nil && poolOf(bc, s.srv).Hold(bc)
	if held {
		s.interrupted.Store(true)
		if s.uploading.Load() {
			_ = s.nc.SetReadDeadline(time.Unix(1, 0))
		}
		if p != nil {
			p.mu.Lock()
			p.killing++
			p.mu.Unlock()
		}
	}
	s.mu.Unlock()
	if !held {
		return
	}
	if d := s.srv.killDelay; d > 0 {
		time.Sleep(d)
	}
	be := bc.be
	if be == nil {
		be = &s.srv.primary
	}
	err := be.killer.killQuery(s.srv, be, bc)
	if err != nil && isIOError(err) {
		s.srv.log.Warn("KILL QUERY on backend failed", "client", s.id, "backend_thread", bc.threadID, "err", err)
	}
	s.srv.noteKillRefused(err, bc.threadID)
	if p != nil {
		p.mu.Lock()
		p.killing--
		p.mu.Unlock()
	}
	// A kill whose fate is unknown may still land: then the connection is
	// not lent to anyone again.
	poolOf(bc, s.srv).Unhold(bc, !isIOError(err))
}

// terminate closes the client connection (KILL CONNECTION) and interrupts
// its running statement so the backend connection comes back promptly.
func (s *session) terminate() {
	_ = s.nc.Close()
	s.interrupt()
}

// killer sends KILL QUERY over a backend connection of its own, kept open
// between kills so that a kill is quick (the pool may be exhausted, and a
// dial takes a round trip or three). Kills are sent one at a time.
//
// Thread ids are per server, and the server behind an address changes (a
// switchover moves a name or a VIP): a kill goes to the address the
// target's connection is open to, and only over a connection to the same
// server (backendConn.server); when no such connection can be had, the
// kill is not sent, rather than end whatever another server runs under
// that thread id.
type killer struct {
	mu sync.Mutex // guards bc; held while a kill is sent
	bc *backendConn
}

// killQuery sends KILL QUERY for the statement target runs. A
// *mysqlwire.SQLError means the server answered (an unknown thread, say)
// or the kill was not sent; any other error that the kill's fate is
// unknown.
func (k *killer) killQuery(srv *Server, be *backend, target *backendConn) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	ctx, cancel := context.WithTimeout(srv.ctx, 5*time.Second)
	defer cancel()
	tid := target.threadID
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if k.bc != nil && k.bc.server != target.server {
			k.bc.close() // open to another server than the target's
			k.bc = nil
		}
		if k.bc == nil {
			if k.bc, err = k.dialServer(ctx, srv, be, target); err != nil {
				// Not sent: nothing can land. A dial failure is no I/O
				// error on the target's connection.
				return &mysqlwire.SQLError{Code: codeConnectFailed, State: "HY000", Msg: err.Error()}
			}
		}
		_, err = k.bc.query(ctx, "KILL QUERY "+strconv.FormatUint(uint64(tid), 10))
		if !isIOError(err) {
			return err
		}
		k.bc.close()
		k.bc = nil
	}
	return err
}

// dialServer opens a kill connection to the server target is open to:
// at the address target is open to, else (a VIP that moved since) at the
// addresses the topology check last reached that server at. It fails when
// none leads to that server.
func (k *killer) dialServer(ctx context.Context, srv *Server, be *backend, target *backendConn) (*backendConn, error) {
	bs := be.settings(srv.ownSettings())
	addrs := []string{bs.Address}
	if ra := target.remoteAddr(); ra != "" {
		addrs[0] = ra
	}
	if v := srv.topo.view.Load(); v != nil && target.server != "" {
		for _, o := range v.obs {
			if o.id == target.server && !slices.Contains(addrs, o.addr) {
				addrs = append(addrs, o.addr)
			}
		}
	}
	var reached []string
	for _, a := range addrs {
		bs.Address = a
		bc, err := dialBackend(ctx, bs, 0)
		if err != nil {
			reached = append(reached, a+": "+err.Error())
			continue
		}
		if bc.server == target.server {
			return bc, nil
		}
		reached = append(reached, a+" leads to "+string(bc.server))
		bc.close()
	}
	srv.log.Warn("KILL QUERY not sent: the server the statement runs on cannot be reached (a switchover moved its address)",
		"backend_thread", target.threadID, "server", target.server, "tried", strings.Join(reached, "; "))
	return nil, fmt.Errorf("holdfast: KILL QUERY not sent: the statement runs on server %s, which no address leads to now (%s)", target.server, strings.Join(reached, "; "))
}

// remoteAddr is the address bc is open to ("" when unknown).
func (bc *backendConn) remoteAddr() string {
	if bc.nc == nil || bc.nc.RemoteAddr() == nil {
		return ""
	}
	return bc.nc.RemoteAddr().String()
}

// close closes the kill connection (at shutdown).
func (k *killer) close() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.bc != nil {
		k.bc.close()
		k.bc = nil
	}
}

// clientWatch notices a client that disconnects while its statement runs
// (drivers close the socket when a context is cancelled) and interrupts
// the statement so the backend connection is not held for nothing. A
// statement only marks itself as running (one atomic store); the server's
// watchdog starts reading the client socket once a statement has run for
// watchDelay.
type clientWatch struct {
	s     *session
	since atomic.Int64 // UnixNano when the running statement started; 0: none

	mu      sync.Mutex // guards the fields below
	running bool
	done    chan struct{}
}

const watchDelay = 100 * time.Millisecond

func (w *clientWatch) arm() { w.since.Store(time.Now().UnixNano()) }

// start begins watching if the statement still runs; the watchdog calls it.
func (w *clientWatch) start() {
	w.mu.Lock()
	if w.since.Load() == 0 || w.running {
		w.mu.Unlock()
		return
	}
	w.running = true
	w.done = make(chan struct{})
	done := w.done
	w.mu.Unlock()
	go func() {
		defer close(done)
		// The session goroutine does not read while a statement runs, so
		// the reader is ours until disarm. Anything read stays buffered.
		_, err := w.s.r.Buf.Peek(1)
		if err == nil {
			return
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) {
			return // disarmed
		}
		w.s.srv.log.Info("client disconnected during a statement; interrupting it", "client", w.s.id)
		w.s.interrupt()
	}()
}

func (w *clientWatch) disarm() {
	w.since.Store(0)
	w.mu.Lock()
	running, done := w.running, w.done
	w.running = false
	w.mu.Unlock()
	if running {
		_ = w.s.nc.SetReadDeadline(time.Unix(1, 0))
		<-done
		_ = w.s.nc.SetReadDeadline(time.Time{})
	}
}

// killIn returns the KILL statement that text, one statement whose scan
// is info, has the server run: info itself for a KILL; for EXECUTE
// IMMEDIATE of a literal KILL (the whole statement, without USING), that
// KILL, which holdfast runs in its place as it runs KILL itself. Any other
// form that holds a KILL gets an error: PREPARE of a KILL (holdfast cannot
// hold a prepared KILL for a later EXECUTE, which it does not see
// through), and KILL text that is built by an expression or buried in a
// larger statement.
func (s *session) killIn(text []byte, info *sqlscan.Info) (*sqlscan.Info, *mysqlwire.SQLError) {
	if info.Features&plan.DynamicSQL == 0 || info.Kind == sqlscan.KindKill {
		return info, nil
	}
	mode := s.scanMode()
	for depth := 0; depth <= plan.MaxKillDepth; depth++ {
		ds := mode.AppendDynamic(nil, text)
		for _, d := range ds {
			if d.Prepare && (d.Literal && mode.Scan(d.Text).Features&(sqlscan.FeatKill|plan.DynamicSQL) != 0 || !d.Literal) {
				return nil, errPreparedKill()
			}
		}
		if len(ds) != 1 || !ds[0].Literal || !ds[0].Whole || ds[0].Using {
			break
		}
		text = ds[0].Text
		inner := mode.Scan(text)
		if inner.Kind == sqlscan.KindKill && inner.Statements == 1 {
			return &inner, nil
		}
		if inner.Kind != sqlscan.KindExecute {
			break
		}
	}
	return nil, newErr(codeNotSupported, "42000", "holdfast: a KILL run by EXECUTE IMMEDIATE must be its whole literal text, with a literal id (EXECUTE IMMEDIATE 'KILL [CONNECTION|QUERY] <connection id>'), as a statement of its own; holdfast translates KILL's connection ids, and in any other form the database would read them as its own")
}

// errPreparedKill is the answer to a KILL prepared through holdfast.
func errPreparedKill() *mysqlwire.SQLError {
	return newErr(codeUnsupportedPS, "HY000", "holdfast: KILL cannot be prepared through holdfast (its id is holdfast's connection id, which only a KILL statement, or EXECUTE IMMEDIATE of one, translates); send it as a statement")
}
