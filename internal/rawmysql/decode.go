package rawmysql

import (
	"database/sql"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Strict decoders: each takes mysqlwire's reading of a packet and also
// refuses what a well-behaved server never sends (trailing bytes, a
// missing SQLSTATE, a state-change flag without state), so that a test
// of a proxy notices a packet it mangled.

// DecodeErr decodes a protocol-4.1 ERR packet strictly: a SQLSTATE marker
// and five SQLSTATE characters are required.
func DecodeErr(p []byte) (*mysqlwire.SQLError, error) {
	if len(p) < 9 || p[0] != mysqlwire.HeaderErr || p[3] != '#' {
		return nil, fmt.Errorf("%w: ERR packet % x", ErrProtocol, p)
	}
	for _, ch := range p[4:9] {
		if !(ch >= '0' && ch <= '9' || ch >= 'A' && ch <= 'Z') {
			return nil, fmt.Errorf("%w: SQLSTATE %q", ErrProtocol, p[4:9])
		}
	}
	return mysqlwire.ParseErr(p), nil
}

// ErrPacket returns the ERR in p as an error: a *mysqlwire.SQLError when
// it is well formed.
func ErrPacket(p []byte) error {
	e, err := DecodeErr(p)
	if err != nil {
		return err
	}
	return e
}

// DecodeOK decodes an OK packet (header 0x00) for a client that did
// (track) or did not negotiate CLIENT_SESSION_TRACK. Without it, the info
// runs to the end of the packet; with it, info and state are
// length-encoded, state is present when its flag is set, and nothing may
// follow them. Slices alias p.
func DecodeOK(p []byte, track bool) (mysqlwire.OK, error) {
	ok, good := mysqlwire.ParseOK(p, track)
	if !good || len(p) < 7 || p[0] != mysqlwire.HeaderOK {
		return mysqlwire.OK{}, fmt.Errorf("%w: OK packet % x", ErrProtocol, p)
	}
	// Neither count may be NULL.
	if _, n, err := lenEnc(p[1:]); err != nil {
		return ok, fmt.Errorf("OK affected rows: %w", err)
	} else if _, _, err := lenEnc(p[1+n:]); err != nil {
		return ok, fmt.Errorf("OK insert id: %w", err)
	}
	if !track {
		return ok, nil
	}
	// What follows the status and warnings, as a client without session
	// tracking reads it.
	plain, _ := mysqlwire.ParseOK(p, false)
	rest := plain.Info
	if len(rest) == 0 {
		if ok.Status&mysqlwire.StatusSessionChanged != 0 {
			return ok, fmt.Errorf("%w: OK packet flags a state change but carries no state", ErrProtocol)
		}
		return ok, nil
	}
	_, n, _ := mysqlwire.ReadLenEncString(rest) // ParseOK read it
	rest = rest[n:]
	if ok.Status&mysqlwire.StatusSessionChanged != 0 {
		st, n, good := mysqlwire.ReadLenEncString(rest)
		if !good {
			return ok, fmt.Errorf("%w: OK packet session state % x", ErrProtocol, rest)
		}
		ok.StateInfo, rest = st, rest[n:]
	}
	if len(rest) != 0 {
		return ok, fmt.Errorf("%w: %d bytes after the OK packet's fields", ErrProtocol, len(rest))
	}
	return ok, nil
}

// DecodeEOF decodes a protocol-4.1 EOF packet strictly (five bytes).
func DecodeEOF(p []byte) (warnings, status uint16, err error) {
	if len(p) != 5 || p[0] != mysqlwire.HeaderEOF {
		return 0, 0, fmt.Errorf("%w: EOF packet % x", ErrProtocol, p)
	}
	warnings, status = mysqlwire.EOFStatus(p)
	return warnings, status, nil
}

// isEOF reports whether p is an EOF packet (not a row that starts 0xfe).
func isEOF(p []byte) bool { return mysqlwire.IsEOF(p[0], len(p)) }

// StateEntry is one entry of an OK packet's session state information.
type StateEntry struct {
	Type        byte // 0 system variable, 1 schema, 2 state change, ...
	Name, Value string
}

// DecodeState decodes session state information strictly.
func DecodeState(b []byte) ([]StateEntry, error) {
	var out []StateEntry
	for len(b) > 0 {
		typ := b[0]
		data, n, err := lenEncStr(b[1:])
		if err != nil {
			return out, err
		}
		b = b[1+n:]
		e := StateEntry{Type: typ}
		switch typ {
		case 0: // system variable: name, value
			name, k, err := lenEncStr(data)
			if err != nil {
				return out, err
			}
			val, m, err := lenEncStr(data[k:])
			if err != nil {
				return out, err
			}
			if k+m != len(data) {
				return out, fmt.Errorf("%w: trailing bytes in a system variable entry", ErrProtocol)
			}
			e.Name, e.Value = string(name), string(val)
		case 1: // schema
			v, k, err := lenEncStr(data)
			if err != nil {
				return out, err
			}
			if k != len(data) {
				return out, fmt.Errorf("%w: trailing bytes in a schema entry", ErrProtocol)
			}
			e.Value = string(v)
		case 2: // state change: the entry's data is the byte '1' itself (MySQL and MariaDB)
			if string(data) != "1" && string(data) != "0" {
				return out, fmt.Errorf("%w: state change entry %q", ErrProtocol, data)
			}
			e.Value = string(data)
		default:
			e.Value = string(data)
		}
		out = append(out, e)
	}
	return out, nil
}

// lenEnc reads a length-encoded integer that must not be NULL.
func lenEnc(b []byte) (uint64, int, error) {
	v, n, null, ok := mysqlwire.ReadLenEnc(b)
	switch {
	case len(b) == 0:
		return 0, 0, fmt.Errorf("%w: missing length-encoded integer", ErrProtocol)
	case null || !ok && b[0] == 0xff:
		return 0, 0, fmt.Errorf("%w: 0x%02x is no length-encoded integer", ErrProtocol, b[0])
	case !ok:
		return 0, 0, fmt.Errorf("%w: truncated length-encoded integer", ErrProtocol)
	}
	return v, n, nil
}

// lenEncStr reads a length-encoded string that must not be NULL.
func lenEncStr(b []byte) ([]byte, int, error) {
	if _, _, err := lenEnc(b); err != nil {
		return nil, 0, err
	}
	s, n, ok := mysqlwire.ReadLenEncString(b)
	if !ok {
		return nil, 0, fmt.Errorf("%w: truncated length-encoded string", ErrProtocol)
	}
	return s, n, nil
}

// Column is a decoded column definition (protocol 4.1).
type Column struct {
	Schema, Table, OrgTable, Name, OrgName string
	Charset                                uint16
	Length                                 uint32
	Type                                   byte
	Flags                                  uint16
	Decimals                               byte
	TypeInfo                               []byte // MariaDB extended type info, when negotiated
}

// DecodeColumn decodes a column definition strictly; fieldList allows the
// trailing default value COM_FIELD_LIST sends, typeInfo MariaDB's
// extended type info (mysqlwire.ExtTypeInfo) after the names.
func DecodeColumn(p []byte, fieldList, typeInfo bool) (Column, error) {
	var c Column
	var s [6]string
	pos := 0
	for i := range s {
		v, n, err := lenEncStr(p[pos:])
		if err != nil {
			return c, fmt.Errorf("column definition: %w", err)
		}
		s[i] = string(v)
		pos += n
	}
	if s[0] != "def" {
		return c, fmt.Errorf("%w: column catalog %q", ErrProtocol, s[0])
	}
	c.Schema, c.Table, c.OrgTable, c.Name, c.OrgName = s[1], s[2], s[3], s[4], s[5]
	if typeInfo {
		v, n, err := lenEncStr(p[pos:])
		if err != nil {
			return c, fmt.Errorf("column extended type info: %w", err)
		}
		c.TypeInfo = append([]byte{}, v...)
		pos += n
	}
	if len(p) < pos+13 || p[pos] != 0x0c {
		return c, fmt.Errorf("%w: column definition fixed fields truncated", ErrProtocol)
	}
	d, ok := mysqlwire.ParseColumnDef(p, typeInfo)
	if !ok {
		return c, fmt.Errorf("%w: column definition % x", ErrProtocol, p)
	}
	c.Charset, c.Length, c.Type, c.Flags, c.Decimals = d.Charset, d.Length, d.Type, d.Flags, d.Decimals
	rest := p[pos+13:]
	if fieldList && len(rest) > 0 {
		if rest[0] == 0xfb {
			rest = rest[1:]
		} else if _, n, err := lenEncStr(rest); err == nil {
			rest = rest[n:]
		}
	}
	if len(rest) != 0 {
		return c, fmt.Errorf("%w: %d bytes after a column definition", ErrProtocol, len(rest))
	}
	return c, nil
}

// DecodeTextRow decodes a text-protocol row of n columns.
func DecodeTextRow(p []byte, n int) ([]sql.NullString, error) {
	vals, err := parseTextRow(make([][]byte, 0, n), p, n)
	if err != nil {
		return nil, fmt.Errorf("text row: %w", err)
	}
	row := make([]sql.NullString, n)
	for i, v := range vals {
		if v != nil {
			row[i] = sql.NullString{String: string(v), Valid: true}
		}
	}
	return row, nil
}

// DecodeBinaryRow decodes a binary-protocol row; values become strings
// (temporal values as the hex of their bytes).
func DecodeBinaryRow(p []byte, cols []Column) ([]sql.NullString, error) {
	nb := (len(cols) + 7 + 2) / 8
	if len(p) < 1+nb || p[0] != 0x00 {
		return nil, fmt.Errorf("%w: binary row % x", ErrProtocol, p)
	}
	bitmap, b := p[1:1+nb], p[1+nb:]
	row := make([]sql.NullString, len(cols))
	need := func(n int) ([]byte, error) {
		if len(b) < n {
			return nil, fmt.Errorf("%w: binary row truncated", ErrProtocol)
		}
		v := b[:n]
		b = b[n:]
		return v, nil
	}
	for i, col := range cols {
		if bitmap[(i+2)/8]&(1<<((i+2)%8)) != 0 {
			continue
		}
		unsigned := col.Flags&0x20 != 0
		var s string
		switch col.Type {
		case TypeTiny, TypeShort, TypeYear, TypeLong, TypeInt24, TypeLongLong:
			size := map[byte]int{TypeTiny: 1, TypeShort: 2, TypeYear: 2, TypeLong: 4, TypeInt24: 4, TypeLongLong: 8}[col.Type]
			v, err := need(size)
			if err != nil {
				return nil, err
			}
			var u uint64
			for j := size - 1; j >= 0; j-- {
				u = u<<8 | uint64(v[j])
			}
			if unsigned {
				s = strconv.FormatUint(u, 10)
			} else {
				shift := 64 - 8*size
				s = strconv.FormatInt(int64(u<<shift)>>shift, 10)
			}
		case TypeFloat:
			v, err := need(4)
			if err != nil {
				return nil, err
			}
			s = strconv.FormatFloat(float64(math.Float32frombits(binary.LittleEndian.Uint32(v))), 'g', -1, 32)
		case TypeDouble:
			v, err := need(8)
			if err != nil {
				return nil, err
			}
			s = strconv.FormatFloat(math.Float64frombits(binary.LittleEndian.Uint64(v)), 'g', -1, 64)
		case TypeNull:
		case TypeDate, TypeDatetime, TypeTimestamp, TypeTime:
			l, err := need(1)
			if err != nil {
				return nil, err
			}
			v, err := need(int(l[0]))
			if err != nil {
				return nil, err
			}
			s = fmt.Sprintf("%x", v)
		default:
			v, n, err := lenEncStr(b)
			if err != nil {
				return nil, fmt.Errorf("binary row: %w", err)
			}
			s, b = string(v), b[n:]
		}
		row[i] = sql.NullString{String: s, Valid: true}
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after a binary row", ErrProtocol, len(b))
	}
	return row, nil
}
