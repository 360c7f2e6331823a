package mysqlwire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (a, b *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.TCPConn), s.(*net.TCPConn)
}

// TestSockIO: the raw-syscall socket I/O behaves as net.Conn's Read and
// Write do where holdfast depends on it: bytes both ways, a write larger
// than the socket buffers completing once the peer reads, io.EOF at the
// peer's close, a deadline and a local Close ending a wait, a reset peer
// reported as an error.
func TestSockIO(t *testing.T) {
	a, b := tcpPair(t)
	sa, sb := NewSockIO(a), NewSockIO(b)
	if _, ok := sa.(*SockIO); !ok {
		t.Fatalf("a TCP connection got %T, not the raw socket I/O", sa)
	}

	if _, err := sa.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := sb.Read(buf)
	if err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}

	// 8 MiB is more than both sockets' buffers: the write waits for room
	// (EAGAIN, then the poller) until the reader drains.
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	done := make(chan error, 1)
	go func() {
		n, err := sa.Write(big)
		if err == nil && n != len(big) {
			err = io.ErrShortWrite
		}
		done <- err
	}()
	got, err := io.ReadAll(io.LimitReader(sb, int64(len(big))))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("read %d of %d bytes back, equal %v, %v", len(got), len(big), bytes.Equal(got, big), err)
	}
	if err := <-done; err != nil {
		t.Fatalf("large write: %v", err)
	}

	// A read deadline ends a wait with the error net.Conn gives.
	_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := sb.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	var ne net.Error
	if _, err := sb.Read(buf); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("a read after the deadline is not a timeout: %v", err)
	}
	_ = b.SetReadDeadline(time.Time{})

	// Closing the connection wakes a waiting read.
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.Close()
	}()
	if _, err := sb.Read(buf); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed connection: %v", err)
	}

	// The peer's close is io.EOF.
	c, d := tcpPair(t)
	sd := NewSockIO(d)
	c.Close()
	if n, err := sd.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed: %d, %v", n, err)
	}

	// A peer that resets the connection: the write or a later read fails
	// with the socket's error, not silently.
	e, f := tcpPair(t)
	se := NewSockIO(e)
	_ = f.SetLinger(0)
	f.Close() // on loopback the reset has arrived when Close returns
	var werr error
	for range 10 {
		if _, werr = se.Write([]byte("x")); werr != nil {
			break
		}
	}
	if werr == nil {
		_, werr = se.Read(buf)
	}
	if !errors.Is(werr, syscall.ECONNRESET) && !errors.Is(werr, syscall.EPIPE) {
		t.Fatalf("I/O on a reset connection: %v", werr)
	}
}

// TestSockIOSendBeforeRead: a command left for the next Read goes out
// before that Read waits, followed by what its more gives, and whole when
// it is larger than the socket buffers (the rest waits for room); a peer
// gone before the command is an error, not a hang.
func TestSockIOSendBeforeRead(t *testing.T) {
	a, b := tcpPair(t)
	sa := NewSockIO(a).(*SockIO)
	buf := make([]byte, 16)

	// The peer answers each command it reads; the Read that sent the
	// command gets the answer.
	go func() {
		in := make([]byte, 64)
		for {
			n, err := b.Read(in)
			if err != nil {
				return
			}
			if _, err := b.Write(bytes.ToUpper(in[:n])); err != nil {
				return
			}
		}
	}()
	for _, cmd := range []string{"one", "two", "three"} {
		sa.SendBeforeRead([]byte(cmd), nil)
		n, err := sa.Read(buf)
		if err != nil || string(buf[:n]) != strings.ToUpper(cmd) {
			t.Fatalf("reply to %q: %q, %v", cmd, buf[:n], err)
		}
	}

	// What more gives goes out after the command, in order, before the
	// wait.
	chunks := []string{"b", "c"}
	sa.SendBeforeRead([]byte("a"), func() []byte {
		if len(chunks) == 0 {
			return nil
		}
		c := chunks[0]
		chunks = chunks[1:]
		return []byte(c)
	})
	var got []byte
	for len(got) < 3 {
		n, err := sa.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
	}
	if string(got) != "ABC" {
		t.Fatalf("command and what followed came back as %q", got)
	}

	// 8 MiB does not fit the socket buffers: sent in part by the Read,
	// the rest as a Write does, then the reply is read.
	c, d := tcpPair(t)
	sc := NewSockIO(c).(*SockIO)
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	go func() {
		if got, err := io.ReadAll(io.LimitReader(d, int64(len(big)))); err == nil && bytes.Equal(got, big) {
			_, _ = d.Write([]byte("ok"))
		} else {
			_, _ = d.Write([]byte("bad"))
		}
	}()
	sc.SendBeforeRead(big, nil)
	if n, err := sc.Read(buf); err != nil || string(buf[:n]) != "ok" {
		t.Fatalf("reply to a large command: %q, %v", buf[:n], err)
	}

	// A peer that reset the connection before the command.
	e, f := tcpPair(t)
	se := NewSockIO(e).(*SockIO)
	_ = f.SetLinger(0)
	f.Close()
	time.Sleep(10 * time.Millisecond)
	se.SendBeforeRead([]byte("x"), nil)
	if _, err := se.Read(buf); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) && err != io.EOF {
		t.Fatalf("command to a reset connection: %v", err)
	}
}
