package mysqlwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// ErrParamsTruncated is DecodeParams's error for a parameter block shorter
// than its own description.
var ErrParamsTruncated = errors.New("parameter block truncated")

// DecodeParams decodes the n parameters of a COM_STMT_EXECUTE's binary
// block: nullMap ((n+7)/8 bytes), types (two bytes per parameter: the
// type, and flags whose 0x80 bit is "unsigned") and values, in order. long
// holds the parameters sent by COM_STMT_SEND_LONG_DATA, by index: they are
// strings, and take no room in values. A NULL decodes as nil, an integer
// as int64 (uint64 when unsigned and above MaxInt64), a FLOAT or DOUBLE as
// float64, a DATE, DATETIME, TIMESTAMP or TIME as its text, and anything
// else (strings, decimals, blobs, JSON) as a string.
func DecodeParams(n int, nullMap, types, values []byte, long map[uint16][]byte) ([]any, error) {
	if n < 0 || len(nullMap) < (n+7)/8 || len(types) < 2*n {
		return nil, ErrParamsTruncated
	}
	out := make([]any, n)
	for i := 0; i < n; i++ {
		if nullMap[i/8]&(1<<(i%8)) != 0 {
			continue
		}
		if d, ok := long[uint16(i)]; ok {
			out[i] = string(d)
			continue
		}
		typ, unsigned := types[2*i], types[2*i+1]&0x80 != 0
		var size int
		switch typ {
		case mysql.MYSQL_TYPE_NULL:
			continue
		case mysql.MYSQL_TYPE_TINY:
			size = 1
		case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
			size = 2
		case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24, mysql.MYSQL_TYPE_FLOAT:
			size = 4
		case mysql.MYSQL_TYPE_LONGLONG, mysql.MYSQL_TYPE_DOUBLE:
			size = 8
		case mysql.MYSQL_TYPE_DATE, mysql.MYSQL_TYPE_DATETIME, mysql.MYSQL_TYPE_TIMESTAMP, mysql.MYSQL_TYPE_TIME:
			if len(values) < 1 {
				return nil, fmt.Errorf("parameter %d truncated", i+1)
			}
			size = 1 + int(values[0])
		default:
			v, k, ok := ReadLenEncString(values)
			if !ok {
				return nil, fmt.Errorf("parameter %d truncated", i+1)
			}
			out[i] = string(v)
			values = values[k:]
			continue
		}
		if len(values) < size {
			return nil, fmt.Errorf("parameter %d truncated", i+1)
		}
		b := values[:size]
		values = values[size:]
		switch typ {
		case mysql.MYSQL_TYPE_TINY:
			out[i] = intParam(uint64(b[0]), int64(int8(b[0])), unsigned)
		case mysql.MYSQL_TYPE_SHORT, mysql.MYSQL_TYPE_YEAR:
			u := binary.LittleEndian.Uint16(b)
			out[i] = intParam(uint64(u), int64(int16(u)), unsigned)
		case mysql.MYSQL_TYPE_LONG, mysql.MYSQL_TYPE_INT24:
			u := binary.LittleEndian.Uint32(b)
			out[i] = intParam(uint64(u), int64(int32(u)), unsigned)
		case mysql.MYSQL_TYPE_LONGLONG:
			u := binary.LittleEndian.Uint64(b)
			out[i] = intParam(u, int64(u), unsigned)
		case mysql.MYSQL_TYPE_FLOAT:
			out[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		case mysql.MYSQL_TYPE_DOUBLE:
			out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b))
		default:
			out[i] = FormatBinaryTime(typ, b[1:])
		}
	}
	return out, nil
}

func intParam(u uint64, i int64, unsigned bool) any {
	if unsigned {
		if u > math.MaxInt64 {
			return u
		}
		return int64(u)
	}
	return i
}

// FormatBinaryTime renders the value b (without its length byte) of a
// binary DATE, DATETIME, TIMESTAMP or TIME (typ) as MySQL writes it in
// text: a short value is zero in the parts it leaves out.
func FormatBinaryTime(typ byte, b []byte) string {
	if typ == mysql.MYSQL_TYPE_TIME {
		if len(b) < 8 {
			return "00:00:00"
		}
		sign := ""
		if b[0] == 1 {
			sign = "-"
		}
		days := binary.LittleEndian.Uint32(b[1:])
		return fmt.Sprintf("%s%02d:%02d:%02d", sign, uint32(b[5])+24*days, b[6], b[7])
	}
	var y, mo, d, h, mi, sec int
	var us uint32
	if len(b) >= 4 {
		y, mo, d = int(binary.LittleEndian.Uint16(b)), int(b[2]), int(b[3])
	}
	if len(b) >= 7 {
		h, mi, sec = int(b[4]), int(b[5]), int(b[6])
	}
	if len(b) >= 11 {
		us = binary.LittleEndian.Uint32(b[7:])
	}
	if typ == mysql.MYSQL_TYPE_DATE {
		return fmt.Sprintf("%04d-%02d-%02d", y, mo, d)
	}
	if us != 0 {
		return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d.%06d", y, mo, d, h, mi, sec, us)
	}
	return fmt.Sprintf("%04d-%02d-%02d %02d:%02d:%02d", y, mo, d, h, mi, sec)
}
