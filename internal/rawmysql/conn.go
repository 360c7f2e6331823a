package rawmysql

import (
	"bufio"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Capability flags.
const (
	CapLongPassword     uint32 = 0x00000001
	CapFoundRows        uint32 = 0x00000002
	CapLongFlag         uint32 = 0x00000004
	CapConnectWithDB    uint32 = 0x00000008
	CapODBC             uint32 = 0x00000040
	CapLocalFiles       uint32 = 0x00000080
	CapIgnoreSpace      uint32 = 0x00000100
	CapProtocol41       uint32 = 0x00000200
	CapInteractive      uint32 = 0x00000400
	CapSSL              uint32 = 0x00000800
	CapIgnoreSigpipe    uint32 = 0x00001000
	CapTransactions     uint32 = 0x00002000
	CapReserved         uint32 = 0x00004000
	CapSecureConnection uint32 = 0x00008000
	CapMultiStatements  uint32 = 0x00010000
	CapMultiResults     uint32 = 0x00020000
	CapPSMultiResults   uint32 = 0x00040000
	CapPluginAuth       uint32 = 0x00080000
	CapConnectAttrs     uint32 = 0x00100000
	CapPluginAuthLenenc uint32 = 0x00200000
	CapSessionTrack     uint32 = 0x00800000
	CapDeprecateEOF     uint32 = 0x01000000
)

// DefaultCaps are the capabilities a login asks for unless Options say
// otherwise. They include CLIENT_LOCAL_FILES, as go-sql-driver's do: a
// proxy that keeps such clients apart from others then pools them with
// go-sql-driver's.
const DefaultCaps = CapLongPassword | CapLongFlag | CapProtocol41 | CapTransactions | CapSecureConnection |
	CapMultiResults | CapPSMultiResults | CapPluginAuth | CapLocalFiles

// DefaultCollation is the handshake's collation unless Options say
// otherwise: utf8mb4_general_ci.
const DefaultCollation = 45

const (
	pluginNative = "mysql_native_password"
	pluginSHA2   = "caching_sha2_password"
	maxPacket    = 1 << 24 // the max_allowed_packet a login announces
)

// ErrProtocol marks a reply this client cannot parse.
var ErrProtocol = errors.New("rawmysql: malformed MySQL packet")

// Options say how to log in.
type Options struct {
	User, Password, DB string
	// Caps are wanted beyond DefaultCaps, kept only if the server offers
	// them; Drop are DefaultCaps to leave out.
	Caps, Drop uint32
	// Ext are MariaDB extended capabilities (mysqlwire.Ext*) wanted, kept
	// only if the server offers them.
	Ext uint32
	// Collation of the handshake; 0: DefaultCollation.
	Collation byte
	// Guard bounds every read and write of the connection (a hang guard);
	// 0: no bound but the caller's deadlines.
	Guard time.Duration
	// LenientSeq accepts any sequence id at the start of a reply, as a
	// server's unsolicited ERR (sequence 0) has.
	LenientSeq bool
	// ReadBuffer is the size of the read buffer; 0: 4 KiB.
	ReadBuffer int
}

// Conn is one client connection. It is not safe for concurrent use; each
// connection belongs to one goroutine. Its exported fields are what the
// greeting and login said; a caller may change Guard and LenientSeq
// between calls.
type Conn struct {
	NC             net.Conn
	Caps           uint32 // capabilities sent in the handshake response
	ServerCaps     uint32 // capabilities the greeting offered
	ServerExt      uint32 // MariaDB extended capabilities offered
	Ext            uint32 // MariaDB extended capabilities negotiated
	ConnID         uint32
	GreetingStatus uint16
	Version        string
	Salt           []byte // the greeting's scramble, 20 bytes
	AuthOK         []byte // the OK that ended authentication
	Guard          time.Duration
	LenientSeq     bool

	r    mysqlwire.Reader
	w    mysqlwire.Writer
	back []byte // a packet read and put back, returned next

	// Exec's buffers, reused from statement to statement.
	buf  []byte   // the packet last read
	cmd  []byte   // the command's payload
	out  []byte   // the command's packet
	cols [][]byte // a row's values
}

// writers lend a connection a write buffer only while it writes a
// packet that does not fit in one command (Conn.WritePacket).
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 4096) }}

// NewConn wraps nc, of a server that has not yet sent its greeting
// (ReadGreeting and Handshake follow), with the read buffer, guard and
// sequence checking of o.
func NewConn(nc net.Conn, o Options) *Conn {
	size := o.ReadBuffer
	if size <= 0 {
		size = 4096
	}
	c := &Conn{NC: nc, Guard: o.Guard, LenientSeq: o.LenientSeq}
	c.r.Buf = bufio.NewReaderSize(nc, size)
	c.w.Dst, c.w.Pool = nc, &writers
	return c
}

// Dial connects to addr and logs in. ctx bounds the dial and the login;
// an ERR from the server comes back as a *mysqlwire.SQLError (wrapped).
func Dial(ctx context.Context, addr string, o Options) (*Conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("rawmysql: dial %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	c := NewConn(nc, o)
	err = c.Handshake(o)
	if !stop() || err != nil {
		nc.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("rawmysql: login to %s as %q: %w", addr, o.User, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

// ReadGreeting reads the server's protocol-10 greeting.
func (c *Conn) ReadGreeting() error {
	c.r.Seq = 0
	p, err := c.ReadPacket()
	if err != nil {
		return err
	}
	if p[0] == mysqlwire.HeaderErr {
		return ErrPacket(p)
	}
	g, ok := mysqlwire.ParseGreeting(p)
	if !ok {
		return fmt.Errorf("%w: greeting % x", ErrProtocol, p[:min(len(p), 16)])
	}
	if len(g.Salt) < 20 {
		return fmt.Errorf("%w: greeting with a scramble of %d bytes", ErrProtocol, len(g.Salt))
	}
	c.Version, c.ConnID, c.ServerCaps, c.ServerExt = g.Version, g.ConnID, g.Caps, g.ExtCaps
	c.GreetingStatus, c.Salt = g.Status, g.Salt[:20]
	return nil
}

// Handshake reads the greeting and logs in with o's account and
// capabilities, answering authentication switches.
func (c *Conn) Handshake(o Options) error {
	if err := c.ReadGreeting(); err != nil {
		return err
	}
	c.Caps = (DefaultCaps&^o.Drop | o.Caps) & c.ServerCaps
	if o.DB != "" {
		c.Caps |= CapConnectWithDB & c.ServerCaps
	}
	c.Ext = o.Ext & c.ServerExt
	if c.Ext != 0 {
		c.Caps &^= CapLongPassword // MariaDB reads the extended capabilities only then
	}
	h := mysqlwire.HandshakeResponse{
		Caps:      c.Caps,
		MaxPacket: maxPacket,
		Collation: o.Collation,
		ExtCaps:   c.Ext,
		User:      o.User,
		AuthResp:  ScrambleNative(c.Salt, []byte(o.Password)),
		DB:        o.DB,
		Plugin:    pluginNative,
		Attrs:     map[string]string{"_client_name": "rawclient"},
	}
	if h.Collation == 0 {
		h.Collation = DefaultCollation
	}
	if err := c.WritePacket(mysqlwire.AppendHandshakeResponse(nil, &h)); err != nil {
		return err
	}
	_, _, err := c.AuthReply(o.Password)
	return err
}

// AuthReply reads the server's answers to an authentication response until
// OK or ERR, answering authentication switches. It reports the plugin of a
// switch (if any) and whether fast authentication (0x01 0x03) was seen.
func (c *Conn) AuthReply(pass string) (switched string, fast bool, err error) {
	for {
		p, err := c.ReadPacket()
		if err != nil {
			return switched, fast, err
		}
		switch {
		case p[0] == mysqlwire.HeaderOK:
			c.AuthOK = p
			_, err := DecodeOK(p, c.Caps&CapSessionTrack != 0)
			return switched, fast, err
		case p[0] == mysqlwire.HeaderErr:
			return switched, fast, ErrPacket(p)
		case p[0] == mysqlwire.HeaderEOF:
			plugin, salt, ok := mysqlwire.ParseAuthSwitch(p)
			if !ok {
				return switched, fast, fmt.Errorf("%w: authentication switch without a plugin name", ErrProtocol)
			}
			switched = plugin
			if len(salt) < 20 {
				return switched, fast, fmt.Errorf("%w: authentication switch with a scramble of %d bytes", ErrProtocol, len(salt))
			}
			var auth []byte
			switch plugin {
			case pluginNative:
				auth = ScrambleNative(salt, []byte(pass))
			case pluginSHA2:
				auth = ScrambleSHA2(salt, []byte(pass))
			default:
				return switched, fast, fmt.Errorf("rawmysql: authentication switch to unsupported plugin %q", plugin)
			}
			if err := c.WritePacket(auth); err != nil {
				return switched, fast, err
			}
		case p[0] == 0x01 && len(p) == 2 && p[1] == 0x03:
			fast = true
		default:
			return switched, fast, fmt.Errorf("%w: unexpected authentication packet % x", ErrProtocol, p)
		}
	}
}

// ScrambleNative is mysql_native_password's answer to salt:
// SHA1(password) XOR SHA1(salt + SHA1(SHA1(password))); nil for no password.
func ScrambleNative(salt, pass []byte) []byte {
	if len(pass) == 0 {
		return nil
	}
	h1 := sha1.Sum(pass)
	h2 := sha1.Sum(h1[:])
	h := sha1.New()
	h.Write(salt[:min(len(salt), 20)])
	h.Write(h2[:])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= h1[i]
	}
	return out
}

// ScrambleSHA2 is caching_sha2_password's fast-path answer to salt:
// SHA256(password) XOR SHA256(SHA256(SHA256(password)) + salt); nil for
// no password.
func ScrambleSHA2(salt, pass []byte) []byte {
	if len(pass) == 0 {
		return nil
	}
	m1 := sha256.Sum256(pass)
	m2 := sha256.Sum256(m1[:])
	h := sha256.New()
	h.Write(m2[:])
	h.Write(salt[:min(len(salt), 20)])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= m1[i]
	}
	return out
}

// Close sends COM_QUIT and closes the connection.
func (c *Conn) Close() error {
	_ = c.Command([]byte{ComQuit})
	return c.NC.Close()
}

// SetDeadline sets the read and write deadline of the connection; a zero
// t clears it. Past the deadline every call fails and the connection is
// broken. A Guard, when set, replaces it at the next read or write.
func (c *Conn) SetDeadline(t time.Time) error { return c.NC.SetDeadline(t) }

// SetSeq sets the sequence id expected in the next packet read and sent
// in the next one written.
func (c *Conn) SetSeq(seq uint8) { c.r.Seq = seq }

// Buffered is the connection's read buffer, for a caller that reads the
// bytes itself.
func (c *Conn) Buffered() *bufio.Reader { return c.r.Buf }

// Framing.

// WriteFrame writes one physical packet whose header claims length bytes
// and sequence id seq, followed by payload (which may be shorter or
// longer). It leaves the expected sequence id alone.
func (c *Conn) WriteFrame(length int, seq uint8, payload []byte) error {
	b := []byte{byte(length), byte(length >> 8), byte(length >> 16), seq}
	c.guardWrite()
	_, err := c.NC.Write(append(b, payload...))
	return err
}

// WritePacket frames payload with the next sequence ids, splitting it at
// mysqlwire.MaxPayload, and sends it.
func (c *Conn) WritePacket(payload []byte) error {
	c.guardWrite()
	c.w.Seq = c.r.Seq
	err := c.w.WritePacket(payload)
	if err == nil {
		err = c.w.FlushTurn(&c.r)
	}
	c.w.Drop()
	if rerr := c.w.Release(); err == nil {
		err = rerr
	}
	return err
}

// Command starts a new exchange with payload (sequence 0). A payload
// shorter than mysqlwire.MaxPayload goes out in one write.
func (c *Conn) Command(payload []byte) error {
	c.r.Seq = 0
	if len(payload) >= mysqlwire.MaxPayload {
		return c.WritePacket(payload)
	}
	c.out = mysqlwire.AppendCommand(c.out[:0], payload)
	c.guardWrite()
	if _, err := c.NC.Write(c.out); err != nil {
		return err
	}
	c.r.Seq = 1
	return nil
}

// Frame returns a whole command packet (header and payload) for sending
// several in one write.
func Frame(seq uint8, payload []byte) []byte {
	n := len(payload)
	return append([]byte{byte(n), byte(n >> 8), byte(n >> 16), seq}, payload...)
}

// ReadPacket reads one logical packet into a new slice and checks its
// sequence id (unless LenientSeq).
func (c *Conn) ReadPacket() ([]byte, error) {
	if p := c.back; p != nil {
		c.back = nil
		return p, nil
	}
	return c.readPacket(nil)
}

// readPacket reads one logical packet into dst[:0].
func (c *Conn) readPacket(dst []byte) ([]byte, error) {
	if c.Guard > 0 {
		_ = c.NC.SetReadDeadline(time.Now().Add(c.Guard))
	}
	if c.LenientSeq {
		h, err := c.r.Buf.Peek(4)
		if err != nil {
			return dst[:0], err
		}
		c.r.Seq = h[3]
	}
	p, err := c.r.ReadPacket(dst, 0)
	if err != nil {
		return p, err
	}
	if len(p) == 0 {
		return p, fmt.Errorf("%w: empty packet", ErrProtocol)
	}
	return p, nil
}

// unread puts p back: the next ReadPacket returns it.
func (c *Conn) unread(p []byte) { c.back = p }

func (c *Conn) guardWrite() {
	if c.Guard > 0 {
		_ = c.NC.SetWriteDeadline(time.Now().Add(c.Guard))
	}
}

// WaitClosed reads until the server closes the connection and returns what
// it sent first (nil when nothing). An error means it neither closed nor
// stopped sending within the guard.
func (c *Conn) WaitClosed() ([]byte, error) {
	if c.Guard > 0 {
		_ = c.NC.SetReadDeadline(time.Now().Add(c.Guard))
	}
	b, err := io.ReadAll(c.r.Buf)
	if err == nil || IsClosed(err) {
		return b, nil
	}
	return b, err
}

// IsClosed reports whether err means the peer closed the connection.
func IsClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// IsTimeout reports whether err is a deadline (or guard) passing.
func IsTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
