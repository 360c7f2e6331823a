package attribution

import "context"

// Work done for others. The reservation engine borrows backend
// connections under its own holdfast:* tags, and does so for the clients
// whose CALL holdfast.* it answers, several at once when it batches their
// reserves. The context of a CALL carries its caller's tag (WithCallers);
// the engine passes the callers of each transaction on in the context of
// its statements, and whoever runs a statement splits its time among them
// (Tag.EngineTime).

type callersKey struct{}

// WithCallers returns ctx carrying tags as the callers the work under it
// is done for, in place of any ctx carried (none, when tags is empty).
func WithCallers(ctx context.Context, tags ...*Tag) context.Context {
	if len(tags) == 0 && Callers(ctx) == nil {
		return ctx
	}
	return context.WithValue(ctx, callersKey{}, tags)
}

// Callers returns the tags ctx carries (WithCallers), nil when none. The
// slice must not be changed.
func Callers(ctx context.Context) []*Tag {
	t, _ := ctx.Value(callersKey{}).([]*Tag)
	return t
}
