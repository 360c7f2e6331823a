// Package chaos is holdfast's own fault harness (`make chaos`): it runs the
// real holdfast binary against a private MariaDB it may kill, drives
// checkout traffic through CALL holdfast.* from many clients while one
// fault at a time is injected, and then checks, directly on the database,
// that the stock is whole and that every answer a client got was true.
//
// A run is a sequence of scenarios (Scenario), each on a fresh database of
// the private server:
//
//   - backend: holdfast's backend connections are killed (KILL CONNECTION)
//     every 100 ms;
//   - mariadb: MariaDB is killed with SIGKILL and restarted;
//   - holdfast: holdfast is killed with SIGKILL and restarted;
//   - instances: three holdfast instances share one database, the clients
//     spread over them;
//   - controls: on-call controls changed through several instances;
//   - replica: reads routed to a replica that is killed and restarted;
//   - switchover: the database on a primary and a replica of its own
//     behind a VIP the harness moves, switched over as an HA tool does;
//   - failover: the same pair, the primary killed with SIGKILL and the
//     replica promoted 2 s later (its relay log applied first).
//
// Every call and its answer goes into a client-side journal (journal.go);
// after the traffic stops the harness reads the database and judges the
// journal against it (judge.go): each success took effect exactly once,
// each error took none, and the only unknown outcomes are calls whose own
// client connection died or that were answered 9108, each resolved
// against the database. Then it checks the stock invariant (sampled during
// the traffic and at the end, with reservation.CheckStock), conservation of
// units, that nothing was claimed twice, and that every unit is
// reservable again once the reservations left behind have expired
// (check.go). Anything else is a Violation, and Run reports it.
//
// The package owns the harness only: it starts its own processes (a
// private mariadbd, holdfast) and kills only those. It must not touch the
// shared test server named by HOLDFAST_TEST_DSN.
package chaos
