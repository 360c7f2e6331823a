package admin

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// get sends GET url (with the write token when auth) through c and
// returns the status, or the error of a request that got no answer.
func get(c *http.Client, url string, auth bool) (int, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+writeToken)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// serve runs a on a new loopback listener until the test ends, and
// returns the listener's address and Serve's result.
func serve(t *testing.T, o Options) (*Admin, string, <-chan error) {
	t.Helper()
	ln := newListener(t)
	o.Listen = ln.Addr().String()
	a := New(newFake(), o)
	done := make(chan error, 1)
	go func() { done <- a.Serve(ln) }()
	t.Cleanup(func() { _ = a.Close() })
	return a, o.Listen, done
}

// TestReloadListen: a new admin.listen is bound before the old listener
// is closed; the new address serves (under the new credentials), the old
// one refuses connections. A new address that cannot be bound changes
// nothing: the old listener and credentials stay in force. Serve returns
// nil after Close, the retired listener's end being no failure.
func TestReloadListen(t *testing.T) {
	a, first, done := serve(t, withCredentials(Options{SampleEvery: time.Hour}))
	c := &http.Client{Timeout: 5 * time.Second}
	if code, err := get(c, "http://"+first+"/api/pool", false); err != nil || code != 200 {
		t.Fatalf("first address: %d %v", code, err)
	}
	second := dbtest.FreeAddr(t)
	if err := a.Reload(Access{Listen: second, Credentials: testCredentials()}); err != nil {
		t.Fatal(err)
	}
	if a.Listen() != second {
		t.Errorf("Listen() = %s after the reload, want %s", a.Listen(), second)
	}
	if code, err := get(c, "http://"+second+"/api/pool", false); err != nil || code != 200 {
		t.Fatalf("the new address: %d %v", code, err)
	}
	c.CloseIdleConnections()
	if code, err := get(c, "http://"+first+"/api/pool", false); err == nil {
		t.Fatalf("the old address still answers: %d", code)
	}

	// An address in use: refused whole, the credentials with it.
	taken := newListener(t)
	defer taken.Close()
	err := a.Reload(Access{Listen: taken.Addr().String(), Credentials: []Credential{{Name: "x", Scope: ScopeWrite, Token: "x-0123456789abcdef"}}})
	if err == nil || !strings.Contains(err.Error(), "still serving on "+second) {
		t.Fatalf("Reload to an address in use: %v", err)
	}
	if a.Listen() != second {
		t.Errorf("Listen() = %s after a refused reload, want %s", a.Listen(), second)
	}
	if code, err := get(c, "http://"+second+"/api/tags", true); err != nil || code != 200 {
		t.Fatalf("after a refused reload, with the old credential: %d %v", code, err)
	}

	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close = %v", err)
	}
	if err := a.Reload(Access{Listen: dbtest.FreeAddr(t)}); err != nil {
		t.Errorf("Reload after Close: %v", err)
	}
}

// TestReloadTLS: with TLS set by a reload, the same listener speaks TLS
// to the connections that follow, with the certificate given; a plain
// HTTP request is refused.
func TestReloadTLS(t *testing.T) {
	a, addr, _ := serve(t, withCredentials(Options{SampleEvery: time.Hour}))
	certFile, keyFile := dbtest.WriteCert(t, t.TempDir())
	cfg, err := LoadTLS(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := LoadTLS(keyFile, certFile); err == nil || !strings.Contains(err.Error(), "admin: admin.tls") {
		t.Errorf("LoadTLS of swapped files: %v", err)
	}
	if err := a.Reload(Access{Listen: addr, Credentials: testCredentials(), TLS: cfg}); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, err := get(c, "https://"+addr+"/api/tags", true); err != nil || code != 200 {
		t.Fatalf("over TLS: %d %v", code, err)
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	if code, err := get(plain, "http://"+addr+"/api/tags", true); err == nil && code == 200 {
		t.Fatal("plain HTTP answered 200 on a TLS listener")
	}
	// A raw plain-text request is not answered as if TLS were off.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET /api/tags HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(conn)
	if strings.Contains(string(b), `"tags"`) {
		t.Fatalf("a plain-text request was answered: %s", b)
	}
}
