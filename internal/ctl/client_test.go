package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestEscapeSegment(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"checkout", "checkout"},
		{"holdfast:reserve", "holdfast%3Areserve"},
		{"a.b-c_D9", "a.b-c_D9"},
		{"a/b", "a%2Fb"},
		{"a b%?#", "a%20b%25%3F%23"},
		{"ü", "%C3%BC"},
	} {
		if got := escapeSegment(tc.in); got != tc.want {
			t.Errorf("escapeSegment(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestClientRequests checks each call's method, escaped path, query and
// Authorization header, and that net/http's ServeMux gives the handler the
// tag back unescaped.
func TestClientRequests(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		call  func(c *Client) error
		route string // the pattern that must answer
		body  string
		want  request
	}{
		{"tags", func(c *Client) error { _, err := c.Tags(ctx); return err },
			"GET /api/tags", tagsJSON, request{Method: "GET", Path: "/api/tags"}},
		{"holders", func(c *Client) error { _, err := c.Holders(ctx); return err },
			"GET /api/holders", holdersJSON, request{Method: "GET", Path: "/api/holders"}},
		{"pool", func(c *Client) error { _, err := c.Pool(ctx); return err },
			"GET /api/pool", poolJSON, request{Method: "GET", Path: "/api/pool"}},
		{"drain", func(c *Client) error { _, err := c.Drain(ctx, "checkout", 0, ""); return err },
			"POST /api/tags/{tag}/drain", `{"tag":"checkout","drained":true}`,
			request{Method: "POST", Path: "/api/tags/checkout/drain", Tag: "checkout"}},
		{"drain grace reason", func(c *Client) error {
			_, err := c.Drain(ctx, "holdfast:reserve", 90*time.Second, "incident-123 db saturated")
			return err
		}, "POST /api/tags/{tag}/drain", `{"tag":"holdfast:reserve","drained":true}`,
			request{Method: "POST", Path: "/api/tags/holdfast%3Areserve/drain", Query: "grace=1m30s&reason=incident-123+db+saturated", Tag: "holdfast:reserve"}},
		{"undrain", func(c *Client) error { _, err := c.Undrain(ctx, "holdfast:reserve"); return err },
			"DELETE /api/tags/{tag}/drain", `{"tag":"holdfast:reserve","drained":false}`,
			request{Method: "DELETE", Path: "/api/tags/holdfast%3Areserve/drain", Tag: "holdfast:reserve"}},
		{"limit", func(c *Client) error { _, err := c.SetLimit(ctx, "a.b-c_D:9", 2, ""); return err },
			"PUT /api/tags/{tag}/limit", `{"tag":"a.b-c_D:9","limit":2}`,
			request{Method: "PUT", Path: "/api/tags/a.b-c_D%3A9/limit", Query: "max=2", Tag: "a.b-c_D:9"}},
		{"unlimit", func(c *Client) error { _, err := c.SetLimit(ctx, "checkout", 0, ""); return err },
			"DELETE /api/tags/{tag}/limit", `{"tag":"checkout","limit":0}`,
			request{Method: "DELETE", Path: "/api/tags/checkout/limit", Tag: "checkout"}},
	} {
		for _, token := range []string{"", "s3cret"} {
			t.Run(tc.name+"/token="+token, func(t *testing.T) {
				f := newFakeAdmin(t)
				f.answer(tc.route, http.StatusOK, tc.body)
				if err := tc.call(f.client(t, token)); err != nil {
					t.Fatal(err)
				}
				want := tc.want
				if token != "" {
					want.Auth = "Bearer " + token
				}
				if got := f.requests(); len(got) != 1 || got[0] != want {
					t.Errorf("requests = %+v, want [%+v]", got, want)
				}
			})
		}
	}
}

func TestClientDecodes(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/tags", 200, tagsJSON)
	f.answer("GET /api/pool", 200, poolJSON)
	f.answer("GET /api/holders", 200, holdersJSON)
	c := f.client(t, "")
	l, err := c.Tags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := Tag{Tag: "checkout", HoldSeconds: 12.5, ExecSeconds: 3.1, IdleInTransactionSeconds: 8.9, WaitSeconds: 0.4,
		Borrows: 1200, Statements: 5400, Errors: 2, Transactions: 1100, SlowTransactions: 3, HeldNow: 2}
	if len(l.Tags) != 5 || l.Tags[0] != want || !l.Tags[2].Drained || l.Tags[2].Limit != 2 {
		t.Errorf("tags = %+v", l)
	}
	p, err := c.Pool(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if wantP := (Pool{Open: 8, InUse: 3, Idle: 5, Max: 16, Acquired: 123, Waited: 4, WaitSeconds: 0.02, Clients: 40, PinnedSessions: 1}); p != wantP {
		t.Errorf("pool = %+v, want %+v", p, wantP)
	}
	hs, err := c.Holders(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(hs) != 4 || hs[0].ClientID != 10042 || hs[0].HeldForSeconds != 0.25 || !hs[0].InTransaction || hs[1].ClientID != 0 {
		t.Errorf("holders = %+v", hs)
	}
}

func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	tags := func(c *Client) error { _, err := c.Tags(ctx); return err }
	drain := func(c *Client) error { _, err := c.Drain(ctx, "nosuch", 0, ""); return err }
	for _, tc := range []struct {
		name    string
		token   string
		route   string
		status  int
		body    string
		call    func(*Client) error
		want    []string // substrings of the message
		notWant string
	}{
		{name: "401 without a token", route: "GET /api/tags", status: 401, body: `{"error":"missing bearer token"}`, call: tags,
			want: []string{"GET /api/tags at 127.0.0.1:", "401 Unauthorized: missing bearer token", "every command needs a credential",
				"set HOLDFAST_ADMIN_TOKEN_FILE (or -token-file FILE)"}},
		{name: "401 for a change without a token", route: "POST /api/tags/{tag}/drain", status: 401, body: `{"error":"admin: this request changes the fleet"}`, call: drain,
			want: []string{"401 Unauthorized", "(this command changes the fleet: it needs a write credential; set HOLDFAST_ADMIN_TOKEN_FILE (or -token-file FILE) " +
				"to a file holding the token of a credential in holdfast's admin.credentials with scope write)"}},
		{name: "401 with a token", token: "wrong", route: "GET /api/tags", status: 401, body: `{"error":"bad token"}`, call: tags,
			want: []string{"401 Unauthorized: bad token", "the token was refused: it is not one of holdfast's credentials"}, notWant: "-token"},
		{name: "403 with a read credential", token: "reader", route: "POST /api/tags/{tag}/drain", status: 403,
			body: `{"error":"admin: credential 'prometheus' has scope read: this request changes the fleet and needs a credential of scope write"}`, call: drain,
			want: []string{"403 Forbidden", "it needs a write credential, and the token is a read credential's"}},
		{name: "400 plain HTTP to TLS", route: "GET /api/tags", status: 400, body: "Client sent an HTTP request to an HTTPS server.", call: tags,
			want: []string{"use -addr https://HOST:PORT"}},
		{name: "404 unknown tag", route: "POST /api/tags/{tag}/drain", status: 404, body: `{"error":"unknown tag \"nosuch\""}`, call: drain,
			want: []string{"POST /api/tags/nosuch/drain at", `404 Not Found: unknown tag "nosuch"`}, notWant: "admin.listen"},
		{name: "500 with a body", route: "GET /api/tags", status: 500, body: `{"error":"stats: internal failure"}`, call: tags,
			want: []string{"500 Internal Server Error: stats: internal failure"}},
		{name: "500 without JSON", route: "GET /api/tags", status: 500, body: "panic: oops\ngoroutine 1", call: tags,
			want: []string{"500 Internal Server Error: panic: oops goroutine 1"}},
		{name: "unknown status", route: "GET /api/tags", status: 599, body: `{"error":"odd"}`, call: tags,
			want: []string{": 599: odd"}},
		{name: "2xx not JSON", route: "GET /api/tags", status: 200, body: "<html>Grafana</html>", call: tags,
			want: []string{"response is not a JSON object", "<html>Grafana</html>", "holdfast's admin.listen?"}},
		{name: "2xx JSON of another service", route: "GET /api/tags", status: 200, body: `{"status":"ok"}`, call: tags,
			want: []string{`response has no "tags" field`, "admin.listen"}},
		{name: "2xx wrong types", route: "GET /api/tags", status: 200, body: `{"tags":[{"tag":7}]}`, call: tags,
			want: []string{"cannot decode the response"}},
		{name: "escapes in a message", route: "GET /api/tags", status: 500, body: `{"error":"bad\u001b[31m red"}`, call: tags,
			want: []string{"bad?[31m red"}, notWant: "\x1b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeAdmin(t)
			f.answer(tc.route, tc.status, tc.body)
			err := tc.call(f.client(t, tc.token))
			var ae *Error
			if !errors.As(err, &ae) || ae.Status != tc.status {
				t.Fatalf("err = %v (%T), want an *Error with status %d", err, err, tc.status)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("message %q has %q", err, tc.notWant)
			}
		})
	}
}

// TestClientNotHoldfast is a 404 from a server without the admin API.
func TestClientNotHoldfast(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c, _ := NewClient(srv.URL, "", time.Second)
	_, err := c.Tags(context.Background())
	if err == nil || !strings.Contains(err.Error(), "404 Not Found: 404 page not found") ||
		!strings.Contains(err.Error(), "holdfast's admin.listen") {
		t.Errorf("err = %v", err)
	}
}

func TestClientConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, _ := NewClient(addr, "", time.Second)
	_, err = c.Tags(context.Background())
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 0 || !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("err = %v, want an *Error wrapping ECONNREFUSED", err)
	}
	for _, w := range []string{"cannot reach holdfast's admin API at " + addr + " (GET /api/tags)", "connection refused",
		"admin.listen set to " + addr, "-addr"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("message %q lacks %q", err, w)
		}
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	c, _ := NewClient(srv.URL, "", 50*time.Millisecond)
	_, err := c.Pool(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no answer within 50ms") || !strings.Contains(err.Error(), "admin.listen") {
		t.Errorf("err = %v", err)
	}
}

func TestClientContextCancelled(t *testing.T) {
	f := newFakeAdmin(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.client(t, "").Tags(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestNewClient(t *testing.T) {
	for _, tc := range []struct{ addr, base string }{
		{"127.0.0.1:6034", "http://127.0.0.1:6034"},
		{"[::1]:6034", "http://[::1]:6034"},
		{"holdfast.internal:6034", "http://holdfast.internal:6034"},
		{"https://ops.example.com/holdfast/", "https://ops.example.com/holdfast"},
	} {
		c, err := NewClient(tc.addr, "", 0)
		if err != nil || c.base != tc.base || c.Addr() != tc.addr {
			t.Errorf("NewClient(%q) = %+v, %v; want base %q", tc.addr, c, err, tc.base)
		}
	}
	for _, addr := range []string{"", "ftp://h:1", "http://", "h:1?x=1", "http://u:p@h:1", "::nope"} {
		var ue *UsageError
		if _, err := NewClient(addr, "", 0); !errors.As(err, &ue) {
			t.Errorf("NewClient(%q) err = %v, want a *UsageError", addr, err)
		}
	}
	var ue *UsageError
	if _, err := NewClient("h:1", "", -time.Second); !errors.As(err, &ue) {
		t.Errorf("negative timeout: err = %v", err)
	}
}

// TestClientPathPrefix serves the API under a reverse proxy's prefix.
func TestClientPathPrefix(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("DELETE /api/tags/{tag}/limit", 200, `{"tag":"holdfast:reserve","limit":0}`)
	front := httptest.NewServer(http.StripPrefix("/hf", f.srv.Config.Handler))
	defer front.Close()
	c, err := NewClient(front.URL+"/hf/", "", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SetLimit(context.Background(), "holdfast:reserve", 0, ""); err != nil {
		t.Fatal(err)
	}
	if got := f.requests(); len(got) != 1 || got[0].Tag != "holdfast:reserve" {
		t.Errorf("requests = %+v", got)
	}
}

// TestLocalToken: without a token, a request refused for want of one
// whose answer names holdfast's local token file is sent again once with
// the file's token, which later requests send too; a file that cannot be
// read is said in the message; a given token is never replaced.
func TestLocalToken(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "holdfast-admin.token")
	if err := os.WriteFile(path, []byte("local-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	refused := func(p string) string {
		b, _ := json.Marshal(map[string]string{"error": "admin: this request changes the fleet", "local_token_path": p})
		return string(b)
	}
	f := newFakeAdmin(t)
	f.mu.Lock()
	f.answers["POST /api/tags/{tag}/drain"] = func(n int) (int, string) {
		if rs := f.requests(); rs[len(rs)-1].Auth != "Bearer local-secret" {
			return 401, refused(path)
		}
		return 200, `{"tag":"checkout","drained":true,"scope":"fleet","set_by":"local"}`
	}
	f.mu.Unlock()
	c := f.client(t, "")
	s, err := c.Drain(ctx, "checkout", 0, "")
	if err != nil || s.SetBy != "local" {
		t.Fatalf("drain: %+v %v", s, err)
	}
	if _, err := c.Drain(ctx, "checkout", 0, ""); err != nil {
		t.Fatal(err)
	}
	var auths []string
	for _, r := range f.requests() {
		auths = append(auths, r.Auth)
	}
	if want := []string{"", "Bearer local-secret", "Bearer local-secret"}; !slices.Equal(auths, want) {
		t.Errorf("Authorization sent %q, want %q", auths, want)
	}

	// Unreadable, or a token given: no second try.
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct{ token, path, want string }{
		{"", missing, "holdfast's local token file " + missing + " could not be read: no such file or directory (run holdfastctl as holdfast's user"},
		{"mine", path, "the token was refused"},
		{"", "relative/path", "this command changes the fleet"},
	} {
		f := newFakeAdmin(t)
		f.answer("POST /api/tags/{tag}/drain", 401, refused(tc.path))
		_, err := f.client(t, tc.token).Drain(ctx, "checkout", 0, "")
		if err == nil || len(f.requests()) != 1 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("token %q, file %s: %d requests, %v", tc.token, tc.path, len(f.requests()), err)
		}
	}
}
