package mysqlwire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"sync"
)

// MaxPayload is the largest payload of one physical packet. Packets carry
// a 3-byte little-endian payload length and a 1-byte sequence id; a
// payload of exactly MaxPayload bytes continues in the next physical
// packet (a logical packet of n*MaxPayload bytes ends with an empty one).
const MaxPayload = 1<<24 - 1

// First bytes of a response packet's payload.
const (
	HeaderOK          = 0x00
	HeaderLocalInfile = 0xfb // LOAD DATA LOCAL: the server asks for a file
	HeaderEOF         = 0xfe // also an authentication switch request
	HeaderErr         = 0xff
)

var (
	// ErrPacketTooLarge is a packet longer than the limit its reader was
	// given; it was not read.
	ErrPacketTooLarge = errors.New("mysqlwire: packet larger than max_allowed_packet")
	// ErrOutOfOrder is a packet whose sequence id is not the one expected.
	ErrOutOfOrder = errors.New("mysqlwire: packets out of order")
)

// Reader reads framed packets from one side of a connection. Its zero
// value is not usable: Buf must be set.
type Reader struct {
	Buf *bufio.Reader
	Seq uint8 // the sequence id expected next
	hdr [4]byte
}

// Header reads one physical packet header, checks its sequence id and
// returns its payload length; the payload is next in Buf.
func (r *Reader) Header() (int, error) {
	if _, err := io.ReadFull(r.Buf, r.hdr[:]); err != nil {
		return 0, err
	}
	n := int(r.hdr[0]) | int(r.hdr[1])<<8 | int(r.hdr[2])<<16
	if r.hdr[3] != r.Seq {
		return 0, fmt.Errorf("%w: got sequence %d, want %d", ErrOutOfOrder, r.hdr[3], r.Seq)
	}
	r.Seq++
	return n, nil
}

// ReadPacket reads one logical packet (joining continuations) into
// dst[:0] and returns it. A packet longer than limit (when limit > 0) is
// not read: ErrPacketTooLarge. It allocates only when dst is too small.
func (r *Reader) ReadPacket(dst []byte, limit int) ([]byte, error) {
	dst = dst[:0]
	for {
		n, err := r.Header()
		if err != nil {
			return dst, err
		}
		if limit > 0 && len(dst)+n > limit {
			return dst, ErrPacketTooLarge
		}
		start := len(dst)
		dst = grow(dst, n)
		if _, err := io.ReadFull(r.Buf, dst[start:start+n]); err != nil {
			return dst, err
		}
		if n < MaxPayload {
			return dst, nil
		}
	}
}

// ReadPayload reads the n payload bytes of a packet whose header was read
// (by Header) into dst[:0] and returns them. It allocates only when dst is
// too small. An error is Buf's as it is (io.EOF after some bytes too).
func (r *Reader) ReadPayload(dst []byte, n int) ([]byte, error) {
	p := grow(dst[:0], n)
	for k := 0; k < n; {
		m, err := r.Buf.Read(p[k:])
		k += m
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

// Discard skips n payload bytes.
func (r *Reader) Discard(n int) error {
	_, err := r.Buf.Discard(n)
	return err
}

// grow extends b by n bytes, reallocating (to twice its capacity plus n)
// when it has no room.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// Writer frames packets onto a buffered writer. Callers flush.
//
// A Writer is eager (Buf set) or lazy (Dst and Pool set, Buf nil): a lazy
// writer takes a *bufio.Writer from Pool at its first write, over Dst, and
// gives it back on Release, so that an owner with nothing to write holds no
// buffer.
type Writer struct {
	Buf  *bufio.Writer
	Seq  uint8 // the sequence id of the next packet
	Dst  io.Writer
	Pool *sync.Pool // of *bufio.Writer
	hdr  [4]byte
}

// Out is the buffered writer, taken from Pool if the writer is lazy and
// has none yet. Bytes written to it go out unframed.
func (w *Writer) Out() *bufio.Writer {
	if w.Buf == nil {
		w.Buf = w.Pool.Get().(*bufio.Writer)
		w.Buf.Reset(w.Dst)
	}
	return w.Buf
}

// Release gives a lazy writer's buffer back to Pool, flushing it first;
// it returns the flush's error.
func (w *Writer) Release() error {
	if w.Buf == nil {
		return nil
	}
	err := w.Buf.Flush()
	w.Buf.Reset(nil)
	w.Pool.Put(w.Buf)
	w.Buf = nil
	return err
}

// Drop forgets what a lazy writer has buffered and not yet flushed.
func (w *Writer) Drop() {
	if w.Buf != nil {
		w.Buf.Reset(w.Dst)
	}
}

// WriteHeader writes the header of a physical packet of n payload bytes,
// which the caller writes next (to Out).
func (w *Writer) WriteHeader(n int) error {
	w.hdr[0], w.hdr[1], w.hdr[2], w.hdr[3] = byte(n), byte(n>>8), byte(n>>16), w.Seq
	w.Seq++
	_, err := w.Out().Write(w.hdr[:])
	return err
}

// WritePacket frames payload, splitting it at MaxPayload as needed.
func (w *Writer) WritePacket(payload []byte) error {
	for {
		n := min(len(payload), MaxPayload)
		if err := w.WriteHeader(n); err != nil {
			return err
		}
		if _, err := w.Out().Write(payload[:n]); err != nil {
			return err
		}
		payload = payload[n:]
		if n < MaxPayload {
			return nil
		}
	}
}

// Flush flushes the buffered packets.
func (w *Writer) Flush() error {
	if w.Buf == nil {
		return nil // a lazy writer that has written nothing
	}
	return w.Buf.Flush()
}

// FlushTurn flushes and hands the turn to r, the reader of the same
// exchange: the peer's reply continues the sequence where w left it.
func (w *Writer) FlushTurn(r *Reader) error {
	if err := w.Flush(); err != nil {
		return err
	}
	r.Seq = w.Seq
	return nil
}

// AppendCommand appends a command as the one packet that starts an
// exchange (sequence 0); payload must be shorter than MaxPayload.
func AppendCommand(dst, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n), byte(n>>8), byte(n>>16), 0)
	return append(dst, payload...)
}

// NewSmallWriter is a writer with a buffer for the few small packets of a
// connection phase.
func NewSmallWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 512) }

// NewSmallReader is a reader with a buffer for the few small packets of a
// connection phase.
func NewSmallReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 512) }
