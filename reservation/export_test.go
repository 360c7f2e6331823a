package reservation

import (
	"context"
	"time"
)

// SetStallAfter sets how long a batch runs before the reserves queued
// behind it start their own. Set it before the engine is used.
func SetStallAfter(e *Engine, d time.Duration) { e.comb.stallAfter = d }

// SetHookLocked makes every reserve transaction call f right after its
// units are locked (nil removes it). Set it before the engine is used.
func SetHookLocked(e *Engine, f func(ctx context.Context, c Conn)) { e.hookLocked = f }

// Queued reports how many reserves wait in key's combiner queue.
func Queued(e *Engine, key PoolKey) int { return e.comb.queued(key) }

// HoldCombiner makes key's combiner act as if a batch of it had started
// now and were running, and its recent batches had carried avg reserves
// each, until end is called: end finishes that pretend batch as a leader
// does, handing leadership on (or giving it up).
func HoldCombiner(e *Engine, key PoolKey, avg float64) (end func()) { return e.comb.hold(key, avg) }

// queued reports how many reserves wait in pool's combiner queue, leaders'
// own included.
func (cs *combiners) queued(pool PoolKey) int {
	cs.mu.Lock()
	cb := cs.byPool[pool]
	cs.mu.Unlock()
	if cb == nil {
		return 0
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return cb.waiting + cb.leading
}

// hold is HoldCombiner.
func (cs *combiners) hold(pool PoolKey, avg float64) (end func()) {
	cb := cs.lock(pool)
	cb.running++
	cb.avgBatch = avg
	run := &batchRun{}
	cb.runs = append(cb.runs, run)
	cs.beginBatchLocked(cb, run)
	cb.mu.Unlock()
	return func() {
		cb.mu.Lock()
		cb.endRunLocked(run)
		s := cb.handOffLocked(nil, cs.cfg.SecondBatchMin)
		cb.mu.Unlock()
		cs.run.closeSession(s)
		cs.dropIfIdle(cb)
	}
}
