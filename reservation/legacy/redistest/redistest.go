// Package redistest gives tests a private Redis: a redis-server of their
// own on a free port, with no persistence (--save "" --appendonly no), that
// a test may kill and start again (empty, as a Redis restarted without
// persistence comes back). Like net/http/httptest it exists only for
// tests; production code must not import it.
//
// It needs the Debian redis-server package (scripts/tools-up.sh installs
// it); a test FAILS without it, since what it checks cannot be checked
// against anything else.
package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Server is one private redis-server.
type Server struct {
	Addr string // 127.0.0.1:port

	t    testing.TB
	port int

	mu  sync.Mutex // guards cmd
	cmd *exec.Cmd
}

// Start starts a redis-server on a free port; it is killed at cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		bin = "/usr/bin/redis-server"
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("redistest: no redis-server (install the redis-server package: scripts/tools-up.sh): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), t: t, port: port}
	s.Restart()
	t.Cleanup(s.Kill)
	return s
}

// Restart starts the server again after Kill (empty), or starts it.
func (s *Server) Restart() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.t.TempDir(), "--protected-mode", "no")
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err == nil {
			_, _ = fmt.Fprintf(c, "PING\r\n")
			buf := make([]byte, 16)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			c.Close()
			if n > 0 && buf[0] == '+' {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server on %s did not answer: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill kills the server (SIGKILL) and waits for it to exit: everything in
// it is lost.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
