package proxy

import (
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// The connection phase is holdfast's own (the protocol's "Handshake V10"):
// greeting, optional TLS, the client's handshake response, an optional
// authentication method switch, and OK or ERR. holdfast knows every
// configured user's password, so it checks mysql_native_password and
// caching_sha2_password scrambles itself, always on caching_sha2's fast path
// (no RSA or clear-text exchange is ever needed); a user from the backend
// (auth.from_backend) is checked against the hash the backend stores (see
// login.go and frombackend.go).

// Authentication plugin names.
const (
	pluginNative = "mysql_native_password"
	pluginSHA2   = "caching_sha2_password"
)

// offeredCaps are the capabilities holdfast offers every client. Not
// offered: COMPRESS, DEPRECATE_EOF and QUERY_ATTRIBUTES (results are
// relayed as the backend, which negotiates neither, sends them).
// LOCAL_FILES is negotiated on backend connections as a pool variant, so
// that LOAD DATA LOCAL reaches the backend for clients that allow it and
// gets the backend's own refusal for those that do not (see
// localinfile.go). IGNORE_SPACE is honoured in the session's sql_mode; ODBC,
// IGNORE_SIGPIPE, RESERVED and CAN_HANDLE_EXPIRED_PASSWORDS change nothing
// on the wire and are offered as MariaDB offers them. SSL is added when
// TLS is configured; LONG_PASSWORD, which MariaDB reads as "a MySQL
// server", when MariaDB's extended capabilities are not offered.
const offeredCaps = mysql.CLIENT_FOUND_ROWS | mysql.CLIENT_LONG_FLAG | mysql.CLIENT_CONNECT_WITH_DB |
	mysql.CLIENT_ODBC | mysql.CLIENT_IGNORE_SPACE | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_INTERACTIVE |
	mysql.CLIENT_IGNORE_SIGPIPE | mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_RESERVED | mysql.CLIENT_LOCAL_FILES |
	mysql.CLIENT_SECURE_CONNECTION | mysql.CLIENT_MULTI_STATEMENTS | mysql.CLIENT_MULTI_RESULTS |
	mysql.CLIENT_PS_MULTI_RESULTS | mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_CONNECT_ATTRS |
	mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | mysql.CLIENT_CAN_HANDLE_EXPIRED_PASSWORDS |
	mysql.CLIENT_SESSION_TRACK

// relayableExt are the MariaDB extended capabilities holdfast honours
// when the backend offers them: each is negotiated on backend connections
// as a pool variant, so a client gets exactly the metadata format it asked
// for. Not offered: progress reports, COM_STMT_BULK_EXECUTE (not handled)
// and metadata caching (result metadata skipped on execute breaks lazy
// prepares).
const relayableExt = mysqlwire.ExtTypeInfo

// User is an account clients may log in as.
type User struct {
	Name       string
	Password   string
	AuthPlugin string // mysql_native_password or caching_sha2_password
	Admin      bool
	DefaultTag string // sessions take theirs from the user's bounds in force (userRules)

	account uint32 // backend account (see accounts.go); 0: backend.user
	hash2   []byte // a user from the backend: SHA1(SHA1(password)) as it stores it, Password unused
	// entry is the user's standing (userbounds.go): set once logged in,
	// with one of its client connections counted until the session ends
	// or changes user.
	entry *userEntry
}

// users is the configured accounts; the map is swapped whole on reload.
type users struct {
	m atomic.Pointer[map[string]User]
}

func (u *users) set(list []User) {
	m := make(map[string]User, len(list))
	for _, x := range list {
		if x.AuthPlugin == "" {
			x.AuthPlugin = pluginNative
		}
		m[x.Name] = x
	}
	u.m.Store(&m)
}

func (u *users) get(name string) (User, bool) {
	x, ok := (*u.m.Load())[name]
	return x, ok
}

// unknownUserPassword stands in for the password of a user that does not
// exist, so that an unknown user gets the same "Access denied" as a wrong
// password and names are not revealed.
var unknownUserPassword = string(newSalt())

// newSalt returns 20 random printable bytes (never NUL, which ends the
// scramble in the greeting).
func newSalt() []byte {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = 0x21 + b[i]%0x5e
	}
	return b
}

// greetingCaps returns the capabilities and MariaDB extended capabilities
// offered now: extended ones only in front of a MariaDB that offers them.
func (s *Server) greetingCaps() (caps, ext uint32) {
	caps = offeredCaps
	if s.tlsConf.Load() != nil {
		caps |= mysql.CLIENT_SSL
	}
	if bi := s.primary.info.Load(); bi != nil && bi.mariaDB {
		ext = bi.extCaps & relayableExt
	}
	if ext == 0 {
		caps |= mysql.CLIENT_LONG_PASSWORD
	}
	return caps, ext
}

// greetingCollation is the collation id announced in the greeting: the
// backend connections' own.
func (s *Server) greetingCollation() uint8 {
	if id, ok := collationID(s.config().Backend.Collation); ok {
		return id
	}
	return mysql.DEFAULT_COLLATION_ID
}

// handshakeIO is the connection phase's framing over one client connection.
type handshakeIO struct {
	nc net.Conn
	r  mysqlwire.Reader
	w  mysqlwire.Writer
}

func (h *handshakeIO) write(p []byte) error {
	if err := h.w.WritePacket(p); err != nil {
		return err
	}
	return h.w.FlushTurn(&h.r)
}

// read reads the client's next packet of at most limit bytes.
func (h *handshakeIO) read(limit int) ([]byte, error) {
	p, err := h.r.ReadPacket(nil, limit)
	h.w.Seq = h.r.Seq
	return p, err
}

// fail sends an ERR packet; the caller closes the connection.
func (h *handshakeIO) fail(e *mysqlwire.SQLError) error {
	_ = h.write(mysqlwire.AppendErr(nil, e))
	return e
}

// maxHello bounds a handshake response (connection attributes included).
const maxHello = 64 << 10

// connect runs the connection phase on nc. It returns the authenticated
// hello and user (one of its clients counted: see admitUser) and the
// connection to use from now on (TLS when the client asked for it), or an
// error after telling the client (when it can be told). release gives up
// the caller's handshake slot (see loginWait).
func (s *Server) connect(nc net.Conn, id uint32, release func()) (*mysqlwire.HandshakeResponse, User, net.Conn, error) {
	salt := newSalt
	if s.salt != nil {
		salt = s.salt
	}
	g := &mysqlwire.Greeting{
		Version:   *s.version.Load(),
		ConnID:    id,
		Salt:      salt(),
		Collation: s.greetingCollation(),
		Status:    mysqlwire.StatusAutocommit,
		Plugin:    pluginNative,
	}
	g.Caps, g.ExtCaps = s.greetingCaps()
	h := &handshakeIO{nc: nc, r: mysqlwire.Reader{Buf: mysqlwire.NewSmallReader(nc)}, w: mysqlwire.Writer{Buf: mysqlwire.NewSmallWriter(nc)}}
	if err := h.write(mysqlwire.AppendGreeting(nil, g)); err != nil {
		return nil, User{}, nil, err
	}
	p, err := h.read(maxHello)
	if err != nil {
		return nil, User{}, nil, err
	}
	if mysqlwire.IsSSLRequest(p) {
		tc := s.tlsConf.Load()
		if tc == nil || g.Caps&mysql.CLIENT_SSL == 0 {
			return nil, User{}, nil, h.fail(newErr(codeHandshake, "08S01", "Bad handshake: TLS was requested but holdfast offers none (tls.cert_file is not set)"))
		}
		// The client's TLS hello may already sit in the reader's buffer.
		tconn := tls.Server(&prefixConn{Conn: nc, r: h.r.Buf}, tc)
		if err := tconn.Handshake(); err != nil {
			return nil, User{}, nil, fmt.Errorf("proxy: TLS handshake: %w", err)
		}
		nc = tconn
		seq := h.r.Seq
		h = &handshakeIO{nc: nc, r: mysqlwire.Reader{Buf: mysqlwire.NewSmallReader(nc), Seq: seq}, w: mysqlwire.Writer{Buf: mysqlwire.NewSmallWriter(nc), Seq: seq}}
		if p, err = h.read(maxHello); err != nil {
			return nil, User{}, nil, err
		}
	}
	hello, err := parseHello(p, g)
	if err != nil {
		var se *mysqlwire.SQLError
		if errors.As(err, &se) {
			return nil, User{}, nil, h.fail(se)
		}
		return nil, User{}, nil, h.fail(newErr(codeHandshake, "08S01", "Bad handshake"))
	}
	remote, withPassword := nc.RemoteAddr(), len(hello.AuthResp) > 0
	if err := s.loginWait(loginKey(hello.User, remote), release); err != nil {
		return nil, User{}, nil, h.fail(s.loginRefused(hello.User, remote, withPassword))
	}
	_ = nc.SetDeadline(handshakeDeadline()) // the wait is not the client's
	u, why, se := s.resolveUser(hello.User, remote)
	if se != nil {
		return nil, User{}, nil, h.fail(se)
	}
	hash1, ok, err := authenticate(h, u, hello.Plugin, hello.AuthResp, g.Salt)
	if err != nil {
		return nil, User{}, nil, err
	}
	u, se = s.loginDone(u, why, hash1, ok, remote, withPassword)
	if se != nil {
		return nil, User{}, nil, h.fail(se)
	}
	if u, se = s.admitUser(u, hello.Attrs); se != nil {
		return nil, User{}, nil, h.fail(se)
	}
	welcome := mysqlwire.OK{Status: mysqlwire.StatusAutocommit}
	track := hello.Caps&mysql.CLIENT_SESSION_TRACK != 0
	if kb := s.keptBase(); track && hello.DB != "" && kb != nil && kb.Track.Schema {
		// As MariaDB: the schema the client named, tracked from the start.
		welcome.Status |= mysqlwire.StatusSessionChanged
		welcome.StateInfo = varstate.AppendStateEntry(nil, varstate.TrackSchema, mysqlwire.AppendLenEncString(nil, []byte(hello.DB)))
	}
	okp := mysqlwire.AppendOK(nil, welcome, track)
	if err := h.write(okp); err != nil {
		u.entry.release()
		return nil, User{}, nil, err
	}
	if h.r.Buf.Buffered() > 0 {
		// A client that pipelined its first command behind the handshake:
		// keep the buffered bytes for the session's reader.
		nc = &prefixConn{Conn: nc, r: h.r.Buf}
	}
	return hello, u, nc, nil
}

// parseHello decodes the client's handshake response to greeting g: its
// MariaDB extended capabilities are kept only as far as g offered them.
// A client too old for protocol 4.1 gets MySQL's error for it.
func parseHello(p []byte, g *mysqlwire.Greeting) (*mysqlwire.HandshakeResponse, error) {
	h, err := mysqlwire.ParseHandshakeResponse(p)
	if errors.Is(err, mysqlwire.ErrNoProtocol41) {
		return nil, newErr(codeAuthMode, "08004", "Client does not support authentication protocol requested by server; consider upgrading MySQL client")
	}
	if err != nil {
		return nil, err
	}
	h.ExtCaps &= g.ExtCaps
	return h, nil
}

// authenticate checks the client's scramble for u, switching the client
// to u's plugin first when it answered for another. An I/O error or a
// malformed switch response is returned as err; a wrong password as
// ok == false (the caller sends 1045). For a user from the backend it
// returns SHA1(password) too (see User.verify).
func authenticate(h *handshakeIO, u User, plugin string, resp, salt []byte) (hash1 []byte, ok bool, err error) {
	if plugin != u.AuthPlugin {
		if err := h.write(mysqlwire.AppendAuthSwitch(nil, u.AuthPlugin, salt)); err != nil {
			return nil, false, err
		}
		if resp, err = h.read(4096); err != nil {
			return nil, false, err
		}
	}
	if hash1, ok = u.verify(salt, resp); !ok {
		return nil, false, nil
	}
	if u.AuthPlugin == pluginSHA2 && !emptyAuth(resp) {
		if err := h.write([]byte{0x01, 0x03}); err != nil { // fast authentication succeeded
			return nil, false, err
		}
	}
	return hash1, true, nil
}

// emptyAuth reports an empty password's response: nothing, or one NUL
// (libmysqlclient sends that).
func emptyAuth(resp []byte) bool { return len(resp) == 0 || len(resp) == 1 && resp[0] == 0 }

// checkScramble verifies a client's scramble of password with salt under
// plugin, in constant time. An empty password matches only an empty
// response and an empty response only an empty password.
func checkScramble(plugin, password string, salt, resp []byte) bool {
	if password == "" || emptyAuth(resp) {
		return password == "" && emptyAuth(resp)
	}
	var want []byte
	switch plugin {
	case pluginNative:
		want = nativeScramble(salt, []byte(password))
	case pluginSHA2:
		want = sha2Scramble(salt, []byte(password))
	default:
		return false
	}
	return subtle.ConstantTimeCompare(want, resp) == 1
}

// nativeScramble is mysql_native_password:
// SHA1(password) XOR SHA1(salt + SHA1(SHA1(password))).
func nativeScramble(salt, password []byte) []byte {
	h1 := sha1.Sum(password)
	return nativeScrambleHash(salt, h1[:])
}

// sha2Scramble is caching_sha2_password's fast-path scramble:
// SHA256(password) XOR SHA256(SHA256(SHA256(password)) + salt).
func sha2Scramble(salt, password []byte) []byte {
	m1 := sha256.Sum256(password)
	m2 := sha256.Sum256(m1[:])
	h := sha256.New()
	h.Write(m2[:])
	h.Write(salt)
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= m1[i]
	}
	return out
}

// accessDenied is MySQL's 1045, naming the client's host without its port.
func accessDenied(user string, remote net.Addr, withPassword bool) *mysqlwire.SQLError {
	using := "NO"
	if withPassword {
		using = "YES"
	}
	host := remote.String()
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	return newErr(codeAccessDenied, "28000", "Access denied for user '%s'@'%s' (using password: %s)", user, host, using)
}

// prefixConn is a connection whose first bytes were already read into r.
type prefixConn struct {
	net.Conn
	r interface {
		Buffered() int
		Read([]byte) (int, error)
	}
}

func (c *prefixConn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p[:min(len(p), c.r.Buffered())])
		}
		c.r = nil
	}
	return c.Conn.Read(p)
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

// handshakeDeadline bounds the whole connection phase, TLS included, as
// MySQL's connect_timeout does.
func handshakeDeadline() time.Time { return time.Now().Add(handshakeTimeout) }
