package reservation

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// A call's context ends at call_timeout unless it is held; held, its
// deadline moves out to the hold; a deadline met while a switch is under
// way moves too; the parent's cancellation and cause pass through.
func TestCallCtx(t *testing.T) {
	t.Run("deadline", func(t *testing.T) {
		c, cancel := newCallCtx(context.Background(), 20*time.Millisecond, time.Hour, nil)
		defer cancel()
		<-c.Done()
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("err %v", c.Err())
		}
		if holdCall(c) {
			t.Fatal("an ended call was held")
		}
	})
	t.Run("held", func(t *testing.T) {
		c, cancel := newCallCtx(context.Background(), 20*time.Millisecond, time.Hour, nil)
		defer cancel()
		d0, _ := c.Deadline()
		if !holdCall(c) {
			t.Fatal("not held")
		}
		if d, _ := c.Deadline(); !d.After(d0.Add(time.Minute)) {
			t.Fatalf("deadline %v not moved out from %v", d, d0)
		}
		time.Sleep(40 * time.Millisecond)
		if c.Err() != nil {
			t.Fatalf("held call ended: %v", c.Err())
		}
		cancel()
		if !errors.Is(c.Err(), context.Canceled) {
			t.Fatalf("err %v", c.Err())
		}
	})
	t.Run("switching", func(t *testing.T) {
		var sw atomic.Bool
		sw.Store(true)
		c, cancel := newCallCtx(context.Background(), 20*time.Millisecond, 80*time.Millisecond, sw.Load)
		defer cancel()
		time.Sleep(40 * time.Millisecond)
		if c.Err() != nil {
			t.Fatalf("ended while switching: %v", c.Err())
		}
		<-c.Done() // at the hold's end
		if !errors.Is(c.Err(), context.DeadlineExceeded) {
			t.Fatalf("err %v", c.Err())
		}
	})
	t.Run("parent", func(t *testing.T) {
		cause := errors.New("KILL QUERY")
		p, pcancel := context.WithCancelCause(context.Background())
		c, cancel := newCallCtx(p, time.Hour, time.Hour, nil)
		defer cancel()
		pcancel(cause)
		<-c.Done()
		if !errors.Is(c.Err(), context.Canceled) || context.Cause(c) != cause {
			t.Fatalf("err %v cause %v", c.Err(), context.Cause(c))
		}
	})
	t.Run("parent deadline", func(t *testing.T) {
		p, pcancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
		defer pcancel()
		c, cancel := newCallCtx(p, time.Hour, time.Hour, nil)
		defer cancel()
		holdCall(c)
		pd, _ := p.Deadline()
		if d, _ := c.Deadline(); d.After(pd) {
			t.Fatalf("deadline %v after the parent's %v", d, pd)
		}
		<-c.Done()
	})
}
