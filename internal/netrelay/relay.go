// Package netrelay is a TCP relay that stands between a client and a
// server (MariaDB, in holdfast's tests and benchmarks) and does to the
// bytes what a network would: pass them on at once (the cheapest proxy
// hop, the floor any MySQL proxy is measured against), late (latency, as
// netem would add, which these machines lack), not at all for a while (a
// stall), or never again (a cut: every connection dropped, new ones
// refused, as a restart does).
//
// It owns relaying bytes between two TCP connections and those faults. It
// must not look into what it relays (no MySQL protocol), and it is not part
// of holdfast's data path: only tests, benchmarks and their harnesses use
// it.
package netrelay

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

// Relay accepts TCP connections and connects each to Target, copying bytes
// both ways.
//
// With no delay in a direction (and no CutWhen on the client's) that
// direction is one io.Copy (splice(2) on Linux). With a delay every chunk
// read is written that long after it was read, in order, so a request and
// its reply gain ToTarget+ToClient of latency without losing throughput to
// pipelining. Each relayed connection costs exactly two goroutines, one per
// direction, whatever the delay: a delayed direction reads with a deadline
// at the due time of its oldest queued chunk, so one goroutine both reads
// and writes on time. A delayed Relay has one more goroutine, its waker.
//
// Delays are realised by Go's timers (the read deadline), which are on time
// while the process is busy; when it is idle, though, the runtime sleeps in
// epoll_wait, whose timeout has millisecond granularity, and a 0.5 ms timer
// would fire after 1 ms or more. So a delayed Relay also keeps a waker (a
// timerfd on Linux, read through the netpoller): armed for the earliest due
// time of any queued chunk, it makes epoll_wait return on time, and the
// runtime then runs the deadline timer that is due. No thread sleeps and
// nothing spins. Stats.Late shows how late chunks still went out.
//
// Set the fields before Start or Serve; they must not change afterwards
// (Retarget moves Target for the connections that come after it).
// Serve (or Start) may be called once. Cut, Up, Stall, Resume, Retarget,
// Stats and Close may be called at any time, from any goroutine; Close more than
// once. A Relay must not be copied after first use.
type Relay struct {
	// Target is the address every accepted connection is relayed to.
	Target string
	// ToTarget is added to every chunk a client sends; zero means none.
	ToTarget time.Duration
	// ToClient is added to every chunk Target sends; zero means none.
	ToClient time.Duration
	// CutWhen, when not nil, is shown every chunk a client sends, as read;
	// when it returns true that chunk is forwarded and then the relay is
	// Cut; that client reads the end of its connection, and nothing Target
	// sends after the chunk. It is called from the relay's goroutines, concurrently, and must
	// neither block nor keep the slice. Setting it makes the client's
	// direction copy through a buffer instead of splice(2).
	CutWhen func(chunk []byte) bool
	// DialTimeout bounds each dial of Target; zero means 5 s.
	DialTimeout time.Duration
	// Log receives per-connection failures (dial errors); nil means they
	// are only counted.
	Log *slog.Logger

	wg sync.WaitGroup // connection handlers, the waker and Start's Serve

	wakeOnce sync.Once
	wake     *waker // nil until the first delayed direction; then set once

	// stalled mirrors stalledCh != nil for the copy loops, which read it
	// without mu: a Stall sets it before poking their read deadlines, and
	// a loop checks it after setting its own, so neither misses the other.
	stalled atomic.Bool

	moved atomic.Pointer[string] // Retarget's target; nil: Target

	accepted  atomic.Int64
	refused   atomic.Int64
	active    atomic.Int64
	dialFails atomic.Int64
	chunks    atomic.Int64
	late      atomic.Int64 // nanoseconds, summed over delayed chunks

	mu        sync.Mutex // guards following
	ln        net.Listener
	links     map[*link]struct{}
	down      bool          // Cut and not yet Up: refuse connections
	stalledCh chan struct{} // while stalled: closed by Resume; nil otherwise
	closed    bool
}

// Stats is a snapshot of a Relay's counters.
type Stats struct {
	Accepted  int64 // connections accepted, refused ones included
	Refused   int64 // connections closed at once because the relay was cut
	Active    int64 // connections being relayed now
	DialFails int64 // accepted connections whose dial of Target failed
	Chunks    int64 // chunks written by a delayed or watched direction
	// Late is how far past their due times those chunks went out, summed.
	Late time.Duration
	// MeanLateNs is Late / Chunks in nanoseconds; zero without chunks.
	MeanLateNs float64
}

// link is one relayed connection: the client's end and Target's.
type link struct {
	client, target net.Conn
	done           chan struct{} // closed by drop
	once           sync.Once
}

// drop closes both ends; the copy loops then end. Any goroutine, any
// number of times.
func (l *link) drop() {
	l.once.Do(func() {
		close(l.done)
		l.client.Close()
		l.target.Close()
	})
}

// Start listens on addr (e.g. "127.0.0.1:0") and relays to target, with
// delay added each way, in the background until Close.
func Start(addr, target string, delay time.Duration) (*Relay, error) {
	r := &Relay{Target: target, ToTarget: delay, ToClient: delay}
	if err := r.Start(addr); err != nil {
		return nil, err
	}
	return r, nil
}

// Start listens on addr and serves in the background until Close.
func (r *Relay) Start(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("netrelay: listen: %w", err)
	}
	r.mu.Lock()
	r.ln = ln // so that Addr answers as soon as Start returns
	r.wg.Add(1)
	r.mu.Unlock()
	go func() {
		defer r.wg.Done()
		_ = r.Serve(ln)
	}()
	return nil
}

// Addr is the address the relay listens on, or nil before Start or Serve.
func (r *Relay) Addr() net.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ln == nil {
		return nil
	}
	return r.ln.Addr()
}

// Stats returns a snapshot of the counters.
func (r *Relay) Stats() Stats {
	s := Stats{
		Accepted:  r.accepted.Load(),
		Refused:   r.refused.Load(),
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
			return fmt.Errorf("netrelay: accept: %w", err)
		}
		r.accepted.Add(1)
		r.mu.Lock()
		closed, down := r.closed, r.down
		if !closed && !down {
			r.wg.Add(1) // under mu, so never concurrent with Close's Wait
		}
		r.mu.Unlock()
		switch {
		case closed:
			c.Close()
			return nil
		case down:
			r.refused.Add(1)
			c.Close()
			continue
		}
		go r.handle(c)
	}
}

// Retarget sends the connections accepted from now on to target instead
// of Target (or the last Retarget's); connections already relayed stay
// with the server they reached, as after a DNS name moved. Safe at any
// time, from any goroutine.
func (r *Relay) Retarget(target string) { r.moved.Store(&target) }

// target is where a connection accepted now goes.
func (r *Relay) target() string {
	if t := r.moved.Load(); t != nil {
		return *t
	}
	return r.Target
}

// Cut drops every relayed connection and refuses new ones (each is
// accepted and closed at once, before a byte passes) until Up: to its
// clients, Target has gone away.
func (r *Relay) Cut() {
	r.mu.Lock()
	r.down = true
	links := r.takeLinksLocked()
	r.mu.Unlock()
	for _, l := range links {
		l.drop()
	}
}

// Up undoes Cut: new connections are relayed again.
func (r *Relay) Up() {
	r.mu.Lock()
	r.down = false
	r.mu.Unlock()
}

// Stall stops forwarding bytes in both directions, on every connection,
// present and future, without closing anything, until Resume: Target seems
// to hang. Bytes already read are held, not lost.
func (r *Relay) Stall() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalledCh != nil {
		return
	}
	r.stalledCh = make(chan struct{})
	r.stalled.Store(true)
	// Wake every reader, so it sees stalled: a deadline set is no I/O.
	now := time.Now()
	for l := range r.links {
		_ = l.client.SetReadDeadline(now)
		_ = l.target.SetReadDeadline(now)
	}
}

// Resume undoes Stall: held bytes go out, the delayed ones at once if
// they fell due meanwhile.
func (r *Relay) Resume() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stalledCh == nil {
		return
	}
	r.stalled.Store(false)
	close(r.stalledCh)
	r.stalledCh = nil
}

// waitResumed blocks while the relay is stalled. It reports false if l was
// dropped meanwhile.
func (r *Relay) waitResumed(l *link) bool {
	for {
		r.mu.Lock()
		ch := r.stalledCh
		r.mu.Unlock()
		if ch == nil {
			return true
		}
		select {
		case <-ch:
		case <-l.done:
			return false
		}
	}
}

// Close stops accepting, closes every relayed connection and waits for
// the relay's goroutines to end.
func (r *Relay) Close() error {
	r.mu.Lock()
	r.closed = true
	ln := r.ln
	links := r.takeLinksLocked()
	r.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for _, l := range links {
		l.drop()
	}
	r.wakeOnce.Do(func() {}) // no waker may start after this
	if r.wake != nil {
		r.wake.close()
	}
	r.wg.Wait()
	return nil
}

func (r *Relay) takeLinksLocked() []*link {
	links := make([]*link, 0, len(r.links))
	for l := range r.links {
		links = append(links, l)
	}
	clear(r.links)
	return links
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

// track registers l for Cut and Close; false means the relay is closing
// or cut and the caller must drop it.
func (r *Relay) track(l *link) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.down {
		return false
	}
	if r.links == nil {
		r.links = make(map[*link]struct{})
	}
	r.links[l] = struct{}{}
	return true
}

func (r *Relay) untrack(l *link) {
	r.mu.Lock()
	delete(r.links, l)
	r.mu.Unlock()
}

// handle relays one client connection: this goroutine copies Target →
// client, a second one client → Target.
func (r *Relay) handle(client net.Conn) {
	defer r.wg.Done()
	defer client.Close()
	defer func() {
		if p := recover(); p != nil && r.Log != nil {
			r.Log.Error("netrelay: connection panicked", "panic", p)
		}
	}()
	timeout := r.DialTimeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	to := r.target()
	target, err := net.DialTimeout("tcp", to, timeout)
	if err != nil {
		r.dialFails.Add(1)
		if r.Log != nil {
			r.Log.Warn("netrelay: dial failed", "target", to, "err", err)
		}
		return
	}
	l := &link{client: client, target: target, done: make(chan struct{})}
	defer l.drop()
	if !r.track(l) {
		return
	}
	defer r.untrack(l)
	r.active.Add(1)
	defer r.active.Add(-1)

	done := make(chan struct{})
	go func() {
		defer close(done)
		r.pipe(l, target, client, r.ToTarget, r.CutWhen)
	}()
	r.pipe(l, client, target, r.ToClient, nil)
	<-done
}

// pipe copies src to dst until src ends. A clean end of src half-closes dst
// so the peer sees EOF as it would without the relay; any other failure
// drops the link so the other direction ends too.
func (r *Relay) pipe(l *link, dst, src net.Conn, delay time.Duration, cutWhen func([]byte) bool) {
	var err error
	if delay <= 0 && cutWhen == nil {
		err = r.plainCopy(l, dst, src)
	} else {
		err = r.delayCopy(l, dst, src, delay, cutWhen)
	}
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	l.drop()
}

// errDropped ends a copy loop whose link was dropped while stalled.
var errDropped = errors.New("netrelay: connection dropped")

// plainCopy is io.Copy, interrupted by Stall (through a read deadline in
// the past) and resumed after Resume.
func (r *Relay) plainCopy(l *link, dst, src net.Conn) error {
	for {
		if r.stalled.Load() && !r.waitResumed(l) {
			return errDropped
		}
		if err := src.SetReadDeadline(time.Time{}); err != nil {
			return err
		}
		if r.stalled.Load() {
			continue // a Stall since the check: its deadline is undone
		}
		_, err := io.Copy(dst, src)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	}
}
