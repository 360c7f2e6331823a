// Package legacy runs holdfast's reservation engine beside a legacy Redis
// counter, for a checkout moving from one to the other without a flag day
// (docs/migration.md; the seeds' "上线迁移"): shadow mode, where the legacy
// counter decides reserves and the engine runs each one too and both
// answers are compared; authority holdfast, where the engine decides and
// Redis is still written (dual write) so that the kill switch can go back at
// any moment; the switch itself, versioned in the backend database and
// polled by every instance, rolled out by shop list and stable percentage;
// the drift check; and resync-redis.
//
// It owns:
//   - Store, the legacy counter: its configurable key layout (Config,
//     reservation.redis, defaulted and validated in package config) and one
//     atomic Lua script per operation (scripts.go), every one idempotent per
//     reservation token;
//   - Router, which answers CALL holdfast.* (the proxy's Procedures) by
//     routing each call to its authority: a reserve by the switch, a claim,
//     release or extend by the authority its reservation was made under
//     (recorded in its token and in reservations.authority), whatever the
//     switch says now;
//   - Switch, the authority switch's table, poll and rollout hash;
//   - the authority a token says (token.go: one bit of its reservation id,
//     reservation.CallerIDBit, which the engine keeps without reading it);
//   - the comparisons, the Redis sweeper, the drift check, Resync with its
//     reads of the engine's tables (resyncread.go), and the Collector that
//     exports them.
//
// The engine keeps deciding everything in MySQL it always did: the ledger
// is the single source of on_hand in both modes (in the Redis era a claim
// already meant "deduct the MySQL ledger, then clean up Redis"). What Redis
// adds is a second opinion on reserves, or, under authority redis, the
// deciding one. A failure of the side that does not decide never fails the
// caller; under authority redis a Redis that cannot be reached fails the
// reserves and extends it decides (2003, or 9108 when the script may have
// run), and never a claim or a release.
//
// It must not be imported by package reservation, which stays unaware of
// Redis and never calls into this package: the Router wraps the engine
// (cmd/holdfast installs it as the proxy's Procedures when
// reservation.redis.address is set) and reaches it only through its
// exported API: CallWith with its per-call CallOptions (the reservation
// id, the authority to record, the lines of a reservation only Redis
// knows, the Changed callback the engine calls after a commit), and
// calloptions.go's request decoders.
package legacy
