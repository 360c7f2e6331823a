// Package reservation owns holdfast's inventory-reservation engine: the schema
// and its versioned migrations, the answers to CALL holdfast.* (reserve, claim,
// release, extend, receive, set_on_hand, adjust, availability), idempotency,
// the expiry sweeper and the invariant reconciler.
//
// The engine never opens connections of its own to the primary: every
// transaction borrows one from holdfast's backend pool through Conns, under a
// tag (holdfast:reserve, holdfast:claim, ...), so its hold time is attributed
// like any other flow. Topping up the unit pools belongs to package refiller,
// reached only through the Refiller interface declared here; this package must
// not import refiller, proxy, attribution or reservation/legacy, and it knows
// nothing of the MySQL wire protocol: errors that should reach a client with a
// specific code implement MySQLError and the proxy turns them into ERR packets.
// Its Config is package config's plain struct (config.Engine), where the
// defaults are written.
//
// A migration from a legacy Redis counter (docs/migration.md) runs in package
// reservation/legacy, which wraps the engine: the engine stays unaware of
// Redis, and takes what that caller decides per call through CallWith's
// CallOptions (calloptions.go): a reservation id whose CallerIDBit the engine
// keeps, the authority to record, and, for a claim of a reservation only the
// legacy store knows, its lines, which the engine deducts from the ledger in
// a claim of its own (legacyclaim.go).
//
// # Data model
//
// Per (shop_id, inventory_item_id, inventory_group_id) — an item at a location,
// a "pool" — inventory_ledger holds on_hand, reservation_units holds up to
// Config.PoolCap rows of one reservable unit each, and reserved_quantities holds
// one row per line of each live reservation. The invariant is
//
//	rows in pool + held reserved quantity <= on_hand
//
// pool_counters keeps, per pool, how many units are issued out of on_hand
// (pool + reserved + pending reservation_returns), so refills never sum the
// reservations (counters.go). Both are checked from the tables in one place,
// CheckStock (check.go): by the reconciler, and by the benchmarks and the
// chaos harness.
//
// Every transaction runs at READ COMMITTED, set per transaction (or, on the
// connection a reserve combiner keeps across consecutive batches, for that
// borrow and restored before release: see session.go); the server keeps its
// default. Every path locks tables in one global order:
// inventory_ledger -> pool_counters -> reservation_units -> reserved_quantities
// -> reservations -> reservation_returns.
// No path uses GET_LOCK: the ledger row lock is the per-pool mutex.
//
// The user-facing reference of the CALL interface is docs/reservation.md.
package reservation
