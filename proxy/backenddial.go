package proxy

import (
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// A backend connection's connection phase is go-mysql's client handshake
// (greeting, handshake response, authentication switches, caching_sha2's
// exchanges), run over a dialConn that sees it in plain text and adjusts
// what go-mysql cannot express:
//
//   - MariaDB's extended capabilities, which go-mysql does not know, go
//     into the handshake response (as a pool variant asks);
//   - TLS: the dialConn sends the SSLRequest itself, ahead of go-mysql's
//     handshake response, and runs everything after it over TLS, go-mysql
//     unaware (it is given no TLS configuration), shifting sequence ids by
//     one in both directions until the handshake ends;
//   - an account known by SHA1(password) alone (auth.from_backend) gets
//     its mysql_native_password responses computed from that hash.
//
// go-mysql's own TLS would wrap the connection the dialer returned, so
// holdfast's hook would see only ciphertext after the SSLRequest: the
// handshake response, the capabilities it carries and its scramble could
// no longer be adjusted. Hence TLS here, under go-mysql and above the
// socket.

// errBackendSetting marks a failed dial that a setting explains (a
// certificate that does not verify, a server without TLS where TLS is
// required): retrying will not help, and holdfast does not start with it.
var errBackendSetting = errors.New("proxy: backend setting")

// backendTLS is backend.tls, loaded: conf is nil when TLS is disabled.
type backendTLS struct {
	set  config.BackendTLS
	conf *tls.Config
}

// loadBackendTLS builds the TLS configuration of backend connections to
// address. Errors name the setting.
func loadBackendTLS(t config.BackendTLS, address string) (backendTLS, error) {
	bt := backendTLS{set: t}
	if t.Mode == "" || t.Mode == config.TLSDisabled {
		return bt, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return bt, fmt.Errorf("proxy: backend.tls.cert_file, key_file: %w", err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	var roots *x509.CertPool // nil: the system's
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return bt, fmt.Errorf("proxy: backend.tls.ca_file: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return bt, fmt.Errorf("proxy: backend.tls.ca_file: no PEM certificate in %s", t.CAFile)
		}
	}
	switch t.Mode {
	case config.TLSPreferred, config.TLSRequired:
		conf.InsecureSkipVerify = true
	case config.TLSVerifyCA:
		// The chain is checked, the name is not (as MySQL's VERIFY_CA).
		conf.InsecureSkipVerify = true
		conf.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("proxy: the backend sent no certificate")
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			_, err := cs.PeerCertificates[0].Verify(opts)
			return err
		}
	case config.TLSVerifyIdentity:
		conf.RootCAs = roots
		conf.ServerName = t.ServerName
		if conf.ServerName == "" {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return bt, fmt.Errorf("proxy: backend.address: %w", err)
			}
			conf.ServerName = host
		}
	default:
		return bt, fmt.Errorf("proxy: backend.tls.mode: unknown mode %q", t.Mode)
	}
	bt.conf = conf
	return bt, nil
}

// BackendTLSConfig is backend.tls for holdfast's other clients of the
// backend (the command-line tools' go-sql-driver connections): nil when
// TLS is disabled; fallback reports mode preferred (plain TCP when the
// server offers no TLS).
func BackendTLSConfig(b config.Backend) (conf *tls.Config, fallback bool, err error) {
	bt, err := loadBackendTLS(b.TLS, b.Address)
	if err != nil || bt.conf == nil {
		return nil, false, err
	}
	return bt.conf.Clone(), b.TLS.Mode == config.TLSPreferred, nil
}

// handshakeErr explains a failed TLS handshake with the setting at fault.
func (bt backendTLS) handshakeErr(err error) error {
	var unknownCA x509.UnknownAuthorityError
	var badName x509.HostnameError
	var invalid x509.CertificateInvalidError
	ca := "the system's roots (backend.tls.ca_file is empty)"
	if bt.set.CAFile != "" {
		ca = "backend.tls.ca_file (" + bt.set.CAFile + ")"
	}
	switch {
	case errors.As(err, &unknownCA):
		return fmt.Errorf("%w: the backend's TLS certificate is not signed by a CA in %s, as backend.tls.mode %s requires: %v", errBackendSetting, ca, bt.set.Mode, err)
	case errors.As(err, &badName):
		return fmt.Errorf("%w: the backend's TLS certificate does not name %q (backend.tls.server_name, else the host of backend.address), as backend.tls.mode %s requires: %v", errBackendSetting, bt.conf.ServerName, bt.set.Mode, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%w: the backend's TLS certificate is not valid for backend.tls.mode %s: %v", errBackendSetting, bt.set.Mode, err)
	}
	return fmt.Errorf("proxy: TLS handshake with the backend (backend.tls.mode %s): %w", bt.set.Mode, err)
}

// dialConn is a backend connection during its connection phase (see the
// top of this file). go-mysql writes each handshake packet whole, header
// included, in one Write; reads are served one server packet at a time
// until the handshake ends, and then pass through.
type dialConn struct {
	net.Conn                 // the TCP connection
	under    net.Conn        // where bytes go: Conn, then the TLS connection once it started
	ctx      context.Context // bounds the TLS handshake
	tls      backendTLS
	wantExt  uint32 // MariaDB extended capabilities to ask for, when offered
	hash     []byte // SHA1(password) when the account is known by it

	greeted  bool
	done     bool   // an OK or ERR ended authentication: bytes pass through
	seqOff   uint8  // 1 once an SSLRequest went ahead of go-mysql's packets
	pending  []byte // a server packet not yet handed to go-mysql
	salt     []byte // the greeting's scramble, then an auth switch's
	switched string // plugin of an auth switch whose response is due
	wrote    bool   // the handshake response went out
	srvCaps  uint32
	srvExt   uint32
	gotExt   uint32 // extended capabilities sent in the handshake response
	// failed is the error of a TLS start that failed: go-mysql reports
	// it as text only, and dialBackend returns it as it is.
	failed error
}

func (c *dialConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		if c.done {
			return c.under.Read(p)
		}
		if err := c.readServerPacket(); err != nil {
			return 0, err
		}
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// readServerPacket reads one packet of the connection phase into pending,
// noting what the handshake needs from it.
func (c *dialConn) readServerPacket() error {
	var hdr [4]byte
	if _, err := io.ReadFull(c.under, hdr[:]); err != nil {
		return err
	}
	n := int(hdr[0]) | int(hdr[1])<<8 | int(hdr[2])<<16
	pkt := make([]byte, 4+n)
	copy(pkt, hdr[:])
	if _, err := io.ReadFull(c.under, pkt[4:]); err != nil {
		return err
	}
	pkt[3] -= c.seqOff
	c.pending = pkt
	payload := pkt[4:]
	switch {
	case !c.greeted:
		c.greeted = true
		g, _ := mysqlwire.ParseGreeting(payload) // zero when it is none
		c.srvCaps, c.srvExt, c.salt = g.Caps, g.ExtCaps, g.Salt
	case n == 0:
	case payload[0] == mysqlwire.HeaderOK || payload[0] == mysqlwire.HeaderErr:
		c.done = true
	case payload[0] == mysqlwire.HeaderEOF: // an authentication switch: plugin name, scramble
		if plugin, data, ok := mysqlwire.ParseAuthSwitch(payload); ok {
			c.switched, c.salt = plugin, bytes.Clone(data)
		}
	}
	return nil
}

func (c *dialConn) Write(p []byte) (int, error) {
	if c.done || !c.greeted {
		return c.under.Write(p)
	}
	if len(p) < 4 || int(p[0])|int(p[1])<<8|int(p[2])<<16 != len(p)-4 {
		return 0, errors.New("proxy: backend handshake: a packet written in pieces")
	}
	q := bytes.Clone(p)
	switch {
	case !c.wrote:
		c.wrote = true
		c.patchResponse(q[4:])
		if err := c.startTLS(q); err != nil {
			c.failed = err
			return 0, err
		}
	case c.switched != "":
		if c.switched == pluginNative && c.hash != nil && len(q) == 4+20 {
			copy(q[4:], nativeScrambleHash(c.salt, c.hash))
		}
		c.switched = ""
	}
	q[3] += c.seqOff
	if _, err := c.under.Write(q); err != nil {
		return 0, err
	}
	return len(p), nil
}

// patchResponse adjusts the handshake response payload r in place: TLS and
// extended capabilities in its flags, the scramble computed from the hash.
func (c *dialConn) patchResponse(r []byte) {
	if len(r) < 32 {
		return
	}
	caps := binary.LittleEndian.Uint32(r)
	if c.tls.conf != nil && c.srvCaps&mysql.CLIENT_SSL != 0 {
		caps |= mysql.CLIENT_SSL
	}
	// Extended capabilities: CLIENT_LONG_PASSWORD off says they are there.
	var ext uint32
	if ext = c.wantExt & c.srvExt; ext != 0 && c.srvCaps&mysql.CLIENT_LONG_PASSWORD == 0 {
		caps &^= mysql.CLIENT_LONG_PASSWORD
		c.gotExt = ext
	} else {
		ext = 0
	}
	mysqlwire.SetResponseCaps(r, caps, ext)
	if c.hash == nil {
		return
	}
	if auth, plugin, ok := mysqlwire.ResponseAuth(r); ok && plugin == pluginNative && len(auth) == 20 {
		copy(auth, nativeScrambleHash(c.salt, c.hash))
	}
	// Any other plugin: the server switches a mysql_native_password
	// account to it, and the switch response is computed then.
}

// startTLS sends the SSLRequest (the first 32 bytes of the handshake
// response pkt, header and all) and runs the TLS handshake, when TLS is
// configured and, for mode preferred, offered.
func (c *dialConn) startTLS(pkt []byte) error {
	if c.tls.conf == nil {
		return nil
	}
	if c.srvCaps&mysql.CLIENT_SSL == 0 {
		if c.tls.set.Mode == config.TLSPreferred {
			return nil
		}
		return fmt.Errorf("%w: the backend offers no TLS, and backend.tls.mode is %s", errBackendSetting, c.tls.set.Mode)
	}
	req := make([]byte, 4+32)
	req[0], req[3] = 32, pkt[3]
	copy(req[4:], pkt[4:4+32])
	if _, err := c.Conn.Write(req); err != nil {
		return err
	}
	tc := tls.Client(c.Conn, c.tls.conf)
	if err := tc.HandshakeContext(c.ctx); err != nil {
		return c.tls.handshakeErr(err)
	}
	c.under, c.seqOff = tc, 1
	return nil
}

func (c *dialConn) Close() error { return c.under.Close() }

// nativeScrambleHash is mysql_native_password's response from
// SHA1(password): SHA1(password) XOR SHA1(salt + SHA1(SHA1(password))).
func nativeScrambleHash(salt, hash []byte) []byte {
	h2 := sha1.Sum(hash)
	h := sha1.New()
	h.Write(salt)
	h.Write(h2[:])
	out := h.Sum(nil)
	for i := range out {
		out[i] ^= hash[i]
	}
	return out
}

// dialInitSQL is backendInitSQL and, in the same round trip, what names
// the server a new connection reached (a name or a VIP may lead to
// another server than the last dial's; see topology.go). SHOW, not
// SELECT: a dial does not count as a read (Com_select).
const dialInitSQL = backendInitSQL + "; SHOW GLOBAL VARIABLES WHERE Variable_name IN ('hostname', 'port', 'server_id')"

// initDialed initialises a new connection (backendInitSQL) and reads
// which server it reached.
func (bc *backendConn) initDialed(ctx context.Context) error {
	res, err := bc.query(ctx, dialInitSQL)
	if err != nil {
		return err
	}
	vars := make(map[string]string, 3)
	for _, r := range res.rows {
		if len(r) == 2 {
			vars[strings.ToLower(string(r[0]))] = string(r[1])
		}
	}
	bc.server = serverIDOf(vars)
	return nil
}
