package bench

import (
	"bufio"
	"context"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Client is a minimal MySQL text-protocol client: mysql_native_password
// login, COM_QUERY, COM_QUIT. It exists so one process can hold thousands of
// connections cheaply (one small read buffer each, no goroutines of its
// own), which database/sql with go-sql-driver cannot. It is not safe for
// concurrent use; each connection belongs to one goroutine.
type Client struct {
	conn net.Conn
	r    *bufio.Reader
	seq  byte
	caps uint32 // negotiated capability flags
	buf  []byte // reused packet buffer (payload of the last read, or the next write)
}

// ServerError is an ERR packet from the server.
type ServerError struct {
	Code    uint16
	State   string
	Message string
}

func (e *ServerError) Error() string {
	return fmt.Sprintf("bench: server error %d (%s): %s", e.Code, e.State, e.Message)
}

// ErrProtocol marks a reply the client cannot parse.
var ErrProtocol = errors.New("bench: malformed MySQL packet")

// Capability flags (MySQL protocol, "Capabilities Flags").
const (
	capLongPassword   = 0x00000001
	capLongFlag       = 0x00000004
	capConnectWithDB  = 0x00000008
	capProtocol41     = 0x00000200
	capTransactions   = 0x00002000
	capSecureConn     = 0x00008000
	capMultiResults   = 0x00020000 // Query follows SERVER_MORE_RESULTS_EXISTS; CALL needs it
	capPluginAuth     = 0x00080000
	capDeprecateEOF   = 0x01000000
	statusMoreResults = 0x0008
	nativePassword    = "mysql_native_password"
	charsetUTF8MB4    = 45 // utf8mb4_general_ci
	maxPayload        = 1<<24 - 1
)

// Dial connects to addr and logs in as user with mysql_native_password,
// selecting db when it is not empty. ctx bounds the dial and the handshake.
func Dial(ctx context.Context, addr, user, password, db string) (*Client, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bench: dial %s: %w", addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = nc.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	c := &Client{conn: nc, r: bufio.NewReaderSize(nc, 4096)}
	err = c.handshake(user, password, db)
	if !stop() || err != nil {
		nc.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("bench: login to %s: %w", addr, err)
	}
	_ = nc.SetDeadline(time.Time{})
	return c, nil
}

func (c *Client) handshake(user, password, db string) error {
	p, err := c.readPacket()
	if err != nil {
		return err
	}
	if p[0] == 0xff {
		return parseErr(p)
	}
	if p[0] != 10 {
		return fmt.Errorf("%w: handshake protocol version %d", ErrProtocol, p[0])
	}
	// Protocol::HandshakeV10.
	rest := p[1:]
	if _, rest, err = cstring(rest); err != nil { // server version
		return err
	}
	if len(rest) < 4+8+1+2 {
		return fmt.Errorf("%w: short handshake", ErrProtocol)
	}
	scramble := append([]byte(nil), rest[4:12]...)
	rest = rest[13:]
	serverCaps := uint32(binary.LittleEndian.Uint16(rest))
	rest = rest[2:]
	plugin := nativePassword
	if len(rest) >= 1+2+2+1+10 {
		serverCaps |= uint32(binary.LittleEndian.Uint16(rest[3:])) << 16
		authLen := int(rest[5])
		rest = rest[16:]
		if serverCaps&capSecureConn != 0 {
			n := max(13, authLen-8)
			if len(rest) < n {
				return fmt.Errorf("%w: short scramble", ErrProtocol)
			}
			scramble = append(scramble, rest[:n-1]...) // the last byte is a NUL
			rest = rest[n:]
		}
		if serverCaps&capPluginAuth != 0 && len(rest) > 0 {
			if plugin, _, err = cstring(rest); err != nil {
				plugin = string(rest) // some servers omit the final NUL
			}
		}
	}
	if serverCaps&capProtocol41 == 0 || serverCaps&capSecureConn == 0 {
		return fmt.Errorf("%w: server lacks PROTOCOL_41 or SECURE_CONNECTION", ErrProtocol)
	}
	c.caps = capLongPassword | capLongFlag | capProtocol41 | capTransactions | capSecureConn |
		capMultiResults | capPluginAuth | capDeprecateEOF
	if db != "" {
		c.caps |= capConnectWithDB
	}
	c.caps &= serverCaps
	auth := []byte{}
	if plugin == nativePassword {
		auth = scrambleNative(scramble, password)
	}

	// Protocol::HandshakeResponse41.
	b := c.startPacket()
	b = binary.LittleEndian.AppendUint32(b, c.caps)
	b = binary.LittleEndian.AppendUint32(b, maxPayload)
	b = append(b, charsetUTF8MB4)
	b = append(b, make([]byte, 23)...)
	b = append(append(b, user...), 0)
	b = append(append(b, byte(len(auth))), auth...)
	if c.caps&capConnectWithDB != 0 {
		b = append(append(b, db...), 0)
	}
	if c.caps&capPluginAuth != 0 {
		b = append(append(b, plugin...), 0)
	}
	if err := c.writePacket(b); err != nil {
		return err
	}
	for {
		p, err := c.readPacket()
		if err != nil {
			return err
		}
		switch p[0] {
		case 0x00:
			return nil
		case 0xff:
			return parseErr(p)
		case 0xfe: // AuthSwitchRequest
			name, data, err := cstring(p[1:])
			if err != nil || name != nativePassword {
				return fmt.Errorf("bench: server asks for auth plugin %q; only %s is supported", name, nativePassword)
			}
			if len(data) > 20 {
				data = data[:20]
			}
			auth := scrambleNative(data, password) // before startPacket reuses p's memory
			if err := c.writePacket(append(c.startPacket(), auth...)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%w: unexpected 0x%02x during login (only %s is supported)", ErrProtocol, p[0], nativePassword)
		}
	}
}

// scrambleNative is mysql_native_password:
// SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password))).
func scrambleNative(scramble []byte, password string) []byte {
	if password == "" {
		return nil
	}
	h1 := sha1.Sum([]byte(password))
	h2 := sha1.Sum(h1[:])
	h := sha1.New()
	h.Write(scramble[:min(len(scramble), 20)])
	h.Write(h2[:])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= h1[i]
	}
	return out
}

// Close sends COM_QUIT and closes the connection.
func (c *Client) Close() error {
	c.seq = 0
	_ = c.writePacket(append(c.startPacket(), 0x01))
	return c.conn.Close()
}

// lenenc decodes a length-encoded integer, returning it and its size (not
// ok for NULL).
func lenenc(b []byte) (v uint64, n int, ok bool) {
	v, n, null, ok := mysqlwire.ReadLenEnc(b)
	if null {
		return 0, 0, false
	}
	return v, n, ok
}

func cstring(b []byte) (s string, rest []byte, err error) {
	for i, x := range b {
		if x == 0 {
			return string(b[:i]), b[i+1:], nil
		}
	}
	return "", nil, fmt.Errorf("%w: unterminated string", ErrProtocol)
}

func parseErr(p []byte) error {
	if len(p) < 3 {
		return fmt.Errorf("%w: short ERR packet", ErrProtocol)
	}
	e := &ServerError{Code: binary.LittleEndian.Uint16(p[1:])}
	msg := p[3:]
	if len(msg) >= 6 && msg[0] == '#' {
		e.State, msg = string(msg[1:6]), msg[6:]
	}
	e.Message = string(msg)
	return e
}

// startPacket returns c.buf emptied, with room for the 4-byte header.
func (c *Client) startPacket() []byte { return append(c.buf[:0], 0, 0, 0, 0) }

// writePacket fills in the header of b (from startPacket) and sends it.
// Payloads are small here; larger than one packet is refused.
func (c *Client) writePacket(b []byte) error {
	n := len(b) - 4
	if n >= maxPayload {
		return errors.New("bench: command too large")
	}
	b[0], b[1], b[2], b[3] = byte(n), byte(n>>8), byte(n>>16), c.seq
	c.seq++
	c.buf = b
	_, err := c.conn.Write(b)
	return err
}

// readPacket reads one logical packet (joining 16 MiB continuations) into
// c.buf and returns its payload, valid until the next read or write.
func (c *Client) readPacket() ([]byte, error) {
	c.buf = c.buf[:0]
	for {
		var h [4]byte
		if _, err := io.ReadFull(c.r, h[:]); err != nil {
			return nil, err
		}
		n := int(h[0]) | int(h[1])<<8 | int(h[2])<<16
		c.seq = h[3] + 1
		start := len(c.buf)
		c.buf = slices.Grow(c.buf, n)[:start+n]
		if _, err := io.ReadFull(c.r, c.buf[start:]); err != nil {
			return nil, err
		}
		if n < maxPayload {
			break
		}
	}
	if len(c.buf) == 0 {
		return nil, fmt.Errorf("%w: empty packet", ErrProtocol)
	}
	return c.buf, nil
}
