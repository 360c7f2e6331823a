// Package docstest checks that the documentation runs as written: its test
// extracts every fenced block of README.md and docs/*.md and runs the SQL
// and shell blocks through a holdfast it starts itself, on a fresh
// database, failing with the file and line of the first block that does
// not run or whose shown output differs. The package owns reading
// Markdown for that purpose (blocks, markers, statements, commands, shown
// tables); it must not be imported by holdfast itself.
//
// What a doc writer needs to know:
//
//   - ```sql blocks run in order, per file, on one connection to holdfast
//     (user app, as config.yaml configures it), statement by statement.
//
//   - ```sh blocks run line by line (a line ending in \ goes on), each
//     line with bash in a directory holding config.yaml and bin/holdfast,
//     bin/holdfastctl (also on PATH), with stdin empty: an interactive
//     client such as `mariadb ... test` logs in and returns. Each must
//     exit 0.
//
//   - A ```text block right after an ```sql block (nothing but blank lines
//     between) is the output of that block's last statement, in the
//     mariadb client's table form. Its column names and values must match;
//     placeholder tokens (rsv_ + 16 hex digits) stand for the real tokens
//     of the run in order of appearance, and a timestamp matches any
//     timestamp.
//
//   - ```yaml blocks are holdfast configuration: merged over config.yaml
//     for the holdfast that runs that file's blocks.
//
//   - Any other block (diagrams, untagged) is not run.
//
//   - A command that does not return (a server, a refreshing view, a
//     benchmark) carries a marker on the line before its block:
//
//     <!-- docs-test: skip (reason) -->             the whole block
//     <!-- docs-test: skip `command` (reason) -->   its lines starting with command
//
//     The reason is required; "see TestName" names the test that covers
//     what is skipped, and that test must exist.
//
// The test rewrites only default addresses and names to its private ones:
// 127.0.0.1:6033 and -P 6033 (listen), 127.0.0.1:6034 (admin listener),
// the database `test` named on a mariadb command line, and 127.0.0.1:6379
// (reservation.redis.address in a yaml block). config.yaml itself is used
// unchanged; holdfast's documented environment variables (HOLDFAST_LISTEN,
// HOLDFAST_ADMIN_LISTEN, HOLDFAST_BACKEND_*, HOLDFAST_FLEET_DATABASE) and
// holdfastctl's HOLDFAST_ADMIN_ADDR point it at the private listeners and
// databases.
//
// Run it alone with `go test -race -count=1 ./internal/docstest` (MariaDB
// as internal/dbtest finds it; `make test` starts one when missing).
package docstest
