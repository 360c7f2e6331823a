package proxy

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// killStatement answers a text holding a KILL statement. Only the forms
// holdfast can translate run: their ids are holdfast's connection ids, and
// every client reaches the database as the one backend account, so no
// KILL may reach the database as written.
func (s *session) killStatement(info *sqlscan.Info) bool {
	k := info.Kill
	switch {
	case info.Kind != sqlscan.KindKill || !k.OK:
		s.writeErr(newErr(codeNotSupported, "42000", "holdfast: KILL must be a statement of its own: KILL [CONNECTION|QUERY] <connection id> or KILL [CONNECTION|QUERY] USER <name>, with a literal id (holdfast translates its connection ids; inside a multi-statement text or with an expression the database would read them as its own)"))
		return true
	case k.QueryID:
		s.writeErr(newErr(codeNotSupported, "42000", "holdfast: KILL QUERY ID is not supported (query ids are the database's, and a pooled connection runs many clients' queries); use KILL QUERY <connection id>"))
		return true
	case k.User != "":
		return s.killUser(k.User, k.Query)
	}
	return s.kill(k.ID, k.Query)
}

// killUser implements KILL [CONNECTION|QUERY] USER name: it acts on
// holdfast's own clients logged in as name, never on the database's
// connections (which all belong to the backend account). The OK counts the
// connections (or statements) killed, as MariaDB's does.
func (s *session) killUser(name string, queryOnly bool) bool {
	if name != s.user.Name && !s.user.Admin {
		s.writeErr(newErr(codeKillDenied, "HY000", "holdfast: you may KILL USER only your own user's connections ('%s' is not yours)", name))
		return true
	}
	s.srv.mu.Lock()
	var victims []*session
	self := false
	for _, x := range s.srv.sessions {
		if x.user.Name != name {
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
	s.writeOK(n, 0)
	return true
}

// kill implements KILL [QUERY] id and COM_PROCESS_KILL, where id is a
// holdfast client connection id.
func (s *session) kill(id uint64, queryOnly bool) bool {
	t := s.srv.session(id)
	if t == nil {
		s.writeErr(newErr(codeNoSuchThread, "HY000", "Unknown thread id: %d", id))
		return true
	}
	if t.user.Name != s.user.Name && !s.user.Admin {
		s.writeErr(newErr(codeKillDenied, "HY000", "You are not owner of thread %d", id))
		return true
	}
	if t == s {
		if queryOnly {
			s.writeOK(0, 0)
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
	s.writeOK(0, 0)
	return true
}

// interrupt stops the statement the session runs now, if any (KILL QUERY).
func (s *session) interrupt() {
	s.mu.Lock()
	tid := s.execTID
	s.mu.Unlock()
	if tid == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := killQuery(ctx, s.srv.backendSettings(), tid); err != nil {
		s.srv.log.Warn("KILL QUERY on backend failed", "client", s.id, "backend_thread", tid, "err", err)
	}
}

// terminate closes the client connection (KILL CONNECTION) and interrupts
// its running statement so the backend connection comes back promptly.
func (s *session) terminate() {
	s.mu.Lock()
	s.killed = true
	s.mu.Unlock()
	_ = s.nc.Close()
	s.interrupt()
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
		_, err := w.s.r.br.Peek(1)
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
