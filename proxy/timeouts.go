package proxy

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Every hold and wait has a bound. Waits are bounded where they wait (the
// pool's and the tag gates' acquire timeout, a pipeline place's). The
// bounds on a client session are enforced by the janitor (server.go), the
// one timer loop, which reads each session's clocks:
//
//   - wait_timeout (the client's own, see kept.go): idle too long;
//   - sessions.idle_in_transaction_timeout: idle too long inside a
//     transaction that holds a backend connection;
//   - sessions.max_transaction_time (or the tag's, set by on-call): a
//     transaction that has held its backend connection too long;
//   - sessions.client_write_timeout (or the client's lower
//     net_write_timeout): a client that stopped reading its answer.
//
// The janitor marks the session (expire), interrupts a statement it runs
// and wakes it (a past read deadline, or, for a client that does not read,
// closing its socket). The session goroutine then ends the session: it
// tells the client why with an unsolicited error where it can, and its
// cleanup rolls back what the backend connection carries and returns it.

// Unsolicited errors that end a session.
const (
	codeClientTimeout = 4031 // MySQL 8.0.24's ER_CLIENT_INTERACTION_TIMEOUT
	codeTxnTooLong    = 9005 // a transaction past max_transaction_time
)

// expireReason is why the janitor ends a session (0: it does not).
type expireReason int32

const (
	expireNone expireReason = iota
	expireIdleInTxn
	expireTxnTime
	expireClientWrite
)

func (r expireReason) tagReason() string {
	switch r {
	case expireIdleInTxn:
		return attribution.TimeoutIdleInTransaction
	case expireTxnTime:
		return attribution.TimeoutTransaction
	case expireClientWrite:
		return attribution.TimeoutClientWrite
	}
	return attribution.TimeoutOther
}

// writeClock is the client socket under the session's writer: it counts
// what left, and while a write blocks, since says from when (for
// client_write_timeout).
type writeClock struct {
	conn interface {
		Write([]byte) (int, error)
	}
	srv   *Server
	n     int64
	since atomic.Int64 // UnixNano (Server.now) a write began; 0: none running
}

func (c *writeClock) Write(p []byte) (int, error) {
	c.since.Store(c.srv.now())
	n, err := c.conn.Write(p)
	c.since.Store(0)
	c.n += int64(n)
	return n, err
}

// clientWriteTimeout is the session's bound on a blocked write: the
// configured one, or the client's own net_write_timeout when lower.
func (s *session) clientWriteTimeout() time.Duration {
	d := s.srv.config().Sessions.ClientWriteTimeout
	if d == 0 {
		return 0
	}
	var w string
	if s.state.Vars != nil {
		w = s.state.Vars.Get("net_write_timeout")
	}
	if w != "" { // no failed parse per packet
		if n, err := strconv.ParseFloat(w, 64); err == nil && n > 0 {
			d = min(d, time.Duration(n*float64(time.Second)))
		}
	}
	return d
}

// checkBounds is the janitor's look at one session at now (UnixNano); it
// ends the session when one of its bounds has passed.
func (srv *Server) checkBounds(x *session, now int64) {
	if x.expire.Load() != 0 {
		return
	}
	if since := x.cw.since.Load(); since != 0 {
		if d := x.writeLimit.Load(); d > 0 && now-since > d {
			x.expireNow(expireClientWrite)
			return
		}
	}
	idleInTxn := srv.config().Sessions.IdleInTransactionTimeout
	maxTxn := srv.config().Sessions.MaxTransactionTime
	if idleInTxn == 0 && maxTxn == 0 && srv.gates.maxTxnActive.Load() == 0 {
		return
	}
	if !x.holding.Load() {
		return
	}
	x.mu.Lock()
	inTxn, holdSince, tag := x.inTxn, x.holdSince, x.holdKey
	x.mu.Unlock()
	if !inTxn || holdSince.IsZero() {
		return
	}
	if d := srv.gates.maxTxn(tag); d > 0 {
		maxTxn = d
	}
	idle := x.idleSince.Load()
	switch {
	case maxTxn > 0 && now-holdSince.UnixNano() > int64(maxTxn):
		x.expireNow(expireTxnTime)
	case idleInTxn > 0 && idle != 0 && now-idle > int64(idleInTxn):
		x.expireNow(expireIdleInTxn)
	}
}

// expireNow marks the session for ending and wakes it. Called by the
// janitor.
func (s *session) expireNow(r expireReason) {
	if !s.expire.CompareAndSwap(0, int32(r)) {
		return
	}
	if r == expireClientWrite {
		// It does not read: closing the socket fails the blocked write;
		// the rest of the answer is read and dropped (the statement is
		// interrupted so that it ends soon), and the session ends.
		_ = s.nc.Close()
	} else {
		_ = s.nc.SetReadDeadline(time.Unix(1, 0))
	}
	s.interrupt()
}

// expired ends a session the janitor marked: it counts and logs why, and
// tells the client with an unsolicited error (sequence 0, as MySQL sends
// its own) unless the client is the one that stopped reading.
func (s *session) expired() {
	r := expireReason(s.expire.Load())
	tag := s.defaultTag()
	if s.lease.tag != nil {
		tag = s.lease.tag
	}
	if s.srv.attr {
		s.defaultTagFor(tag).TimedOut(r.tagReason())
	}
	cfg := s.srv.config().Sessions
	var e *mysqlwire.SQLError
	switch r {
	case expireIdleInTxn:
		e = newErr(codeClientTimeout, "HY000", "holdfast: the client was disconnected for staying idle inside a transaction longer than sessions.idle_in_transaction_timeout (%v); the transaction was rolled back", cfg.IdleInTransactionTimeout)
	case expireTxnTime:
		d := cfg.MaxTransactionTime
		if td := s.srv.gates.maxTxn(s.keyOf(s.defaultTagFor(tag))); td > 0 {
			d = td
		}
		e = newErr(codeTxnTooLong, "HY000", "holdfast: the transaction held its backend connection longer than max_transaction_time (%v, tag '%s') and was rolled back; the connection is closed", d, s.defaultTagFor(tag).Name())
	}
	s.srv.log.Warn("client session ended by a bound", "client", s.id, "user", s.user.Name, "tag", s.defaultTagFor(tag).Name(), "reason", r.tagReason())
	if e != nil {
		_ = s.nc.SetWriteDeadline(time.Now().Add(time.Second))
		s.r.Seq = 0
		s.writeNow(e)
	}
}

// janitor is the one timer loop behind every session timeout. Each tick it
// starts watching the client socket of statements that have run longer
// than watchDelay (see clientWatch), and closes clients idle longer than
// their own wait_timeout (interactive_timeout for interactive clients),
// as MariaDB does: without a message, rolling back an open transaction.
func (s *Server) janitor() {
	defer s.wg.Done()
	t := time.NewTicker(watchDelay / 2)
	defer t.Stop()
	var sess []*session
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.clock.Store(now.UnixNano())
			sess = sess[:0]
			s.mu.Lock()
			for _, x := range s.sessions {
				sess = append(sess, x)
			}
			s.mu.Unlock()
			limit := now.Add(-watchDelay).UnixNano()
			for _, x := range sess {
				if since := x.watch.since.Load(); since != 0 && since < limit {
					x.watch.start()
				}
				if wt, idle := x.waitTimeout.Load(), x.idleSince.Load(); wt > 0 && idle != 0 && now.UnixNano()-idle > wt {
					s.log.Info("closing a client idle longer than its wait_timeout", "client", x.id, "user", x.userName(),
						"wait_timeout", time.Duration(wt))
					x.idleSince.Store(0)
					if s.attr {
						x.mu.Lock()
						ct := x.connTag
						x.mu.Unlock()
						ct.TimedOut(attribution.TimeoutWait)
					}
					_ = x.nc.Close()
					continue
				}
				s.checkBounds(x, now.UnixNano())
			}
		}
	}
}

// now is a clock that the janitor advances every tick: cheap enough to
// read once per statement.
func (s *Server) now() int64 {
	if t := s.clock.Load(); t != 0 {
		return t
	}
	return time.Now().UnixNano()
}
