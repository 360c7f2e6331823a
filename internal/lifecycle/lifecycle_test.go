package lifecycle

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestStartClose(t *testing.T) {
	var l Loops
	var ran, stopped atomic.Int32
	loop := func(ctx context.Context) {
		ran.Add(1)
		<-ctx.Done()
		stopped.Add(1)
	}
	if err := l.Start(context.Background(), loop, loop); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(context.Background(), loop); !errors.Is(err, ErrStarted) {
		t.Fatalf("second Start = %v, want ErrStarted", err)
	}
	if l.Closed() {
		t.Fatal("Closed before Close")
	}
	if !l.Close() {
		t.Fatal("first Close reported false")
	}
	if ran.Load() != 2 || stopped.Load() != 2 {
		t.Fatalf("Close returned with %d loops run, %d stopped; want 2 and 2", ran.Load(), stopped.Load())
	}
	if l.Close() {
		t.Fatal("second Close reported true")
	}
	if !l.Closed() {
		t.Fatal("not Closed after Close")
	}
	if err := l.Start(context.Background(), loop); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestCloseBeforeStart(t *testing.T) {
	var l Loops
	if !l.Close() {
		t.Fatal("Close before Start reported false")
	}
	if err := l.StartAfter(context.Background(), func(context.Context) { t.Error("first ran after Close") }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
}

func TestStartAfter(t *testing.T) {
	var l Loops
	var first atomic.Bool
	seen := make(chan bool, 1)
	err := l.StartAfter(context.Background(), func(ctx context.Context) {
		if ctx.Err() != nil {
			t.Error("first got a done context")
		}
		first.Store(true)
	}, func(ctx context.Context) { seen <- first.Load() })
	if err != nil {
		t.Fatal(err)
	}
	if !<-seen {
		t.Error("a loop started before first returned")
	}
	l.Close()
}

func TestParentCancel(t *testing.T) {
	var l Loops
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if err := l.Start(ctx, func(ctx context.Context) { <-ctx.Done(); close(done) }); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a loop did not stop when the parent context ended")
	}
	l.Close()
}

func TestEvery(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	Every(ctx, time.Millisecond, func(context.Context) {
		n++
		if n == 3 {
			cancel()
		}
	})
	if n < 3 { // a tick due when ctx ended may run f once more
		t.Fatalf("f ran %d times, want at least 3", n)
	}

	n = 0
	Every(ctx, time.Hour, func(context.Context) { n++ })
	if n != 1 {
		t.Fatalf("with ctx done, f ran %d times, want 1 (Every calls f at once)", n)
	}
}

func TestSleep(t *testing.T) {
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a done ctx = %v, want context.Canceled", err)
	}
}
