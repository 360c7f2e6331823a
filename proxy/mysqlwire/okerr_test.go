package mysqlwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

// TestOKBytes: OK packets as MySQL and MariaDB send them, decoded and
// encoded again byte for byte.
func TestOKBytes(t *testing.T) {
	for _, c := range []struct {
		name  string
		p     []byte
		track bool
		want  OK
	}{
		{"affected rows, insert id, status, warnings",
			[]byte{0x00, 0x03, 0xfc, 0x10, 0x27, 0x02, 0x00, 0x01, 0x00}, false,
			OK{AffectedRows: 3, InsertID: 10000, Status: StatusAutocommit, Warnings: 1, Info: []byte{}}},
		{"info to the end without session tracking",
			append([]byte{0x00, 0x01, 0x00, 0x22, 0x00, 0x00, 0x00}, "Rows matched: 1"...), false,
			OK{AffectedRows: 1, Status: StatusAutocommit | 0x20, Info: []byte("Rows matched: 1")}},
		{"length-encoded info with session tracking",
			append([]byte{0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x02}, "hi"...), true,
			OK{Status: StatusAutocommit, Info: []byte("hi")}},
		{"session state",
			[]byte{0x00, 0x00, 0x00, 0x02, 0x40, 0x00, 0x00, 0x00, 0x05, 0x01, 0x03, 0x02, 'd', 'b'}, true,
			OK{Status: StatusAutocommit | StatusSessionChanged, Info: []byte{}, StateInfo: []byte{0x01, 0x03, 0x02, 'd', 'b'}}},
	} {
		got, ok := ParseOK(c.p, c.track)
		if !ok || !sameOK(got, c.want) {
			t.Errorf("%s: ParseOK(% x) = %+v, %v; want %+v", c.name, c.p, got, ok, c.want)
			continue
		}
		if enc := AppendOK(nil, got, c.track); !bytes.Equal(enc, c.p) {
			t.Errorf("%s: AppendOK = % x, want % x", c.name, enc, c.p)
		}
	}
	// Without session tracking the state and its flag go.
	o := OK{Status: StatusAutocommit | StatusSessionChanged, StateInfo: []byte{1, 1, 0}}
	if got, want := AppendOK(nil, o, false), []byte{0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00}; !bytes.Equal(got, want) {
		t.Errorf("AppendOK without tracking = % x, want % x", got, want)
	}
	for _, p := range [][]byte{nil, {0x00}, {0x00, 0x00}, {0x00, 0x00, 0x00, 0x02}, {0xff, 0, 0, 0, 0, 0, 0}, {0x00, 0xfc, 0x01}, {0x00, 0, 0, 0x02, 0x40, 0, 0, 0x00, 0x05, 1}} {
		if o, ok := ParseOK(p, true); ok {
			t.Errorf("ParseOK(% x) accepted: %+v", p, o)
		}
	}
}

func TestSetOKStatus(t *testing.T) {
	p := []byte{0x00, 0xfc, 0x10, 0x27, 0x05, 0x02, 0x00, 0x00, 0x00}
	SetOKStatus(p, StatusAutocommit|StatusMoreResults)
	if o, ok := ParseOK(p, false); !ok || o.Status != StatusAutocommit|StatusMoreResults || o.AffectedRows != 10000 || o.InsertID != 5 {
		t.Fatalf("after SetOKStatus: %+v, %v", o, ok)
	}
	for _, short := range [][]byte{nil, {0x00}, {0x00, 0x01, 0x02, 0x03}, {0x00, 0xfc}} {
		in := bytes.Clone(short)
		SetOKStatus(short, 0xffff)
		if !bytes.Equal(in, short) {
			t.Errorf("SetOKStatus changed a packet too short to hold a status: % x → % x", in, short)
		}
	}
}

func TestEOF(t *testing.T) {
	p := AppendEOF(nil, 3, StatusAutocommit|StatusMoreResults)
	if want := []byte{0xfe, 0x03, 0x00, 0x0a, 0x00}; !bytes.Equal(p, want) {
		t.Fatalf("AppendEOF = % x, want % x", p, want)
	}
	if w, st := EOFStatus(p); w != 3 || st != StatusAutocommit|StatusMoreResults {
		t.Fatalf("EOFStatus = %d, %#x", w, st)
	}
	if w, st := EOFStatus(p[:4]); w != 0 || st != 0 {
		t.Fatalf("EOFStatus of a short packet = %d, %#x", w, st)
	}
	if !IsEOF(0xfe, 5) || !IsEOF(0xfe, 8) || IsEOF(0xfe, 9) || IsEOF(0x00, 5) {
		t.Fatal("IsEOF: 0xfe with fewer than 9 bytes, and only that")
	}
}

func TestErrBytes(t *testing.T) {
	e := &SQLError{Code: 1045, State: "28000", Msg: "Access denied"}
	p := AppendErr(nil, e)
	want := append([]byte{0xff, 0x15, 0x04, '#', '2', '8', '0', '0', '0'}, "Access denied"...)
	if !bytes.Equal(p, want) {
		t.Fatalf("AppendErr = % x, want % x", p, want)
	}
	if got := ParseErr(p); *got != *e {
		t.Fatalf("ParseErr = %+v, want %+v", got, e)
	}
	if got := AppendErr(nil, &SQLError{Code: 1, State: "bad", Msg: "m"}); !bytes.Equal(got[3:9], []byte("#HY000")) {
		t.Fatalf("a state not 5 long goes out as % x", got[3:9])
	}
	// Protocol 4.0: no SQLSTATE marker.
	if got := ParseErr([]byte{0xff, 0x28, 0x04, 'o', 'l', 'd'}); got.Code != 1064 || got.State != "HY000" || got.Msg != "old" {
		t.Fatalf("ParseErr without a marker = %+v", got)
	}
	for _, p := range [][]byte{nil, {0xff}, {0xff, 0x01}, {0x00, 0x01, 0x02}} {
		if got := ParseErr(p); got.Code != 1105 || got.State != "HY000" || got.Msg != "malformed error packet" {
			t.Errorf("ParseErr(% x) = %+v", p, got)
		}
	}
	var err error = e
	var se *SQLError
	if !errors.As(err, &se) || se.Number() != 1045 || se.SQLState() != "28000" || err.Error() != "ERROR 1045 (28000): Access denied" {
		t.Fatalf("as an error: %v", err)
	}
}

// TestOKAllocs: the OK and EOF codecs of the per-statement path allocate
// nothing.
func TestOKAllocs(t *testing.T) {
	p := AppendOK(nil, OK{AffectedRows: 3, InsertID: 7, Status: 2 | StatusSessionChanged, Warnings: 1, StateInfo: []byte{0, 3, 1, 'a', 'b'}}, true)
	buf := make([]byte, 0, 64)
	allocs := testing.AllocsPerRun(100, func() {
		o, ok := ParseOK(p, true)
		if !ok {
			t.Fatal("rejected")
		}
		buf = AppendOK(buf[:0], o, true)
		SetOKStatus(buf, o.Status|StatusMoreResults)
		buf = AppendEOF(buf[:0], 0, o.Status)
		_, _ = EOFStatus(buf)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations", allocs)
	}
}

func BenchmarkParseOK(b *testing.B) {
	p := AppendOK(nil, OK{AffectedRows: 3, InsertID: 7, Status: 2 | StatusSessionChanged, Warnings: 1, StateInfo: []byte{0, 3, 1, 'a', 'b'}}, true)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := ParseOK(p, true); !ok {
			b.Fatal()
		}
	}
}

func BenchmarkAppendOK(b *testing.B) {
	buf := make([]byte, 0, 64)
	o := OK{AffectedRows: 3, InsertID: 7, Status: 2, Warnings: 1}
	b.ReportAllocs()
	for b.Loop() {
		buf = AppendOK(buf[:0], o, true)
		buf = AppendEOF(buf[:0], 0, 2)
	}
}

func sameOK(a, b OK) bool {
	return a.AffectedRows == b.AffectedRows && a.InsertID == b.InsertID && a.Status == b.Status &&
		a.Warnings == b.Warnings && bytes.Equal(a.Info, b.Info) && bytes.Equal(a.StateInfo, b.StateInfo)
}

// refOK is an OK packet as refDecodeOK reads it.
type refOK struct {
	affected, insertID uint64
	status, warnings   uint16
	info               string
	state              []byte
}

// refDecodeOK is a second, deliberately plain decoder of OK packets,
// written from the protocol's description and sharing nothing with
// ParseOK but the length-encoded integer reader.
func refDecodeOK(p []byte, track bool) (refOK, error) {
	var o refOK
	bad := errors.New("bad OK")
	if len(p) == 0 || p[0] != 0x00 {
		return o, bad
	}
	p = p[1:]
	next := func() (uint64, bool) {
		v, n, null, ok := ReadLenEnc(p)
		if !ok || null {
			return 0, false
		}
		p = p[n:]
		return v, true
	}
	var ok bool
	if o.affected, ok = next(); !ok {
		return o, bad
	}
	if o.insertID, ok = next(); !ok {
		return o, bad
	}
	if len(p) < 4 {
		return o, bad
	}
	o.status, o.warnings = binary.LittleEndian.Uint16(p), binary.LittleEndian.Uint16(p[2:])
	p = p[4:]
	if !track {
		o.info = string(p)
		return o, nil
	}
	if len(p) == 0 {
		return o, nil
	}
	n, ok := next()
	if !ok || uint64(len(p)) < n {
		return o, bad
	}
	o.info, p = string(p[:n]), p[n:]
	if o.status&0x4000 != 0 {
		if n, ok = next(); !ok || uint64(len(p)) < n {
			return o, bad
		}
		o.state = p[:n]
	}
	return o, nil
}

// FuzzParseOK: ParseOK never panics nor changes its input, and a packet
// it accepts survives AppendOK (as holdfast writes OKs to
// session-tracking clients): the re-encoded packet parses to the same
// fields, and an independent decoder reads them too. AppendOK drops
// SESSION_STATE_CHANGED when there is no state information to send;
// that is the one field allowed to change.
func FuzzParseOK(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte, track bool) {
		in := bytes.Clone(p)
		o, good := ParseOK(p, track)
		if !bytes.Equal(in, p) {
			t.Fatal("ParseOK modified its input")
		}
		for _, st := range []bool{false, true} {
			_ = AppendOK(nil, o, st)
		}
		SetOKStatus(bytes.Clone(p), 0xffff)
		if !good {
			return
		}
		want := o
		if len(want.StateInfo) == 0 {
			want.Status &^= StatusSessionChanged
		}
		enc := AppendOK(nil, o, true)
		got, good := ParseOK(enc, true)
		if !good {
			t.Fatalf("AppendOK(%+v) = % x, which ParseOK rejects", o, enc)
		}
		if !sameOK(got, want) {
			t.Fatalf("round trip of % x (track %v):\nparsed   %+v\nencoded  % x\nreparsed %+v", p, track, o, enc, got)
		}
		ref, err := refDecodeOK(enc, true)
		if err != nil {
			t.Fatalf("AppendOK(%+v) = % x: %v", o, enc, err)
		}
		if ref.affected != o.AffectedRows || ref.insertID != o.InsertID || ref.status != want.Status ||
			ref.warnings != o.Warnings || ref.info != string(o.Info) || !bytes.Equal(ref.state, o.StateInfo) {
			t.Fatalf("AppendOK(%+v) = % x decodes independently as %+v", o, enc, ref)
		}
		// Without session tracking: no state, no flag, info to the end.
		enc = AppendOK(nil, o, false)
		ref, err = refDecodeOK(enc, false)
		if err != nil || ref.status != o.Status&^StatusSessionChanged || ref.info != string(o.Info) {
			t.Fatalf("AppendOK(%+v, false) = % x decodes as %+v, %v", o, enc, ref, err)
		}
	})
}

// FuzzParseERR: ParseErr never panics and always returns an error; what
// AppendErr writes of it parses back the same.
func FuzzParseERR(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte) {
		e := ParseErr(p)
		if e == nil || len(e.State) != 5 {
			t.Fatalf("ParseErr(% x) = %+v", p, e)
		}
		back := ParseErr(AppendErr(nil, e))
		if *back != *e {
			t.Fatalf("ParseErr(% x) = %+v, written and read back as %+v", p, e, back)
		}
	})
}
