// Package mysqlwire is the MySQL wire protocol as holdfast speaks it, both
// to clients and to backends, with no policy: it knows nothing of routing,
// pinning, tags, sessions, pools or metrics, and imports nothing of
// holdfast (only go-mysql's constants). The proxy decides; this package
// moves and codes the bytes.
//
// It holds:
//   - framing (packet.go): packet headers, sequence ids, the split of a
//     payload at MaxPayload and the join of continuations, buffered
//     Reader and Writer (a Writer may take its buffer from a pool only
//     while it has something to write);
//   - socket I/O (sockio.go): reads and writes of a TCP socket as raw
//     system calls, and a command written in the same wait as its reply's
//     read;
//   - OK, ERR and EOF packets and their status flags, and the answer to a
//     COM_STMT_PREPARE (okerr.go);
//   - the binary parameters of a COM_STMT_EXECUTE (params.go);
//   - column definitions and text and binary rows (coldef.go);
//   - the connection phase's packets (greeting.go): the greeting, the
//     handshake response, the SSLRequest, the authentication switch and
//     MariaDB's extended capabilities;
//   - length-encoded integers and strings (lenenc.go).
//
// Parsers never panic on short or malformed input: they report it (ok
// false or an error), and their results alias the input unless their
// documentation says otherwise. Append functions allocate only in their
// dst; the per-statement path (Reader, Writer, OK and EOF codecs)
// allocates nothing once its buffers have grown.
package mysqlwire
