// Package pool is holdfast's one pool of backend connections, generic over
// the connection (Conn) and its session variant, the key K: connections of
// different keys are not interchangeable (today CLIENT_FOUND_ROWS and the
// other negotiated capabilities a client sees; later the backend account).
// Every borrower acquires from it with a key; each key may have its own
// min and max under the one global max.
//
// It owns lending and returning, waiting (through internal/waitq, so that a
// borrower that gives up never loses or doubles a connection or a slot
// handed to it meanwhile), dialing with back-off, lifetimes, idle timeouts,
// health checks before a lend, holds that keep a connection out of
// circulation (a kill in flight), and the counters behind the pool's
// metrics. It knows nothing of MySQL: dialing, health checks and closing
// are the Conn's and the Dial function's. It does no I/O under its lock.
//
// Waiting. A borrower that finds nothing it can use queues, in order of
// arrival, or of arrival plus a handicap for borrowers of lower priority
// (AcquireHandicap). Whatever frees up (a returned connection, a slot)
// goes at once to the first queued borrower that can use it: an idle connection of its key, else a free slot
// to dial into. A returned connection of one key thus goes to the oldest
// waiter of that key even if an older waiter wants another key; that older
// one is passed over at most a few times (maxSkips) before a connection of
// another key is closed to make room for it (a swap), and a swap is made at
// once when no waiter can use what is free. So nothing free is ever left
// that a queued borrower could use, and a newcomer may take what it finds
// free without queueing. A borrower that gives up as something is handed to
// it gives it back, which serves the next one.
//
// Kills. A kill sent for the statement a connection runs now must not land
// on the statement of whoever borrows the connection next. Hold marks a
// lent connection so that its Release parks it instead of lending it on; the
// last Unhold (after the kill completed) finishes the Release, or closes the
// connection when the kill left it in doubt.
//
// Retirement. Retire takes the connections open to a server out of
// service when that server stops being the one to use (a primary
// switchover): see retire.go.
//
// Who calls what: Acquire, TryAcquire, CanDial, Waiting, Retired and Stats anyone;
// Release only the borrower, once per lend; Hold and Unhold whoever must
// keep a lent connection from being lent on (see Hold); SetLimits, Retire,
// Relearn, Start and Close the owner.
//
// Lock order: Pool.mu, then the wait queue's lock. Conn methods, Dial,
// OnFirstDial and OnFree run without either.
package pool

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/internal/waitq"
)

// Errors from Acquire. Timeouts wrap ErrTimeout, or ErrBackendDown (and
// the last dial error) when dials failed in the last ten seconds.
var (
	ErrClosed      = errors.New("pool: closed")
	ErrWaiterCap   = errors.New("pool: too many borrowers waiting for a connection")
	ErrTimeout     = errors.New("pool: timed out waiting for a connection")
	ErrBackendDown = errors.New("pool: backend unreachable")
	// ErrRefused marks a dial error that retrying will not mend soon: the
	// backend refused the login (a wrong password, an unknown account or
	// database). Dial returns it through Refused. Acquire returns such an
	// error at once, and for refusedRetry after it, borrowers of that key
	// get it without a dial, as PgBouncer's server_login_retry does.
	ErrRefused = errors.New("pool: the backend refused the login")
)

// Refused marks err, a dial error, as a refused login (ErrRefused); its
// text is err's.
func Refused(err error) error { return refusedError{err} }

type refusedError struct{ error }

func (e refusedError) Unwrap() error        { return e.error }
func (e refusedError) Is(target error) bool { return target == ErrRefused }

// refusedRetry is how long a refused login is answered without a dial.
const refusedRetry = 5 * time.Second

// maxSkips is how many times a waiter may be passed over for later
// waiters whose key matched a returned connection before it is served by
// closing a connection of another key for it (Vitess's smartconnpool ages
// waiters the same way).
const maxSkips = 8

// recentDialErr is how long a dial error explains a timeout.
const recentDialErr = 10 * time.Second

// Pool lends connections of type C, keyed by K. Create it with New; all
// methods are safe for concurrent use.
type Pool[K comparable, C Conn[K]] struct {
	dial        func(ctx context.Context, key K) (C, error)
	onFirstDial func(C) error
	onFree      func()
	now         func() time.Time
	epoch       time.Time // waiters' ranks count from it
	opts        Options[K, C]

	q       *waitq.Queue[K, grant[K, C]]
	waiters sync.Pool       // of *waitq.Waiter[K, grant[K, C]], out of the queue and Reset
	ctx     context.Context // ends at Close: cuts dials and pings short
	cancel  context.CancelFunc
	stop    chan struct{}
	wg      sync.WaitGroup
	nextID  atomic.Uint64

	acquired, waited, waitNanos, timeouts, rejected atomic.Uint64

	firstMu   sync.Mutex // serialises OnFirstDial
	firstDone atomic.Bool

	retired atomic.Pointer[func(C) bool] // Retire's test; nil: none
	// redial is closed by Redial: borrowers backing off after a failed
	// dial wait on it too.
	redial atomic.Pointer[chan struct{}]

	mu        sync.Mutex // guards following, and every Slot of this pool
	lim       Limits[K]
	keys      map[K]*keyState[C]
	lastKey   K            // keyLocked's one-entry cache: most pools see
	lastKS    *keyState[C] // one key almost always
	open      int          // connections open, including those being dialed
	dialing   int
	idle      int // sum of len(keyState.idle)
	held      int // parked: released while held
	closed    bool
	started   bool
	lastErr   error // last dial error, for timeout messages; nil after a success
	lastErrAt time.Time
	dials     uint64
	dialErrs  uint64
	// retiredDials counts dials that reached a retired server.
	retiredDials uint64
	closes       [NumCloseReasons]uint64
}

// keyState is one key's share of the pool.
type keyState[C any] struct {
	open int // including dials in progress
	idle []C // oldest first; the newest is lent first
	lim  KeyLimits
	// refused is the key's last dial error marked Refused, at refusedAt;
	// nil after a successful dial.
	refused   error
	refusedAt time.Time
}

// grant is what a waiter is handed: a connection, or a slot reserved for it
// to dial into (dial true). A connection handed to a waiter is already
// counted as lent; a slot is already counted in open and dialing.
type grant[K comparable, C any] struct {
	conn C
	key  K
	dial bool
	ping bool // the connection was idle past PingAfterIdle: ping before use
}

// New returns a pool that opens nothing until it is needed (or Start).
func New[K comparable, C Conn[K]](o Options[K, C], l Limits[K]) (*Pool[K, C], error) {
	if o.Dial == nil {
		return nil, errors.New("pool: Options.Dial is required")
	}
	if err := l.validate(); err != nil {
		return nil, err
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaintainEvery <= 0 {
		o.MaintainEvery = time.Second
	}
	if o.PingTimeout <= 0 {
		o.PingTimeout = time.Second
	}
	if o.DialBackoff <= 0 {
		o.DialBackoff = 50 * time.Millisecond
	}
	if o.MaxDialBackoff < o.DialBackoff {
		o.MaxDialBackoff = max(time.Second, o.DialBackoff)
	}
	p := &Pool[K, C]{
		dial: o.Dial, onFirstDial: o.OnFirstDial, onFree: o.OnFree, now: o.Now, epoch: o.Now(), opts: o,
		stop: make(chan struct{}),
		keys: map[K]*keyState[C]{},
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	redial := make(chan struct{})
	p.redial.Store(&redial)
	p.q = waitq.New[K](p.giveBack)
	p.setLimitsLocked(l)
	return p, nil
}

// Limits returns the limits in force (Keys is a copy).
func (p *Pool[K, C]) Limits() Limits[K] {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.lim
	l.Keys = maps.Clone(l.Keys)
	return l
}

// Waiting returns the number of borrowers queued, without the lock (it
// may be stale as soon as it is read).
func (p *Pool[K, C]) Waiting() int { return p.q.Len() }

// CanDial reports whether an Acquire of key now would dial a connection
// rather than wait: there is room under Max and the key's max, and nobody
// is queued.
func (p *Pool[K, C]) CanDial(key K) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && p.q.Len() == 0 && p.roomLocked(p.keyLocked(key))
}

// finish closes what the locked part collected and runs OnFree. Called
// without the lock.
func (p *Pool[K, C]) finish(toClose []C, free bool) {
	for _, c := range toClose {
		c.Close()
	}
	if free && p.onFree != nil {
		p.onFree()
	}
}

// SetLimits applies new limits (on reload). Idle connections over a lower
// Max, key max or MaxIdle close now; lent ones over a lower Max close as
// they return; a higher Max serves queued borrowers at once.
func (p *Pool[K, C]) SetLimits(l Limits[K]) error {
	if err := l.validate(); err != nil {
		return err
	}
	now := p.now()
	p.mu.Lock()
	p.setLimitsLocked(l)
	var toClose []C
	for p.open > p.lim.Max && p.idle > 0 {
		toClose = append(toClose, p.closeOldestIdleLocked(CloseShrink))
	}
	for _, ks := range p.keys {
		for ks.lim.Max > 0 && ks.open > ks.lim.Max && len(ks.idle) > 0 {
			c := ks.idle[0]
			ks.idle = slices.Delete(ks.idle, 0, 1)
			p.idle--
			p.dropLocked(c, CloseShrink)
			toClose = append(toClose, c)
		}
	}
	for p.idle > p.lim.MaxIdle {
		toClose = append(toClose, p.closeOldestIdleLocked(CloseIdle))
	}
	toClose = p.serveLocked(now, toClose)
	free := p.idle > 0 || p.open < p.lim.Max
	p.mu.Unlock()
	p.finish(toClose, free)
	return nil
}

func (p *Pool[K, C]) setLimitsLocked(l Limits[K]) {
	l.Keys = maps.Clone(l.Keys)
	p.lim = l
	for k, ks := range p.keys {
		ks.lim = l.Keys[k]
	}
	p.q.SetCap(l.MaxWaiters)
}

// Stats returns a snapshot.
func (p *Pool[K, C]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	open := p.open - p.dialing
	return Stats{
		Open: open, Dialing: p.dialing, InUse: open - p.idle, Idle: p.idle, Held: p.held,
		Waiting: p.q.Len(), Max: p.lim.Max,
		Acquired: p.acquired.Load(), Waited: p.waited.Load(), WaitTime: time.Duration(p.waitNanos.Load()),
		Timeouts: p.timeouts.Load(), Rejected: p.rejected.Load(),
		Dials: p.dials, DialErrors: p.dialErrs, RetiredDials: p.retiredDials, Closed: p.closes,
	}
}

// Close closes the idle connections, wakes every queued borrower with
// ErrClosed, cuts short dials and pings in progress, and stops
// maintenance. Connections lent are closed as they return (held ones at
// their last Unhold). Idempotent.
func (p *Pool[K, C]) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var toClose []C
	for _, ks := range p.keys {
		for _, c := range ks.idle {
			p.dropLocked(c, CloseShutdown)
			toClose = append(toClose, c)
		}
		p.idle -= len(ks.idle)
		ks.idle = nil
	}
	p.mu.Unlock()
	p.cancel()
	p.q.Close()
	close(p.stop)
	p.wg.Wait()
	p.finish(toClose, false)
}
