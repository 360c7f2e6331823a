package proxy

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// sockIO reads and writes a non-blocking TCP socket with raw system calls,
// waiting for readiness through the connection's own poller (so deadlines
// and Close wake it as they wake a net.Conn's Read and Write).
//
// Why not net.Conn's Read and Write: those enter the system call through
// the runtime's syscall wrapper, which, when the process has been idle (no
// goroutine running), wakes the runtime's monitor thread; the monitor then
// polls every 20 µs until the process idles again. A proxy at low load goes
// idle between every two statements, so each statement paid a futex wake-up
// and several monitor wake-ups, measured as one futex and one nanosleep
// system call per statement and a third of holdfast's CPU at one client.
// A read or write on a non-blocking socket never blocks, so it may skip the
// wrapper (the rule for syscall.RawSyscall).
type sockIO struct {
	nc net.Conn
	rc syscall.RawConn

	rmu   sync.Mutex // guards rbuf, rn, rerr: Read's operands
	rbuf  []byte
	rn    int
	rerr  syscall.Errno
	readf func(fd uintptr) bool

	wmu    sync.Mutex // guards wbuf, wn, werr: Write's operands
	wbuf   []byte
	wn     int
	werr   syscall.Errno
	writef func(fd uintptr) bool
}

// newSockIO returns the socket I/O for nc: a sockIO for a TCP connection,
// else nc itself (TLS, a pipe in tests).
func newSockIO(nc net.Conn) io.ReadWriter {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	s := &sockIO{nc: nc, rc: rc}
	s.readf, s.writef = s.readFD, s.writeFD
	return s
}

func (s *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.rbuf, s.rn, s.rerr = p, 0, 0
	err := s.rc.Read(s.readf)
	n, errno := s.rn, s.rerr
	s.rbuf = nil
	switch {
	case err != nil:
		return 0, err // a deadline, or the connection closed
	case errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: os.NewSyscallError("read", errno)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readFD is Read's system call; false asks the poller to wait.
func (s *sockIO) readFD(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&s.rbuf[0])), uintptr(len(s.rbuf)))
		switch e {
		case 0:
			s.rn = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		s.rerr = e
		return true
	}
}

func (s *sockIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.wbuf, s.wn, s.werr = p, 0, 0
	err := s.rc.Write(s.writef)
	n, errno := s.wn, s.werr
	s.wbuf = nil
	switch {
	case err != nil:
		return n, err
	case errno != 0:
		return n, &net.OpError{Op: "write", Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: os.NewSyscallError("write", errno)}
	}
	return n, nil
}

// writeFD is Write's system call, repeated until everything is written;
// false asks the poller to wait for room.
func (s *sockIO) writeFD(fd uintptr) bool {
	for s.wn < len(s.wbuf) {
		b := s.wbuf[s.wn:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			s.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			s.werr = e
			return true
		}
	}
	return true
}
