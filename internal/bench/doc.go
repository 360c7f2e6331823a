// Package bench is the harness behind `make bench-proxy` and `make
// bench-attribution` (cmd/holdfast-bench, Options.Mode). bench-proxy
// measures holdfast against the two baselines every proxy hop must be judged
// by, MariaDB reached directly and a plain TCP relay, and runs a
// connection-scale test of many mostly idle clients. bench-attribution
// measures the cost of per-tag accounting: the same binary with attribution
// on and off, side by side (attribution.go). bench-reserve
// (cmd/holdfast-bench-reserve, RunReserve in reserve.go) measures CALL
// holdfast.reserve on one hot item against a transactional counter and an
// autocommit UPDATE, through holdfast and a relay that delays each
// direction, and the same CALL in shadow mode through a second holdfast
// with a Redis counter deciding (reserve_shadow.go), and checks every run
// for oversell.
//
// It owns:
//   - building and running a holdfast binary as a child process with a
//     generated configuration, and reading its memory and CPU from /proc;
//   - driving sysbench and parsing its report;
//   - the orchestration (Run) and the printed report, both modes.
//
// Its MySQL connections are internal/rawmysql's (cheap enough to hold
// thousands from one process, and allocating nothing per statement). The
// TCP relay, plain (the floor of any proxy hop) or delaying each direction
// (a userspace stand-in for netem, which these machines lack), is
// internal/netrelay's. The harness must not touch holdfast's own packages:
// holdfast is measured as a user runs it, from a freshly built binary and
// a configuration file. Everything the harness starts it stops; the
// sysbench tables stay in their database (Options.Database) for the next
// run.
package bench
