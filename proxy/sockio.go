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
	r  sockOp // Read's
	w  sockOp // Write's
}

// sockOp is one direction's operands: the buffer, what the system calls
// did with it, and the callback given to the RawConn (made once).
type sockOp struct {
	mu    sync.Mutex // held for a whole Read (or Write)
	buf   []byte
	n     int
	errno syscall.Errno
	f     func(fd uintptr) bool
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
	s.r.f, s.w.f = s.r.readFD, s.w.writeFD
	return s
}

// run gives p to o's system calls through the RawConn's Read (or Write)
// and reports what they did.
func (s *sockIO) run(o *sockOp, p []byte, write bool) (int, syscall.Errno, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf, o.n, o.errno = p, 0, 0
	var err error
	if write {
		err = s.rc.Write(o.f)
	} else {
		err = s.rc.Read(o.f)
	}
	o.buf = nil
	return o.n, o.errno, err
}

func (s *sockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := s.run(&s.r, p, false)
	if err == nil && errno == 0 && n == 0 {
		return 0, io.EOF
	}
	return n, s.fail("read", errno, err)
}

func (s *sockIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := s.run(&s.w, p, true)
	return n, s.fail("write", errno, err)
}

// fail is the error of a Read or Write: the RawConn's (a deadline, the
// connection closed), else the system call's, as net reports it.
func (s *sockIO) fail(op string, errno syscall.Errno, err error) error {
	if err != nil || errno == 0 {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// readFD is Read's system call; false asks the poller to wait.
func (o *sockOp) readFD(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&o.buf[0])), uintptr(len(o.buf)))
		switch e {
		case 0:
			o.n = int(n)
			return true
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		o.errno = e
		return true
	}
}

// writeFD is Write's system call, repeated until everything is written;
// false asks the poller to wait for room.
func (o *sockOp) writeFD(fd uintptr) bool {
	for o.n < len(o.buf) {
		b := o.buf[o.n:]
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
		switch e {
		case 0:
			o.n += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false
		default:
			o.errno = e
			return true
		}
	}
	return true
}
