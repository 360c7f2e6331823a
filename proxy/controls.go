package proxy

import (
	"time"

	"github.com/holdfast-db/holdfast/config"
)

// On-call controls per tag, as the admin API and configuration set them:
// drains, connection limits, max_transaction_time (see gate.go for how
// borrows pass them).

// DrainTag refuses new borrows for tag. With grace > 0, sessions still holding
// a connection for the tag when it ends are killed (their transactions
// roll back).
func (s *Server) DrainTag(tag, reason string, grace time.Duration) {
	s.gates.drain(tag, reason, grace, func() { s.killHolders(tag) })
	s.log.Warn("tag drained", "tag", tag, "reason", reason, "grace", grace)
}

// UndrainTag lifts a drain.
func (s *Server) UndrainTag(tag string) {
	s.gates.undrain(tag)
	s.log.Warn("tag undrained", "tag", tag)
}

// LimitTag caps tag at n backend connections; n == 0 lifts the cap.
func (s *Server) LimitTag(tag string, n int) {
	s.gates.setLimit(tag, n, s.heldBy(tag))
	if n == 0 {
		s.log.Warn("tag connection limit lifted", "tag", tag)
	} else {
		s.log.Warn("tag connection limit set", "tag", tag, "max", n)
	}
}

// SetMaxTransactionTime bounds how long a transaction of tag may hold its
// backend connection (0 lifts the tag's own bound; sessions.
// max_transaction_time, when set, applies to every tag without one).
// Transactions past it have their statement interrupted and are rolled
// back, and their clients get error 9005 and are disconnected.
func (s *Server) SetMaxTransactionTime(tag string, d time.Duration) {
	s.gates.setMaxTxn(tag, d)
	if d == 0 {
		s.log.Warn("tag max_transaction_time lifted", "tag", tag)
	} else {
		s.log.Warn("tag max_transaction_time set", "tag", tag, "max", d)
	}
}

// Gates lists the on-call controls in force, by tag. InUse is the number of
// backend connections the tag holds now (as in Holders), whether or not it
// is capped.
func (s *Server) Gates() []GateState {
	gs := s.gates.snapshot()
	if len(gs) == 0 {
		return gs
	}
	held := map[string]int{}
	for _, h := range s.Holders() {
		held[h.Tag]++
	}
	for i := range gs {
		gs[i].InUse = held[gs[i].Tag]
	}
	return gs
}

func (s *Server) killHolders(tag string) {
	s.mu.Lock()
	var victims []*session
	for _, x := range s.sessions {
		x.mu.Lock()
		if !x.holdSince.IsZero() && x.holdKey == tag {
			victims = append(victims, x)
		}
		x.mu.Unlock()
	}
	s.mu.Unlock()
	for _, x := range victims {
		s.log.Warn("drain grace over: closing a client still holding a connection for the tag", "tag", tag, "client", x.id)
		x.terminate()
	}
}

// applyConfigGates puts the controls named in the configuration in force
// (on start and on reload; controls set through the admin API stay).
func (s *Server) applyConfigGates(t config.Tags) {
	for _, tag := range t.Drained {
		s.gates.drain(tag, "configured", 0, nil)
	}
	for tag, n := range t.Limits {
		s.gates.setLimit(tag, n, s.heldBy(tag))
	}
	if len(t.Drained)+len(t.Limits) > 0 {
		s.log.Info("configured tag controls applied", "drained", len(t.Drained), "limits", len(t.Limits))
	}
}
