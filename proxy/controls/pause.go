package controls

// PauseKind pauses the tags matching its key, as PgBouncer's PAUSE does a
// database: for a planned switchover, set before the HA tool flips the
// primary and lifted after. While it is in force, a statement of such a
// tag that would start a new borrow (its session holds no backend
// connection: a new transaction, an autocommit statement) waits, holding
// no connection, until the pause is lifted, and then runs; past
// failover.hold it gets error 9010. Open transactions and pinned sessions
// go on, so that they finish before the flip. '*' pauses every tag. Any
// source's pause holds (it merges strictest); it has no value.
var PauseKind = Register(&Kind{
	Name: "pause", Doc: "new borrows wait, holding no connection, until lifted (then 9010 past failover.hold)",
	Merge: Strictest, Effect: EffectPause, Pattern: true,
	Show: func(int64) string { return "paused" },
})
