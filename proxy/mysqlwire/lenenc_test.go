package mysqlwire

import (
	"bytes"
	"testing"
)

func TestLenEncRoundTrip(t *testing.T) {
	for _, n := range []uint64{0, 1, 250, 251, 1<<16 - 1, 1 << 16, 1<<24 - 1, 1 << 24, 1<<64 - 1} {
		b := AppendLenEnc([]byte{0xaa}, n)
		got, size, null, ok := ReadLenEnc(b[1:])
		if !ok || null || got != n || size != len(b)-1 {
			t.Errorf("%d: encoded % x, read %d size %d null %v ok %v", n, b[1:], got, size, null, ok)
		}
		if _, _, _, ok := ReadLenEnc(b[1 : len(b)-1]); ok && size > 1 {
			t.Errorf("%d: a truncated encoding read as whole", n)
		}
	}
	if _, size, null, ok := ReadLenEnc([]byte{0xfb}); !ok || !null || size != 1 {
		t.Errorf("0xfb is NULL")
	}
	if _, _, _, ok := ReadLenEnc([]byte{0xff}); ok {
		t.Errorf("0xff is no length-encoded integer")
	}
	s := AppendLenEncString(nil, []byte("holdfast"))
	got, size, ok := ReadLenEncString(append(s, 'x'))
	if !ok || !bytes.Equal(got, []byte("holdfast")) || size != len(s) {
		t.Errorf("string: %q size %d ok %v", got, size, ok)
	}
	if _, _, ok := ReadLenEncString(s[:len(s)-1]); ok {
		t.Errorf("a truncated string read as whole")
	}
}

func FuzzReadLenEnc(f *testing.F) {
	for _, s := range [][]byte{{}, {0}, {0xfb}, {0xfc, 1}, {0xfd, 1, 2, 3}, {0xfe, 1, 2, 3, 4, 5, 6, 7, 8}, {0xff}} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, size, null, ok := ReadLenEnc(b)
		if !ok {
			return
		}
		if size > len(b) || size < 1 {
			t.Fatalf("size %d of %d bytes", size, len(b))
		}
		if !null && b[0] < 0xfb {
			if again := AppendLenEnc(nil, n); !bytes.Equal(again, b[:size]) {
				t.Fatalf("% x reads %d, which encodes as % x", b[:size], n, again)
			}
		}
		if s, k, ok := ReadLenEncString(b); ok && (k > len(b) || len(s) > k) {
			t.Fatalf("string of %d in %d bytes", len(s), k)
		}
	})
}
