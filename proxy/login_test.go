package proxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// A password sent for a user configured with none is a wrong password:
// 1045, as MariaDB answers, not a dropped connection.
func TestLoginEmptyPasswordUser(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Users = append(c.Users, config.User{Name: "nopass"})
	})
	_, err := rawDial(p.addr, rawmysql.Options{User: "nopass", Password: "guess"})
	var e *mysqlwire.SQLError
	if !errors.As(err, &e) || e.Code != 1045 || e.State != "28000" || !strings.Contains(e.Msg, "'nopass'@'127.0.0.1' (using password: YES)") {
		t.Fatalf("non-empty password for a user without one: %v, want ERR 1045 (28000) Access denied ... (using password: YES)", err)
	}
	c, err := rawDial(p.addr, rawmysql.Options{User: "nopass"})
	if err != nil {
		t.Fatalf("empty password for a user without one: %v", err)
	}
	defer c.NC.Close()
	c.t = t
	if v := c.value("SELECT 'in'"); v != "in" {
		t.Fatal(v)
	}
	_, err = rawDial(p.addr, rawmysql.Options{User: "app"})
	if !errors.As(err, &e) || e.Code != 1045 || !strings.Contains(e.Msg, "(using password: NO)") {
		t.Fatalf("no password for a user with one: %v, want 1045 (using password: NO)", err)
	}
}

// writeTestCert writes a self-signed certificate for 127.0.0.1 and its key
// into dir.
func writeTestCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "holdfast test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// Clients may log in over TLS (go-sql-driver's tls=skip-verify), with
// either authentication plugin; without TLS, caching_sha2_password
// completes on its fast path (holdfast knows the password), so no RSA key
// exchange is needed.
func TestClientTLS(t *testing.T) {
	cert, key := writeTestCert(t, t.TempDir())
	p := startProxy(t, func(c *config.Config) { c.TLS.CertFile, c.TLS.KeyFile = cert, key })
	if c := greeted(t, p.addr); c.ServerCaps&rawmysql.CapSSL == 0 {
		t.Fatalf("greeting capabilities %#x lack CLIENT_SSL with tls.cert_file set", c.ServerCaps)
	}
	for _, tc := range []struct{ user, pass, params string }{
		{"app", "app", "tls=skip-verify"},
		{"sha", "sha-secret", "tls=skip-verify"},
		{"sha", "sha-secret", "tls=false"},
	} {
		db, err := sql.Open("mysql", p.dsn(tc.user, tc.pass, tc.params))
		if err != nil {
			t.Fatal(err)
		}
		var v string
		err = db.QueryRow("SELECT 'over tls'").Scan(&v)
		db.Close()
		if err != nil || v != "over tls" {
			t.Errorf("%s with %s: %q, %v", tc.user, tc.params, v, err)
		}
	}
	// A wrong password over TLS is still 1045.
	db, err := sql.Open("mysql", p.dsn("app", "wrong", "tls=skip-verify"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Ping(); mysqlErrNo(err) != 1045 {
		t.Fatalf("wrong password over TLS: %v, want 1045", err)
	}
}
