package reservation

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/internal/waitq"
)

// The combiner coalesces concurrent single-line reserves of one pool into
// one transaction (runBatch), the way group commit coalesces log flushes.
// Without it, N concurrent reservers of a hot item run N transactions that
// each scan past the rows the others hold; with it, the reservers of one
// pool in this process take their units with one SKIP LOCKED select and one
// DELETE and INSERT per table, and the round trips are paid once per batch.
//
// There is no goroutine per pool: the reserver that finds no batch running
// becomes a leader and runs batches from the queue until its own request is
// answered, then hands leadership to the oldest waiter still queued. Every
// request waits for at most its own batch plus the batches queued ahead of
// it. A further batch (up to Config.BatchesPerPool) starts beside a running
// one only when it is worth its fixed cost in the database (overlapLocked):
// when Config.SecondBatchMin reserves wait, when the pool is quiet, or
// when the running batch has stalled (stallAfter).
//
// The queue is a waitq.Queue, and the races of a reserve that gives up are
// its protocol: a waiting reserve is handed either leadership (with the
// session of the leader before it) or its place in a batch, under the
// combiner's lock; one whose context ends is then either out of the queue
// before any of that (nothing was reserved), or in a batch that may commit
// (the outcome is unknown; the idempotency key finds it), or was handed
// leadership, which the queue gives back to passOn to hand on. A leader's
// own reserve keeps its place in the queue, so its batches take the
// reserves queued ahead of it first.

// batchRunner runs a combiner's batches. The engine is one: runBatch runs
// the SQL, a session keeps one backend connection across batches. Tests of
// the combiner's races use a fake that needs no database.
type batchRunner interface {
	// openSession returns a session to run consecutive batches on, or nil
	// and no error when none may be opened now.
	openSession(ctx context.Context) (*session, error)
	// closeSession releases s; nil, or closed already: nothing.
	closeSession(s *session)
	// runBatch sets out of every reserve in batch, on s when s is not nil.
	// If s breaks, runBatch may close it; s.broken then says so.
	runBatch(ctx context.Context, batch []*pending, s *session, ps *poolState)
}

// combiners is an engine's set of combiners: one per pool with
// single-line reserves queued or in a batch, made by the first reserve,
// removed when the last leaves (dropIfIdle).
type combiners struct {
	run        batchRunner
	cfg        *Config       // MaxBatch, BatchesPerPool, SecondBatchMin, MaxWaitersPerPool, CallTimeout
	m          *metrics      // rejected, stallEscapes
	stallAfter time.Duration // the package's stallAfter; tests change it

	mu     sync.Mutex // guards following
	byPool map[PoolKey]*combiner
}

func (cs *combiners) init(run batchRunner, cfg *Config, m *metrics) {
	cs.run, cs.cfg, cs.m = run, cfg, m
	cs.stallAfter = stallAfter
	cs.byPool = map[PoolKey]*combiner{}
}

type pendingState uint8

const (
	stQueued pendingState = iota // queued, nobody has taken it
	stLead                       // leads: queued at its place until a batch of its own takes it (or on its way back there)
	stTaken                      // inside a batch
)

// request is one reserve in a combiner.
type request struct {
	p     *pending
	w     waitq.Waiter[*request, grant] // its place in combiner.q; Key is the request itself
	state pendingState                  // guarded by the combiner's mu
	done  chan struct{}                 // closed once the batch that took it has set p.out
}

// grant is what a queued reserve is handed: leadership (lead), with the
// session of the leader before it (sess, nil when none), or else its place
// in a batch, whose outcome follows on request.done.
type grant struct {
	lead bool
	sess *session
}

// combiner is the queue of one pool.
type combiner struct {
	key PoolKey

	last poolState // what its batches remember between them

	// q orders the pool's reserves waiting for a batch, and each leader's
	// own until a batch takes it. Enqueues and hand-offs happen under mu.
	q *waitq.Queue[*request, grant]

	mu sync.Mutex // guards following, and request.state
	// waiting counts the requests in stQueued (one that gives up counts
	// until it has taken mu), leading those in stLead: together, the
	// reserves queued.
	waiting, leading int
	running          int   // leaders running or handed leadership
	fronts           int64 // retries queued at the head so far (see enqueue)
	dead             bool  // removed from combiners.byPool; use a new one
	// avgBatch is a moving average of the sizes of the pool's batches
	// (each new batch weighs 1/5): what overlapLocked calls recent.
	avgBatch float64
	// runs has one entry per leader, for stalledLocked.
	runs []*batchRun
}

// batchRun is one leader's entry in combiner.runs.
type batchRun struct {
	start   time.Time   // when its running batch started; zero between batches
	stalled bool        // the running batch has run longer than stallAfter
	timer   *time.Timer // fires stallAfter after start (batchStalled)
}

// stallAfter is how long a batch may run before the reserves queued
// behind it stop waiting for it and start one of their own beside it. A
// batch takes milliseconds (a round trip and a few of the database's);
// one that runs a hundred times as long is stuck on a connection that
// stopped answering, or the database is overloaded, and in either case
// waiting for it is worse than the fixed cost of a second batch.
const stallAfter = 100 * time.Millisecond

// overlapLocked reports whether a batch should start beside the one
// already running when queued reserves wait, need being
// Config.SecondBatchMin. A batch costs the database the same fixed work
// (about half a millisecond of CPU on MariaDB: the commit, each
// statement's overhead) however many reserves it carries, so on a busy
// pool, where the database's CPU is the bound, two batches carrying what
// one would waste it: the next one waits for need reserves. A quiet pool,
// whose recent batches carried fewer than need/2, overlaps at once: there
// the round trips, not the database, are the bound. So does a pool whose
// running batch has stalled: its leader would take the waiters next, but
// not soon.
func (cb *combiner) overlapLocked(queued, need int) bool {
	return queued >= need || 2*cb.avgBatch < float64(need) || cb.stalledLocked()
}

// stalledLocked reports whether a batch of the pool has run longer than
// stallAfter.
func (cb *combiner) stalledLocked() bool {
	return slices.ContainsFunc(cb.runs, func(r *batchRun) bool { return r.stalled })
}

// beginBatchLocked marks run's batch started now, and arms its stall
// timer: one timer per batch, however many reserves wait behind it.
func (cs *combiners) beginBatchLocked(cb *combiner, run *batchRun) {
	run.start, run.stalled = time.Now(), false
	if run.timer == nil {
		run.timer = time.AfterFunc(cs.stallAfter, func() { cs.batchStalled(cb, run) })
	} else {
		run.timer.Reset(cs.stallAfter)
	}
}

// endBatchLocked marks run between batches.
func (run *batchRun) endBatchLocked() {
	run.start, run.stalled = time.Time{}, false
	if run.timer != nil {
		run.timer.Stop()
	}
}

// endRunLocked removes a leader's entry from runs.
func (cb *combiner) endRunLocked(run *batchRun) {
	run.endBatchLocked()
	if i := slices.Index(cb.runs, run); i >= 0 {
		cb.runs = slices.Delete(cb.runs, i, i+1)
	}
}

// batchStalled is run's stall timer: its batch has run stallAfter. From
// now on overlapLocked lets batches start beside it, and the oldest
// reserve already waiting is handed leadership of one at once (reserves
// that come later lead one themselves, in submit).
func (cs *combiners) batchStalled(cb *combiner, run *batchRun) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if run.start.IsZero() || time.Since(run.start) < cs.stallAfter {
		return // the batch ended, or the timer was re-armed for the next
	}
	run.stalled = true
	if cb.running < cs.cfg.BatchesPerPool && cb.wakeLeaderLocked(nil) {
		cb.running++
		cs.m.stallEscapes.Add(1)
	}
}

// poolState is what one pool's consecutive batches remember.
type poolState struct {
	// cursor is the highest unit id a batch of this pool took; the next
	// batch's SKIP LOCKED select starts after it. Units are appended with
	// increasing ids (pool_counters.next_unit_id) and taken in id order, so
	// the head of the pool is a run of units just deleted, and of units the
	// running sibling batch holds: starting after them spares each batch
	// walking (and lock-probing) those records until purge removes them.
	// A batch that finds fewer units than it wants resets it to 0, so units
	// below it (from a batch that rolled back) are found again.
	cursor atomic.Int64

	// short is set by a batch that found fewer free units than it wanted,
	// cleared by one that got them all. The next batch runs in one round
	// trip (batchOneTrip) only while it is clear.
	short atomic.Bool
}

// submit queues a single-line reserve on pool and waits for its outcome.
func (cs *combiners) submit(ctx context.Context, pool PoolKey, req *reserveReq, front bool) outcome {
	cb, r, lead, err := cs.enqueue(ctx, pool, req, front)
	if err != nil {
		return outcome{err: err}
	}
	return cs.await(ctx, cb, r, lead)
}

// enqueue queues a single-line reserve on pool, and reports whether it
// leads (a batch of its own runs at once) or waits. A retry (front) goes to
// the head of the queue, so a reserve that came up short keeps its age
// instead of queuing behind newcomers; of two retries, the later goes
// first.
func (cs *combiners) enqueue(ctx context.Context, pool PoolKey, req *reserveReq, front bool) (*combiner, *request, bool, error) {
	r := &request{p: &pending{req: req, pools: []PoolKey{pool}, callers: attribution.Callers(ctx)}, done: make(chan struct{})}
	r.w.Key = r
	cb := cs.lock(pool)
	defer cb.mu.Unlock()
	if cb.waiting+cb.leading >= cs.cfg.MaxWaitersPerPool {
		cs.m.rejected.Add(1)
		return nil, nil, false, newError(CodeBusy, "HY000",
			"holdfast.reserve: %d reserves already queued on item %d at location %d; nothing was reserved, retry",
			cs.cfg.MaxWaitersPerPool, pool.ItemID, pool.GroupID)
	}
	if front {
		cb.fronts++
		r.w.Rank = -cb.fronts
	}
	if err := cb.q.Enqueue(&r.w); err != nil {
		panic("reservation: combiner queue refused a reserve: " + err.Error()) // it has no cap and is never closed
	}
	queued := cb.waiting + cb.leading + 1
	lead := cb.running == 0 || cb.running < cs.cfg.BatchesPerPool && cb.overlapLocked(queued, cs.cfg.SecondBatchMin)
	if lead {
		cb.running++
		r.state = stLead
		cb.leading++
	} else {
		r.state = stQueued
		cb.waiting++
	}
	return cb, r, lead, nil
}

// await waits for the outcome of r, queued by enqueue, leading batches
// when it leads or is handed leadership.
func (cs *combiners) await(ctx context.Context, cb *combiner, r *request, lead bool) outcome {
	if lead {
		cs.lead(ctx, cb, r, nil)
		return r.p.out
	}
	g, err := cb.q.Wait(ctx, &r.w)
	if err != nil {
		cb.mu.Lock()
		st := r.state
		if st == stQueued {
			cb.waiting--
		}
		cb.mu.Unlock()
		switch st {
		case stQueued: // left before anyone took it
			cs.dropIfIdle(cb)
			return outcome{err: ctx.Err()}
		case stLead: // handed leadership as it gave up: passOn handed it on
			return outcome{err: ctx.Err()}
		}
		// Taken into a batch as it gave up: the batch may commit, so the
		// outcome is unknown. Whatever it reserves stays findable by the
		// idempotency key, so the client's retry gets it.
		return outcome{err: &commitUnknownError{&lostError{ctx.Err()}}}
	}
	if g.lead {
		// Back to its place in the queue (a re-queue keeps it), for a
		// batch of its own to take it.
		cb.mu.Lock()
		if err := cb.q.Enqueue(&r.w); err != nil {
			panic("reservation: combiner queue refused a reserve: " + err.Error())
		}
		cb.mu.Unlock()
		cs.lead(ctx, cb, r, g.sess)
		return r.p.out
	}
	select {
	case <-r.done:
		return r.p.out
	case <-ctx.Done():
		// Its batch is running; it will still close done. It may commit:
		// the outcome is unknown (see above).
		return outcome{err: &commitUnknownError{&lostError{ctx.Err()}}}
	}
}

// lock returns pool's live combiner, made if there is none, with its mu
// held.
func (cs *combiners) lock(pool PoolKey) *combiner {
	for {
		cs.mu.Lock()
		cb := cs.byPool[pool]
		if cb == nil {
			cb = &combiner{key: pool}
			cb.q = waitq.New[*request](func(g grant) { cs.passOn(cb, g) })
			cs.byPool[pool] = cb
		}
		cb.mu.Lock()
		cs.mu.Unlock()
		if !cb.dead {
			return cb
		}
		cb.mu.Unlock()
	}
}

// lead runs batches from cb's queue until me has been answered, then hands
// leadership on, with sess (nil when none; the session it was handed). The
// batches run under a context detached from the leader's own cancellation
// and deadline (they answer other reservers too), bounded by CallTimeout.
func (cs *combiners) lead(ctx context.Context, cb *combiner, me *request, sess *session) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cs.cfg.CallTimeout)
	defer cancel()
	var run *batchRun // this leader's entry in cb.runs
	for {
		// Take up to MaxBatch requests in queue order, leaving those that
		// were handed leadership: they lead their own batch.
		cb.mu.Lock()
		var batch []*request
		mine := false
		// A session pays for itself over consecutive batches, but costs a
		// round trip to put back: a batch with no other batch of its pool
		// running and nobody queued behind it runs on a connection
		// borrowed for its transaction alone, in one round trip.
		busy := cb.running > 1
		cb.q.HandOffEach(func(r *request, _ int) (grant, bool) {
			if len(batch) == cs.cfg.MaxBatch || r != me && r.state != stQueued {
				busy = busy || r.state == stQueued
				return grant{}, false
			}
			if r == me {
				mine = true
				cb.leading--
			} else {
				cb.waiting--
			}
			r.state = stTaken
			batch = append(batch, r)
			return grant{}, true
		})
		if mine {
			cb.q.Leave(&me.w) // what it was handed: its own place in the batch
		}
		n := len(batch)
		if run == nil {
			run = &batchRun{}
			cb.runs = append(cb.runs, run)
		}
		run.endBatchLocked()
		if n > 0 {
			cb.avgBatch = 0.8*cb.avgBatch + 0.2*float64(n)
			cs.beginBatchLocked(cb, run)
		}
		cb.mu.Unlock()

		if n > 0 {
			ps := make([]*pending, n)
			for i, r := range batch {
				ps[i] = r.p
			}
			var err error
			if sess == nil && busy {
				sess, err = cs.run.openSession(bctx)
			}
			if err != nil {
				for _, p := range ps {
					p.out = outcome{err: err}
				}
			} else {
				cs.run.runBatch(forCallers(bctx, ps), ps, sess, &cb.last) // sess may be nil: no session free
				if sess != nil && (sess.broken || noneGotUnits(ps)) {
					// Do not hold a connection while the reserves back
					// off or wait for a refill.
					cs.run.closeSession(sess)
					sess = nil
				}
			}
		}
		for _, r := range batch {
			if r != me {
				close(r.done)
			}
		}
		if mine || n == 0 {
			cb.mu.Lock()
			cb.endRunLocked(run)
			sess = cb.handOffLocked(sess, cs.cfg.SecondBatchMin)
			cb.mu.Unlock()
			if sess != nil {
				// Leadership given up (nobody queued, or the batch
				// running beside takes them): release the connection,
				// after the leader's answer rather than before it.
				go cs.run.closeSession(sess)
			}
			cs.dropIfIdle(cb)
			return
		}
	}
}

// passOn is the give-back of cb's queue: a reserve handed leadership (and
// maybe a session) as it gave up passes them on. A place in a batch needs
// nothing: the batch answers done whether anyone reads it or not.
func (cs *combiners) passOn(cb *combiner, g grant) {
	if !g.lead {
		return
	}
	cb.mu.Lock()
	cb.leading--
	s := cb.handOffLocked(g.sess, cs.cfg.SecondBatchMin)
	cb.mu.Unlock()
	cs.run.closeSession(s)
	cs.dropIfIdle(cb)
}

// forCallers is ctx carrying the callers of every reserve in batch, whose
// time the batch's statements are (see attribution.WithCallers).
func forCallers(ctx context.Context, batch []*pending) context.Context {
	var callers []*attribution.Tag
	for _, p := range batch {
		callers = append(callers, p.callers...)
	}
	return attribution.WithCallers(ctx, callers...)
}

func noneGotUnits(batch []*pending) bool {
	for _, p := range batch {
		if p.out.res != nil {
			return false
		}
	}
	return true
}

// handOffLocked passes the caller's leadership, and its session, to the
// oldest queued waiter. If nobody waits, or another batch is running and
// the waiters are too few to run beside it (overlapLocked; that batch's
// leader takes them next), it gives leadership up and returns the session
// for the caller to close (outside the lock: it is I/O).
func (cb *combiner) handOffLocked(s *session, need int) *session {
	if (cb.running <= 1 || cb.overlapLocked(cb.waiting, need)) && cb.wakeLeaderLocked(s) {
		return nil
	}
	cb.running--
	return s
}

// wakeLeaderLocked hands leadership, and the session s (may be nil), to the
// oldest queued waiter; false when nobody waits.
func (cb *combiner) wakeLeaderLocked(s *session) bool {
	return cb.q.HandOffFunc(func(r *request, _ int) (grant, bool) {
		if r.state != stQueued {
			return grant{}, false
		}
		r.state = stLead
		cb.waiting--
		cb.leading++
		return grant{lead: true, sess: s}, true
	})
}

// dropIfIdle removes cb from the map when nobody uses it, so the map holds
// only pools with reserves in flight.
func (cs *combiners) dropIfIdle(cb *combiner) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.running == 0 && cb.waiting == 0 && cb.leading == 0 && !cb.dead {
		cb.dead = true
		delete(cs.byPool, cb.key)
	}
}
