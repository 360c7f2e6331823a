// Package rollout is holdfast's rolling-upgrade harness (`make
// bench-rollout`, and a short run in `make test`): it replaces a fleet of
// holdfast instances of an earlier version (N−1, built from a commit of
// the repository) with instances of the checkout's (N), one at a time, the
// way a Kubernetes Deployment does, under traffic and with on-call
// controls in force, and checks that nobody noticed.
//
// One run, on a private MariaDB (binary logging on) it starts and stops:
//
//  1. N−1's `holdfast migrate`, three N−1 instances, stock for the
//     engine's shop; a drain of one tag and a fleet-wide cap of another,
//     set through an N−1 instance's admin API (N−1 has no credentials);
//  2. traffic through a client-side balancer over the ready instances
//     (what a Service does): checkout transactions (tagged SELECT and
//     INSERT), the engine's CALL holdfast.reserve/claim/release with
//     idempotency keys (internal/chaos's clients), statements of the
//     drained tag, statements of the capped tag that sleep;
//  3. N's `holdfast migrate`, with the N−1 instances running (and, for
//     the test that shows the harness fails, a bad extra step after it);
//  4. per N−1 instance: an N instance started and waited for until ready
//     (ready), added to the balancer; the N−1 instance taken out of it,
//     its clients' work let finish, then SIGTERM;
//  5. the checks: no client of a ready instance got an error but the
//     drain's 9001 on the drained tag and the cap's 9002 on the capped
//     tag; every statement of the drained tag refused, by every version;
//     never more statements of the capped tag running at once, fleet-wide,
//     than the cap (information_schema.PROCESSLIST, sampled); every
//     committed checkout transaction's row present; every engine answer
//     true, each success exactly once, the stock invariant and
//     conservation of units (chaos.Judge); what N−1 left reserved
//     expired by N; the mixed fleet as N shows it (the N−1 instances'
//     schema range and control kinds not recorded); no instance crashed.
//
// N−1 and N share one set of tables: N−1 keeps them in backend.database,
// and N finds them there (the legacy location), which is the point.
//
// The package owns the harness only: it starts its own processes (a
// private mariadbd, holdfast instances) and stops only those; it must not
// touch the shared test server named by HOLDFAST_TEST_DSN. It must not
// import testing (cmd/holdfast-rollout runs it).
package rollout
