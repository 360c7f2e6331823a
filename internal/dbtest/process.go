package dbtest

import (
	"bytes"
	"fmt"
	"net"
	"sync"
	"testing"
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

// ListenAddr is FreeAddr for programs (the chaos harness) and for callers
// that return the error.
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
