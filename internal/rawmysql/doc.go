// Package rawmysql is the MySQL client of holdfast's tests and
// benchmarks: one connection, one goroutine, and the wire in the caller's
// hands. It exists beside go-sql-driver and go-mysql's client for what
// they cannot do:
//
//   - send anything, malformed or not: any capability flags, sequence ids,
//     a length that lies (WriteFrame), commands a driver never sends, and
//     read each packet of the answer as it came (ReadPacket), decoded
//     strictly (DecodeOK, DecodeErr, DecodeColumn, ReadResults): a packet
//     that does not parse exactly is an error;
//   - hold thousands of connections and run statements on them cheaply
//     (Exec, Query): one small read buffer per connection, no goroutine of
//     its own, and nothing allocated per statement once its buffers have
//     grown, so that a benchmark measures the server and not its client.
//
// Framing, OK, ERR and EOF packets, the greeting, the handshake response
// and length-encoded values are proxy/mysqlwire's; this package adds the
// client's side of the conversation (login, commands, prepared
// statements) and strict decoders for checking what a server sent. It
// must not import anything of holdfast but mysqlwire, and nothing of
// testing: a benchmark binary links it.
//
// It speaks mysql_native_password, and caching_sha2_password when a
// server switches to it and accepts the fast path; no TLS and no
// compression.
package rawmysql
