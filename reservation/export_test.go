package reservation

import "context"

// SetHookLocked makes every reserve transaction call f right after its
// units are locked (nil removes it). Set it before the engine is used.
func SetHookLocked(e *Engine, f func(ctx context.Context, c Conn)) { e.hookLocked = f }
