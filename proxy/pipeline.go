package proxy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/waitq"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	plan "github.com/holdfast-db/holdfast/proxy/policy"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/sessionstate"
)

// Pipelining: the MySQL protocol lets a client send several commands
// without waiting; the server runs them in order and answers in order.
// holdfast uses that for autocommit SELECTs (which change no session
// state and hold no locks afterwards): such a statement rides on a backend
// connection already carrying other sessions' SELECTs with the same
// session state, instead of taking a connection of its own or queueing for
// one. Commands that arrive while another is being written go out in the
// same write, and responses that arrive together are read in one read, so
// the system calls and the backend's thread wake-ups per statement drop as
// load rises. At most pool.pipeline_depth statements share a connection.
//
// A slow SELECT delays the ones queued behind it on its connection. KILL
// QUERY reaches a pipelined statement while it is the one running; the
// pipe takes no newcomers while a kill is in flight, and a statement queued
// behind the target that the kill hits anyway is run again (see kill.go).

// pipe is a backend connection shared by pipelined statements.
type pipe struct {
	bc  *backendConn
	srv *Server

	mu        sync.Mutex // guards the fields below
	pending   []byte     // framed commands not yet written
	flushing  bool
	queue     []chan struct{} // responses to read, in order; the head reads
	closed    bool            // released, or broken: no more joiners
	err       error           // the I/O error that broke it
	poisoned  bool            // a statement changed session state: close at the end
	killing   int             // kills in flight on the connection: no newcomers
	spare     []byte          // a written buffer, reused for pending
	writing   []byte          // the buffer the head's first read is writing
	next      func() []byte   // nextWrite, made once
	headSince time.Time       // when the current head statement got its turn
	class     class           // its statements' overload class: pipes do not mix classes
}

// rankEpoch is where the pipe waiters' ranks count from.
var rankEpoch = time.Now()

// pipes is the server's set of open pipes.
type pipes struct {
	// waiters are statements waiting for a place in a full pipe, oldest
	// first. A wake-up means "a place may be free: try again"; one a waiter
	// does not use is passed on to the next (see newPipes).
	waiters *waitq.Queue[struct{}, struct{}]

	mu   sync.Mutex // guards open
	open []*pipe
}

func newPipes() *pipes {
	ps := &pipes{}
	ps.waiters = waitq.New[struct{}](func(struct{}) { ps.wakeOne() })
	return ps
}

// pipelineDepth is how many statements may share one backend connection
// (0: pipelining off).
func (s *Server) pipelineDepth() int { return s.config().Pool.PipelineDepth }

// ensureVars gives the session its variables' starting values once the
// primary's defaults are known.
func (s *session) ensureVars() {
	if s.state.Vars == nil && s.srv.primary.base.Load() != nil {
		s.state.Vars = s.initialVars()
	}
}

// runPipelined runs command c on a pipe, as plan pl allows (policy: an
// autocommit plain SELECT, of a tag under no admission control, not of
// the background class while it is capped). A pipelined statement takes
// no lease of its own, so passes no control. handled is false when no
// pipe could take it (the caller then borrows a connection as usual);
// reran then says that it ran on a pipe and is to be sent again (its
// answer dropped: a kill meant for another hit it, or its pipe's server
// was retired before its turn).
func (s *session) runPipelined(c command, pl *plan.Plan) (handled, keep, reran bool) {
	tag, cl, text := c.base().tag, pl.Class, c.text()
	start := time.Now()
	q := s.srv.pipes.waiters
	var w *waitq.Waiter[struct{}, struct{}]
	var ctx context.Context
	p, turn, cmd, wait := s.srv.joinPipe(s, c, cl)
	for p == nil && wait {
		// A pipe fit for us exists but cannot take us now (full, busy with
		// a slow statement, or closed to newcomers while transactions wait
		// for a connection), and the pool cannot open another connection:
		// wait for a place rather than for a connection of our own, which
		// a busy pipe would not give back.
		if w == nil {
			// Queued by class like the pool's borrowers (classes.go).
			w = &waitq.Waiter[struct{}, struct{}]{Rank: int64(start.Sub(rankEpoch) + s.srv.handicap(cl))}
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(s.srv.ctx, s.srv.pool.Limits().AcquireTimeout)
			defer cancel()
		}
		if err := q.Enqueue(w); err != nil {
			s.writeErr(poolErr(pool.ErrClosed))
			return true, true, false
		}
		// A place may have opened between the failed try and queueing.
		if p, turn, cmd, wait = s.srv.joinPipe(s, c, cl); p != nil || !wait {
			if _, handed := q.Leave(w); handed {
				q.GiveBack(struct{}{}) // a wake-up we no longer need
			}
			break
		}
		if _, err := q.Wait(ctx, w); err != nil {
			if s.srv.ctx.Err() != nil || errors.Is(err, waitq.ErrClosed) {
				s.writeErr(poolErr(pool.ErrClosed))
			} else {
				s.writeErr(poolErr(fmt.Errorf("%w after %v (every backend connection busy)", pool.ErrTimeout, time.Since(start).Round(time.Millisecond))))
			}
			return true, true, false
		}
		if p, turn, cmd, wait = s.srv.joinPipe(s, c, cl); p == nil && !wait {
			// Woken, but off to borrow a connection instead: the place
			// we were woken for goes to the next waiter.
			q.GiveBack(struct{}{})
		}
	}
	if p == nil {
		return false, true, false
	}
	<-turn
	// Our turn: the statements before ours are done, so the backend thread
	// runs ours. It is a lease of the primary's (a turn: see takeTurn).
	s.srv.takeTurn(&s.turnLease, tag, start, &s.srv.primary)
	turnAt := s.turnLease.start
	s.mu.Lock()
	s.holdSince, s.holdTag, s.holdKey = turnAt, tag.Name(), pl.Key
	s.stmtText, s.stmtShape, s.stmtMode = append(s.stmtText[:0], text[:min(len(text), maxStmtCopy)]...), s.shape, s.mode
	s.mu.Unlock()
	p.mu.Lock()
	err := p.err
	p.mu.Unlock()
	// A pipe whose server was retired before this turn (it joined before
	// the retirement) must not answer it: a former primary's data may be
	// behind the new one's. Its answer is read (the pipe stays in step)
	// and dropped, and it runs again on a connection of its own.
	retired := s.srv.pool.Retired(p.bc)
	var rr relayResult
	sent, seq := s.cw.n, s.w.Seq
	if err == nil {
		// KILL QUERY may target the backend thread now.
		s.setExec(p.bc, p)
		s.watch.arm()
		p.bc.r.Seq = 1
		rr, err = s.relay(p.bc, cmd[0])
		s.setExec(nil, nil)
		s.watch.disarm()
		switch {
		case err != nil && !errors.Is(err, errClientGone):
			p.fail(err)
		case rr.sc.Changed || len(rr.sc.Vars) > 0 || rr.sc.SchemaSet:
			p.mu.Lock()
			p.poisoned = true
			p.mu.Unlock()
		}
	}
	p.leave()
	s.srv.statementDone(&s.turnLease, tag, turnAt, time.Now(), err != nil || rr.failed)
	s.srv.give(&s.turnLease, true, tag, s.id, nil, 0)
	s.endHoldMirror(false)
	if err == nil && s.cw.n == sent && (retired || rr.failed && rr.errCode == codeQueryInterrupted && !s.interrupted.Load()) {
		// Interrupted by a kill meant for the statement queued before ours
		// on the pipe, or answered by a retired server, and nothing of the
		// answer has left yet: drop it and run the statement again on a
		// connection of its own.
		s.w.Drop()
		s.w.Seq = seq
		s.srv.pipeReruns.Add(1)
		return false, true, true
	}
	if err != nil {
		if errors.Is(err, errClientGone) {
			return true, false, false
		}
		s.writeErr(newErr(codeServerLost, "HY000", "holdfast: lost the backend connection during a read-only statement; nothing was changed, it is safe to retry"))
		return true, true, false
	}
	s.state.Status = rr.status & sessionstate.Status
	s.srv.pipelined.Add(1)
	return true, true, false
}

// joinPipe queues command c on a pipe matching the session's state, or
// on a new pipe over an idle connection, and writes it (with whatever
// else is queued) unless another sender is writing. It returns the pipe,
// the channel that signals this statement's turn to read its response,
// and the command's bytes; a nil pipe when neither is possible without
// waiting.
func (srv *Server) joinPipe(s *session, c command, cl class) (p *pipe, turn chan struct{}, cmd []byte, wait bool) {
	if s.turn == nil {
		s.turn = make(chan struct{}, 1)
	}
	turn = s.turn
	// An idle connection first: no statement waits behind another then.
	bc, ok, other := srv.takeIdle(s.variant, func(bc *backendConn) bool { return s.fitsPipe(bc, c) })
	if ok {
		p = &bc.pipe
		p.mu.Lock()
		p.reset(bc, srv)
		p.class = cl
		srv.pipes.mu.Lock()
		srv.pipes.open = append(srv.pipes.open, p)
		srv.pipes.mu.Unlock()
		cmd = c.wire(s, bc)
		p.enqueueLocked(turn, cmd)
		return p, turn, cmd, false
	}
	if other {
		// An idle connection needs restoring or preparing first: the
		// caller borrows it as usual.
		return nil, nil, nil, false
	}
	// Every connection is busy: join the shortest pipe whose running
	// statement is not a slow one. While borrowers wait in the pool (a
	// transaction, say) pipes take no newcomers, so that they drain and
	// hand their connection over: pipelining never starves them.
	depth := srv.pipelineDepth()
	open := srv.pool.Waiting() == 0
	now := time.Now()
	srv.pipes.mu.Lock()
	var best *pipe
	bestLen := depth
	for _, x := range srv.pipes.open {
		x.mu.Lock()
		if !x.closed && x.killing == 0 && x.class == cl && s.fitsPipe(x.bc, c) && !srv.pool.Retired(x.bc) { // a retired server's pipe takes no newcomers
			wait = true
			if open && len(x.queue) < bestLen && now.Sub(x.headSince) < time.Duration(srv.slowHead.Load()) {
				best, bestLen = x, len(x.queue)
			}
		}
		x.mu.Unlock()
	}
	if best == nil {
		srv.pipes.mu.Unlock()
		if wait && open && srv.pool.CanDial(s.variant) {
			// Fitting pipes are full, but the pool has room: a connection
			// of our own comes sooner than a place.
			wait = false
		}
		return nil, nil, nil, wait
	}
	best.mu.Lock()
	srv.pipes.mu.Unlock()
	if best.closed || best.killing > 0 {
		best.mu.Unlock()
		return nil, nil, nil, true
	}
	cmd = c.wire(s, best.bc)
	best.enqueueLocked(turn, cmd)
	return best, turn, cmd, false
}

// wakeOne tells the oldest statement waiting for a place in a pipe to try
// again.
func (ps *pipes) wakeOne() { ps.waiters.HandOff(struct{}{}) }

// wakeAll tells every statement waiting for a place in a pipe to try again.
func (ps *pipes) wakeAll() { ps.waiters.HandOffAll(struct{}{}) }

// defaultSlowHead: a pipe whose current statement has run this long takes
// no new statements (they would wait behind it). Server.slowHead holds the
// value in force (tests change it).
const defaultSlowHead = 20 * time.Millisecond

// fitsPipe reports whether bc's session state is the session's, and
// whether bc has what command c needs (a prepared statement, prepared):
// a pipe cannot restore or prepare without delaying the statements queued
// on it.
func (s *session) fitsPipe(bc *backendConn, c command) bool {
	vars := bc.vars
	if vars == nil {
		vars = s.srv.baseVars()
	}
	if bc.variant != s.variant || !bc.dbKnown || bc.db != s.state.DB || bc.multiStmts != s.state.MultiStmts || !s.state.Vars.Equal(vars) {
		return false
	}
	// A statement whose parameter count changed on this connection (the
	// table was altered) takes the borrowing path, which reports it; so
	// does one prepared in another database than the session's, whose run
	// switches the database and back, which the server reports as a
	// session state change (see afterStatement).
	return c.fits(s, bc)
}

// enqueueLocked (p.mu held; released here) queues a command and its turn
// and flushes pending commands unless another sender is flushing.
func (p *pipe) enqueueLocked(turn chan struct{}, cmd []byte) {
	p.queue = append(p.queue, turn)
	if len(p.queue) == 1 {
		turn <- struct{}{}
	}
	p.pending = mysqlwire.AppendCommand(p.pending, cmd)
	if p.flushing || p.err != nil {
		p.mu.Unlock()
		return
	}
	p.flushing = true
	if sio, ok := p.bc.sock.(*mysqlwire.SockIO); ok && len(p.queue) == 1 && p.bc.r.Buf.Buffered() == 0 {
		// The sender is the head, which reads the response next: its
		// read writes the commands before it waits (mysqlwire.SockIO.SendBeforeRead),
		// and those queued meanwhile after them (nextWrite).
		p.writing = p.pending
		p.pending = p.spare[:0]
		sio.SendBeforeRead(p.writing, p.next)
		p.mu.Unlock()
		return
	}
	for len(p.pending) > 0 && p.err == nil {
		buf := p.pending
		p.pending = p.spare[:0]
		p.mu.Unlock()
		_, err := p.bc.sock.Write(buf)
		p.mu.Lock()
		p.spare = buf
		if err != nil {
			p.err = err
			p.closed = true
		}
	}
	p.flushing = false
	p.mu.Unlock()
}

// nextWrite is the head's read's SendBeforeRead more: the written buffer
// becomes the spare, and commands queued meanwhile are written next;
// none left ends the flush.
func (p *pipe) nextWrite() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.spare, p.writing = p.writing, nil
	if len(p.pending) == 0 || p.err != nil {
		p.flushing = false
		return nil
	}
	p.writing = p.pending
	p.pending = p.spare[:0]
	return p.writing
}

// maxPipeBuffer bounds the write buffers a pipe keeps between runs: a
// run of long statements does not leave its connection holding their
// size.
const maxPipeBuffer = 16 << 10

// reset (p.mu held) readies the connection's pipe for a new run, keeping
// its buffers when they are not large.
func (p *pipe) reset(bc *backendConn, srv *Server) {
	pending, spare, queue := p.pending[:0], p.spare[:0], p.queue[:0]
	if cap(pending) > maxPipeBuffer {
		pending = nil
	}
	if cap(spare) > maxPipeBuffer {
		spare = nil
	}
	p.bc, p.srv = bc, srv
	p.pending, p.spare, p.queue, p.writing = pending, spare, queue, nil
	if p.next == nil {
		p.next = p.nextWrite // made once: a method value allocates
	}
	p.flushing, p.closed, p.err, p.poisoned, p.killing = false, false, nil, false, 0
	p.headSince = time.Now()
}

func (p *pipe) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.closed = true
	p.mu.Unlock()
}

// leave ends the head's turn: the next in line may read; the last one out
// returns the connection.
func (p *pipe) leave() {
	p.mu.Lock()
	// Shifted, not resliced, so that the queue's array serves the next run.
	n := copy(p.queue, p.queue[1:])
	clear(p.queue[n:])
	p.queue = p.queue[:n]
	if n > 0 {
		p.headSince = time.Now()
		p.queue[0] <- struct{}{}
	}
	last := n == 0
	if last {
		p.closed = true
	}
	// Read before unlocking: once the last statement has left, the
	// connection and its pipe may be another run's.
	srv, bc := p.srv, p.bc
	broken, poisoned := p.err != nil, p.poisoned
	p.mu.Unlock()
	if !last {
		srv.pipes.wakeOne()
		return
	}
	srv.pipes.mu.Lock()
	if i := slices.Index(srv.pipes.open, p); i >= 0 {
		srv.pipes.open = slices.Delete(srv.pipes.open, i, i+1)
	}
	srv.pipes.mu.Unlock()
	srv.givePipe(bc, !broken && !poisoned)
	// The pipe is gone: everyone waiting for a place in it tries again
	// (another pipe, an idle connection, or the pool's queue); waiters for
	// other pipes re-queue in their turn.
	srv.pipes.wakeAll()
}
