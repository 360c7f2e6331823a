package proxy

import (
	"context"
	"net"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// What the front end says of its readiness (holdfast serve's /readyz),
// and the hold on logins that keeps a new instance from serving before
// what must apply to its clients is known (HoldLogins).

// codeStarting refuses a login held past its bound (HoldLogins): the
// instance is starting and may not serve yet. Nothing ran.
const codeStarting = 9013

// Readiness is the front end's part of an instance's readiness.
type Readiness struct {
	// Listening: Serve accepts clients (after its first backend
	// connection was tried), and Drain has not been called.
	Listening bool
	// BackendAnswered: a backend connection has opened since start (the
	// backend's version and session defaults were read from it). It
	// stays true when the backend goes away later: see README.md,
	// "Running in Kubernetes", for why readiness does not follow every
	// backend blip.
	BackendAnswered bool
}

// Readiness reports the front end's readiness now. Any goroutine may
// call it at any time.
func (s *Server) Readiness() Readiness {
	return Readiness{
		Listening:       s.accepting.Load() && !s.draining.Load() && !s.isClosed(),
		BackendAnswered: s.primary.base.Load() != nil,
	}
}

// loginHold is what HoldLogins set.
type loginHold struct {
	open <-chan struct{}
	why  string
}

// HoldLogins makes each client that connects wait, before its handshake,
// until open is closed; one that has waited pool.acquire_timeout (read
// then) is refused with error 9013 saying why (e.g. "the fleet's controls
// have not been read yet"), and nothing of it ran. Call it before Serve,
// at most once (a client that connected before it is not held); without
// it no login waits.
func (s *Server) HoldLogins(open <-chan struct{}, why string) {
	s.hold.Store(&loginHold{open: open, why: why})
}

// admitLogin waits for the hold on logins to lift (see HoldLogins), and
// reports whether the client on nc may go on to its handshake. A refused
// client has been sent why; one cut off by Close has not.
func (s *Server) admitLogin(nc net.Conn) bool {
	h := s.hold.Load()
	if h == nil {
		return true
	}
	select {
	case <-h.open:
		return true
	default:
	}
	bound := s.config().Pool.AcquireTimeout
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case <-h.open:
		return true
	case <-s.ctx.Done():
		return false
	case <-t.C:
	}
	s.mu.Lock()
	s.st.Rejected++
	s.mu.Unlock()
	w := mysqlwire.Writer{Buf: mysqlwire.NewSmallWriter(nc)}
	_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
	_ = w.WritePacket(mysqlwire.AppendErr(nil, newErr(codeStarting, "08004",
		"holdfast is starting and serves no client yet: %s (waited pool.acquire_timeout, %v); nothing ran, connect again", h.why, bound)))
	_ = w.Flush()
	return false
}

// warmLater tries a first backend connection every few seconds until one
// opens (or Close), so that a backend down at start is found answering
// without waiting for a client: readiness waits for it. The pool keeps
// what it opened.
func (s *Server) warmLater() {
	defer s.wg.Done()
	wait := time.Second
	for s.primary.base.Load() == nil {
		if lifecycle.Sleep(s.ctx, wait) != nil {
			return
		}
		wait = min(2*wait, 5*time.Second)
		ctx, cancel := context.WithTimeout(s.ctx, s.config().Backend.DialTimeout)
		bc, err := s.pool.Acquire(ctx, 0)
		cancel()
		if err == nil {
			s.pool.Release(bc, true)
			return
		}
	}
}
