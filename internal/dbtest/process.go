package dbtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// FreeAddr returns a loopback host:port that was free a moment ago, for a
// server a test starts (holdfast's listeners, a private MariaDB).
func FreeAddr(t testing.TB) string {
	t.Helper()
	addr, err := ListenAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// ListenAddr is FreeAddr for programs (the chaos and bench harnesses) and
// for callers that return the error.
func ListenAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("dbtest: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// SyncBuffer collects what a child process or a server's logger writes
// while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Terminate stops a child process: it sends p SIGTERM, then waits as
// WaitOrKill does. It reports whether p had to be killed.
func Terminate(p *os.Process, exited <-chan struct{}, grace time.Duration) (killed bool) {
	_ = p.Signal(syscall.SIGTERM)
	return WaitOrKill(p, exited, grace)
}

// WaitOrKill waits up to grace for exited to close (the caller's goroutine
// that waits for p closes it), then kills p and waits for exited. It
// reports whether p had to be killed.
func WaitOrKill(p *os.Process, exited <-chan struct{}, grace time.Duration) (killed bool) {
	select {
	case <-exited:
		return false
	case <-time.After(grace):
		_ = p.Kill()
		<-exited
		return true
	}
}

// Eventually polls cond every 20 ms until it holds, failing the test
// after 30 s (a hang guard, not a timing assertion) with what.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
