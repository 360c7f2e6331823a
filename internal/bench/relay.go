package bench

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Relay accepts TCP connections and connects each to Backend, copying bytes
// both ways. With a zero Delay it is two io.Copy calls (splice(2) on Linux):
// the cheapest possible proxy hop, the floor any MySQL proxy is measured
// against. With a positive Delay every chunk read in either direction is
// written Delay after it was read, in order, so a request/response round
// trip gains 2×Delay of latency without losing throughput to pipelining.
//
// Each relayed connection costs exactly two goroutines, one per direction,
// whatever the delay: a delayed direction reads with a deadline set to the
// due time of its oldest queued chunk, so one goroutine both reads and
// writes on time. A delayed Relay has one more goroutine, its waker.
//
// Delays are realised by Go's timers (the read deadline), which are on time
// while the process is busy; when it is idle, though, the runtime sleeps in
// epoll_wait, whose timeout has millisecond granularity, and a 0.5 ms timer
// would fire after 1 ms or more. So a delayed Relay also keeps a waker (a
// timerfd on Linux, read through the netpoller): armed for the earliest due
// time of any queued chunk, it makes epoll_wait return on time, and the
// runtime then runs the deadline timer that is due. No thread sleeps and
// nothing spins. RelayStats.Late shows how late chunks still went out.
//
// A Relay must not be copied after first use. Serve may be called once;
// Close may be called at any time, from any goroutine, more than once.
type Relay struct {
	// Backend is the address every accepted connection is relayed to.
	Backend string
	// Delay is added to every chunk in each direction; zero means none.
	Delay time.Duration
	// DialTimeout bounds each backend dial; zero means 5 s.
	DialTimeout time.Duration
	// Log receives per-connection failures (backend dial errors); nil
	// means they are only counted.
	Log *slog.Logger

	wg sync.WaitGroup // connection handlers and the waker

	wakeOnce sync.Once
	wake     *waker // nil until the first delayed connection; then set once

	accepted  atomic.Int64
	active    atomic.Int64
	dialFails atomic.Int64
	chunks    atomic.Int64
	late      atomic.Int64 // nanoseconds, summed over delayed chunks

	mu     sync.Mutex // guards following
	ln     net.Listener
	conns  map[net.Conn]struct{}
	closed bool
}

// RelayStats is a snapshot of a Relay's counters.
type RelayStats struct {
	Accepted   int64 // connections accepted
	Active     int64 // connections being relayed now
	DialFails  int64 // accepted connections whose backend dial failed
	Chunks     int64 // chunks written after a delay (zero without Delay)
	Late       time.Duration
	MeanLateNs float64 // Late / Chunks: how far past its due time a chunk went out
}

// StartRelay listens on addr (e.g. "127.0.0.1:0") and serves a Relay to
// backend in the background until Close.
func StartRelay(addr, backend string, delay time.Duration) (*Relay, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: relay listen: %w", err)
	}
	r := &Relay{Backend: backend, Delay: delay, ln: ln}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		_ = r.Serve(ln)
	}()
	return r, nil
}

// Addr is the address the relay listens on, or nil before Serve.
func (r *Relay) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		return nil
	}
	return r.ln.Addr()
}

// Stats returns a snapshot of the counters.
func (r *Relay) Stats() RelayStats {
	s := RelayStats{
		Accepted:  r.accepted.Load(),
		Active:    r.active.Load(),
		DialFails: r.dialFails.Load(),
		Chunks:    r.chunks.Load(),
		Late:      time.Duration(r.late.Load()),
	}
	if s.Chunks > 0 {
		s.MeanLateNs = float64(s.Late) / float64(s.Chunks)
	}
	return s
}

// Serve accepts connections on ln until Close, and returns nil after Close
// or the accept error that stopped it. It takes ownership of ln.
func (r *Relay) Serve(ln net.Listener) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		ln.Close()
		return nil
	}
	r.ln = ln
	r.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			r.mu.Lock()
			closed := r.closed
			r.mu.Unlock()
			if closed {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			return fmt.Errorf("bench: relay accept: %w", err)
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			c.Close()
			return nil
		}
		r.wg.Add(1) // under mu, so never concurrent with Close's Wait
		r.mu.Unlock()
		r.accepted.Add(1)
		go r.handle(c)
	}
}

// Close stops accepting, closes every relayed connection and waits for
// their goroutines to end.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	ln := r.ln
	conns := make([]net.Conn, 0, len(r.conns))
	for c := range r.conns {
		conns = append(conns, c)
	}
	r.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, c := range conns {
		c.Close()
	}
	r.wakeOnce.Do(func() {}) // no waker may start after this
	if r.wake != nil {
		r.wake.close()
	}
	r.wg.Wait()
	return nil
}

// waker returns the relay's waker, starting it on first use. It is nil
// after Close.
func (r *Relay) waker() *waker {
	r.wakeOnce.Do(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			return
		}
		r.wake = newWaker()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.wake.run()
		}()
	})
	return r.wake
}

// track registers both ends of a connection for Close; false means the
// relay is closing and the caller must drop them.
func (r *Relay) track(cs ...net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	if r.conns == nil {
		r.conns = make(map[net.Conn]struct{})
	}
	for _, c := range cs {
		r.conns[c] = struct{}{}
	}
	return true
}

func (r *Relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	for _, c := range cs {
		delete(r.conns, c)
	}
	r.mu.Unlock()
}

// handle relays one client connection: this goroutine copies backend →
// client, a second one client → backend.
func (r *Relay) handle(client net.Conn) {
	defer r.wg.Done()
	defer client.Close()
	defer func() {
		if p := recover(); p != nil && r.Log != nil {
			r.Log.Error("bench: relay connection panicked", "panic", p)
		}
	}()
	timeout := r.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	backend, err := net.DialTimeout("tcp", r.Backend, timeout)
	if err != nil {
		r.dialFails.Add(1)
		if r.Log != nil {
			r.Log.Warn("bench: relay dial failed", "backend", r.Backend, "err", err)
		}
		return
	}
	defer backend.Close()
	if !r.track(client, backend) {
		return
	}
	defer r.untrack(client, backend)
	r.active.Add(1)
	defer r.active.Add(-1)

	done := make(chan struct{})
	go func() {
		defer close(done)
		r.pipe(backend, client)
	}()
	r.pipe(client, backend)
	<-done
}

// pipe copies src to dst until src ends. A clean end of src half-closes dst
// so the peer sees EOF as it would without the relay; any other failure
// closes both connections so the other direction ends too.
func (r *Relay) pipe(dst, src net.Conn) {
	var err error
	if r.Delay <= 0 {
		_, err = io.Copy(dst, src)
	} else {
		err = r.delayCopy(dst, src)
	}
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	dst.Close()
	src.Close()
}

// chunkSize is the largest read a delayed direction makes at once.
const chunkSize = 32 << 10

var chunkPool = sync.Pool{New: func() any { b := make([]byte, chunkSize); return &b }}

type chunk struct {
	buf *[]byte
	n   int
	due time.Time
}

// delayCopy copies src to dst writing each chunk r.Delay after it was read,
// in order. It returns nil when src reaches EOF and everything read has been
// written. Reads carry a deadline at the oldest queued chunk's due time, so
// the one goroutine wakes either for new data or to write.
func (r *Relay) delayCopy(dst, src net.Conn) (err error) {
	var q []chunk
	defer func() {
		for _, c := range q {
			chunkPool.Put(c.buf)
		}
	}()
	wk := r.waker()
	var woken time.Time // the due time last handed to wk
	write := func(c chunk) error {
		if d := time.Until(c.due); d > 0 {
			wk.at(c.due)
			time.Sleep(d)
		}
		late := time.Since(c.due)
		_, werr := dst.Write((*c.buf)[:c.n])
		chunkPool.Put(c.buf)
		r.chunks.Add(1)
		r.late.Add(int64(late))
		return werr
	}
	for {
		now := time.Now()
		for len(q) > 0 && !q[0].due.After(now) {
			c := q[0]
			q = q[1:]
			if err := write(c); err != nil {
				return err
			}
			now = time.Now()
		}
		var deadline time.Time
		if len(q) > 0 {
			deadline = q[0].due
			if !deadline.Equal(woken) {
				wk.at(deadline)
				woken = deadline
			}
		}
		if err := src.SetReadDeadline(deadline); err != nil {
			return err
		}
		buf := chunkPool.Get().(*[]byte)
		n, rerr := src.Read(*buf)
		if n > 0 {
			q = append(q, chunk{buf: buf, n: n, due: time.Now().Add(r.Delay)})
		} else {
			chunkPool.Put(buf)
		}
		switch {
		case rerr == nil:
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			// A queued chunk is due: the loop writes it.
		case errors.Is(rerr, io.EOF):
			for len(q) > 0 {
				c := q[0]
				q = q[1:]
				if err := write(c); err != nil {
					return err
				}
			}
			return nil
		default:
			return rerr
		}
	}
}

// waker interrupts the runtime's idle epoll_wait at the due times it is
// given, so that Go timers due then (the relay's read deadlines) fire on
// time instead of up to a millisecond late. It only wakes the process; the
// timers themselves still do the work, so without a platform timer (see
// relay_linux.go) it does nothing and the relay is merely less punctual.
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
