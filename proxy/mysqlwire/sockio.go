package mysqlwire

import (
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// SockIO reads and writes a non-blocking TCP socket with raw system calls,
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
type SockIO struct {
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
	// pre (Read's only) is a command to write before the read, and more
	// what gives the bytes to write after it (see SendBeforeRead); after
	// the Read, pre is what is left when the socket had no room, preErr
	// what a write failed with.
	pre    []byte
	more   func() []byte
	preErr syscall.Errno
}

// NewSockIO returns the socket I/O for nc: a SockIO for a TCP connection,
// else nc itself (TLS, a pipe in tests).
func NewSockIO(nc net.Conn) io.ReadWriter {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nc
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nc
	}
	s := &SockIO{nc: nc, rc: rc}
	s.r.f, s.w.f = s.r.readFD, s.w.writeFD
	return s
}

// run gives p to o's system calls through the RawConn's Read (or Write)
// and reports what they did.
func (s *SockIO) run(o *sockOp, p []byte, write bool) (int, syscall.Errno, error) {
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

// SendBeforeRead makes the next Read write p first, in the same wait for
// readiness as the reply: for a command whose reply is read next, this
// saves the read that would find nothing between them. RawConn.Read
// resets the socket's readiness before its callback runs, so a read
// made there must be tried before waiting, since data that came before
// the reset would not wake it; a reply can only come after its command,
// written after that reset, so the callback that writes the command may
// wait at once. The caller keeps p unchanged until that Read.
//
// more, when not nil, is called after each buffer is written, before the
// wait, and returns the next one to write (nil: done): a pipe's senders
// add to the command while it is being written. Only the goroutine that
// Reads next may call SendBeforeRead, and no Write may come between.
func (s *SockIO) SendBeforeRead(p []byte, more func() []byte) { s.r.pre, s.r.more = p, more }

// Read reads as net.Conn's Read does, after writing what SendBeforeRead
// left for it.
func (s *SockIO) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		sending := s.r.pre != nil
		n, errno, err := s.run(&s.r, p, false)
		if sending {
			rest, more, werr := s.r.pre, s.r.more, s.r.preErr
			s.r.pre, s.r.more, s.r.preErr = nil, nil, 0
			if err != nil || werr != 0 {
				return 0, s.fail("write", werr, err)
			}
			if rest != nil {
				// The socket had no room: the rest, and what follows it,
				// wait for room the usual way; then the read.
				for ; rest != nil; rest = next(more) {
					if _, err := s.Write(rest); err != nil {
						return 0, err
					}
				}
				continue
			}
		}
		if err == nil && errno == 0 && n == 0 {
			return 0, io.EOF
		}
		return n, s.fail("read", errno, err)
	}
}

// Write writes all of p, as net.Conn's Write does.
func (s *SockIO) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, errno, err := s.run(&s.w, p, true)
	return n, s.fail("write", errno, err)
}

// fail is the error of a Read or Write: the RawConn's (a deadline, the
// connection closed), else the system call's, as net reports it.
func (s *SockIO) fail(op string, errno syscall.Errno, err error) error {
	if err != nil || errno == 0 {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}

// readFD is Read's system call; false asks the poller to wait. With a
// command to send first (pre), its first call writes it and waits.
func (o *sockOp) readFD(fd uintptr) bool {
	if o.pre != nil {
		return o.sendFD(fd)
	}
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

// sendFD writes pre, and what more gives, before Read waits for the
// reply. It leaves in pre what the socket had no room for (nil when all
// went) and in preErr a failure, and then returns true for Read to deal
// with them.
func (o *sockOp) sendFD(fd uintptr) bool {
	for b := o.pre; b != nil; b = next(o.more) {
		n, e := writeAll(fd, b)
		switch e {
		case 0:
		case syscall.EAGAIN:
			o.pre = b[n:]
			return true
		default:
			o.preErr = e
			return true
		}
	}
	o.pre = nil
	return false
}

// next is what more gives, nil when there is no more.
func next(more func() []byte) []byte {
	if more == nil {
		return nil
	}
	return more()
}

// writeFD is Write's system call, repeated until everything is written;
// false asks the poller to wait for room.
func (o *sockOp) writeFD(fd uintptr) bool {
	n, e := writeAll(fd, o.buf[o.n:])
	o.n += n
	switch e {
	case 0:
		return true
	case syscall.EAGAIN:
		return false
	}
	o.errno = e
	return true
}

// writeAll writes b to socket fd until all of it is written, the socket
// has no room (EAGAIN) or the write fails; it returns how much went.
func writeAll(fd uintptr, b []byte) (int, syscall.Errno) {
	done := 0
	for done < len(b) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&b[done])), uintptr(len(b)-done))
		switch e {
		case 0:
			done += int(n)
		case syscall.EINTR:
		default:
			return done, e
		}
	}
	return done, 0
}
