package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
)

// admin is a fake admin API that records what it is asked.
type admin struct {
	srv  *httptest.Server
	mu   sync.Mutex // guards reqs
	reqs []string   // "METHOD escaped-path?query auth"
}

func newAdmin(t *testing.T) *admin {
	a := &admin{}
	mux := http.NewServeMux()
	reply := func(pattern, body string) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			a.mu.Lock()
			a.reqs = append(a.reqs, r.Method+" "+r.URL.EscapedPath()+"?"+r.URL.RawQuery+" "+r.Header.Get("Authorization"))
			a.mu.Unlock()
			if r.Header.Get("Authorization") == "Bearer wrong" {
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"error":"bad token"}`)
				return
			}
			io.WriteString(w, strings.ReplaceAll(body, "{tag}", r.PathValue("tag")))
		})
	}
	reply("GET /api/tags", `{"tags":[{"tag":"checkout","hold_seconds":12.5,"exec_seconds":3.1,"idle_in_transaction_seconds":8.9,"wait_seconds":0.4,"borrows":1200,"statements":5400,"errors":2,"transactions":1100,"slow_transactions":3,"held_now":2,"drained":false,"limit":0}],"folded":0}`)
	reply("GET /api/holders", `{"holders":[{"client_id":10042,"user":"app","tag":"checkout","held_for_seconds":0.250,"in_transaction":true,"statement":"UPDATE inventory SET ..."}]}`)
	reply("GET /api/pool", `{"open":8,"in_use":3,"idle":5,"waiting":0,"max":16,"acquired":123,"waited":4,"wait_seconds":0.02,"timeouts":0,"rejected":0,"clients":40,"pinned_sessions":1}`)
	reply("POST /api/tags/{tag}/drain", `{"tag":"{tag}","drained":true}`)
	reply("DELETE /api/tags/{tag}/drain", `{"tag":"{tag}","drained":false}`)
	reply("PUT /api/tags/{tag}/limit", `{"tag":"{tag}","limit":2}`)
	reply("DELETE /api/tags/{tag}/limit", `{"tag":"{tag}","limit":0}`)
	reply("PUT /api/tags/{tag}/max_transaction_time", `{"tag":"{tag}","max_transaction_seconds":2}`)
	reply("DELETE /api/tags/{tag}/max_transaction_time", `{"tag":"{tag}","max_transaction_seconds":0}`)
	reply("PUT /api/tags/{tag}/readonly", `{"tag":"{tag}","kind":"readonly","scope":"fleet","in_force_here":true,"here_now":"read-only","set_by":"envtok-owner/oncall","by_unverified":"oncall"}`)
	reply("DELETE /api/tags/{tag}/readonly", `{"tag":"{tag}","kind":"readonly","scope":"fleet","in_force_here":false,"here_now":""}`)
	reply("PUT /api/tags/{tag}/pause", `{"tag":"{tag}","kind":"pause","scope":"fleet","in_force_here":true,"here_now":"paused"}`)
	reply("DELETE /api/tags/{tag}/pause", `{"tag":"{tag}","kind":"pause","scope":"fleet","in_force_here":false,"here_now":""}`)
	reply("GET /api/authority", `{"version":4,"authority":"redis","shops":[],"percent":0,"changed_by":"config","reason":"","poll_interval_seconds":1,"redis_stale":false}`)
	reply("PUT /api/authority", `{"version":5,"authority":"redis","shops":[3],"percent":50,"changed_by":"admin API","reason":"x","poll_interval_seconds":1,"redis_stale":false}`)
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *admin) addr() string { return a.srv.Listener.Addr().String() }

func (a *admin) requests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.reqs...)
}

// holdfastctl runs the command with env as its whole environment.
func holdfastctl(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut strings.Builder
	code = run(context.Background(), args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		out, err string // substrings; "" means must be empty
	}{
		{[]string{"help"}, 0, "Usage:\n  holdfastctl [global flags] COMMAND", ""},
		{[]string{"-h"}, 0, "Commands:", ""},
		{[]string{"drain", "-h"}, 0, "drain TAG", ""},
		{nil, 2, "", "Usage:"},
		{[]string{"frobnicate"}, 2, "", `holdfastctl: unknown command "frobnicate"` + "\nRun 'holdfastctl help' for usage.\n"},
		{[]string{"tags", "-x"}, 2, "", "flag provided but not defined: -x"},
		{[]string{"tags", "extra"}, 2, "", "usage: holdfastctl tags\n"},
		{[]string{"limit", "checkout"}, 2, "", "usage: holdfastctl limit TAG N\n"},
		{[]string{"readonly"}, 2, "", "usage: holdfastctl readonly TAG\n"},
		{[]string{"readonly", "batch", "now"}, 2, "", "usage: holdfastctl readonly TAG\n"},
		{[]string{"readonly", "-h"}, 0, "readonly TAG", ""},
		{[]string{"resume"}, 2, "", "usage: holdfastctl resume TAG\n"},
		{[]string{"resume", "x", "off"}, 2, "", "usage: holdfastctl resume TAG\n"},
		{[]string{"limit", "checkout", "two"}, 2, "", `got "two"`},
		{[]string{"maxtxn", "checkout", "soon"}, 2, "", `got "soon"`},
		{[]string{"drain", "checkout v2"}, 2, "", `try "checkout_v2"`},
		{[]string{"top", "-interval", "0s"}, 2, "", "-interval 0s must be positive"},
		{[]string{"-addr", "ftp://x", "tags"}, 2, "", "bad -addr"},
		{[]string{"-timeout", "soon", "tags"}, 2, "", "invalid value"},
	} {
		code, out, errOut := holdfastctl(nil, tc.args...)
		if code != tc.code {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, code, tc.code, errOut)
		}
		for _, c := range []struct{ got, want string }{{out, tc.out}, {errOut, tc.err}} {
			if c.want == "" && c.got != "" || !strings.Contains(c.got, c.want) {
				t.Errorf("%q: output %q, want it to contain %q", tc.args, c.got, c.want)
			}
		}
	}
}

func TestCommands(t *testing.T) {
	a := newAdmin(t)
	env := map[string]string{"HOLDFAST_ADMIN_ADDR": a.addr(), "HOLDFAST_ADMIN_TOKEN": "envtok", "HOLDFAST_CTL_BY": "oncall"}
	for _, tc := range []struct {
		args []string
		req  string
		out  string
	}{
		{[]string{"tags"}, "GET /api/tags? Bearer envtok", "checkout         2    12.5      25             71    0.40     1200   5400  1100       2     3  -\n"},
		{[]string{"holders"}, "GET /api/holders? Bearer envtok", " 10042  app   checkout     250ms  yes     UPDATE inventory SET ...\n"},
		{[]string{"drain", "holdfast:reserve", "-grace", "30s", "-reason", "incident-123"},
			"POST /api/tags/holdfast%3Areserve/drain?by=oncall&grace=30s&reason=incident-123 Bearer envtok",
			"drained holdfast:reserve (incident-123): its new borrows fail fast, holders still holding after 30s are killed (undo: holdfastctl undrain holdfast:reserve)\n"},
		{[]string{"-token", "flagtok", "undrain", "checkout"}, "DELETE /api/tags/checkout/drain?by=oncall Bearer flagtok", "undrained checkout: its new borrows proceed\n"},
		{[]string{"limit", "checkout", "2", "-token", "flagtok"}, "PUT /api/tags/checkout/limit?by=oncall&max=2 Bearer flagtok", "limited checkout to 2 backend connections"},
		{[]string{"limit", "checkout", "2", "-reason", "INC-9"}, "PUT /api/tags/checkout/limit?by=oncall&max=2&reason=INC-9 Bearer envtok", "limited checkout to 2 backend connections"},
		{[]string{"limit", "checkout", "off"}, "DELETE /api/tags/checkout/limit?by=oncall Bearer envtok", "lifted the limit on checkout"},
		{[]string{"undrain", "--", "-odd-tag"}, "DELETE /api/tags/-odd-tag/drain?by=oncall Bearer envtok", "undrained -odd-tag"},
		{[]string{"maxtxn", "checkout", "2s"}, "PUT /api/tags/checkout/max_transaction_time?by=oncall&max=2s Bearer envtok", "longer than 2s are rolled back"},
		{[]string{"maxtxn", "checkout", "off"}, "DELETE /api/tags/checkout/max_transaction_time?by=oncall Bearer envtok", "lifted checkout's own max_transaction_time"},
		{[]string{"drain", "checkout", "-for", "30m", "-local", "-by", "alice"}, "POST /api/tags/checkout/drain?by=alice&for=30m0s&local=1 Bearer envtok", "drained checkout"},
		{[]string{"readonly", "batch_*", "-reason", "INC-42", "-for", "1h"}, "PUT /api/tags/batch_%2A/readonly?by=oncall&for=1h0m0s&reason=INC-42 Bearer envtok",
			"batch_* is read-only: its statements but reads, SHOW, SET, USE, BEGIN, COMMIT and ROLLBACK get error 9011 (lift: holdfastctl readonly batch_* off); on every holdfast instance, for 1h0m0s; set by envtok-owner/oncall (by unverified)\n"},
		{[]string{"readonly", "batch_*", "off"}, "DELETE /api/tags/batch_%2A/readonly?by=oncall Bearer envtok", "batch_* may write again; on every holdfast instance\n"},
		{[]string{"pause", "*", "-reason", "switchover"}, "PUT /api/tags/%2A/pause?by=oncall&reason=switchover Bearer envtok",
			"* is paused: its statements that need a new backend connection wait (open transactions go on), then get error 9010 past failover.hold (lift: holdfastctl pause * off); on every holdfast instance\n"},
		{[]string{"pause", "*", "off"}, "DELETE /api/tags/%2A/pause?by=oncall Bearer envtok", "* is no longer paused: held statements run; on every holdfast instance\n"},
		{[]string{"resume", "*"}, "DELETE /api/tags/%2A/pause?by=oncall Bearer envtok", "* is no longer paused: held statements run; on every holdfast instance\n"},
	} {
		before := len(a.requests())
		code, out, errOut := holdfastctl(env, tc.args...)
		if code != 0 || errOut != "" {
			t.Errorf("%q: exit %d, stderr %q", tc.args, code, errOut)
		}
		if !strings.Contains(out, tc.out) {
			t.Errorf("%q: stdout\n%s\nwant it to contain %q", tc.args, out, tc.out)
		}
		if reqs := a.requests()[before:]; len(reqs) != 1 || reqs[0] != tc.req {
			t.Errorf("%q: requests %q, want [%q]", tc.args, reqs, tc.req)
		}
	}
}

// TestAddrFlag: -addr after the command beats $HOLDFAST_ADMIN_ADDR, and no
// token means no Authorization header.
func TestAddrFlag(t *testing.T) {
	a := newAdmin(t)
	code, _, errOut := holdfastctl(map[string]string{"HOLDFAST_ADMIN_ADDR": "127.0.0.1:1"}, "tags", "-addr", "http://"+a.addr())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if reqs := a.requests(); len(reqs) != 1 || reqs[0] != "GET /api/tags? " {
		t.Errorf("requests %q", reqs)
	}
}

func TestTopOnce(t *testing.T) {
	a := newAdmin(t)
	code, out, errOut := holdfastctl(nil, "top", "-addr", a.addr(), "-once", "-interval", "10ms")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, w := range []string{"pool  open 8  in use 3  idle 5  waiting 0  max 16", "TAG", "LONGEST HOLDERS", "10042"} {
		if !strings.Contains(out, w) {
			t.Errorf("frame lacks %q:\n%s", w, out)
		}
	}
	if n := strings.Count(out, "pool  open"); n != 1 {
		t.Errorf("%d frames, want 1", n)
	}
	if n := len(a.requests()); n != 6 {
		t.Errorf("%d requests, want 6 (two snapshots)", n)
	}
}

func TestAPIErrorsExit1(t *testing.T) {
	a := newAdmin(t)
	code, out, errOut := holdfastctl(map[string]string{"HOLDFAST_ADMIN_TOKEN": "wrong"}, "-addr", a.addr(), "tags")
	if code != 1 || out != "" || !strings.Contains(errOut, "401 Unauthorized: bad token (the token from $HOLDFAST_ADMIN_TOKEN was refused") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	code, _, errOut = holdfastctl(nil, "-addr", dead, "drain", "checkout")
	if code != 1 || !strings.HasPrefix(errOut, "holdfastctl: cannot reach holdfast's admin API at "+dead) ||
		!strings.Contains(errOut, "admin.listen") || strings.Contains(errOut, "Run 'holdfastctl help'") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestCredentialSources: a token comes from -token-file, -token,
// $HOLDFAST_ADMIN_TOKEN_FILE or $HOLDFAST_ADMIN_TOKEN, a flag winning over
// the environment; two forms from one source, or a file that cannot be
// read, are usage errors that send nothing.
func TestCredentialSources(t *testing.T) {
	a := newAdmin(t)
	dir := t.TempDir()
	file := dir + "/tok"
	if err := os.WriteFile(file, []byte("filetok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		auth string
	}{
		{nil, []string{"-token-file", file, "tags"}, "Bearer filetok"},
		{map[string]string{"HOLDFAST_ADMIN_TOKEN_FILE": file}, []string{"tags"}, "Bearer filetok"},
		{map[string]string{"HOLDFAST_ADMIN_TOKEN": "envtok"}, []string{"tags"}, "Bearer envtok"},
		{map[string]string{"HOLDFAST_ADMIN_TOKEN": "envtok"}, []string{"tags", "-token-file", file}, "Bearer filetok"},
		{map[string]string{"HOLDFAST_ADMIN_TOKEN_FILE": file}, []string{"-token", "flagtok", "tags"}, "Bearer flagtok"},
		{nil, []string{"tags"}, ""},
	} {
		before := len(a.requests())
		code, _, errOut := holdfastctl(tc.env, append([]string{"-addr", a.addr()}, tc.args...)...)
		reqs := a.requests()
		if code != 0 || len(reqs) != before+1 || !strings.HasSuffix(reqs[len(reqs)-1], " "+tc.auth) {
			t.Errorf("%v %v: exit %d (%s), requests %q, want %q", tc.env, tc.args, code, errOut, reqs[before:], tc.auth)
		}
	}
	before := len(a.requests())
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"-token", "x", "-token-file", file, "tags"}, "give -token or -token-file, not both"},
		{map[string]string{"HOLDFAST_ADMIN_TOKEN": "x", "HOLDFAST_ADMIN_TOKEN_FILE": file}, []string{"tags"}, "are both set: set one"},
		{nil, []string{"-token-file", dir + "/missing", "drain", "checkout"}, "cannot read the token of -token-file " + dir + "/missing"},
		{nil, []string{"-ca-file", dir + "/missing", "tags"}, "bad -ca-file"},
		{nil, []string{"-ca-file", file, "tags"}, "no PEM certificate"},
	} {
		code, _, errOut := holdfastctl(tc.env, append([]string{"-addr", a.addr()}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v %v: exit %d, stderr %q, want %q", tc.env, tc.args, code, errOut, tc.want)
		}
	}
	if n := len(a.requests()); n != before {
		t.Errorf("usage errors sent %d requests", n-before)
	}
}
