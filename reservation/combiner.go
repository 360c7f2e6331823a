package reservation

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
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

type pendingState uint8

const (
	stQueued pendingState = iota // in queue, nobody has taken it
	stLead                       // in queue, told to lead
	stTaken                      // inside a running batch
)

// combiner is the queue of one pool.
type combiner struct {
	key PoolKey

	last poolState // what its batches remember between them

	mu      sync.Mutex // guards following
	queue   []*pending
	running int  // leaders running or handed leadership
	dead    bool // removed from Engine.combiners; use a new one
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
func (e *Engine) beginBatchLocked(cb *combiner, run *batchRun) {
	run.start, run.stalled = time.Now(), false
	if run.timer == nil {
		run.timer = time.AfterFunc(e.stallAfter, func() { e.batchStalled(cb, run) })
	} else {
		run.timer.Reset(e.stallAfter)
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
func (e *Engine) batchStalled(cb *combiner, run *batchRun) {
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if run.start.IsZero() || time.Since(run.start) < e.stallAfter {
		return // the batch ended, or the timer was re-armed for the next
	}
	run.stalled = true
	if cb.running < e.cfg.BatchesPerPool && cb.wakeLeaderLocked(nil) {
		cb.running++
		e.m.stallEscapes.Add(1)
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

// submit queues a single-line reserve on pool and waits for its outcome. A
// retry (front) goes to the head of the queue, so a reserve that came up
// short keeps its age instead of queuing behind newcomers.
func (e *Engine) submit(ctx context.Context, pool PoolKey, req *reserveReq, front bool) outcome {
	p := &pending{req: req, pools: []PoolKey{pool}, wake: make(chan bool, 1), callers: attribution.Callers(ctx)}
	cb := e.lockCombiner(pool)
	if len(cb.queue) >= e.cfg.MaxWaitersPerPool {
		cb.mu.Unlock()
		e.m.rejected.Add(1)
		return outcome{err: newError(CodeBusy, "HY000",
			"holdfast.reserve: %d reserves already queued on item %d at location %d; nothing was reserved, retry",
			e.cfg.MaxWaitersPerPool, pool.ItemID, pool.GroupID)}
	}
	if front {
		cb.queue = append([]*pending{p}, cb.queue...)
	} else {
		cb.queue = append(cb.queue, p)
	}
	lead := cb.running == 0 || cb.running < e.cfg.BatchesPerPool && cb.overlapLocked(len(cb.queue), e.cfg.SecondBatchMin)
	if lead {
		cb.running++
		p.state = stLead
	}
	cb.mu.Unlock()

	for {
		if lead {
			e.lead(ctx, cb, p)
			return p.out
		}
		select {
		case l := <-p.wake:
			if !l {
				return p.out
			}
			lead = true
		case <-ctx.Done():
			cb.mu.Lock()
			switch p.state {
			case stQueued:
				cb.removeLocked(p)
				cb.mu.Unlock()
				return outcome{err: ctx.Err()}
			case stLead:
				// Leadership (and maybe a session) was handed to us: pass
				// them on.
				cb.removeLocked(p)
				s := cb.handOffLocked(p.sess, e.cfg.SecondBatchMin)
				cb.mu.Unlock()
				e.closeSession(s)
				e.dropIfIdle(cb)
				return outcome{err: ctx.Err()}
			default:
				// Our batch is running; it will answer into p.wake,
				// buffered. It may commit: the outcome is unknown.
				// Whatever it reserves stays findable by the idempotency
				// key, so the client's retry gets it.
				cb.mu.Unlock()
				return outcome{err: &commitUnknownError{&lostError{ctx.Err()}}}
			}
		}
	}
}

// lockCombiner returns pool's live combiner, made if there is none, with
// its mu held.
func (e *Engine) lockCombiner(pool PoolKey) *combiner {
	for {
		e.combMu.Lock()
		cb := e.combiners[pool]
		if cb == nil {
			cb = &combiner{key: pool}
			e.combiners[pool] = cb
		}
		cb.mu.Lock()
		e.combMu.Unlock()
		if !cb.dead {
			return cb
		}
		cb.mu.Unlock()
	}
}

// lead runs batches from cb's queue until me has been answered, then hands
// leadership on. The batches run under a context detached from the leader's
// own cancellation and deadline (they answer other reservers too), bounded
// by CallTimeout.
func (e *Engine) lead(ctx context.Context, cb *combiner, me *pending) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.CallTimeout)
	defer cancel()
	sess := me.sess
	me.sess = nil
	var run *batchRun // this leader's entry in cb.runs
	for {
		// Take up to MaxBatch requests in arrival order, leaving those that
		// were handed leadership: they lead their own batch.
		cb.mu.Lock()
		var batch []*pending
		rest := cb.queue[:0:0]
		mine := false
		// A session pays for itself over consecutive batches, but costs a
		// round trip to put back: a batch with no other batch of its pool
		// running and nobody queued behind it runs on a connection
		// borrowed for its transaction alone, in one round trip.
		busy := cb.running > 1
		for _, p := range cb.queue {
			if len(batch) < e.cfg.MaxBatch && (p == me || p.state == stQueued) {
				p.state = stTaken
				mine = mine || p == me
				batch = append(batch, p)
			} else {
				rest = append(rest, p)
				busy = busy || p.state == stQueued
			}
		}
		cb.queue = rest
		n := len(batch)
		if run == nil {
			run = &batchRun{}
			cb.runs = append(cb.runs, run)
		}
		run.endBatchLocked()
		if n > 0 {
			cb.avgBatch = 0.8*cb.avgBatch + 0.2*float64(n)
			e.beginBatchLocked(cb, run)
		}
		cb.mu.Unlock()

		if n > 0 {
			var err error
			if sess == nil && busy {
				sess, err = e.openSession(bctx)
			}
			if err != nil {
				for _, p := range batch {
					p.out = outcome{err: err}
				}
			} else {
				e.runBatch(forCallers(bctx, batch), batch, sess, &cb.last) // sess may be nil: no session free
				if sess != nil && (sess.broken || noneGotUnits(batch)) {
					// Do not hold a connection while the reserves back
					// off or wait for a refill.
					e.closeSession(sess)
					sess = nil
				}
			}
		}
		for _, p := range batch {
			if p != me {
				p.wake <- false
			}
		}
		if mine || n == 0 {
			cb.mu.Lock()
			cb.endRunLocked(run)
			sess = cb.handOffLocked(sess, e.cfg.SecondBatchMin)
			cb.mu.Unlock()
			if sess != nil {
				// Leadership given up (nobody queued, or the batch
				// running beside takes them): release the connection,
				// after the leader's answer rather than before it.
				go e.closeSession(sess)
			}
			e.dropIfIdle(cb)
			return
		}
	}
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
	if cb.running > 1 {
		queued := 0
		for _, p := range cb.queue {
			if p.state == stQueued {
				queued++
			}
		}
		if !cb.overlapLocked(queued, need) {
			cb.running--
			return s
		}
	}
	if cb.wakeLeaderLocked(s) {
		return nil
	}
	cb.running--
	return s
}

// wakeLeaderLocked hands leadership, and the session s (may be nil), to the
// oldest queued waiter; false when nobody waits.
func (cb *combiner) wakeLeaderLocked(s *session) bool {
	for _, p := range cb.queue {
		if p.state == stQueued {
			p.state = stLead
			p.sess = s
			p.wake <- true
			return true
		}
	}
	return false
}

func (cb *combiner) removeLocked(p *pending) {
	if i := slices.Index(cb.queue, p); i >= 0 {
		cb.queue = slices.Delete(cb.queue, i, i+1)
	}
}

// dropIfIdle removes cb from the engine's map when nobody uses it, so the
// map holds only pools with reserves in flight.
func (e *Engine) dropIfIdle(cb *combiner) {
	e.combMu.Lock()
	defer e.combMu.Unlock()
	cb.mu.Lock()
	defer cb.mu.Unlock()
	if cb.running == 0 && len(cb.queue) == 0 && !cb.dead {
		cb.dead = true
		delete(e.combiners, cb.key)
	}
}
