package mysqlwire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
)

// frames is payload framed by a Writer from sequence seq.
func frames(t *testing.T, seq uint8, payload []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	w := Writer{Buf: bufio.NewWriter(&out), Seq: seq}
	if err := w.WritePacket(payload); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestWritePacketBytes(t *testing.T) {
	if got, want := frames(t, 7, []byte{3, 'a'}), []byte{2, 0, 0, 7, 3, 'a'}; !bytes.Equal(got, want) {
		t.Fatalf("framed % x, want % x", got, want)
	}
	if got, want := frames(t, 0, nil), []byte{0, 0, 0, 0}; !bytes.Equal(got, want) {
		t.Fatalf("empty packet framed % x, want % x", got, want)
	}
	if got, want := AppendCommand([]byte{9}, []byte{1}), []byte{9, 1, 0, 0, 0, 1}; !bytes.Equal(got, want) {
		t.Fatalf("AppendCommand = % x, want % x", got, want)
	}
}

// TestPacketSplit: payloads at and around MaxPayload split into physical
// packets of MaxPayload bytes, ending with a shorter (maybe empty) one,
// with consecutive sequence ids, and read back whole.
func TestPacketSplit(t *testing.T) {
	for _, n := range []int{MaxPayload - 1, MaxPayload, MaxPayload + 1, 2 * MaxPayload} {
		payload := bytes.Repeat([]byte{0xab}, n)
		payload[0], payload[n-1] = 1, 2
		b := frames(t, 250, payload)
		// Walk the physical packets.
		var sizes []int
		seq := uint8(250)
		for pos := 0; pos < len(b); {
			size := int(b[pos]) | int(b[pos+1])<<8 | int(b[pos+2])<<16
			if b[pos+3] != seq {
				t.Fatalf("%d: packet %d has sequence %d, want %d", n, len(sizes), b[pos+3], seq)
			}
			seq++
			sizes = append(sizes, size)
			pos += 4 + size
		}
		want := []int{}
		for rest := n; ; rest -= MaxPayload {
			want = append(want, min(rest, MaxPayload))
			if rest < MaxPayload {
				break
			}
		}
		if len(sizes) != len(want) || sizes[len(sizes)-1] != want[len(want)-1] {
			t.Fatalf("%d bytes framed as %v, want %v", n, sizes, want)
		}
		r := Reader{Buf: bufio.NewReader(bytes.NewReader(b)), Seq: 250}
		got, err := r.ReadPacket(nil, 0)
		if err != nil || !bytes.Equal(got, payload) {
			t.Fatalf("%d: read back %d bytes, equal %v, %v", n, len(got), bytes.Equal(got, payload), err)
		}
		if r.Seq != seq {
			t.Fatalf("%d: reader at sequence %d, want %d", n, r.Seq, seq)
		}
		r = Reader{Buf: bufio.NewReader(bytes.NewReader(b)), Seq: 250}
		if _, err := r.ReadPacket(nil, n-1); !errors.Is(err, ErrPacketTooLarge) {
			t.Fatalf("%d bytes with limit %d: %v", n, n-1, err)
		}
	}
}

func TestReaderErrors(t *testing.T) {
	read := func(b []byte, seq uint8) error {
		r := Reader{Buf: bufio.NewReader(bytes.NewReader(b)), Seq: seq}
		_, err := r.ReadPacket(nil, 0)
		return err
	}
	if err := read([]byte{1, 0, 0, 3, 'x'}, 2); !errors.Is(err, ErrOutOfOrder) {
		t.Errorf("sequence 3 when 2 is due: %v", err)
	}
	if err := read([]byte{1, 0}, 0); err != io.ErrUnexpectedEOF {
		t.Errorf("short header: %v", err)
	}
	if err := read([]byte{5, 0, 0, 0, 'x'}, 0); err != io.ErrUnexpectedEOF {
		t.Errorf("short payload: %v", err)
	}
	if err := read(nil, 0); err != io.EOF {
		t.Errorf("nothing: %v", err)
	}
	// A continuation missing after a full packet.
	b := append([]byte{0xff, 0xff, 0xff, 0}, make([]byte, MaxPayload)...)
	if err := read(b, 0); err != io.EOF {
		t.Errorf("continuation missing: %v", err)
	}
}

func TestReadPayload(t *testing.T) {
	r := Reader{Buf: bufio.NewReader(bytes.NewReader([]byte{3, 0, 0, 0, 'a', 'b', 'c', 9}))}
	n, err := r.Header()
	if err != nil || n != 3 {
		t.Fatalf("header: %d, %v", n, err)
	}
	dst := make([]byte, 0, 8)
	p, err := r.ReadPayload(dst, n)
	if err != nil || string(p) != "abc" || &p[0] != &dst[:1][0] {
		t.Fatalf("payload %q, %v (in dst's array: %v)", p, err, err == nil && &p[0] == &dst[:1][0])
	}
	if _, err := r.ReadPayload(nil, 2); err == nil {
		t.Fatalf("a payload past the end read whole")
	}
}

// TestLazyWriter: a lazy writer holds no buffer until it writes, and gives
// it back flushed.
func TestLazyWriter(t *testing.T) {
	var out bytes.Buffer
	pool := &sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64) }}
	w := Writer{Dst: &out, Pool: pool}
	if err := w.Flush(); err != nil || w.Buf != nil {
		t.Fatalf("flush of nothing took a buffer (%v)", err)
	}
	_ = w.WritePacket([]byte("x"))
	w.Drop()
	_ = w.WritePacket([]byte("y"))
	if out.Len() != 0 {
		t.Fatalf("wrote before the flush: % x", out.Bytes())
	}
	if err := w.Release(); err != nil || w.Buf != nil {
		t.Fatalf("release: %v, buffer kept %v", err, w.Buf != nil)
	}
	if want := []byte{1, 0, 0, 1, 'y'}; !bytes.Equal(out.Bytes(), want) {
		t.Fatalf("wrote % x, want % x (the dropped packet gone, its sequence id spent)", out.Bytes(), want)
	}
	r := Reader{}
	w.Seq = 5
	if err := w.FlushTurn(&r); err != nil || r.Seq != 5 {
		t.Fatalf("turn: reader at %d, %v", r.Seq, err)
	}
}

// TestPacketAllocs: reading and writing packets allocates nothing once
// the buffers are there.
func TestPacketAllocs(t *testing.T) {
	b := frames(t, 0, make([]byte, 200))
	src := bytes.NewReader(b)
	r := Reader{Buf: bufio.NewReader(src)}
	w := Writer{Buf: bufio.NewWriter(io.Discard)}
	dst := make([]byte, 0, 256)
	allocs := testing.AllocsPerRun(100, func() {
		src.Reset(b)
		r.Buf.Reset(src)
		r.Seq, w.Seq = 0, 0
		var err error
		if dst, err = r.ReadPacket(dst, 0); err != nil {
			t.Fatal(err)
		}
		_ = w.WritePacket(dst)
		_ = w.Flush()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per packet read and written", allocs)
	}
}

func BenchmarkPacket(b *testing.B) {
	var pkt bytes.Buffer
	w := Writer{Buf: bufio.NewWriter(&pkt)}
	_ = w.WritePacket(make([]byte, 200))
	_ = w.Flush()
	src := bytes.NewReader(pkt.Bytes())
	r := Reader{Buf: bufio.NewReader(src)}
	ww := Writer{Buf: bufio.NewWriter(io.Discard)}
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(pkt.Bytes())
		r.Buf.Reset(src)
		r.Seq, ww.Seq = 0, 0
		var err error
		if dst, err = r.ReadPacket(dst, 0); err != nil {
			b.Fatal(err)
		}
		_ = ww.WritePacket(dst)
		_ = ww.Flush()
	}
}
