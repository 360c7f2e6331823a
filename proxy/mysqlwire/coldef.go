package mysqlwire

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// Column describes one column of a result set built without a server.
type Column struct {
	Name   string
	Type   byte // a mysql.MYSQL_TYPE_*
	Flags  uint16
	Length uint32 // display width; 0: the type's default
}

// AppendColumnDef appends c's column definition (protocol 4.1): catalog
// "def", no schema or table, utf8mb4_general_ci for VAR_STRING and binary
// for the rest. typeInfo adds MariaDB's (empty) extended type info, for a
// client that negotiated it.
func AppendColumnDef(b []byte, c Column, typeInfo bool) []byte {
	b = AppendLenEncString(b, []byte("def"))
	b = AppendLenEncString(b, nil) // schema
	b = AppendLenEncString(b, nil) // table
	b = AppendLenEncString(b, nil) // org_table
	b = AppendLenEncString(b, []byte(c.Name))
	b = AppendLenEncString(b, nil) // org_name
	if typeInfo {
		b = append(b, 0) // no extended type info
	}
	b = append(b, 0x0c)
	cs, length := uint16(63), uint32(21) // binary, numeric width
	if c.Type == mysql.MYSQL_TYPE_VAR_STRING {
		cs, length = 45, 1<<24-1 // utf8mb4_general_ci
	} else if c.Type == mysql.MYSQL_TYPE_DATETIME {
		length = 26
	}
	if c.Length != 0 {
		length = c.Length
	}
	b = binary.LittleEndian.AppendUint16(b, cs)
	b = binary.LittleEndian.AppendUint32(b, length)
	b = append(b, c.Type)
	b = binary.LittleEndian.AppendUint16(b, c.Flags)
	dec := byte(0)
	if c.Type == mysql.MYSQL_TYPE_DOUBLE {
		dec = 31
	} else if c.Type == mysql.MYSQL_TYPE_DATETIME {
		dec = 6
	}
	b = append(b, dec, 0, 0)
	return b
}

// ColumnName returns the name in column definition p, nil when p is too
// short to hold one.
func ColumnName(p []byte) []byte {
	pos := 0
	for range 4 { // catalog, schema, table, org_table
		_, n, ok := ReadLenEncString(p[pos:])
		if !ok {
			return nil
		}
		pos += n
	}
	name, _, ok := ReadLenEncString(p[pos:])
	if !ok {
		return nil
	}
	return name
}

// ColumnDef is the part of a decoded column definition a reader of
// results needs. Slices alias the packet.
type ColumnDef struct {
	Schema, Table, Name []byte
	Charset             uint16
	Length              uint32
	Type                byte
	Flags               uint16
	Decimals            byte
}

// ParseColumnDef decodes a column definition (protocol 4.1); typeInfo says
// whether the connection negotiated MariaDB's extended type info (which it
// skips). ok is false when p is no well-formed column definition.
func ParseColumnDef(p []byte, typeInfo bool) (c ColumnDef, ok bool) {
	var f [6][]byte // catalog, schema, table, org_table, name, org_name
	pos := 0
	for i := range f {
		s, n, good := ReadLenEncString(p[pos:])
		if !good {
			return ColumnDef{}, false
		}
		f[i], pos = s, pos+n
	}
	if typeInfo {
		_, n, good := ReadLenEncString(p[pos:])
		if !good {
			return ColumnDef{}, false
		}
		pos += n
	}
	if len(p) < pos+13 || p[pos] < 0x0a {
		return ColumnDef{}, false
	}
	pos++
	c = ColumnDef{Schema: f[1], Table: f[2], Name: f[4]}
	c.Charset = binary.LittleEndian.Uint16(p[pos:])
	c.Length = binary.LittleEndian.Uint32(p[pos+2:])
	c.Type = p[pos+6]
	c.Flags = binary.LittleEndian.Uint16(p[pos+7:])
	c.Decimals = p[pos+9]
	return c, true
}

// AppendTextRow appends a text-protocol row: each value as a
// length-encoded string (nil as NULL); int64, uint64, float64, string,
// []byte and time.Time (UTC, microseconds) as MySQL prints them, anything
// else as fmt's %v.
func AppendTextRow(b []byte, row []any) []byte {
	for _, v := range row {
		switch x := v.(type) {
		case nil:
			b = append(b, 0xfb)
		case int64:
			b = AppendLenEncString(b, strconv.AppendInt(nil, x, 10))
		case uint64:
			b = AppendLenEncString(b, strconv.AppendUint(nil, x, 10))
		case float64:
			b = AppendLenEncString(b, strconv.AppendFloat(nil, x, 'g', -1, 64))
		case string:
			b = AppendLenEncString(b, []byte(x))
		case []byte:
			b = AppendLenEncString(b, x)
		case time.Time:
			b = AppendLenEncString(b, []byte(x.UTC().Format("2006-01-02 15:04:05.000000")))
		default:
			b = AppendLenEncString(b, fmt.Appendf(nil, "%v", x))
		}
	}
	return b
}

// ParseTextRow decodes text-protocol row p, appending its values to dst:
// each aliasing p, nil for NULL. ok is false when a value is truncated.
func ParseTextRow(dst [][]byte, p []byte) (_ [][]byte, ok bool) {
	for pos := 0; pos < len(p); {
		if p[pos] == 0xfb {
			dst = append(dst, nil)
			pos++
			continue
		}
		v, n, good := ReadLenEncString(p[pos:])
		if !good {
			return dst, false
		}
		dst = append(dst, v)
		pos += n
	}
	return dst, true
}

// intBits is the two's-complement bits of an int64 or uint64 value (0 for
// any other type), as a binary-protocol integer carries them.
func intBits(v any) uint64 {
	switch x := v.(type) {
	case int64:
		return uint64(x)
	case uint64:
		return x
	}
	return 0
}

// AppendBinaryRow appends a binary-protocol row (COM_STMT_EXECUTE's
// results) of values typed by cols: LONGLONG, LONG, DOUBLE and DATETIME
// in their binary forms, any other type as a length-encoded string (as
// AppendTextRow), nil as a bit in the NULL bitmap.
func AppendBinaryRow(b []byte, cols []Column, row []any) []byte {
	b = append(b, 0)
	nb := (len(cols) + 7 + 2) / 8
	start := len(b)
	b = append(b, make([]byte, nb)...)
	for i, v := range row {
		if v == nil {
			b[start+(i+2)/8] |= 1 << ((i + 2) % 8)
		}
	}
	for i, v := range row {
		if v == nil {
			continue
		}
		switch cols[i].Type {
		case mysql.MYSQL_TYPE_LONGLONG:
			b = binary.LittleEndian.AppendUint64(b, intBits(v))
		case mysql.MYSQL_TYPE_LONG:
			b = binary.LittleEndian.AppendUint32(b, uint32(intBits(v)))
		case mysql.MYSQL_TYPE_DOUBLE:
			f, _ := v.(float64)
			b = binary.LittleEndian.AppendUint64(b, math.Float64bits(f))
		case mysql.MYSQL_TYPE_DATETIME:
			t, _ := v.(time.Time)
			t = t.UTC()
			b = append(b, 11)
			b = binary.LittleEndian.AppendUint16(b, uint16(t.Year()))
			b = append(b, byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()))
			b = binary.LittleEndian.AppendUint32(b, uint32(t.Nanosecond()/1000))
		default:
			b = AppendTextRow(b, []any{v})
		}
	}
	return b
}
