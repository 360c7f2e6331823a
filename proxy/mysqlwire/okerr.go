package mysqlwire

import (
	"encoding/binary"
	"fmt"
)

// Status flags of OK and EOF packets.
const (
	StatusInTrans        uint16 = 0x0001
	StatusAutocommit     uint16 = 0x0002
	StatusMoreResults    uint16 = 0x0008
	StatusCursorExists   uint16 = 0x0040
	StatusLastRowSent    uint16 = 0x0080
	StatusNoBackslash    uint16 = 0x0200 // NO_BACKSLASH_ESCAPES is in sql_mode
	StatusInTransRO      uint16 = 0x2000
	StatusSessionChanged uint16 = 0x4000 // session state information follows
)

// OK is a decoded OK packet (protocol 4.1).
type OK struct {
	AffectedRows uint64
	InsertID     uint64
	Status       uint16
	Warnings     uint16
	Info         []byte
	StateInfo    []byte // session state changes; only with CLIENT_SESSION_TRACK
}

// ParseOK decodes an OK packet (or an EOF-headed OK) sent to a connection
// with the given session-tracking capability. Slices alias p; ok is false
// when p is no well-formed OK packet.
func ParseOK(p []byte, sessionTrack bool) (_ OK, ok bool) {
	var o OK
	if len(p) < 1 || (p[0] != HeaderOK && p[0] != HeaderEOF) {
		return o, false
	}
	pos := 1
	var n int
	var good bool
	if o.AffectedRows, n, _, good = ReadLenEnc(p[pos:]); !good {
		return o, false
	}
	pos += n
	if o.InsertID, n, _, good = ReadLenEnc(p[pos:]); !good {
		return o, false
	}
	pos += n
	if len(p) < pos+4 {
		return o, false
	}
	o.Status = binary.LittleEndian.Uint16(p[pos:])
	o.Warnings = binary.LittleEndian.Uint16(p[pos+2:])
	pos += 4
	if !sessionTrack {
		o.Info = p[pos:]
		return o, true
	}
	if pos == len(p) {
		return o, true
	}
	if o.Info, n, good = ReadLenEncString(p[pos:]); !good {
		return o, false
	}
	pos += n
	if o.Status&StatusSessionChanged != 0 && pos < len(p) {
		if o.StateInfo, _, good = ReadLenEncString(p[pos:]); !good {
			return o, false
		}
	}
	return o, true
}

// AppendOK encodes o for a peer with the given session-tracking
// capability. Without it, session state is dropped and its flag cleared;
// the flag is cleared too when there is no state information.
func AppendOK(b []byte, o OK, sessionTrack bool) []byte {
	b = append(b, HeaderOK)
	b = AppendLenEnc(b, o.AffectedRows)
	b = AppendLenEnc(b, o.InsertID)
	st := o.Status
	if !sessionTrack || len(o.StateInfo) == 0 {
		st &^= StatusSessionChanged
	}
	b = binary.LittleEndian.AppendUint16(b, st)
	b = binary.LittleEndian.AppendUint16(b, o.Warnings)
	if !sessionTrack {
		return append(b, o.Info...)
	}
	if len(o.Info) == 0 && st&StatusSessionChanged == 0 {
		return b
	}
	b = AppendLenEncString(b, o.Info)
	if st&StatusSessionChanged != 0 {
		b = AppendLenEncString(b, o.StateInfo)
	}
	return b
}

// SetOKStatus overwrites the status flags of OK packet payload p in place;
// it does nothing to a packet too short to hold them.
func SetOKStatus(p []byte, st uint16) {
	pos := 1
	for range 2 { // affected rows, insert id
		if pos > len(p) {
			return
		}
		_, n, _, ok := ReadLenEnc(p[pos:])
		if !ok {
			return
		}
		pos += n
	}
	if len(p) >= pos+2 {
		binary.LittleEndian.PutUint16(p[pos:], st)
	}
}

// IsEOF reports whether a packet whose payload starts with first and whose
// first physical packet has n payload bytes is an EOF packet: 0xfe with
// fewer than 9 bytes. Longer 0xfe packets are rows starting with an 8-byte
// length-encoded string.
func IsEOF(first byte, n int) bool { return first == HeaderEOF && n < 9 }

// EOFStatus returns the warning count and status flags of an EOF packet
// payload (zero when p is too short to hold them).
func EOFStatus(p []byte) (warnings, status uint16) {
	if len(p) >= 5 {
		return binary.LittleEndian.Uint16(p[1:]), binary.LittleEndian.Uint16(p[3:])
	}
	return 0, 0
}

// AppendEOF appends an EOF packet payload.
func AppendEOF(b []byte, warnings, status uint16) []byte {
	b = append(b, HeaderEOF)
	b = binary.LittleEndian.AppendUint16(b, warnings)
	return binary.LittleEndian.AppendUint16(b, status)
}

// SetEOFStatus overwrites the status flags of EOF packet payload p in
// place; it does nothing to a packet too short to hold them.
func SetEOFStatus(p []byte, st uint16) {
	if len(p) >= 5 {
		binary.LittleEndian.PutUint16(p[3:], st)
	}
}

// ErrCode returns the error code of ERR packet payload p (only its first
// three bytes are read); ok is false when p is no ERR packet.
func ErrCode(p []byte) (code uint16, ok bool) {
	if len(p) < 3 || p[0] != HeaderErr {
		return 0, false
	}
	return binary.LittleEndian.Uint16(p[1:]), true
}

// PrepareOK is the first packet of the answer to a COM_STMT_PREPARE that
// succeeded; Columns column and Params parameter definitions follow it,
// each list ended by an EOF unless the client has CLIENT_DEPRECATE_EOF.
type PrepareOK struct {
	ID                        uint32
	Columns, Params, Warnings uint16
}

// AppendPrepareOK appends a COM_STMT_PREPARE OK packet payload.
func AppendPrepareOK(b []byte, p PrepareOK) []byte {
	b = append(b, HeaderOK)
	b = binary.LittleEndian.AppendUint32(b, p.ID)
	b = binary.LittleEndian.AppendUint16(b, p.Columns)
	b = binary.LittleEndian.AppendUint16(b, p.Params)
	b = append(b, 0) // filler
	return binary.LittleEndian.AppendUint16(b, p.Warnings)
}

// ParsePrepareOK decodes a COM_STMT_PREPARE OK packet payload; ok is false
// when p is not one (an ERR, or shorter than 12 bytes).
func ParsePrepareOK(p []byte) (_ PrepareOK, ok bool) {
	if len(p) < 12 || p[0] != HeaderOK {
		return PrepareOK{}, false
	}
	return PrepareOK{
		ID:       binary.LittleEndian.Uint32(p[1:]),
		Columns:  binary.LittleEndian.Uint16(p[5:]),
		Params:   binary.LittleEndian.Uint16(p[7:]),
		Warnings: binary.LittleEndian.Uint16(p[10:]),
	}, true
}

// SQLError is a MySQL error as it travels in an ERR packet.
type SQLError struct {
	Code  uint16
	State string // SQLSTATE, five characters
	Msg   string
}

func (e *SQLError) Error() string {
	return fmt.Sprintf("ERROR %d (%s): %s", e.Code, e.State, e.Msg)
}

// Number returns the MySQL error number.
func (e *SQLError) Number() uint16 { return e.Code }

// SQLState returns the five-character SQLSTATE.
func (e *SQLError) SQLState() string { return e.State }

// AppendErr appends e as an ERR packet payload (protocol 4.1); a State
// that is not five characters long goes out as HY000.
func AppendErr(b []byte, e *SQLError) []byte {
	b = append(b, HeaderErr)
	b = binary.LittleEndian.AppendUint16(b, e.Code)
	b = append(b, '#')
	st := e.State
	if len(st) != 5 {
		st = "HY000"
	}
	b = append(b, st...)
	return append(b, e.Msg...)
}

// ParseErr decodes an ERR packet (protocol 4.1). It never fails: a packet
// too short to be one is error 1105 (HY000) "malformed error packet", and
// one without a SQLSTATE marker has HY000.
func ParseErr(p []byte) *SQLError {
	e := &SQLError{Code: 1105, State: "HY000"}
	if len(p) < 3 || p[0] != HeaderErr {
		e.Msg = "malformed error packet"
		return e
	}
	e.Code = binary.LittleEndian.Uint16(p[1:])
	rest := p[3:]
	if len(rest) >= 6 && rest[0] == '#' {
		e.State = string(rest[1:6])
		rest = rest[6:]
	}
	e.Msg = string(rest)
	return e
}
