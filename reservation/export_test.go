package reservation

import "context"

// SetHookLocked makes every reserve transaction call f right after its
// units are locked (nil removes it). Set it before the engine is used.
func SetHookLocked(e *Engine, f func(ctx context.Context, c Conn)) { e.hookLocked = f }

// Queued reports how many reserves wait in key's combiner queue.
func Queued(e *Engine, key PoolKey) int {
	e.combMu.Lock()
	cb := e.combiners[key]
	e.combMu.Unlock()
	if cb == nil {
		return 0
	}
	cb.mu.Lock()
	defer cb.mu.Unlock()
	return len(cb.queue)
}
