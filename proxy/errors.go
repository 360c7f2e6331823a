package proxy

import (
	"errors"
	"fmt"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// errMalformed is a backend reply that breaks the protocol; the backend
// connection is then unusable.
var errMalformed = errors.New("proxy: malformed packet")

// Error codes holdfast itself sends. Backend errors are relayed byte-exact
// and never pass through here. README.md lists these for users.
const (
	codeConCount         = 1040 // pool exhausted: no backend connection in time
	codeAccessDenied     = 1045
	codeUnknownCommand   = 1047
	codeHandshake        = 1043 // a handshake packet that makes no sense
	codeShutdown         = 1053
	codeNoSuchThread     = 1094
	codeKillDenied       = 1095
	codeUnknownError     = 1105
	codeQueryInterrupted = 1317 // the server's KILL QUERY answer
	codePacketTooLarge   = 1153
	codeOutOfOrder       = 1156
	codeWrongArguments   = 1210
	codeUnknownStmt      = 1243
	codeUnsupportedPS    = 1295 // a statement that cannot be prepared
	codeNotSupported     = 1235 // a statement form holdfast does not support
	codeAuthMode         = 1251 // a client without the 4.1 protocol
	codeMalformed        = 1835
	codeConnectFailed    = 2003 // backend unreachable
	codeServerLost       = 2013 // backend connection lost during a statement
	codeTagDrained       = 9001 // the statement's tag is drained by on-call
	codeTagLimit         = 9002 // no slot under the tag's connection limit in time
	codeShapeBlocked     = 9007 // the statement's shape is blocked by on-call
	codeShapeLimit       = 9008 // no slot under the shape's cap in time
	codeProtected        = 9009 // a client statement writes, locks or alters one of holdfast's tables
	// codePrimarySwitching (9010, "the primary is switching") is declared
	// in failover.go with its SQLSTATE.
	// The codes of statements refused by a statement-level on-call
	// control are declared with their kinds, in proxy/controls (a
	// controls.Refusal carries code and SQLSTATE to controlErr).
)

func newErr(code uint16, state, format string, a ...any) *mysqlwire.SQLError {
	return &mysqlwire.SQLError{Code: code, State: state, Msg: fmt.Sprintf(format, a...)}
}

func errUnknownCommand(cmd byte) *mysqlwire.SQLError {
	return newErr(codeUnknownCommand, "08S01", "Unknown command 0x%02x: holdfast does not support this protocol command", cmd)
}

func errTooLarge(limit int) *mysqlwire.SQLError {
	return newErr(codePacketTooLarge, "08S01", "Got a packet bigger than 'max_allowed_packet' bytes (%d); holdfast closes the connection", limit)
}

func errMalformedPacket(what string) *mysqlwire.SQLError {
	return newErr(codeMalformed, "HY000", "Malformed communication packet: %s", what)
}
