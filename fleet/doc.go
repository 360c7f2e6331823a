// Package fleet is what must be one answer for every holdfast instance in
// front of one database, kept in that database (holdfast's schema,
// migration 5), the way the Redis authority switch already is: no
// consensus protocol of holdfast's own and no connection-level locks.
//
//   - Controls (holdfast_controls): on-call's drains, connection caps,
//     per-tag max_transaction_time and overload classes, each with who set it, when, why and an
//     optional expiry (the database's clock). Every instance polls them,
//     validates each row as the admin API validates a control it writes
//     (a row that fails is ignored, visibly), and applies them within one
//     poll interval.
//   - Membership (holdfast_members): each instance's heartbeat row.
//   - Cap grants (holdfast_cap_grants): a fleet-wide cap's slots, granted
//     to instances in proportion to their demand, what is left over by
//     turns (share.go), moved as demand moves (caps.go); their sum never
//     exceeds the cap.
//   - Duties (holdfast_duties): work that must run on one instance at a
//     time, by a lease with an expiry.
//
// Fleet reads and writes on a database/sql pool of its own, never the
// proxy's pool: a drain must go through when the pool is saturated, which
// is when on-call sends one. It knows nothing of sessions: it tells an
// Applier (the proxy) what to put in force.
package fleet
