package mysqlwire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"maps"
	"slices"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// MariaDB's extended capabilities, carried in the greeting's and the
// handshake response's reserved bytes when the server does not set
// CLIENT_LONG_PASSWORD (which MariaDB names CLIENT_MYSQL).
const (
	ExtProgress      uint32 = 1 << 0 // progress reports
	ExtBulk          uint32 = 1 << 2 // COM_STMT_BULK_EXECUTE
	ExtTypeInfo      uint32 = 1 << 3 // extended type info in column definitions (JSON, UUID, ...)
	ExtCacheMetadata uint32 = 1 << 4 // result metadata skipped on execute when unchanged
)

// pluginNative is the authentication plugin a handshake response that
// names none uses.
const pluginNative = "mysql_native_password"

var (
	// ErrHandshake is a handshake response too short or truncated.
	ErrHandshake = errors.New("mysqlwire: malformed handshake response")
	// ErrNoProtocol41 is a handshake response without
	// CLIENT_PROTOCOL_41: a client too old to speak protocol 4.1.
	ErrNoProtocol41 = errors.New("mysqlwire: handshake response without CLIENT_PROTOCOL_41")
)

// Greeting is a server's initial handshake packet, protocol version 10.
type Greeting struct {
	Version   string // server version
	ConnID    uint32
	Salt      []byte // the scramble: 8 bytes, then (with SECURE_CONNECTION) 12 more
	Caps      uint32
	Collation uint8
	Status    uint16
	ExtCaps   uint32 // MariaDB extended capabilities (see ExtTypeInfo)
	Plugin    string // authentication plugin the scramble is for
}

// AppendGreeting appends g as a greeting payload. Salt must hold at least
// 8 bytes; ExtCaps goes in the reserved bytes, which a server that sets
// CLIENT_LONG_PASSWORD leaves zero.
func AppendGreeting(b []byte, g *Greeting) []byte {
	b = append(b, 10)
	b = append(b, g.Version...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint32(b, g.ConnID)
	b = append(b, g.Salt[:8]...)
	b = append(b, 0)
	b = binary.LittleEndian.AppendUint16(b, uint16(g.Caps))
	b = append(b, g.Collation)
	b = binary.LittleEndian.AppendUint16(b, g.Status)
	b = binary.LittleEndian.AppendUint16(b, uint16(g.Caps>>16))
	b = append(b, byte(len(g.Salt)+1))
	b = append(b, 0, 0, 0, 0, 0, 0)
	b = binary.LittleEndian.AppendUint32(b, g.ExtCaps)
	b = append(b, g.Salt[8:]...)
	b = append(b, 0)
	b = append(b, g.Plugin...)
	return append(b, 0)
}

// ParseGreeting decodes a greeting payload. ok is false (and g zero) when
// p is no protocol-10 greeting. Salt is a new slice (12 bytes of its
// second part are read when SECURE_CONNECTION is set and present); ExtCaps
// is read only without CLIENT_LONG_PASSWORD.
func ParseGreeting(p []byte) (g Greeting, ok bool) {
	if len(p) < 1 || p[0] != 10 {
		return Greeting{}, false
	}
	nul := bytes.IndexByte(p[1:], 0)
	if nul < 0 {
		return Greeting{}, false
	}
	pos := 1 + nul + 1 // version
	if len(p) < pos+4+8+1+18 {
		return Greeting{}, false
	}
	g.Version = string(p[1 : 1+nul])
	g.ConnID = binary.LittleEndian.Uint32(p[pos:])
	pos += 4
	g.Salt = bytes.Clone(p[pos : pos+8])
	pos += 8 + 1 // salt part 1, filler
	g.Caps = uint32(binary.LittleEndian.Uint16(p[pos:])) | uint32(binary.LittleEndian.Uint16(p[pos+5:]))<<16
	g.Collation = p[pos+2]
	g.Status = binary.LittleEndian.Uint16(p[pos+3:])
	authLen := int(p[pos+7])
	if g.Caps&mysql.CLIENT_LONG_PASSWORD == 0 {
		g.ExtCaps = binary.LittleEndian.Uint32(p[pos+14:])
	}
	pos += 18 // capabilities, collation, status, capabilities, scramble length, reserved
	rest := p[pos:]
	if g.Caps&mysql.CLIENT_SECURE_CONNECTION == 0 || len(rest) < 12 {
		return g, true
	}
	g.Salt = append(g.Salt, rest[:12]...)
	if k := max(13, authLen-8); g.Caps&mysql.CLIENT_PLUGIN_AUTH != 0 && len(rest) >= k {
		name := rest[k:]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		g.Plugin = string(name)
	}
	return g, true
}

// HandshakeResponse is a client's protocol-4.1 handshake response.
type HandshakeResponse struct {
	Caps      uint32
	MaxPacket uint32
	Collation uint8
	ExtCaps   uint32 // MariaDB extended capabilities; read only without CLIENT_LONG_PASSWORD
	User      string
	AuthResp  []byte // the scramble, as sent
	DB        string // with CLIENT_CONNECT_WITH_DB
	Plugin    string // mysql_native_password when the client names none
	Attrs     map[string]string
}

// IsSSLRequest reports whether p is an SSLRequest: the first 32 bytes of a
// handshake response, with CLIENT_SSL, and nothing after them.
func IsSSLRequest(p []byte) bool {
	return len(p) == 32 && binary.LittleEndian.Uint32(p)&mysql.CLIENT_SSL != 0
}

// ParseHandshakeResponse decodes a handshake response payload:
// ErrNoProtocol41 for a client without protocol 4.1, ErrHandshake for a
// packet too short or truncated. Connection attributes are advisory: a
// malformed block yields the pairs read before the fault, at most 256.
// AuthResp is a new slice.
func ParseHandshakeResponse(p []byte) (*HandshakeResponse, error) {
	f, err := splitResponse(p)
	if err != nil {
		return nil, err
	}
	h := &HandshakeResponse{Caps: f.caps, MaxPacket: binary.LittleEndian.Uint32(p[4:]), Collation: p[8],
		User: string(f.user), AuthResp: bytes.Clone(f.auth), DB: string(f.db), Plugin: f.plugin}
	if h.Caps&mysql.CLIENT_LONG_PASSWORD == 0 {
		h.ExtCaps = binary.LittleEndian.Uint32(p[28:])
	}
	if h.Caps&mysql.CLIENT_CONNECT_ATTRS != 0 && len(f.attrs) > 0 {
		h.Attrs = parseAttrs(f.attrs)
	}
	return h, nil
}

// responseFields are the variable parts of a handshake response, aliasing
// its payload.
type responseFields struct {
	caps                  uint32
	user, auth, db, attrs []byte
	plugin                string
}

// splitResponse finds the fields of handshake response payload p.
func splitResponse(p []byte) (f responseFields, err error) {
	if len(p) < 32 {
		return f, ErrHandshake
	}
	f.caps = binary.LittleEndian.Uint32(p)
	if f.caps&mysql.CLIENT_PROTOCOL_41 == 0 {
		return f, ErrNoProtocol41
	}
	rest := p[32:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return f, ErrHandshake
	}
	f.user, rest = rest[:i], rest[i+1:]
	switch {
	case f.caps&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0:
		a, n, ok := ReadLenEncString(rest)
		if !ok {
			return f, ErrHandshake
		}
		f.auth, rest = a, rest[n:]
	case f.caps&mysql.CLIENT_SECURE_CONNECTION != 0:
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			return f, ErrHandshake
		}
		f.auth, rest = rest[1:1+int(rest[0])], rest[1+int(rest[0]):]
	default:
		j := bytes.IndexByte(rest, 0)
		if j < 0 {
			return f, ErrHandshake
		}
		f.auth, rest = rest[:j], rest[j+1:]
	}
	if f.caps&mysql.CLIENT_CONNECT_WITH_DB != 0 && len(rest) > 0 {
		j := bytes.IndexByte(rest, 0)
		if j < 0 {
			return f, ErrHandshake
		}
		f.db, rest = rest[:j], rest[j+1:]
	}
	f.plugin = pluginNative
	if f.caps&mysql.CLIENT_PLUGIN_AUTH != 0 && len(rest) > 0 {
		j := bytes.IndexByte(rest, 0)
		if j < 0 {
			// Some clients end the packet with the name, unterminated.
			j = len(rest)
		}
		f.plugin = string(rest[:j])
		rest = rest[min(j+1, len(rest)):]
	}
	f.attrs = rest
	return f, nil
}

// ResponseAuth returns the authentication response of handshake response
// payload p in place, aliasing p (a caller may overwrite it with another
// of the same length), and the plugin it is for; ok is false when p is no
// well-formed handshake response.
func ResponseAuth(p []byte) (auth []byte, plugin string, ok bool) {
	f, err := splitResponse(p)
	if err != nil {
		return nil, "", false
	}
	return f.auth, f.plugin, true
}

// SetResponseCaps overwrites the capability flags of handshake response
// payload p in place and, when ext is not 0, MariaDB's extended
// capabilities (bytes 28 to 31, which a client may use only without
// CLIENT_LONG_PASSWORD: the caller clears it in caps). It does nothing to
// a payload shorter than 32 bytes.
func SetResponseCaps(p []byte, caps, ext uint32) {
	if len(p) < 32 {
		return
	}
	binary.LittleEndian.PutUint32(p, caps)
	if ext != 0 {
		binary.LittleEndian.PutUint32(p[28:], ext)
	}
}

// parseAttrs decodes connection attributes; a malformed block yields the
// pairs read before the fault.
func parseAttrs(b []byte) map[string]string {
	total, n, null, ok := ReadLenEnc(b)
	if !ok || null || uint64(len(b)-n) < total {
		return nil
	}
	b = b[n : n+int(total)]
	m := map[string]string{}
	for len(b) > 0 && len(m) < 256 {
		k, n, ok := ReadLenEncString(b)
		if !ok {
			break
		}
		v, n2, ok := ReadLenEncString(b[n:])
		if !ok {
			break
		}
		m[string(k)] = string(v)
		b = b[n+n2:]
	}
	return m
}

// AppendHandshakeResponse appends h as a handshake response payload, in
// the form its Caps say: the scramble length-encoded, one-byte-length
// prefixed (SECURE_CONNECTION) or NUL-terminated; the database, plugin
// and attributes (in key order) only with their capabilities. ExtCaps
// goes in the reserved bytes.
func AppendHandshakeResponse(b []byte, h *HandshakeResponse) []byte {
	b = binary.LittleEndian.AppendUint32(b, h.Caps)
	b = binary.LittleEndian.AppendUint32(b, h.MaxPacket)
	b = append(b, h.Collation)
	b = append(b, make([]byte, 19)...)
	b = binary.LittleEndian.AppendUint32(b, h.ExtCaps)
	b = append(b, h.User...)
	b = append(b, 0)
	switch {
	case h.Caps&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0:
		b = AppendLenEncString(b, h.AuthResp)
	case h.Caps&mysql.CLIENT_SECURE_CONNECTION != 0:
		b = append(b, byte(len(h.AuthResp)))
		b = append(b, h.AuthResp...)
	default:
		b = append(b, h.AuthResp...)
		b = append(b, 0)
	}
	if h.Caps&mysql.CLIENT_CONNECT_WITH_DB != 0 {
		b = append(b, h.DB...)
		b = append(b, 0)
	}
	if h.Caps&mysql.CLIENT_PLUGIN_AUTH != 0 {
		b = append(b, h.Plugin...)
		b = append(b, 0)
	}
	if h.Caps&mysql.CLIENT_CONNECT_ATTRS != 0 {
		var kv []byte
		for _, k := range slices.Sorted(maps.Keys(h.Attrs)) {
			kv = AppendLenEncString(kv, []byte(k))
			kv = AppendLenEncString(kv, []byte(h.Attrs[k]))
		}
		b = AppendLenEncString(b, kv)
	}
	return b
}

// AppendAuthSwitch appends an authentication switch request payload: the
// plugin to switch to and its data (a scramble), each NUL-terminated.
func AppendAuthSwitch(b []byte, plugin string, data []byte) []byte {
	b = append(b, HeaderEOF)
	b = append(b, plugin...)
	b = append(b, 0)
	b = append(b, data...)
	return append(b, 0)
}

// ParseAuthSwitch decodes an authentication switch request payload: the
// plugin and its data without the trailing NUL (aliasing p). ok is false
// when p is none or the plugin name is not terminated.
func ParseAuthSwitch(p []byte) (plugin string, data []byte, ok bool) {
	if len(p) < 1 || p[0] != HeaderEOF {
		return "", nil, false
	}
	i := bytes.IndexByte(p[1:], 0)
	if i < 0 {
		return "", nil, false
	}
	return string(p[1 : 1+i]), bytes.TrimSuffix(p[2+i:], []byte{0}), true
}
