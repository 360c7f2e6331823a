package netrelay

import (
	"os"
	"syscall"
	"time"
	"unsafe"
)

// timerfd is the waker's platform timer on Linux: a one-shot
// CLOCK_MONOTONIC timerfd, read through the Go netpoller, so waiting on it
// blocks no thread and its expiry makes the runtime's epoll_wait return.
// (timerfd_settime is not subject to timer slack as a poll timeout is.)
type timerfd struct {
	f *os.File
}

func newPlatformTimer() platformTimer {
	const clockMonotonic = 1
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errno != 0 {
		return nil
	}
	return &timerfd{f: os.NewFile(fd, "timerfd")}
}

func (t *timerfd) arm(d time.Duration) {
	// struct itimerspec { it_interval, it_value }: one shot, relative.
	spec := [2]syscall.Timespec{{}, syscall.NsecToTimespec(int64(d))}
	rc, err := t.f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _, _ = syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, fd, 0, uintptr(unsafe.Pointer(&spec)), 0, 0, 0)
	})
}

func (t *timerfd) wait() bool {
	var buf [8]byte // the expiration count
	_, err := t.f.Read(buf[:])
	return err == nil
}

func (t *timerfd) close() { t.f.Close() }
