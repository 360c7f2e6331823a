// Package ctl is the on-call CLI's library (cmd/holdfastctl): an HTTP client
// for holdfast's admin API, the readable tables it prints, and the commands
// built on them — tags, holders, top, drain, undrain and limit.
//
// It owns:
//   - Client, which speaks the admin API's JSON contract (GET /api/tags,
//     /api/holders, /api/pool; POST/DELETE /api/tags/{tag}/drain;
//     PUT/DELETE /api/tags/{tag}/limit) and turns every failure into an
//     *Error that names the admin address and what to check;
//   - the commands (Tags, Holders, Top, Drain, Undrain, Limit, ...), each
//     writing plain text to an io.Writer, and Control, which sets a control
//     of any kind offered as a command of its own (kinds.go) through the
//     admin API's routes for every kind (PUT/DELETE /api/tags/{tag}/{kind});
//   - Rates, the arithmetic behind top: the change of a tag's hold_seconds
//     counter plus the age of its holds still open (WithInFlight, from
//     /api/holders) over the wall time between two snapshots is the average
//     number of backend connections the tag held in that time, a long open
//     transaction included.
//
// It must not import holdfast's server packages (proxy, attribution, config,
// ...): it is a client of the admin API and nothing more, so it works against
// any holdfast that serves the contract, and the tag charset it checks
// ([A-Za-z0-9_.:-], at most 64 bytes) is restated here from the attribution
// package's documentation rather than imported. It reads no configuration
// and no environment; cmd/holdfastctl wires flags, the environment and the
// terminal into it. The only files it reads are those it is given (a CA,
// a token file) and the local credential's token file that holdfast names
// in a 401 answer (see Client).
//
// Everything from the server that reaches the terminal — tags, user names,
// statement text, error messages — goes through clean first, so a statement
// cannot smuggle escape sequences into an on-call engineer's terminal.
package ctl
