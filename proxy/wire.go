package proxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// MySQL packet framing: a 3-byte little-endian payload length and a 1-byte
// sequence id. A payload of exactly maxPayload bytes continues in the next
// physical packet.
const maxPayload = 1<<24 - 1

const (
	hdrOK       = 0x00
	hdrEOF      = 0xfe
	hdrErr      = 0xff
	hdrLocalInf = 0xfb
)

// Status flags of OK and EOF packets.
const (
	statusInTrans        uint16 = 0x0001
	statusAutocommit     uint16 = 0x0002
	statusMoreResults    uint16 = 0x0008
	statusCursorExists   uint16 = 0x0040
	statusLastRowSent    uint16 = 0x0080
	statusNoBackslash    uint16 = 0x0200
	statusInTransRO      uint16 = 0x2000
	statusSessionChanged uint16 = 0x4000
)

// sessionStatus are the status flags that describe the session rather than
// one statement's response (index use, cursors, rows sent, state changes):
// what holdfast keeps between statements and puts in OKs it makes itself.
const sessionStatus = statusInTrans | statusAutocommit | statusNoBackslash | statusInTransRO

var (
	errPacketTooLarge = errors.New("proxy: packet larger than max_allowed_packet")
	errOutOfOrder     = errors.New("proxy: packets out of order")
	errMalformed      = errors.New("proxy: malformed packet")
)

// packetReader reads framed packets from one side of a connection. seq is
// the sequence id expected next.
type packetReader struct {
	br  *bufio.Reader
	seq uint8
	hdr [4]byte
}

// header reads one physical packet header and checks its sequence id.
func (r *packetReader) header() (int, error) {
	if _, err := io.ReadFull(r.br, r.hdr[:]); err != nil {
		return 0, err
	}
	n := int(r.hdr[0]) | int(r.hdr[1])<<8 | int(r.hdr[2])<<16
	if r.hdr[3] != r.seq {
		return 0, fmt.Errorf("%w: got sequence %d, want %d", errOutOfOrder, r.hdr[3], r.seq)
	}
	r.seq++
	return n, nil
}

// readPacket reads one logical packet (joining continuations) into dst[:0].
// A packet longer than limit (when limit > 0) is not read: errPacketTooLarge.
func (r *packetReader) readPacket(dst []byte, limit int) ([]byte, error) {
	dst = dst[:0]
	for {
		n, err := r.header()
		if err != nil {
			return dst, err
		}
		if limit > 0 && len(dst)+n > limit {
			return dst, errPacketTooLarge
		}
		start := len(dst)
		dst = grow(dst, n)
		if _, err := io.ReadFull(r.br, dst[start:start+n]); err != nil {
			return dst, err
		}
		if n < maxPayload {
			return dst, nil
		}
	}
}

// discard skips n payload bytes.
func (r *packetReader) discard(n int) error {
	_, err := r.br.Discard(n)
	return err
}

func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// packetWriter frames packets onto a buffered writer. Callers flush.
type packetWriter struct {
	bw  *bufio.Writer
	seq uint8
	hdr [4]byte
	// dst, when set, makes the buffer lazy: bw is nil until the first
	// write, which takes one from writerPool over dst (the owner puts it
	// back). A session that waits for a connection holds no buffer.
	dst io.Writer
}

// out is the buffered writer, taken from writerPool if the writer is lazy
// and has none yet.
func (w *packetWriter) out() *bufio.Writer {
	if w.bw == nil {
		w.bw = writerPool.Get().(*bufio.Writer)
		w.bw.Reset(w.dst)
	}
	return w.bw
}

// release gives a lazy writer's buffer back to writerPool, flushing it
// first; it returns the flush's error.
func (w *packetWriter) release() error {
	if w.bw == nil {
		return nil
	}
	err := w.bw.Flush()
	w.bw.Reset(nil)
	writerPool.Put(w.bw)
	w.bw = nil
	return err
}

// drop forgets what a lazy writer has buffered and not yet flushed.
func (w *packetWriter) drop() {
	if w.bw != nil {
		w.bw.Reset(w.dst)
	}
}

func (w *packetWriter) writeHeader(n int) error {
	w.hdr[0], w.hdr[1], w.hdr[2], w.hdr[3] = byte(n), byte(n>>8), byte(n>>16), w.seq
	w.seq++
	_, err := w.out().Write(w.hdr[:])
	return err
}

// writePacket frames payload, splitting it at maxPayload as needed.
func (w *packetWriter) writePacket(payload []byte) error {
	for {
		n := min(len(payload), maxPayload)
		if err := w.writeHeader(n); err != nil {
			return err
		}
		if _, err := w.out().Write(payload[:n]); err != nil {
			return err
		}
		payload = payload[n:]
		if n < maxPayload {
			return nil
		}
	}
}

func (w *packetWriter) flush() error {
	if w.bw == nil {
		return nil // a lazy writer that has written nothing
	}
	return w.bw.Flush()
}

// flushTurn flushes and hands the turn to r, the reader of the same
// exchange: the peer's reply continues the sequence where w left it.
func (w *packetWriter) flushTurn(r *packetReader) error {
	if err := w.flush(); err != nil {
		return err
	}
	r.seq = w.seq
	return nil
}

// appendCommand appends a command as the one packet that starts an
// exchange (sequence 0); payload must be shorter than maxPayload.
func appendCommand(dst, payload []byte) []byte {
	n := len(payload)
	dst = append(dst, byte(n), byte(n>>8), byte(n>>16), 0)
	return append(dst, payload...)
}

func newSmallWriter(w io.Writer) *bufio.Writer { return bufio.NewWriterSize(w, 512) }

func newSmallReader(r io.Reader) *bufio.Reader { return bufio.NewReaderSize(r, 512) }

// Length-encoded integers and strings.

// okPacket is a decoded OK packet (protocol 4.1).
type okPacket struct {
	affectedRows uint64
	insertID     uint64
	status       uint16
	warnings     uint16
	info         []byte
	stateInfo    []byte // session state changes; only with CLIENT_SESSION_TRACK
}

// parseOK decodes an OK packet sent to a connection with the given
// session-tracking capability. Slices alias p.
func parseOK(p []byte, sessionTrack bool) (okPacket, bool) {
	var ok okPacket
	if len(p) < 1 || (p[0] != hdrOK && p[0] != hdrEOF) {
		return ok, false
	}
	pos := 1
	var n int
	var good bool
	if ok.affectedRows, n, _, good = mysqlwire.ReadLenEnc(p[pos:]); !good {
		return ok, false
	}
	pos += n
	if ok.insertID, n, _, good = mysqlwire.ReadLenEnc(p[pos:]); !good {
		return ok, false
	}
	pos += n
	if len(p) < pos+4 {
		return ok, false
	}
	ok.status = binary.LittleEndian.Uint16(p[pos:])
	ok.warnings = binary.LittleEndian.Uint16(p[pos+2:])
	pos += 4
	if !sessionTrack {
		ok.info = p[pos:]
		return ok, true
	}
	if pos == len(p) {
		return ok, true
	}
	if ok.info, n, good = mysqlwire.ReadLenEncString(p[pos:]); !good {
		return ok, false
	}
	pos += n
	if ok.status&statusSessionChanged != 0 && pos < len(p) {
		if ok.stateInfo, _, good = mysqlwire.ReadLenEncString(p[pos:]); !good {
			return ok, false
		}
	}
	return ok, true
}

// appendOK encodes ok for a client with the given session-tracking
// capability. Without it, session state is dropped and its flag cleared.
func appendOK(b []byte, ok okPacket, sessionTrack bool) []byte {
	b = append(b, hdrOK)
	b = mysqlwire.AppendLenEnc(b, ok.affectedRows)
	b = mysqlwire.AppendLenEnc(b, ok.insertID)
	st := ok.status
	if !sessionTrack || len(ok.stateInfo) == 0 {
		st &^= statusSessionChanged
	}
	b = binary.LittleEndian.AppendUint16(b, st)
	b = binary.LittleEndian.AppendUint16(b, ok.warnings)
	if !sessionTrack {
		return append(b, ok.info...)
	}
	if len(ok.info) == 0 && st&statusSessionChanged == 0 {
		return b
	}
	b = mysqlwire.AppendLenEncString(b, ok.info)
	if st&statusSessionChanged != 0 {
		b = mysqlwire.AppendLenEncString(b, ok.stateInfo)
	}
	return b
}

// setOKStatus overwrites the status flags of OK packet payload p.
func setOKStatus(p []byte, st uint16) {
	pos := 1
	for range 2 { // affected rows, insert id
		_, n, _, ok := mysqlwire.ReadLenEnc(p[pos:])
		if !ok {
			return
		}
		pos += n
	}
	if len(p) >= pos+2 {
		binary.LittleEndian.PutUint16(p[pos:], st)
	}
}

// isEOF reports whether a packet (first physical chunk of length n) is an
// EOF packet: 0xfe with fewer than 9 payload bytes. Longer 0xfe packets are
// rows starting with an 8-byte length-encoded string.
func isEOF(first byte, n int) bool { return first == hdrEOF && n < 9 }

// eofStatus returns the status flags of an EOF packet payload.
func eofStatus(p []byte) (warnings, status uint16) {
	if len(p) >= 5 {
		return binary.LittleEndian.Uint16(p[1:]), binary.LittleEndian.Uint16(p[3:])
	}
	return 0, 0
}

func appendEOF(b []byte, warnings, status uint16) []byte {
	b = append(b, hdrEOF)
	b = binary.LittleEndian.AppendUint16(b, warnings)
	return binary.LittleEndian.AppendUint16(b, status)
}

// sqlError is a MySQL error as it travels in an ERR packet.
type sqlError struct {
	Code  uint16
	State string
	Msg   string
}

func (e *sqlError) Error() string {
	return fmt.Sprintf("ERROR %d (%s): %s", e.Code, e.State, e.Msg)
}

// Number returns the MySQL error number.
func (e *sqlError) Number() uint16 { return e.Code }

// SQLState returns the five-character SQLSTATE.
func (e *sqlError) SQLState() string { return e.State }

func appendErr(b []byte, e *sqlError) []byte {
	b = append(b, hdrErr)
	b = binary.LittleEndian.AppendUint16(b, e.Code)
	b = append(b, '#')
	st := e.State
	if len(st) != 5 {
		st = "HY000"
	}
	b = append(b, st...)
	return append(b, e.Msg...)
}

// parseErr decodes an ERR packet (protocol 4.1).
func parseErr(p []byte) *sqlError {
	e := &sqlError{Code: 1105, State: "HY000"}
	if len(p) < 3 || p[0] != hdrErr {
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
