// Package mysqlwire holds the MySQL wire protocol's encodings that more than
// one layer of holdfast reads or writes: length-encoded integers and
// strings. It has no policy and no I/O; it never allocates except in the
// Append functions' dst, and never panics on short input.
package mysqlwire
