package restest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/holdfast-db/holdfast/reservation"
)

// FaultConns is the tests' fault injector at the engine's (and the
// refiller's) own seam, reservation.Conns. It wraps the real Conns and, on
// the statements a rule matches, makes the backend connection fail: either
// before the statement is sent (nothing of it ran), or after the database
// ran it (its answer is lost: "committed, but the client never heard").
// Either way the connection is then broken: later statements on it fail
// without being sent, and it is released broken, so the database closes it
// (rolling back whatever transaction it still had open). While down, the
// database is unreachable: every borrow fails, and so does every statement
// on a connection already lent.
type FaultConns struct {
	inner reservation.Conns

	mu    sync.Mutex // guards following
	rules []*FaultRule
	down  bool
}

// FaultRule fails the first statement that contains Match (after Skip).
type FaultRule struct {
	Match string
	After bool   // let the database run the statement, then lose its answer
	Skip  int    // let this many matching statements through first
	Then  func() // when set, called once the fault fired (e.g. f.SetDown)
	// Hold, when set, delays the statement instead of failing it: until
	// Hold is closed it is not sent, or, with After, its answer is not
	// returned (the database has run it; Then is called before the wait).
	// The statement's ctx bounds the wait, as it bounds a driver's: when it
	// ends first, an unsent statement is not sent and a held answer is
	// lost with the connection.
	Hold  <-chan struct{}
	fired int
}

// ErrLost is what a failed connection returns: an I/O error, as a driver
// reports a connection that died mid-statement.
var ErrLost = fmt.Errorf("faultconns: read tcp 127.0.0.1:41234->127.0.0.1:3306: %w", io.ErrUnexpectedEOF)

// ErrRefused is what a borrow returns while the database is down.
var ErrRefused = errors.New("faultconns: dial tcp 127.0.0.1:3306: connect: connection refused")

// NewFaultConns wraps inner with no rules.
func NewFaultConns(inner reservation.Conns) *FaultConns { return &FaultConns{inner: inner} }

// Inject adds a rule and returns it, so the test can check that it fired.
func (f *FaultConns) Inject(match string, after bool) *FaultRule {
	return f.Add(&FaultRule{Match: match, After: after})
}

// Add adds r and returns it.
func (f *FaultConns) Add(r *FaultRule) *FaultRule {
	f.mu.Lock()
	f.rules = append(f.rules, r)
	f.mu.Unlock()
	return r
}

// SetDown makes the database unreachable (true) or reachable again.
func (f *FaultConns) SetDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// Fired reports how often r fired.
func (f *FaultConns) Fired(r *FaultRule) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return r.fired
}

// Clear removes every rule and brings the database back.
func (f *FaultConns) Clear() {
	f.mu.Lock()
	f.rules, f.down = nil, false
	f.mu.Unlock()
}

// Borrow borrows from the wrapped Conns unless the database is down.
func (f *FaultConns) Borrow(ctx context.Context, tag string) (reservation.Conn, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down {
		return nil, ErrRefused
	}
	c, err := f.inner.Borrow(ctx, tag)
	if err != nil {
		return nil, err
	}
	return &faultConn{f: f, c: c}, nil
}

// pick returns the rule that fires for q, if any, and whether the
// database is down.
func (f *FaultConns) pick(q string) (*FaultRule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, true
	}
	for _, r := range f.rules {
		if r.fired == 0 && strings.Contains(q, r.Match) {
			if r.Skip > 0 {
				r.Skip--
				continue
			}
			r.fired++
			return r, false
		}
	}
	return nil, false
}

type faultConn struct {
	f      *FaultConns
	c      reservation.Conn
	broken bool
}

func (c *faultConn) do(ctx context.Context, q string, run func() error) error {
	if c.broken {
		return ErrLost
	}
	r, down := c.f.pick(q)
	switch {
	case down:
		c.broken = true
		return ErrLost
	case r == nil:
		return run()
	case r.Hold != nil && r.After:
		err := run()
		if r.Then != nil {
			r.Then()
		}
		select {
		case <-r.Hold:
			return err
		case <-ctx.Done():
			c.broken = true
			return ctx.Err()
		}
	case r.Hold != nil:
		select {
		case <-r.Hold:
			return run()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c.broken = true
	if r.After {
		_ = run() // the database runs it; the answer never arrives
	}
	if r.Then != nil {
		r.Then()
	}
	return ErrLost
}

func (c *faultConn) Exec(ctx context.Context, q string, args ...any) (reservation.Result, error) {
	var res reservation.Result
	err := c.do(ctx, q, func() (err error) {
		res, err = c.c.Exec(ctx, q, args...)
		return err
	})
	return res, err
}

func (c *faultConn) Query(ctx context.Context, q string, args ...any) ([][][]byte, error) {
	var rows [][][]byte
	err := c.do(ctx, q, func() (err error) {
		rows, err = c.c.Query(ctx, q, args...)
		return err
	})
	return rows, err
}

func (c *faultConn) Release(broken bool) { c.c.Release(broken || c.broken) }
