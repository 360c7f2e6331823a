package testkit

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	c.Advance(time.Minute)
	if err := c.Sleep(context.Background(), time.Second); err != nil {
		t.Fatalf("Sleep: %v", err)
	}
	if got, want := c.Now(), start.Add(time.Minute+time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v", got, want)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Sleep(ctx, time.Second); err != context.Canceled {
		t.Fatalf("Sleep with ctx cancelled = %v, want %v", err, context.Canceled)
	}
	if got, want := c.Now(), start.Add(time.Minute+2*time.Second); !got.Equal(want) {
		t.Fatalf("Now = %v, want %v (Sleep advances even when ctx is done)", got, want)
	}
	var zero Clock
	if !zero.Now().IsZero() {
		t.Fatalf("zero Clock at %v", zero.Now())
	}
}

func TestMustPanic(t *testing.T) {
	MustPanic(t, "panic", func() { panic("x") })
	ft := &fakeT{TB: t}
	func() {
		defer func() { _ = recover() }() // fakeT.Fatalf panics to end MustPanic as t.Fatalf would
		MustPanic(ft, "nothing", func() {})
	}()
	if ft.failed != "nothing did not panic" {
		t.Fatalf("MustPanic of a call that returns: failure %q", ft.failed)
	}
}

// fakeT records Fatalf instead of failing the test.
type fakeT struct {
	testing.TB
	failed string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
	panic(f)
}
