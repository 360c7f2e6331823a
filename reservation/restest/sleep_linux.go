package restest

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// sleeper sleeps with the kernel's timer precision without blocking a
// thread: a timerfd read through the Go netpoller. The runtime's own timers
// round short sleeps up to about a millisecond here, which would more than
// double a 0.5 ms relay delay, and nanosleep would park a whole thread (and
// its P) per relayed direction.
type sleeper struct {
	f *os.File // nil if timerfd is unavailable: fall back to time.Sleep
}

func newSleeper() *sleeper {
	const clockMonotonic, tfdNonblock, tfdCloexec = 1, syscall.O_NONBLOCK, syscall.O_CLOEXEC
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if errno != 0 {
		return &sleeper{}
	}
	return &sleeper{f: os.NewFile(fd, "timerfd")}
}

func (s *sleeper) sleep(d time.Duration) {
	if s.f == nil || d >= 5*time.Millisecond {
		time.Sleep(d)
		return
	}
	// struct itimerspec { it_interval, it_value timespec }: one shot.
	spec := [2]syscall.Timespec{{}, syscall.NsecToTimespec(int64(d))}
	rc, err := s.f.SyscallConn()
	if err != nil {
		time.Sleep(d)
		return
	}
	var errno syscall.Errno
	_ = rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	})
	if errno != 0 {
		time.Sleep(d)
		return
	}
	var buf [8]byte
	_, _ = s.f.Read(buf[:]) // returns when the timer fires
}

func (s *sleeper) close() {
	if s.f != nil {
		s.f.Close()
	}
}
