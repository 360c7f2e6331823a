package mysqlwire

import (
	"bytes"
	"testing"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"
)

func TestColumnDefBytes(t *testing.T) {
	c := Column{Name: "id", Type: mysql.MYSQL_TYPE_LONGLONG, Flags: mysql.UNSIGNED_FLAG | mysql.NOT_NULL_FLAG, Length: 21}
	want := []byte("\x03def\x00\x00\x00\x02id\x00\x0c\x3f\x00\x15\x00\x00\x00\x08\x21\x00\x00\x00\x00")
	p := AppendColumnDef(nil, c, false)
	if !bytes.Equal(p, want) {
		t.Fatalf("AppendColumnDef = %q\nwant %q", p, want)
	}
	d, ok := ParseColumnDef(p, false)
	if !ok || string(d.Name) != "id" || d.Type != c.Type || d.Flags != c.Flags || d.Length != 21 || d.Charset != 63 || d.Decimals != 0 {
		t.Fatalf("ParseColumnDef = %+v, %v", d, ok)
	}
	if name := ColumnName(p); string(name) != "id" {
		t.Fatalf("ColumnName = %q", name)
	}
	// MariaDB's extended type info, and the defaults of each type.
	for _, c := range []struct {
		col          Column
		cs           uint16
		length       uint32
		dec          byte
		withTypeInfo bool
	}{
		{Column{Name: "s", Type: mysql.MYSQL_TYPE_VAR_STRING}, 45, 1<<24 - 1, 0, true},
		{Column{Name: "t", Type: mysql.MYSQL_TYPE_DATETIME}, 63, 26, 6, false},
		{Column{Name: "f", Type: mysql.MYSQL_TYPE_DOUBLE}, 63, 21, 31, true},
	} {
		p := AppendColumnDef(nil, c.col, c.withTypeInfo)
		d, ok := ParseColumnDef(p, c.withTypeInfo)
		if !ok || string(d.Name) != c.col.Name || d.Charset != c.cs || d.Length != c.length || d.Decimals != c.dec {
			t.Errorf("%+v: %+v, %v", c.col, d, ok)
		}
		if _, ok := ParseColumnDef(p, !c.withTypeInfo); ok && c.withTypeInfo {
			t.Errorf("%+v: read without its type info", c.col)
		}
	}
	for n := range len(p) {
		if _, ok := ParseColumnDef(p[:n], false); ok {
			t.Errorf("cut at %d: accepted", n)
		}
	}
	if ColumnName(p[:8]) != nil {
		t.Error("ColumnName of a cut definition")
	}
}

func TestTextRow(t *testing.T) {
	ts := time.Date(2024, 2, 29, 13, 4, 5, 6000, time.UTC)
	row := []any{nil, int64(-1), uint64(1 << 63), 1.5, "é", []byte{}, ts, true}
	p := AppendTextRow(nil, row)
	want := []byte("\xfb\x02-1\x139223372036854775808\x031.5\x02\xc3\xa9\x00\x1a2024-02-29 13:04:05.000006\x04true")
	if !bytes.Equal(p, want) {
		t.Fatalf("AppendTextRow = %q\nwant %q", p, want)
	}
	vals, ok := ParseTextRow(nil, p)
	if !ok || len(vals) != len(row) || vals[0] != nil || string(vals[1]) != "-1" || vals[5] == nil || len(vals[5]) != 0 || string(vals[7]) != "true" {
		t.Fatalf("ParseTextRow = %q, %v", vals, ok)
	}
	if _, ok := ParseTextRow(nil, p[:len(p)-1]); ok {
		t.Fatal("a cut row accepted")
	}
}

func TestBinaryRow(t *testing.T) {
	cols := []Column{{Type: mysql.MYSQL_TYPE_LONGLONG}, {Type: mysql.MYSQL_TYPE_LONG}, {Type: mysql.MYSQL_TYPE_VAR_STRING},
		{Type: mysql.MYSQL_TYPE_DOUBLE}, {Type: mysql.MYSQL_TYPE_DATETIME}}
	ts := time.Date(2024, 2, 29, 13, 4, 5, 6000, time.UTC)
	p := AppendBinaryRow(nil, cols, []any{int64(-2), uint64(7), nil, 0.5, ts})
	want := []byte("\x00\x10" + // header, NULL bitmap (one byte, two bits reserved): column 2
		"\xfe\xff\xff\xff\xff\xff\xff\xff" + "\x07\x00\x00\x00" + "\x00\x00\x00\x00\x00\x00\xe0\x3f" +
		"\x0b\xe8\x07\x02\x1d\x0d\x04\x05\x06\x00\x00\x00")
	if !bytes.Equal(p, want) {
		t.Fatalf("AppendBinaryRow = % x\nwant % x", p, want)
	}
}

// FuzzParseColumnDef: the column definition and text row parsers never
// panic, and agree on the name.
func FuzzParseColumnDef(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte, typeInfo bool) {
		d, ok := ParseColumnDef(p, typeInfo)
		if ok && !bytes.Equal(d.Name, ColumnName(p)) {
			t.Fatalf("% x: name %q, ColumnName %q", p, d.Name, ColumnName(p))
		}
		if vals, ok := ParseTextRow(nil, p); ok {
			if again := AppendTextRow(nil, anys(vals)); !bytes.Equal(again, p) && !nonMinimal(p) {
				t.Fatalf("% x reads as %q, which writes as % x", p, vals, again)
			}
		}
	})
}

func anys(vals [][]byte) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		if v != nil {
			out[i] = v
		}
	}
	return out
}

// nonMinimal reports whether p holds a length written longer than
// needed (AppendLenEnc writes the shortest), or 0xfb where a length is due.
func nonMinimal(p []byte) bool {
	for pos := 0; pos < len(p); {
		if p[pos] == 0xfb {
			pos++
			continue
		}
		n, k, _, ok := ReadLenEnc(p[pos:])
		if !ok || len(AppendLenEnc(nil, n)) != k {
			return true
		}
		pos += k + int(n)
	}
	return false
}
