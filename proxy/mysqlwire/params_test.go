package mysqlwire

import (
	"bytes"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// TestDecodeParams: one parameter of every kind a driver binds, as the
// bytes go-sql-driver and the mariadb client send them.
func TestDecodeParams(t *testing.T) {
	for _, c := range []struct {
		name   string
		typ    byte
		flags  byte
		values []byte
		want   any
	}{
		{"signed tiny", mysql.MYSQL_TYPE_TINY, 0, []byte{0xff}, int64(-1)},
		{"unsigned tiny", mysql.MYSQL_TYPE_TINY, 0x80, []byte{0xff}, int64(255)},
		{"short", mysql.MYSQL_TYPE_SHORT, 0, []byte{0x00, 0x80}, int64(math.MinInt16)},
		{"year", mysql.MYSQL_TYPE_YEAR, 0x80, []byte{0xea, 0x07}, int64(2026)},
		{"long", mysql.MYSQL_TYPE_LONG, 0, []byte{0xfe, 0xff, 0xff, 0xff}, int64(-2)},
		{"unsigned longlong past int64", mysql.MYSQL_TYPE_LONGLONG, 0x80,
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, uint64(math.MaxUint64)},
		{"signed longlong", mysql.MYSQL_TYPE_LONGLONG, 0,
			[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, int64(-1)},
		{"float", mysql.MYSQL_TYPE_FLOAT, 0, []byte{0x00, 0x00, 0xc0, 0x3f}, float64(1.5)},
		{"double", mysql.MYSQL_TYPE_DOUBLE, 0, []byte{0, 0, 0, 0, 0, 0, 0x04, 0x40}, float64(2.5)},
		{"date", mysql.MYSQL_TYPE_DATE, 0, []byte{4, 0xea, 0x07, 12, 4}, "2026-12-04"},
		{"datetime", mysql.MYSQL_TYPE_DATETIME, 0, []byte{7, 0xea, 0x07, 12, 4, 23, 5, 9}, "2026-12-04 23:05:09"},
		{"datetime with microseconds", mysql.MYSQL_TYPE_DATETIME, 0,
			[]byte{11, 0xea, 0x07, 12, 4, 23, 5, 9, 0x40, 0xe2, 0x01, 0x00}, "2026-12-04 23:05:09.123456"},
		{"zero datetime", mysql.MYSQL_TYPE_TIMESTAMP, 0, []byte{0}, "0000-00-00 00:00:00"},
		{"negative time over a day", mysql.MYSQL_TYPE_TIME, 0, []byte{8, 1, 1, 0, 0, 0, 2, 3, 4}, "-26:03:04"},
		{"string", mysql.MYSQL_TYPE_VAR_STRING, 0, []byte{3, 'a', 'b', 'c'}, "abc"},
		{"decimal", mysql.MYSQL_TYPE_NEWDECIMAL, 0, []byte{4, '1', '.', '2', '5'}, "1.25"},
		{"null type", mysql.MYSQL_TYPE_NULL, 0, nil, nil},
	} {
		got, err := DecodeParams(1, []byte{0}, []byte{c.typ, c.flags}, c.values, nil)
		if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], c.want) {
			t.Errorf("%s: DecodeParams = %#v, %v; want %#v", c.name, got, err, c.want)
		}
	}
}

// TestDecodeParamsOrder: NULLs from the bitmap and long data take no room
// in the values; the rest follow in order.
func TestDecodeParamsOrder(t *testing.T) {
	types := []byte{
		mysql.MYSQL_TYPE_LONG, 0, // 0: NULL by the bitmap
		mysql.MYSQL_TYPE_BLOB, 0, // 1: long data
		mysql.MYSQL_TYPE_TINY, 0, // 2
		mysql.MYSQL_TYPE_VAR_STRING, 0, // 3
	}
	values := []byte{7, 2, 'h', 'i'}
	got, err := DecodeParams(4, []byte{0b0001}, types, values, map[uint16][]byte{1: []byte("long")})
	want := []any{nil, "long", int64(7), "hi"}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeParams = %#v, %v; want %#v", got, err, want)
	}
}

// TestDecodeParamsTruncated: a block shorter than its description is an
// error, never a panic or a guess.
func TestDecodeParamsTruncated(t *testing.T) {
	for _, c := range []struct {
		name                   string
		n                      int
		nullMap, types, values []byte
	}{
		{"no null bitmap", 1, nil, []byte{mysql.MYSQL_TYPE_TINY, 0}, []byte{1}},
		{"types short", 2, []byte{0}, []byte{mysql.MYSQL_TYPE_TINY, 0}, []byte{1, 2}},
		{"integer short", 1, []byte{0}, []byte{mysql.MYSQL_TYPE_LONG, 0}, []byte{1, 2}},
		{"date without its length", 1, []byte{0}, []byte{mysql.MYSQL_TYPE_DATE, 0}, nil},
		{"date shorter than its length", 1, []byte{0}, []byte{mysql.MYSQL_TYPE_DATE, 0}, []byte{4, 0xea}},
		{"string shorter than its length", 1, []byte{0}, []byte{mysql.MYSQL_TYPE_STRING, 0}, []byte{5, 'a'}},
	} {
		if got, err := DecodeParams(c.n, c.nullMap, c.types, c.values, nil); err == nil {
			t.Errorf("%s: DecodeParams = %#v, no error", c.name, got)
		}
	}
	if _, err := DecodeParams(1, nil, nil, nil, nil); !errors.Is(err, ErrParamsTruncated) {
		t.Errorf("no bitmap or types: %v, want ErrParamsTruncated", err)
	}
}

// TestPrepareOK: the answer MariaDB gives to a prepare of a statement with
// two columns and one parameter, decoded and encoded again byte for byte.
func TestPrepareOK(t *testing.T) {
	p := []byte{0x00, 0x07, 0x00, 0x00, 0x00, 0x02, 0x00, 0x01, 0x00, 0x00, 0x03, 0x00}
	want := PrepareOK{ID: 7, Columns: 2, Params: 1, Warnings: 3}
	got, ok := ParsePrepareOK(p)
	if !ok || got != want {
		t.Fatalf("ParsePrepareOK(% x) = %+v, %v; want %+v", p, got, ok, want)
	}
	if enc := AppendPrepareOK(nil, got); !bytes.Equal(enc, p) {
		t.Errorf("AppendPrepareOK = % x, want % x", enc, p)
	}
	for _, bad := range [][]byte{nil, p[:11], append([]byte{HeaderErr}, p[1:]...)} {
		if got, ok := ParsePrepareOK(bad); ok {
			t.Errorf("ParsePrepareOK(% x) = %+v, accepted", bad, got)
		}
	}
}

// TestErrCodeAndEOFStatus: the two in-place accessors the relay uses.
func TestErrCodeAndEOFStatus(t *testing.T) {
	if code, ok := ErrCode([]byte{HeaderErr, 0x15, 0x04}); !ok || code != 1045 {
		t.Errorf("ErrCode = %d, %v; want 1045", code, ok)
	}
	for _, bad := range [][]byte{nil, {HeaderErr, 0x15}, {HeaderOK, 0x15, 0x04}} {
		if _, ok := ErrCode(bad); ok {
			t.Errorf("ErrCode(% x) accepted", bad)
		}
	}
	p := AppendEOF(nil, 1, StatusAutocommit)
	SetEOFStatus(p, StatusAutocommit|StatusMoreResults)
	if w, st := EOFStatus(p); w != 1 || st != StatusAutocommit|StatusMoreResults {
		t.Errorf("after SetEOFStatus: warnings %d, status %#x", w, st)
	}
	short := []byte{HeaderEOF, 0, 0}
	SetEOFStatus(short, 0xffff) // too short: left alone
	if !bytes.Equal(short, []byte{HeaderEOF, 0, 0}) {
		t.Errorf("a short EOF was written: % x", short)
	}
}

// FuzzDecodeParams: any parameter block decodes to n values or an error;
// none panics.
func FuzzDecodeParams(f *testing.F) {
	f.Fuzz(func(t *testing.T, n uint8, nullMap, types, values []byte) {
		got, err := DecodeParams(int(n), nullMap, types, values, map[uint16][]byte{3: []byte("x")})
		if err == nil && len(got) != int(n) {
			t.Fatalf("DecodeParams(%d, ...) = %d values", n, len(got))
		}
	})
}

// FuzzParsePrepareOK: what parses is written back to the same 12 bytes.
func FuzzParsePrepareOK(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte) {
		got, ok := ParsePrepareOK(p)
		if !ok {
			return
		}
		if enc := AppendPrepareOK(nil, got); !bytes.Equal(enc[:9], p[:9]) || !bytes.Equal(enc[10:], p[10:12]) {
			t.Fatalf("ParsePrepareOK(% x) = %+v, written back as % x", p, got, enc)
		}
	})
}
