// Package waitq is the FIFO hand-off queue that holdfast's waits share: the
// backend pool's borrowers, the per-tag connection limits, the statements
// waiting for a place in a pipeline and the reserves waiting for a batch of
// their pool (reservation's combiner).
//
// It owns one protocol and nothing else: a waiter queues, then waits with a
// context; whoever frees something hands it to the first waiter that can
// use it (the oldest, or the first by rank: see Waiter.Rank), or to each of
// several at once (HandOffEach); a waiter that gives up removes itself, and
// if a hand-off raced it (the value was already on its way), it gives the
// value back through the queue's give-back function instead of dropping it;
// a waiter that leaves after a wake-up it will not use passes that on the
// same way; Close wakes every waiter. What the handed value means (a
// connection, a slot, a mere "try again", leadership of a batch) and how it
// is given back belong to the owner.
//
// The queue knows nothing about the owner's state. An owner that decides
// "nothing free, so queue" under its own lock must call Enqueue under that
// same lock, and hand off under it too, so that no hand-off can fall between
// the decision and the enqueue (lock order: owner's lock, then the queue's).
// Wait, Leave and the give-back function run without the queue's lock, so
// the give-back function may take the owner's lock and call the queue again.
package waitq

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Errors returned by Enqueue and Wait.
var (
	ErrFull   = errors.New("waitq: too many waiters")
	ErrClosed = errors.New("waitq: closed")
)

// Queue is a FIFO of waiters. K is what a waiter asks for (struct{} when all
// waiters are alike), V what is handed to it.
//
// The zero value is ready to use: no cap on its length, and values handed to
// a waiter that then gave up are dropped (which suits only values that need
// no giving back). A Queue must not be copied after first use.
type Queue[K, V any] struct {
	giveBack func(V) // set by New, read-only after
	n        atomic.Int32

	mu         sync.Mutex // guards following
	head, tail *Waiter[K, V]
	len        int
	cap        int    // 0: no cap
	seq        uint64 // last Waiter.seq given out
	closed     bool
}

// New returns a queue that passes values handed to waiters that gave up to
// giveBack (nil: drop them). giveBack runs on the waiter's goroutine, with
// no lock held; it typically returns a connection to its pool, a slot to its
// gate, or hands a wake-up to the next waiter.
func New[K, V any](giveBack func(V)) *Queue[K, V] {
	return &Queue[K, V]{giveBack: giveBack}
}

type state uint8

const (
	stateOut    state = iota // not queued: new, or done with the last wait
	stateQueued              // in the list
	stateHanded              // taken off the list by a hand-off; a value is in ch
	stateClosed              // taken off the list by Close; a zero value is in ch
)

// Waiter is one goroutine's place in a queue. Its zero value is ready; set
// Key before the first Enqueue. A Waiter belongs to the goroutine that
// enqueues it: only that goroutine calls Enqueue, Wait and Leave with it, and
// it may reuse it for every pass of one wait (re-queueing keeps its place).
// It must not be copied after first use, nor be in two queues.
type Waiter[K, V any] struct {
	// Key is what the waiter asks for, given to HandOffFunc's pick; it
	// must not change while the waiter is queued.
	Key K
	// Rank orders the queue: waiters of lower Rank come first, those of
	// equal Rank in order of first arrival. An owner that leaves every
	// Rank 0 has a FIFO; one that sets Rank to an arrival time plus a
	// handicap gets a priority order in which no waiter is passed by
	// anyone arriving more than its handicap after it (see pool). Set it
	// before the first Enqueue of a wait; it must not change until Reset.
	Rank int64

	ch         chan V // buffered(1): made at first Enqueue
	prev, next *Waiter[K, V]
	seq        uint64 // order of first arrival; 0 until first queued
	skipped    int    // hand-offs that passed this waiter over for a later one
	state      state  // written under the queue's lock or by the owner once out
}

// Reset prepares an out-of-queue w for a new, unrelated wait: it queues
// last again (among waiters of its Rank) and its skips count from zero. (Re-queueing within one wait
// needs no Reset; that is what keeps its place.)
func (w *Waiter[K, V]) Reset() {
	if w.state != stateOut {
		panic("waitq: Reset of a waiter that is queued or has a value to receive")
	}
	w.seq, w.skipped = 0, 0
}

// Len returns the number of queued waiters. It takes no lock, so it may
// be stale by the time the caller acts on it: use it for fast paths ("nobody
// queued, skip the lock") and for stats, not for decisions that need to be
// exact.
func (q *Queue[K, V]) Len() int { return int(q.n.Load()) }

// SetCap caps the number of waiters: Enqueue of a new waiter fails with
// ErrFull when n are queued. n <= 0 removes the cap. A lower cap does not
// remove waiters already queued.
func (q *Queue[K, V]) SetCap(n int) {
	q.mu.Lock()
	q.cap = max(n, 0)
	q.mu.Unlock()
}

// Enqueue queues w. A waiter queued for the first time goes last among
// those of its Rank (behind every lower Rank, ahead of every higher one);
// one that queued before (woken, it found nothing and tries again) goes
// back to the place its first arrival gave it, ahead of everyone of its
// Rank who arrived later, and is never refused for the cap (its place was
// counted when it was new).
// It fails with ErrClosed after Close and with ErrFull at the cap. w must not
// be queued already, nor hold a value not yet received.
func (q *Queue[K, V]) Enqueue(w *Waiter[K, V]) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if w.state != stateOut {
		panic("waitq: Enqueue of a waiter that is queued or has a value to receive")
	}
	if q.closed {
		return ErrClosed
	}
	if w.seq == 0 {
		if q.cap > 0 && q.len >= q.cap {
			return ErrFull
		}
		q.seq++
		w.seq = q.seq
	}
	if w.ch == nil {
		w.ch = make(chan V, 1)
	}
	w.state = stateQueued
	q.insertLocked(w)
	return nil
}

// insertLocked puts w before the first waiter that comes after it (a
// higher Rank, or the same Rank and a later arrival). In a FIFO a new
// waiter has the highest seq and goes straight to the tail; one
// re-queueing, or of a low Rank, is usually near the head, so the walk
// starts there.
func (q *Queue[K, V]) insertLocked(w *Waiter[K, V]) {
	at := (*Waiter[K, V])(nil) // insert before at; nil: at the tail
	if q.tail != nil && w.before(q.tail) {
		for at = q.head; at.before(w); at = at.next {
		}
	}
	prev := q.tail
	if at != nil {
		prev = at.prev
	}
	w.prev, w.next = prev, at
	if prev != nil {
		prev.next = w
	} else {
		q.head = w
	}
	if at != nil {
		at.prev = w
	} else {
		q.tail = w
	}
	q.len++
	q.n.Store(int32(q.len))
}

// before reports whether w comes before x in the queue's order.
func (w *Waiter[K, V]) before(x *Waiter[K, V]) bool {
	if w.Rank != x.Rank {
		return w.Rank < x.Rank
	}
	return w.seq < x.seq
}

func (q *Queue[K, V]) removeLocked(w *Waiter[K, V]) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		q.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		q.tail = w.prev
	}
	w.prev, w.next = nil, nil
	q.len--
	q.n.Store(int32(q.len))
}

// deliverLocked takes queued w off the list and puts v in its channel, with
// st (stateHanded, or stateClosed and a zero v) telling Wait or Leave
// which it is. The channel is buffered and empty while w is queued, so the
// send never blocks.
func (q *Queue[K, V]) deliverLocked(w *Waiter[K, V], v V, st state) {
	q.removeLocked(w)
	w.state = st
	w.ch <- v
}

// Wait blocks until a value is handed to w, ctx ends or the queue closes.
// w must have been enqueued (a value handed to it since is returned at
// once). When ctx ends first, w leaves the queue; if a hand-off raced the
// end of ctx, the value goes to the give-back function, so it is neither
// lost nor used twice, and Wait returns ctx's cause. After Close it
// returns ErrClosed. On return w is out of the queue.
func (q *Queue[K, V]) Wait(ctx context.Context, w *Waiter[K, V]) (V, error) {
	select {
	case v := <-w.ch:
		return q.received(w, v)
	case <-ctx.Done():
		v, handed := q.leave(w)
		if handed {
			if w.state == stateClosed {
				w.state = stateOut
				return v, ErrClosed
			}
			w.state = stateOut
			q.GiveBack(v)
		}
		var zero V
		return zero, context.Cause(ctx)
	}
}

// received finishes a wait that got v from w.ch.
func (q *Queue[K, V]) received(w *Waiter[K, V], v V) (V, error) {
	closed := w.state == stateClosed
	w.state = stateOut
	if closed {
		return v, ErrClosed
	}
	return v, nil
}

// Leave takes w off the queue without waiting. If a value was handed to it
// meanwhile, Leave returns it with handed true: the caller then owns it, to
// use or to pass to GiveBack. (After Close, the value is V's zero value and
// handed is false.)
func (q *Queue[K, V]) Leave(w *Waiter[K, V]) (v V, handed bool) {
	v, handed = q.leave(w)
	closed := w.state == stateClosed
	w.state = stateOut
	return v, handed && !closed
}

// leave removes w if queued, else receives what was handed (or the close
// signal); w.state tells which.
func (q *Queue[K, V]) leave(w *Waiter[K, V]) (V, bool) {
	q.mu.Lock()
	switch w.state {
	case stateQueued:
		q.removeLocked(w)
		w.state = stateOut
		q.mu.Unlock()
		var zero V
		return zero, false
	case stateOut:
		q.mu.Unlock()
		var zero V
		return zero, false
	}
	q.mu.Unlock()
	// Handed or closed: the value was put in the buffer under the lock.
	return <-w.ch, true
}

// GiveBack passes v, handed to a waiter that will not use it, to the give-back
// function (or drops it when there is none). Call it without the queue's
// lock; it may run the owner's code that takes the owner's lock.
func (q *Queue[K, V]) GiveBack(v V) {
	if q.giveBack != nil {
		q.giveBack(v)
	}
}

// HandOff hands v to the first waiter and reports whether there was one;
// when not, the caller keeps v.
func (q *Queue[K, V]) HandOff(v V) bool {
	if q.n.Load() == 0 {
		return false
	}
	return q.HandOffFunc(func(K, int) (V, bool) { return v, true })
}

// HandOffFunc offers a hand-off to each waiter from the first on: pick
// gets the waiter's key and how many earlier hand-offs passed it over for a
// later waiter, and returns the value to give and true, or false to pass it
// over. The first waiter picked gets the value; each waiter passed over
// counts one more skip. It reports whether one was picked. pick runs under
// the queue's lock (and the owner's, if the owner holds it): it may change
// the owner's state, but must not block nor call the queue.
func (q *Queue[K, V]) HandOffFunc(pick func(key K, skipped int) (V, bool)) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for w := q.head; w != nil; w = w.next {
		v, ok := pick(w.Key, w.skipped)
		if !ok {
			continue
		}
		for x := q.head; x != w; x = x.next {
			x.skipped++
		}
		q.deliverLocked(w, v, stateHanded)
		return true
	}
	return false
}

// HandOffEach offers a hand-off to every waiter, from the first on, as
// HandOffFunc does, and hands a value to each one pick accepts, not just
// the first: a batch taking several waiters at once, which none of them can
// leave half taken. It returns how many were handed. Each waiter passed over
// ahead of one that was handed counts one more skip. pick runs under the
// queue's lock, as HandOffFunc's does; to take at most n, it returns false
// once it has accepted n.
func (q *Queue[K, V]) HandOffEach(pick func(key K, skipped int) (V, bool)) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	var lastPassed *Waiter[K, V] // the last passed over ahead of one handed
	var passed *Waiter[K, V]     // the last passed over so far
	for w := q.head; w != nil; {
		next := w.next
		if v, ok := pick(w.Key, w.skipped); ok {
			q.deliverLocked(w, v, stateHanded)
			n++
			lastPassed = passed
		} else {
			passed = w
		}
		w = next
	}
	if lastPassed != nil {
		for w := q.head; ; w = w.next {
			w.skipped++
			if w == lastPassed {
				break
			}
		}
	}
	return n
}

// HandOffAll hands v to every waiter and returns how many there were.
func (q *Queue[K, V]) HandOffAll(v V) int {
	if q.n.Load() == 0 {
		return 0
	}
	return q.HandOffEach(func(K, int) (V, bool) { return v, true })
}

// Close wakes every waiter with ErrClosed and refuses later Enqueues.
// Values already handed stay with their waiters. Idempotent.
func (q *Queue[K, V]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	var zero V
	for w := q.head; w != nil; w = q.head {
		q.deliverLocked(w, zero, stateClosed)
	}
}
