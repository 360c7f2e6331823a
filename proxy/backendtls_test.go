package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"database/sql"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gsd "github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// testPKI is a CA, a server certificate it signed (for 127.0.0.1 and
// db.test), and another CA that signed nothing of the server's.
type testPKI struct {
	ca, otherCA        string // PEM files
	serverCert, srvKey string
	pool               *x509.CertPool
	clientCert, cliKey string
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *rsa.PrivateKey {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	serial := int64(0)
	cert := func(tmpl *x509.Certificate, parent *x509.Certificate, pub, signer any) (*x509.Certificate, []byte) {
		serial++
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
		if parent == nil {
			parent = tmpl
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, signer)
		if err != nil {
			t.Fatal(err)
		}
		c, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		return c, der
	}
	caTmpl := func(cn string) *x509.Certificate {
		return &x509.Certificate{Subject: pkix.Name{CommonName: cn}, IsCA: true, BasicConstraintsValid: true,
			KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	}
	var p testPKI
	caKey := newKey()
	ca, caDER := cert(caTmpl("holdfast test CA"), nil, &caKey.PublicKey, caKey)
	p.ca = write("ca.pem", "CERTIFICATE", caDER)
	otherKey := newKey()
	_, otherDER := cert(caTmpl("another CA"), nil, &otherKey.PublicKey, otherKey)
	p.otherCA = write("other-ca.pem", "CERTIFICATE", otherDER)
	srvKey := newKey()
	_, srvDER := cert(&x509.Certificate{Subject: pkix.Name{CommonName: "db.test"}, DNSNames: []string{"db.test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}, ca, &srvKey.PublicKey, caKey)
	p.serverCert = write("server.pem", "CERTIFICATE", srvDER)
	p.srvKey = write("server-key.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(srvKey))
	cliKey := newKey()
	_, cliDER := cert(&x509.Certificate{Subject: pkix.Name{CommonName: "holdfast"}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca, &cliKey.PublicKey, caKey)
	p.clientCert = write("client.pem", "CERTIFICATE", cliDER)
	p.cliKey = write("client-key.pem", "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(cliKey))
	p.pool = x509.NewCertPool()
	p.pool.AddCert(ca)
	return p
}

// tlsMariaDB is a private MariaDB with certificates from a testPKI and
// require_secure_transport=ON, a database and an account for holdfast.
type tlsMariaDB struct {
	priv     *dbtest.Private
	pki      testPKI
	root     *sql.DB // root over TLS
	db, user string  // the account's password is its name
}

var tlsConfigSeq atomic.Int64

func startTLSMariaDB(t *testing.T) *tlsMariaDB {
	t.Helper()
	pki := newTestPKI(t)
	priv := dbtest.StartPrivate(t, "--ssl-ca="+pki.ca, "--ssl-cert="+pki.serverCert, "--ssl-key="+pki.srvKey)
	plain := priv.Open("")
	defer plain.Close()
	// mariadb-install-db leaves anonymous accounts, which would take
	// precedence over the test's own for connections from localhost.
	mustExec(t, plain, "DELETE FROM mysql.global_priv WHERE User = ''; FLUSH PRIVILEGES")
	mustExec(t, plain, "SET GLOBAL require_secure_transport = ON")
	name := fmt.Sprintf("hf-test-tls-%d", tlsConfigSeq.Add(1))
	if err := gsd.RegisterTLSConfig(name, &tls.Config{RootCAs: pki.pool, ServerName: "db.test"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { gsd.DeregisterTLSConfig(name) })
	root, err := sql.Open("mysql", "root@tcp("+priv.Addr+")/?multiStatements=true&tls="+name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	m := &tlsMariaDB{priv: priv, pki: pki, root: root, db: "hf_tls", user: "hf_tls_pool"}
	mustExec(t, root, "CREATE DATABASE hf_tls; CREATE USER hf_tls_pool IDENTIFIED BY 'hf_tls_pool'; "+
		"GRANT ALL ON hf_tls.* TO hf_tls_pool; GRANT PROCESS, CONNECTION ADMIN ON *.* TO hf_tls_pool")
	return m
}

// proxy starts holdfast in front of m with backend TLS settings tc.
func (m *tlsMariaDB) proxy(t *testing.T, tc config.BackendTLS, mutate ...func(*config.Config)) *testProxy {
	t.Helper()
	p := startProxy(t, append([]func(*config.Config){func(c *config.Config) {
		c.Backend.Address, c.Backend.User, c.Backend.Password, c.Backend.Database = m.priv.Addr, m.user, m.user, m.db
		c.Backend.TLS = tc
	}}, mutate...)...)
	p.db, p.user = m.db, m.user // the private server's, not the shared one's
	return p
}

// sslCipher is the TLS cipher MariaDB reports for the session that runs
// the statement: through holdfast, one of holdfast's backend connections.
func sslCipher(t *testing.T, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}) string {
	t.Helper()
	var name, v string
	if err := q.QueryRowContext(context.Background(), "SHOW SESSION STATUS LIKE 'Ssl_cipher'").Scan(&name, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TLS to the backend: a MariaDB with require_secure_transport=ON is
// reached in modes required, verify_ca and verify_identity, with a client
// certificate too; MariaDB reports a cipher for holdfast's connections
// (clients', the engine's); kills and the idle check work on them; a
// certificate that does not verify stops holdfast at start-up with an
// error naming the setting.
func TestBackendTLS(t *testing.T) {
	m := startTLSMariaDB(t)
	// MariaDB 10.11 answers a plain login under require_secure_transport
	// with 1045; the same account over TLS logs in.
	dsn := m.user + ":" + m.user + "@tcp(" + m.priv.Addr + ")/" + m.db
	for _, tc := range []struct {
		params string
		ok     bool
	}{{"", false}, {"?tls=skip-verify", true}} {
		db, err := sql.Open("mysql", dsn+tc.params)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Ping()
		db.Close()
		if (err == nil) != tc.ok {
			t.Fatalf("login to the private MariaDB with %q: %v", tc.params, err)
		}
	}

	for _, tc := range []struct {
		name string
		tls  config.BackendTLS
	}{
		{"required", config.BackendTLS{Mode: config.TLSRequired}},
		{"verify_ca", config.BackendTLS{Mode: config.TLSVerifyCA, CAFile: m.pki.ca}},
		{"verify_identity", config.BackendTLS{Mode: config.TLSVerifyIdentity, CAFile: m.pki.ca, ServerName: "db.test"}},
		{"verify_ca_client_cert", config.BackendTLS{Mode: config.TLSVerifyCA, CAFile: m.pki.ca, CertFile: m.pki.clientCert, KeyFile: m.pki.cliKey}},
		{"preferred", config.BackendTLS{Mode: config.TLSPreferred}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := m.proxy(t, tc.tls)
			db := p.open(t)
			if c := sslCipher(t, db); c == "" {
				t.Fatalf("Ssl_cipher of holdfast's backend connection is empty")
			}
			tx, err := db.Begin()
			if err != nil {
				t.Fatal(err)
			}
			mustExec(t, tx, "CREATE TABLE IF NOT EXISTS t_"+tc.name+" (id INT PRIMARY KEY)")
			mustExec(t, tx, "INSERT INTO t_"+tc.name+" VALUES (1)")
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM t_"+tc.name+" WHERE id = ?", 1).Scan(&n); err != nil || n != 1 {
				t.Fatalf("prepared statement over TLS: %d, %v", n, err)
			}
			ec, err := p.srv.BorrowEngine(context.Background(), "holdfast:test")
			if err != nil {
				t.Fatal(err)
			}
			rows, err := ec.Query(context.Background(), "SHOW SESSION STATUS LIKE 'Ssl_cipher'")
			ec.Release(err != nil)
			if err != nil || len(rows) != 1 || len(rows[0][1]) == 0 {
				t.Fatalf("the engine's connection: %q, %v", rows, err)
			}
			if v, err := CheckBackend(context.Background(), p.cfg); err != nil || !strings.Contains(v, "MariaDB") {
				t.Fatalf("CheckBackend: %q, %v", v, err)
			}
		})
	}

	t.Run("kill_and_idle_check", func(t *testing.T) {
		p := m.proxy(t, config.BackendTLS{Mode: config.TLSVerifyCA, CAFile: m.pki.ca}, func(c *config.Config) {
			c.Pool.PingAfterIdle = 0 // only the socket check vets a lend
		})
		victim := p.conn(t)
		vid := queryString(t, victim, "SELECT CONNECTION_ID()")
		errc := make(chan error, 1)
		go func() {
			var v int
			err := victim.QueryRowContext(context.Background(), "SELECT SLEEP(30)").Scan(&v)
			if err == nil && v != 1 {
				err = fmt.Errorf("SLEEP returned %d, not interrupted", v)
			}
			errc <- err
		}()
		waitFor(t, "the SLEEP running", func() bool {
			return queryString(t, m.root, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = 'SELECT SLEEP(30)'") == "1"
		})
		mustExec(t, p.open(t), "KILL QUERY "+vid) // sent by the kill connection, over TLS
		if err := <-errc; err != nil && mysqlErrNo(err) != 1317 {
			t.Fatalf("a killed SLEEP answers 1 or 1317, got %v", err)
		}

		db := p.open(t)
		db.SetMaxOpenConns(1)
		for range 5 {
			queryString(t, db, "SELECT 1")
		}
		st := p.srv.Stats().Pool
		if st.Closed[1] != 0 { // unhealthy
			t.Fatalf("idle TLS connections judged dead: %+v", st)
		}
		// MariaDB closes holdfast's idle connections; the next lend notices.
		mustExec(t, m.root, "SELECT 1")
		rows, err := m.root.Query("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = ?", m.user)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for rows.Next() {
			var id string
			_ = rows.Scan(&id)
			ids = append(ids, id)
		}
		rows.Close()
		for _, id := range ids {
			mustExec(t, m.root, "KILL CONNECTION "+id)
		}
		waitFor(t, "holdfast's backend connections gone", func() bool {
			return queryString(t, m.root, "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '"+m.user+"'") == "0"
		})
		if v := queryString(t, db, "SELECT 'after the kill'"); v != "after the kill" {
			t.Fatal(v)
		}
		if st := p.srv.Stats().Pool; st.Closed[1] == 0 {
			t.Fatalf("a closed TLS connection was not noticed before its lend: %+v", st)
		}
	})

	t.Run("extended_type_info", func(t *testing.T) {
		p := m.proxy(t, config.BackendTLS{Mode: config.TLSRequired})
		mustExec(t, p.open(t), "CREATE TABLE IF NOT EXISTS js (j JSON)")
		c := p.raw(t, rawmysql.Options{Ext: mysqlwire.ExtTypeInfo})
		if c.Ext != mysqlwire.ExtTypeInfo {
			t.Fatalf("extended type info not negotiated through holdfast: %#x", c.Ext)
		}
		if err := c.Command(append([]byte{rawmysql.ComQuery}, "SELECT j FROM js"...)); err != nil {
			t.Fatal(err)
		}
		ps, err := readResponse(c, respResults)
		if err != nil || len(ps) < 2 || !bytes.Contains(ps[1], []byte("json")) {
			t.Fatalf("column definition without MariaDB's extended type info over TLS: %s, %v", hexPackets(ps), err)
		}
	})

	t.Run("refused_at_start", func(t *testing.T) {
		for _, tc := range []struct {
			name string
			tls  config.BackendTLS
			addr string
			want []string
		}{
			{"wrong_ca", config.BackendTLS{Mode: config.TLSVerifyCA, CAFile: m.pki.otherCA}, m.priv.Addr,
				[]string{"backend.tls.ca_file (" + m.pki.otherCA + ")", "not signed"}},
			{"wrong_ca_identity", config.BackendTLS{Mode: config.TLSVerifyIdentity, CAFile: m.pki.otherCA, ServerName: "db.test"}, m.priv.Addr,
				[]string{"backend.tls.ca_file", "not signed"}},
			{"wrong_name", config.BackendTLS{Mode: config.TLSVerifyIdentity, CAFile: m.pki.ca, ServerName: "other.test"}, m.priv.Addr,
				[]string{"backend.tls.server_name", `"other.test"`}},
			{"no_tls_offered", config.BackendTLS{Mode: config.TLSRequired}, dbtest.Config(t).Addr,
				[]string{"offers no TLS", "backend.tls.mode is required"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				cfg := config.Default()
				cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", ""
				cfg.Backend.Address, cfg.Backend.User, cfg.Backend.Password, cfg.Backend.Database = tc.addr, m.user, m.user, ""
				cfg.Backend.TLS = tc.tls
				// Serve refuses to start only when its first dial fails
				// within dial_timeout; one that times out (a TLS
				// handshake under -race on a loaded machine) starts it.
				// The timeout is generous, and a Serve that starts anyway
				// fails the test rather than hanging it.
				cfg.Backend.DialTimeout = 30 * time.Second
				srv, err := New(cfg, testLogger(t))
				if err != nil {
					t.Fatal(err)
				}
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				served := make(chan error, 1)
				go func() { served <- srv.Serve(ln) }()
				bound := cfg.Backend.DialTimeout + 10*time.Second
				select {
				case err = <-served:
				case <-time.After(bound):
					srv.Close()
					t.Fatalf("Serve started (or is still starting) after %v; want a start-up error", bound)
				}
				srv.Close()
				for _, w := range tc.want {
					if err == nil || !strings.Contains(err.Error(), w) {
						t.Fatalf("Serve: %v, want a start-up error containing %q", err, w)
					}
				}
				if !errors.Is(err, errBackendSetting) {
					t.Fatalf("Serve: %v is not a setting's error", err)
				}
				if _, err := CheckBackend(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), tc.want[0]) {
					t.Fatalf("CheckBackend: %v, want %q", err, tc.want[0])
				}
			})
		}
	})
}

// preferred falls back to plain TCP in front of a server without TLS.
func TestBackendTLSPreferredPlain(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Backend.TLS = config.BackendTLS{Mode: config.TLSPreferred} })
	if c := sslCipher(t, p.open(t)); c != "" {
		t.Fatalf("Ssl_cipher %q in front of a server without TLS", c)
	}
}
