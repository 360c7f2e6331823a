package netrelay

import (
	"sync"
	"time"
)

// waker interrupts the runtime's idle epoll_wait at the due times it is
// given, so that Go timers due then (the relay's read deadlines) fire on
// time instead of up to a millisecond late. It only wakes the process; the
// timers themselves still do the work, so without a platform timer (see
// timer_linux.go) it does nothing and the relay is merely less punctual.
//
// Methods may be called from any goroutine; run is called once, close once.
type waker struct {
	t platformTimer // nil: no precise timer on this platform

	mu    sync.Mutex  // guards following
	due   []time.Time // min-heap of pending wake-up times
	armed time.Time   // what t is armed for; zero when disarmed
}

// wakeMargin arms the timer this much after a due time, so that when the
// runtime looks at its timers on waking, the one due is already expired
// (it reads the clock a little after the caller did).
const wakeMargin = 10 * time.Microsecond

// platformTimer is a one-shot timer whose expiry wakes the netpoller.
type platformTimer interface {
	arm(d time.Duration) // fire once, d from now, replacing any earlier arming
	wait() bool          // block until it fires; false once closed
	close()
}

func newWaker() *waker {
	return &waker{t: newPlatformTimer()}
}

// at asks for a wake-up at t.
func (w *waker) at(t time.Time) {
	if w == nil || w.t == nil {
		return
	}
	t = t.Add(wakeMargin)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.push(t)
	if w.armed.IsZero() || t.Before(w.armed) {
		w.armLocked(t)
	}
}

func (w *waker) armLocked(t time.Time) {
	w.armed = t
	w.t.arm(max(time.Until(t), time.Nanosecond))
}

// run waits for the timer and re-arms it for the next pending time, until
// close.
func (w *waker) run() {
	if w == nil || w.t == nil {
		return
	}
	for w.t.wait() {
		w.mu.Lock()
		now := time.Now()
		for len(w.due) > 0 && !w.due[0].After(now) {
			w.pop()
		}
		w.armed = time.Time{}
		if len(w.due) > 0 {
			w.armLocked(w.due[0])
		}
		w.mu.Unlock()
	}
}

func (w *waker) close() {
	if w != nil && w.t != nil {
		w.t.close()
	}
}

// push and pop keep w.due a binary min-heap (container/heap without the
// interface boxing).
func (w *waker) push(t time.Time) {
	w.due = append(w.due, t)
	for i := len(w.due) - 1; i > 0; {
		p := (i - 1) / 2
		if !w.due[i].Before(w.due[p]) {
			break
		}
		w.due[i], w.due[p] = w.due[p], w.due[i]
		i = p
	}
}

func (w *waker) pop() {
	n := len(w.due) - 1
	w.due[0] = w.due[n]
	w.due = w.due[:n]
	for i := 0; ; {
		l, m := 2*i+1, i
		if l < n && w.due[l].Before(w.due[m]) {
			m = l
		}
		if l+1 < n && w.due[l+1].Before(w.due[m]) {
			m = l + 1
		}
		if m == i {
			return
		}
		w.due[i], w.due[m] = w.due[m], w.due[i]
		i = m
	}
}
