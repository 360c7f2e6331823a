package proxy

// A small MySQL client/server protocol client for tests, written from the
// protocol documentation and deliberately independent of holdfast's own
// framing and codecs (wire.go): a test that decoded with parseOK could not
// catch a bug in parseOK. It gives a test full control of what goes on the
// wire (sequence ids, the 3-byte length, capability flags) and decodes
// responses strictly: a packet that does not parse exactly is an error.

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Capability flags.
const (
	capLongPassword     uint32 = 0x00000001
	capFoundRows        uint32 = 0x00000002
	capLongFlag         uint32 = 0x00000004
	capConnectWithDB    uint32 = 0x00000008
	capProtocol41       uint32 = 0x00000200
	capSSL              uint32 = 0x00000800
	capTransactions     uint32 = 0x00002000
	capSecureConnection uint32 = 0x00008000
	capMultiStatements  uint32 = 0x00010000
	capMultiResults     uint32 = 0x00020000
	capPSMultiResults   uint32 = 0x00040000
	capPluginAuth       uint32 = 0x00080000
	capConnectAttrs     uint32 = 0x00100000
	capSessionTrack     uint32 = 0x00800000
)

// Server status flags.
const (
	stInTrans       uint16 = 0x0001
	stAutocommit    uint16 = 0x0002
	stMoreResults   uint16 = 0x0008
	stCursorExists  uint16 = 0x0040
	stLastRowSent   uint16 = 0x0080
	stStateChanged  uint16 = 0x4000
	stFlagsCompared        = stInTrans | stAutocommit | stMoreResults
)

// Command bytes.
const (
	rcQuit         byte = 0x01
	rcInitDB       byte = 0x02
	rcQuery        byte = 0x03
	rcFieldList    byte = 0x04
	rcStatistics   byte = 0x09
	rcProcessKill  byte = 0x0c
	rcPing         byte = 0x0e
	rcChangeUser   byte = 0x11
	rcStmtPrepare  byte = 0x16
	rcStmtExecute  byte = 0x17
	rcStmtSendLong byte = 0x18
	rcStmtClose    byte = 0x19
	rcStmtReset    byte = 0x1a
	rcSetOption    byte = 0x1b
	rcStmtFetch    byte = 0x1c
	rcResetConn    byte = 0x1f
)

// Column types used by tests.
const (
	tyTiny              byte = 1
	tyShort             byte = 2
	tyLong              byte = 3
	tyFloat             byte = 4
	tyDouble            byte = 5
	tyNull              byte = 6
	tyTimestamp         byte = 7
	tyLongLong          byte = 8
	tyInt24             byte = 9
	tyDate              byte = 10
	tyTime              byte = 11
	tyDatetime          byte = 12
	tyYear              byte = 13
	tyBlob              byte = 0xfc
	tyVarString         byte = 0xfd
	rawLastStmt              = uint32(0xffffffff) // MariaDB: the statement prepared last
	rawDefaultCollation      = 45                 // utf8mb4_general_ci
)

// rawDefaultCaps include CLIENT_LOCAL_FILES, as go-sql-driver's do: it
// keeps backend connections apart (a pool variant), and tests pair raw
// clients with go-sql-driver ones on shared connections.
const rawDefaultCaps = capLongPassword | capLongFlag | capProtocol41 | capTransactions | capSecureConnection |
	capMultiResults | capPSMultiResults | capPluginAuth | capLocalFiles

// rawConn is one client connection. Not safe for concurrent use.
type rawConn struct {
	t          testing.TB // for the must* helpers; nil outside a test goroutine
	nc         net.Conn
	br         *bufio.Reader
	seq        uint8  // sequence id expected or sent next
	lenientSeq bool   // accept any sequence id in responses
	caps       uint32 // capabilities sent in the handshake response
	srvCaps    uint32
	srvExt     uint32 // MariaDB extended capabilities offered
	ext        uint32 // MariaDB extended capabilities negotiated
	connID     uint32
	greetSt    uint16
	version    string
	salt       []byte
	guard      time.Duration // hang guard for each read
	back       []byte        // a packet read and put back, returned next
	authOK     []byte        // the OK that ended authentication
}

type rawOpts struct {
	user, pass, db string
	caps           uint32 // wanted beyond the defaults, kept only if the server offers them
	drop           uint32 // defaults to leave out
	ext            uint32 // MariaDB extended capabilities wanted, kept only if offered
	coll           byte   // handshake collation; 0: rawDefaultCollation
}

// MariaDB extended capabilities (sent where MySQL has reserved bytes, when
// the server does not set CLIENT_LONG_PASSWORD, which MariaDB calls
// CLIENT_MYSQL).
const (
	rawExtProgress  uint32 = 1 << 0
	rawExtBulk      uint32 = 1 << 2
	rawExtTypeInfo  uint32 = 1 << 3
	rawExtCacheMeta uint32 = 1 << 4
)

// rawDial connects and logs in. An ERR from the server comes back as *rawErr.
func rawDial(addr string, o rawOpts) (*rawConn, error) {
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return nil, err
	}
	c := &rawConn{nc: nc, br: bufioReader(nc), guard: 15 * time.Second}
	if err := c.handshake(o); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func bufioReader(nc net.Conn) *bufio.Reader { return bufio.NewReaderSize(nc, 64<<10) }

// rawLogin is rawDial that fails the test on error and closes at cleanup.
func rawLogin(t testing.TB, addr string, o rawOpts) *rawConn {
	t.Helper()
	c, err := rawDial(addr, o)
	if err != nil {
		t.Fatalf("raw login to %s as %q: %v", addr, o.user, err)
	}
	c.t = t
	t.Cleanup(func() { c.nc.Close() })
	return c
}

// readGreeting reads the server's protocol-10 greeting.
func (c *rawConn) readGreeting() error {
	c.seq = 0
	p, err := c.readPacket()
	if err != nil {
		return err
	}
	if p[0] == 0xff {
		return errPacket(p)
	}
	if p[0] != 10 {
		return fmt.Errorf("rawclient: greeting protocol %d", p[0])
	}
	i := bytes.IndexByte(p[1:], 0)
	if i < 0 {
		return errors.New("rawclient: greeting version not terminated")
	}
	c.version = string(p[1 : 1+i])
	pos := 2 + i
	if len(p) < pos+31 {
		return fmt.Errorf("rawclient: greeting of %d bytes too short", len(p))
	}
	c.connID = binary.LittleEndian.Uint32(p[pos:])
	c.salt = append([]byte(nil), p[pos+4:pos+12]...)
	pos += 13 // connection id, salt part 1, filler
	c.srvCaps = uint32(binary.LittleEndian.Uint16(p[pos:])) | uint32(binary.LittleEndian.Uint16(p[pos+5:]))<<16
	c.greetSt = binary.LittleEndian.Uint16(p[pos+3:])
	if c.srvCaps&capLongPassword == 0 {
		c.srvExt = binary.LittleEndian.Uint32(p[pos+14:])
	}
	authLen := int(p[pos+7])
	pos += 8 + 10
	n := max(13, authLen-8)
	if len(p) < pos+n {
		return errors.New("rawclient: greeting salt truncated")
	}
	c.salt = append(c.salt, bytes.TrimRight(p[pos:pos+n], "\x00")...)
	if len(c.salt) < 20 {
		return fmt.Errorf("rawclient: salt of %d bytes", len(c.salt))
	}
	c.salt = c.salt[:20]
	return nil
}

func (c *rawConn) handshake(o rawOpts) error {
	if err := c.readGreeting(); err != nil {
		return err
	}
	c.caps = (rawDefaultCaps&^o.drop | o.caps) & c.srvCaps
	if o.db != "" {
		c.caps |= capConnectWithDB & c.srvCaps
	}
	c.ext = o.ext & c.srvExt
	if c.ext != 0 {
		c.caps &^= capLongPassword
	}
	coll := o.coll
	if coll == 0 {
		coll = rawDefaultCollation
	}
	b := binary.LittleEndian.AppendUint32(nil, c.caps)
	b = binary.LittleEndian.AppendUint32(b, 1<<24)
	b = append(b, coll)
	b = append(b, make([]byte, 19)...)
	b = binary.LittleEndian.AppendUint32(b, c.ext)
	b = append(b, o.user...)
	b = append(b, 0)
	auth := scrambleNative(c.salt, []byte(o.pass))
	b = append(b, byte(len(auth)))
	b = append(b, auth...)
	if c.caps&capConnectWithDB != 0 {
		b = append(b, o.db...)
		b = append(b, 0)
	}
	if c.caps&capPluginAuth != 0 {
		b = append(b, "mysql_native_password\x00"...)
	}
	if c.caps&capConnectAttrs != 0 {
		attrs := putLenEncStr(putLenEncStr(nil, "_client_name"), "rawclient")
		b = mysqlwire.AppendLenEnc(b, uint64(len(attrs)))
		b = append(b, attrs...)
	}
	if err := c.writePacket(b); err != nil {
		return err
	}
	_, _, err := c.authReply(o.pass)
	return err
}

// authReply reads the server's answers to an authentication response until
// OK or ERR, answering auth switch requests. It reports the plugin of a
// switch (if any) and whether fast authentication (0x01 0x03) was seen.
func (c *rawConn) authReply(pass string) (switched string, fast bool, err error) {
	for {
		p, err := c.readPacket()
		if err != nil {
			return switched, fast, err
		}
		switch {
		case p[0] == 0x00:
			c.authOK = p
			_, err := decodeOK(p, c.caps&capSessionTrack != 0)
			return switched, fast, err
		case p[0] == 0xff:
			return switched, fast, errPacket(p)
		case p[0] == 0xfe:
			i := bytes.IndexByte(p[1:], 0)
			if i < 0 {
				return switched, fast, errors.New("rawclient: auth switch without plugin name")
			}
			switched = string(p[1 : 1+i])
			salt := bytes.TrimSuffix(p[2+i:], []byte{0})
			var auth []byte
			switch switched {
			case "mysql_native_password":
				auth = scrambleNative(salt, []byte(pass))
			case "caching_sha2_password":
				auth = scrambleSHA2(salt, []byte(pass))
			default:
				return switched, fast, fmt.Errorf("rawclient: auth switch to unsupported plugin %q", switched)
			}
			if err := c.writePacket(auth); err != nil {
				return switched, fast, err
			}
		case p[0] == 0x01 && len(p) == 2 && p[1] == 0x03:
			fast = true
		default:
			return switched, fast, fmt.Errorf("rawclient: unexpected authentication packet % x", p)
		}
	}
}

// scrambleNative is mysql_native_password:
// SHA1(password) XOR SHA1(salt + SHA1(SHA1(password))).
func scrambleNative(salt, pass []byte) []byte {
	if len(pass) == 0 {
		return nil
	}
	h1 := sha1.Sum(pass)
	h2 := sha1.Sum(h1[:])
	h := sha1.New()
	h.Write(salt[:20])
	h.Write(h2[:])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= h1[i]
	}
	return out
}

// scrambleSHA2 is caching_sha2_password's fast path:
// SHA256(password) XOR SHA256(SHA256(SHA256(password)) + salt).
func scrambleSHA2(salt, pass []byte) []byte {
	if len(pass) == 0 {
		return nil
	}
	m1 := sha256.Sum256(pass)
	m2 := sha256.Sum256(m1[:])
	h := sha256.New()
	h.Write(m2[:])
	h.Write(salt[:20])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= m1[i]
	}
	return out
}

// Framing.

// writeFrame writes one physical packet whose header claims length bytes
// and sequence id seq, followed by payload (which may be shorter or longer).
func (c *rawConn) writeFrame(length int, seq uint8, payload []byte) error {
	b := []byte{byte(length), byte(length >> 8), byte(length >> 16), seq}
	_ = c.nc.SetWriteDeadline(time.Now().Add(c.guard))
	_, err := c.nc.Write(append(b, payload...))
	return err
}

// writePacket frames payload with the next sequence ids.
func (c *rawConn) writePacket(payload []byte) error {
	for {
		n := min(len(payload), 0xffffff)
		if err := c.writeFrame(n, c.seq, payload[:n]); err != nil {
			return err
		}
		c.seq++
		payload = payload[n:]
		if n < 0xffffff {
			return nil
		}
	}
}

// command starts a new exchange with payload.
func (c *rawConn) command(payload []byte) error {
	c.seq = 0
	return c.writePacket(payload)
}

// frame returns a whole command packet (header and payload) for pipelining.
func frame(seq uint8, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

// readPacket reads one logical packet and checks its sequence id.
func (c *rawConn) readPacket() ([]byte, error) {
	if p := c.back; p != nil {
		c.back = nil
		return p, nil
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(c.guard))
	var out []byte
	for {
		var h [4]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return nil, err
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		if h[3] != c.seq && !c.lenientSeq {
			return nil, fmt.Errorf("rawclient: packet with sequence id %d, want %d", h[3], c.seq)
		}
		c.seq = h[3] + 1
		start := len(out)
		out = append(out, make([]byte, n)...)
		if _, err := io.ReadFull(c.br, out[start:]); err != nil {
			return nil, err
		}
		if n < 0xffffff {
			break
		}
	}
	if len(out) == 0 {
		return nil, errors.New("rawclient: empty packet from server")
	}
	return out, nil
}

// isClosed reports whether err means the peer closed the connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// waitClosed reads until the server closes the connection and returns what
// it sent first (nil when nothing). An error means it neither closed nor
// stopped sending within the hang guard.
func (c *rawConn) waitClosed() ([]byte, error) {
	_ = c.nc.SetReadDeadline(time.Now().Add(c.guard))
	b, err := io.ReadAll(c.br)
	if err == nil || isClosed(err) {
		return b, nil
	}
	return b, err
}

// Decoding.

func lenEnc(b []byte) (uint64, int, error) {
	v, n, null, ok := mysqlwire.ReadLenEnc(b)
	switch {
	case len(b) == 0:
		return 0, 0, errors.New("rawclient: missing length-encoded integer")
	case null || b[0] == 0xff:
		return 0, 0, fmt.Errorf("rawclient: 0x%02x is no length-encoded integer", b[0])
	case !ok:
		return 0, 0, errors.New("rawclient: truncated length-encoded integer")
	}
	return v, n, nil
}

func lenEncStr(b []byte) ([]byte, int, error) {
	n, k, err := lenEnc(b)
	if err != nil {
		return nil, 0, err
	}
	if uint64(len(b)-k) < n {
		return nil, 0, errors.New("rawclient: truncated length-encoded string")
	}
	return b[k : k+int(n)], k + int(n), nil
}

func putLenEncStr(b []byte, s string) []byte { return mysqlwire.AppendLenEncString(b, []byte(s)) }

// rawErr is a decoded ERR packet.
type rawErr struct {
	Code  uint16
	State string
	Msg   string
}

func (e *rawErr) Error() string { return fmt.Sprintf("ERR %d (%s): %s", e.Code, e.State, e.Msg) }

// decodeErr decodes a protocol-4.1 ERR packet strictly.
func decodeErr(p []byte) (*rawErr, error) {
	if len(p) < 9 || p[0] != 0xff || p[3] != '#' {
		return nil, fmt.Errorf("rawclient: malformed ERR packet % x", p)
	}
	for _, ch := range p[4:9] {
		if !(ch >= '0' && ch <= '9' || ch >= 'A' && ch <= 'Z') {
			return nil, fmt.Errorf("rawclient: bad SQLSTATE %q", p[4:9])
		}
	}
	return &rawErr{Code: binary.LittleEndian.Uint16(p[1:]), State: string(p[4:9]), Msg: string(p[9:])}, nil
}

// errPacket returns the ERR in p as an error (a *rawErr when well formed).
func errPacket(p []byte) error {
	e, err := decodeErr(p)
	if err != nil {
		return err
	}
	return e
}

// rawOK is a decoded OK packet.
type rawOK struct {
	affected, insertID uint64
	status, warnings   uint16
	info               string
	state              []byte // session state information
	hasState           bool
}

// decodeOK decodes an OK packet for a client that did (track) or did not
// negotiate CLIENT_SESSION_TRACK. Without it, the info runs to the end of
// the packet; with it, info and state are length-encoded and nothing may
// follow them.
func decodeOK(p []byte, track bool) (rawOK, error) {
	var ok rawOK
	if len(p) < 7 || p[0] != 0x00 {
		return ok, fmt.Errorf("rawclient: malformed OK packet % x", p)
	}
	pos := 1
	var n int
	var err error
	if ok.affected, n, err = lenEnc(p[pos:]); err != nil {
		return ok, err
	}
	pos += n
	if ok.insertID, n, err = lenEnc(p[pos:]); err != nil {
		return ok, err
	}
	pos += n
	if len(p) < pos+4 {
		return ok, errors.New("rawclient: OK packet without status and warnings")
	}
	ok.status = binary.LittleEndian.Uint16(p[pos:])
	ok.warnings = binary.LittleEndian.Uint16(p[pos+2:])
	rest := p[pos+4:]
	if !track {
		ok.info = string(rest)
		return ok, nil
	}
	if len(rest) == 0 {
		if ok.status&stStateChanged != 0 {
			return ok, errors.New("rawclient: OK packet flags a state change but carries no state")
		}
		return ok, nil
	}
	info, n, err := lenEncStr(rest)
	if err != nil {
		return ok, fmt.Errorf("rawclient: OK info: %w", err)
	}
	ok.info, rest = string(info), rest[n:]
	if ok.status&stStateChanged != 0 {
		st, n, err := lenEncStr(rest)
		if err != nil {
			return ok, fmt.Errorf("rawclient: OK session state: %w", err)
		}
		ok.state, ok.hasState, rest = st, true, rest[n:]
	}
	if len(rest) != 0 {
		return ok, fmt.Errorf("rawclient: %d bytes after the OK packet's fields", len(rest))
	}
	return ok, nil
}

// decodeEOF decodes a protocol-4.1 EOF packet.
func decodeEOF(p []byte) (warnings, status uint16, err error) {
	if len(p) != 5 || p[0] != 0xfe {
		return 0, 0, fmt.Errorf("rawclient: malformed EOF packet % x", p)
	}
	return binary.LittleEndian.Uint16(p[1:]), binary.LittleEndian.Uint16(p[3:]), nil
}

func isEOFPacket(p []byte) bool { return p[0] == 0xfe && len(p) < 9 }

// stateEntry is one entry of OK-packet session state information.
type stateEntry struct {
	typ         byte
	name, value string
}

// decodeState decodes session state information strictly.
func decodeState(b []byte) ([]stateEntry, error) {
	var out []stateEntry
	for len(b) > 0 {
		typ := b[0]
		data, n, err := lenEncStr(b[1:])
		if err != nil {
			return out, err
		}
		b = b[1+n:]
		e := stateEntry{typ: typ}
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
				return out, errors.New("rawclient: trailing bytes in a system variable entry")
			}
			e.name, e.value = string(name), string(val)
		case 1: // schema
			v, k, err := lenEncStr(data)
			if err != nil {
				return out, err
			}
			if k != len(data) {
				return out, errors.New("rawclient: trailing bytes in a schema entry")
			}
			e.value = string(v)
		case 2: // state change: the entry's data is the byte '1' itself (MySQL and MariaDB)
			if string(data) != "1" && string(data) != "0" {
				return out, fmt.Errorf("rawclient: state change entry %q", data)
			}
			e.value = string(data)
		default:
			e.value = string(data)
		}
		out = append(out, e)
	}
	return out, nil
}
