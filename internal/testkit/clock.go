// Package testkit holds the small fakes and checks that the unit tests of
// several packages share and that need no database or network: a Clock
// moved by hand and MustPanic. internal/dbtest is its sibling for tests
// that need MariaDB. Like net/http/httptest it exists only for tests; production
// code must not import it.
package testkit

import (
	"context"
	"sync"
	"time"
)

// Clock is an injectable clock that moves only when the test moves it.
// Its zero value stands at the zero time; NewClock starts it elsewhere.
// It is safe for use by several goroutines.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewClock returns a Clock standing at start.
func NewClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock on by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Sleep is a sleep that never blocks: it advances the clock by exactly d
// and returns ctx.Err().
func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.Advance(d)
	return ctx.Err()
}
