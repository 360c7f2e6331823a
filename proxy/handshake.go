package proxy

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	"github.com/go-mysql-org/go-mysql/mysql"
	"github.com/go-mysql-org/go-mysql/server"
)

// advertisedCaps are added to go-mysql's greeting. go-mysql only lets a
// server toggle a few flags, but drivers such as go-sql-driver/mysql only
// use what the greeting offers, and multiStatements=true and
// clientFoundRows=true are ordinary application settings. holdfast honours
// both per client (COM_SET_OPTION on the backend, and a FOUND_ROWS pool
// variant). DEPRECATE_EOF, QUERY_ATTRIBUTES, COMPRESS and LOCAL_FILES are
// deliberately not offered.
const advertisedCaps = mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_FOUND_ROWS

// User is an account clients may log in as.
type User struct {
	Name       string
	Password   string
	AuthPlugin string // mysql_native_password or caching_sha2_password
	Admin      bool
	DefaultTag string
}

// users is the authentication handler go-mysql asks for credentials. The
// map is swapped whole on reload.
type users struct {
	m atomic.Pointer[map[string]User]
}

func (u *users) set(list []User) {
	m := make(map[string]User, len(list))
	for _, x := range list {
		if x.AuthPlugin == "" {
			x.AuthPlugin = mysql.AUTH_NATIVE_PASSWORD
		}
		m[x.Name] = x
	}
	u.m.Store(&m)
}

func (u *users) get(name string) (User, bool) {
	x, ok := (*u.m.Load())[name]
	return x, ok
}

// GetCredential implements server.AuthenticationHandler.
func (u *users) GetCredential(name string) (server.Credential, bool, error) {
	x, ok := u.get(name)
	if !ok {
		// An unknown user gets the same "Access denied" as a wrong
		// password (go-mysql would say ER_NO_SUCH_USER and reveal which
		// names exist): a password no one can know.
		return server.Credential{Passwords: []string{unknownUserPassword}, AuthPluginName: mysql.AUTH_NATIVE_PASSWORD}, true, nil
	}
	return server.Credential{Passwords: []string{x.Password}, AuthPluginName: x.AuthPlugin}, true, nil
}

// OnAuthSuccess implements server.AuthenticationHandler.
func (u *users) OnAuthSuccess(*server.Conn) error { return nil }

// OnAuthFailure implements server.AuthenticationHandler.
func (u *users) OnAuthFailure(*server.Conn, error) {}

var unknownUserPassword = hex.EncodeToString(mysql.RandomBuf(32))

// handshakeHandler receives the only Handler callback go-mysql makes during
// the handshake: the database named in the handshake response.
type handshakeHandler struct{ db string }

func (h *handshakeHandler) UseDB(db string) error { h.db = db; return nil }
func (h *handshakeHandler) HandleQuery(string) (*mysql.Result, error) {
	return nil, errors.New("proxy: unexpected query during handshake")
}
func (h *handshakeHandler) HandleFieldList(string, string) ([]*mysql.Field, error) {
	return nil, errors.New("proxy: unexpected field list during handshake")
}
func (h *handshakeHandler) HandleStmtPrepare(string) (int, int, any, error) {
	return 0, 0, nil, errors.New("proxy: unexpected prepare during handshake")
}
func (h *handshakeHandler) HandleStmtExecute(any, string, []any) (*mysql.Result, error) {
	return nil, errors.New("proxy: unexpected execute during handshake")
}
func (h *handshakeHandler) HandleStmtClose(any) error { return nil }
func (h *handshakeHandler) HandleOtherCommand(byte, []byte) error {
	return errors.New("proxy: unexpected command during handshake")
}

// handshakeConn carries a client connection through go-mysql's handshake.
// It adds advertisedCaps and the AUTOCOMMIT status to the greeting, and it
// reads the client's packets exactly — never past the end of the current
// packet — so that go-mysql's read-ahead buffer holds nothing when holdfast
// takes the connection over. After an SSLRequest it passes bytes through
// untouched (TLS records follow).
type handshakeConn struct {
	net.Conn
	greeted  bool
	raw      bool // pass-through: TLS started, or handshake over
	packets  int  // client packets read so far
	hdr      [4]byte
	hdrN     int // header bytes read of the current packet
	left     int // payload bytes left in the current packet
	connID   uint32
	greeting []byte
}

func (h *handshakeConn) Write(p []byte) (int, error) {
	if h.greeted {
		return h.Conn.Write(p)
	}
	h.greeted = true
	g := patchGreeting(append([]byte(nil), p...))
	if _, err := h.Conn.Write(g); err != nil {
		return 0, err
	}
	return len(p), nil
}

// patchGreeting ORs advertisedCaps into a protocol-10 greeting packet
// (header included) and sets the AUTOCOMMIT status flag.
func patchGreeting(g []byte) []byte {
	if len(g) < 6 || g[4] != 10 {
		return g
	}
	nul := bytes.IndexByte(g[5:], 0)
	if nul < 0 {
		return g
	}
	pos := 5 + nul + 1 + 4 + 8 + 1 // version, connection id, salt part 1, filler
	if len(g) < pos+7 {
		return g
	}
	caps := uint32(binary.LittleEndian.Uint16(g[pos:])) | uint32(binary.LittleEndian.Uint16(g[pos+5:]))<<16
	caps |= advertisedCaps
	binary.LittleEndian.PutUint16(g[pos:], uint16(caps))
	binary.LittleEndian.PutUint16(g[pos+3:], statusAutocommit)
	binary.LittleEndian.PutUint16(g[pos+5:], uint16(caps>>16))
	return g
}

func (h *handshakeConn) Read(p []byte) (int, error) {
	if h.raw {
		return h.Conn.Read(p)
	}
	if h.hdrN < 4 {
		n, err := h.Conn.Read(p[:min(len(p), 4-h.hdrN)])
		copy(h.hdr[h.hdrN:], p[:n])
		h.hdrN += n
		if h.hdrN == 4 {
			h.left = int(h.hdr[0]) | int(h.hdr[1])<<8 | int(h.hdr[2])<<16
			h.packets++
			h.endIfDone()
		}
		return n, err
	}
	n, err := h.Conn.Read(p[:min(len(p), h.left)])
	h.left -= n
	h.endIfDone()
	return n, err
}

func (h *handshakeConn) endIfDone() {
	if h.hdrN == 4 && h.left == 0 {
		// A 32-byte first packet is an SSLRequest: TLS follows.
		sslRequest := h.packets == 1 && int(h.hdr[0])|int(h.hdr[1])<<8|int(h.hdr[2])<<16 == 32
		h.hdrN = 0
		if sslRequest {
			h.raw = true
		}
	}
}

// tlsFiles loads TLS settings; both empty means no TLS.
func tlsFiles(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("proxy: load TLS key pair: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// rsaKey loads the caching_sha2_password RSA key, or generates one.
func rsaKey(file string) (*rsa.PrivateKey, error) {
	if file == "" {
		return rsa.GenerateKey(rand.Reader, 2048)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("proxy: read RSA key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("proxy: %s holds no PEM block", file)
	}
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("proxy: parse RSA key %s: %w", file, err)
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("proxy: %s is not an RSA key", file)
	}
	return rk, nil
}

var _ = io.EOF
