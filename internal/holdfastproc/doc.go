// Package holdfastproc runs holdfast as a child process: it builds the
// binary (Build, Cached), writes its configuration file (Config), starts
// it and waits until it is ready, scrapes its /metrics, stops or kills it,
// and reports what went wrong (exits nobody asked for, panics and data
// races in its log) (Process).
//
// It is the one way the tests, the benchmarks (cmd/holdfast-bench,
// cmd/holdfast-bench-reserve) and the chaos harness (cmd/holdfast-chaos)
// run holdfast. The benchmarks and the chaos harness are programs, so this
// package must not import testing; internal/dbtest wraps it for tests
// (a binary built once per checkout, a process killed at the test's
// cleanup). Production code must not import it.
package holdfastproc
