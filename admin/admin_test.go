package admin

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

func newFake() *fakeServer {
	return &fakeServer{
		stats: proxy.ServerStats{ClientsActive: 12, PinnedSessions: 1, Pins: map[string]uint64{"user_variable": 3},
			Pool: pool.Stats{Open: 4, InUse: 3, Idle: 1, Waiting: 2, Max: 4, Acquired: 900, Waited: 40,
				WaitTime: 1234567 * time.Microsecond}},
		waiting: proxy.Waiting{Pool: 2, TagLimit: 3, Pipeline: 1, ByTag: map[string]int{"capped": 3}},
		tags: []proxy.TagInfo{
			{Tag: "checkout", HoldSeconds: 12.3456789, ExecSeconds: 3.0004, IdleInTxnSeconds: 8.9, Borrows: 10, HeldNow: 2},
			{Tag: "capped", HoldSeconds: 1, HeldNow: 1, Limit: 1},
		},
		holders: []proxy.HolderInfo{
			{ClientID: 7, User: "app", Tag: "checkout", HeldFor: 1.7504622699999999, InTransaction: true, Statement: "UPDATE t SET n = n + ?"},
			{ClientID: 9, User: "app", Tag: "checkout", HeldFor: 0.0002, Statement: "SELECT ?"},
			{User: "holdfast", Tag: "holdfast:refill", HeldFor: 0.01},
		},
		gates: []proxy.GateState{
			{Tag: "capped", Limit: 1, InUse: 1},
			{Tag: "reports", Drained: true, DrainedAt: time.Date(2026, 5, 12, 14, 3, 0, 0, time.UTC), Reason: "INC-1", InUse: 1},
		},
		folded: 5,
	}
}

// TestAPIAnswers: every documented GET answers its contract; durations
// are written to the millisecond; waiting adds the tag-limit and pipeline
// queues to the pool's.
func TestAPIAnswers(t *testing.T) {
	h := New(newFake(), Options{}).Handler()

	a := do(t, h, "GET", "/api/holders", "")
	if a.status != 200 || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("/api/holders: %d %s", a.status, a.body)
	}
	for _, want := range []string{`"held_for_seconds": 1.750,`, `"held_for_seconds": 0,`, `"held_for_seconds": 0.010,`} {
		if !strings.Contains(a.body, want) {
			t.Errorf("/api/holders lacks %s:\n%s", want, a.body)
		}
	}
	if regexp.MustCompile(`\d\.\d{4,}`).MatchString(a.body) {
		t.Errorf("/api/holders has a number with more than three decimals:\n%s", a.body)
	}
	if b := do(t, h, "GET", "/api/tags", "").body; !strings.Contains(b, `"hold_seconds": 12.345679,`) {
		t.Errorf("totals are not written to the microsecond:\n%s", b)
	}

	var tags struct {
		Tags   []map[string]any `json:"tags"`
		Folded int              `json:"folded"`
	}
	a = do(t, h, "GET", "/api/tags", "")
	decode(t, a, &tags)
	if len(tags.Tags) != 2 || tags.Folded != 5 || tags.Tags[0]["hold_seconds"] != 12.345679 || tags.Tags[0]["exec_seconds"] != 3.0004 {
		t.Errorf("/api/tags: %s", a.body)
	}
	for _, k := range []string{"tag", "hold_seconds", "exec_seconds", "idle_in_transaction_seconds", "wait_seconds", "borrows",
		"statements", "errors", "transactions", "slow_transactions", "held_now", "drained", "limit"} {
		if _, ok := tags.Tags[0][k]; !ok {
			t.Errorf("/api/tags rows lack %q", k)
		}
	}

	var pool map[string]any
	a = do(t, h, "GET", "/api/pool", "")
	decode(t, a, &pool)
	for k, want := range map[string]any{"open": 4.0, "in_use": 3.0, "idle": 1.0, "max": 4.0, "waiting": 6.0, "waiting_pool": 2.0,
		"waiting_tag_limit": 3.0, "waiting_pipeline": 1.0, "wait_seconds": 1.234567, "clients": 12.0, "pinned_sessions": 1.0} {
		if pool[k] != want {
			t.Errorf("/api/pool %s = %v, want %v", k, pool[k], want)
		}
	}

	var gates struct {
		Gates []map[string]any `json:"gates"`
	}
	a = do(t, h, "GET", "/api/gates", "")
	decode(t, a, &gates)
	if len(gates.Gates) != 2 || gates.Gates[0]["waiting"] != 3.0 || gates.Gates[1]["in_use"] != 1.0 ||
		gates.Gates[1]["reason"] != "INC-1" || gates.Gates[1]["drained_at"] != "2026-05-12T14:03:00Z" {
		t.Errorf("/api/gates: %s", a.body)
	}
}

// TestAPIChanges: drain, undrain, limit and lift reach the server with
// their arguments; a limit's reason shows with the gate.
func TestAPIChanges(t *testing.T) {
	f := newFake()
	h := New(f, withCredentials(Options{})).Handler()
	for _, c := range []struct{ method, target, want string }{
		{"POST", "/api/tags/checkout/drain?grace=30s&reason=INC-9", `"grace_seconds": 30.000`},
		{"DELETE", "/api/tags/checkout/drain", `"drained": false`},
		{"PUT", "/api/tags/capped/limit?max=2&reason=INC-10", `"limit": 2`},
		{"DELETE", "/api/tags/holdfast%3Arefill/limit", `"limit": 0`},
		{"PUT", "/api/tags/checkout/max_transaction_time?max=2s", `"max_transaction_seconds": 2`},
		{"DELETE", "/api/tags/checkout/max_transaction_time", `"max_transaction_seconds": 0`},
	} {
		a := do(t, h, c.method, c.target, "", asWriter)
		if a.status != 200 || !strings.Contains(a.body, c.want) {
			t.Errorf("%s %s: %d %s, want %s", c.method, c.target, a.status, a.body, c.want)
		}
	}
	want := []string{"drain checkout INC-9 30s", "undrain checkout", "limit capped II", "limit holdfast:refill ",
		"maxtxn checkout 2s", "maxtxn checkout 0s"}
	if got := f.recorded(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}
	f.set(func(f *fakeServer) { f.gates[0].Limit = 2 })
	if a := do(t, h, "GET", "/api/gates", ""); !strings.Contains(a.body, `"limit_reason": "INC-10"`) {
		t.Errorf("the limit's reason is not shown: %s", a.body)
	}
}

// TestAPIErrors: every error is JSON with one "admin: " prefix.
func TestAPIErrors(t *testing.T) {
	f := newFake()
	h := New(f, withCredentials(Options{})).Handler()
	for _, c := range []struct {
		method, target string
		status         int
		want           string
	}{
		{"POST", "/api/tags/a%20b/drain", 400, `admin: \"a b\" is not a tag`},
		{"POST", "/api/tags/x/drain?grace=soon", 400, `admin: grace: want a duration`},
		{"PUT", "/api/tags/x/limit?max=-1", 400, `admin: max: want a connection count`},
		{"PUT", "/api/tags/x/max_transaction_time?max=soon", 400, `admin: max: want a duration`},
		{"GET", "/api/nothing", 404, `admin: no such request: GET /api/nothing`},
	} {
		a := do(t, h, c.method, c.target, "", asWriter)
		if a.status != c.status || !strings.Contains(a.body, `"error": "`+c.want) {
			t.Errorf("%s %s: %d %s, want %d %s", c.method, c.target, a.status, a.body, c.status, c.want)
		}
	}
	if calls := f.recorded(); len(calls) != 0 {
		t.Errorf("refused requests reached the server: %q", calls)
	}
}

// TestCredentials: on loopback, reads need no credential and every
// change needs one of scope write (401 without, 403 with one of scope
// read), and nothing reaches the server or the fleet's controls; a
// token that is not a credential's is refused even for a read. Off
// loopback, reads need a credential too. The status page's shell needs
// none.
func TestCredentials(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, fl := newFake(), &fakeFleet{}
	a := New(f, withCredentials(Options{Access: Access{LocalTokenPath: "/run/holdfast/admin.token"}, Pprof: true, Gatherer: reg, Fleet: fl}))
	h := a.Handler()
	for _, path := range []string{"/api/tags", "/api/status", "/metrics", "/debug/pprof/", "/debug/pprof/cmdline"} {
		for _, hdr := range [][]string{nil, {asReader}, {asWriter}} {
			if r := do(t, h, "GET", path, "", hdr...); r.status != 200 {
				t.Errorf("%s on loopback with %q: %d %s", path, hdr, r.status, r.body)
			}
		}
		for _, hdr := range []string{"Authorization: Bearer wrong", "Authorization: Basic " + writeToken, "Authorization: " + writeToken} {
			if r := do(t, h, "GET", path, "", hdr); r.status != 401 || !strings.Contains(r.body, "admin: the bearer token is not one of this listener's credentials") {
				t.Errorf("%s with %q: %d %s", path, hdr, r.status, r.body)
			}
		}
	}
	changes := []string{"POST /api/tags/checkout/drain?by=mallory", "DELETE /api/tags/checkout/drain", "PUT /api/tags/checkout/limit?max=1",
		"DELETE /api/tags/checkout/limit", "PUT /api/tags/checkout/max_transaction_time?max=1ms", "DELETE /api/tags/checkout/max_transaction_time",
		"PUT /api/tags/x/class?class=background", "DELETE /api/tags/x/class", "PUT /api/tags/x/route?policy=replica", "DELETE /api/tags/x/route",
		"PUT /api/shapes/0123456789abcdef/block", "DELETE /api/shapes/0123456789abcdef/block",
		"PUT /api/shapes/0123456789abcdef/limit?max=1", "DELETE /api/shapes/0123456789abcdef/limit"}
	for _, m := range changes {
		method, path, _ := strings.Cut(m, " ")
		r := do(t, h, method, path, "", "Remote-Addr: 127.0.0.1:5555")
		if r.status != 401 || r.header.Get("WWW-Authenticate") == "" ||
			!strings.Contains(r.body, "admin: this request changes the fleet: it needs a credential of scope write") ||
			!strings.Contains(r.body, `"local_token_path": "/run/holdfast/admin.token"`) {
			t.Errorf("%s without a credential: %d %s", m, r.status, r.body)
		}
		if r := do(t, h, method, path, ""); strings.Contains(r.body, `"local_token_path":`) {
			t.Errorf("%s from off this machine names the local token's file: %s", m, r.body)
		}
		if r := do(t, h, method, path, "", asReader); r.status != 403 || !strings.Contains(r.body, `admin: credential 'prometheus' has scope read`) {
			t.Errorf("%s with a read credential: %d %s", m, r.status, r.body)
		}
	}
	if calls, set := f.recorded(), fl.controls(); len(calls) != 0 || len(set) != 0 || len(fl.removed) != 0 {
		t.Fatalf("refused changes reached the server %q or the fleet %+v %q", calls, set, fl.removed)
	}
	for _, m := range changes {
		method, path, _ := strings.Cut(m, " ")
		if r := do(t, h, method, path, "", asWriter); r.status != 200 || !strings.Contains(r.body, `"set_by": "oncall`) {
			t.Errorf("%s with a write credential: %d %s", m, r.status, r.body)
		}
	}
	if set := fl.controls(); len(set) != 7 {
		t.Errorf("%d fleet controls set, want 7", len(set))
	}
	for _, path := range []string{"/", "/static/status.js", "/static/status.css"} {
		if r := do(t, h, "GET", path, ""); r.status != 200 || r.header.Get("Content-Security-Policy") == "" {
			t.Errorf("%s without a credential: %d %v", path, r.status, r.header)
		}
	}

	// Off loopback: reads need a credential, under any Host name.
	off := New(newFake(), withCredentials(Options{Access: Access{Listen: "10.1.2.3:6034"}, Gatherer: reg})).Handler()
	for _, path := range []string{"/api/tags", "/metrics"} {
		if r := do(t, off, "GET", path, "", "Remote-Addr: 127.0.0.1:5555"); r.status != 401 || !strings.Contains(r.body, "is not a loopback address: every request needs a credential") {
			t.Errorf("%s off loopback without a credential: %d %s", path, r.status, r.body)
		}
		if r := do(t, off, "GET", path, "holdfast.internal:6034", asReader); r.status != 200 {
			t.Errorf("%s off loopback with a read credential: %d %s", path, r.status, r.body)
		}
	}
	if r := do(t, off, "GET", "/", ""); r.status != 200 {
		t.Errorf("the shell off loopback: %d", r.status)
	}
}

// TestSetBy: a change records the name of the credential that made it,
// and "name/by" when the request gives a by, which the answer marks as the
// caller's unverified word; an over-long by is cut to the column's width.
func TestSetBy(t *testing.T) {
	fl := &fakeFleet{}
	h := New(newFake(), withCredentials(Options{Fleet: fl})).Handler()
	long := strings.Repeat("b", 300)
	for _, c := range []struct{ target, setBy, ans string }{
		{"/api/tags/checkout/drain", "oncall", `"set_by": "oncall"`},
		{"/api/tags/checkout/drain?by=alice", "oncall/alice", `"by_unverified": "alice"`},
		{"/api/tags/checkout/drain?by=oncall-lead", "oncall/oncall-lead", `"set_by": "oncall/oncall-lead"`},
		{"/api/tags/checkout/drain?by=" + long, "oncall/" + long[:255-len("oncall/")], `"set_by": "oncall/bbb`},
	} {
		a := do(t, h, "POST", c.target, "", asWriter)
		got := fl.controls()
		if a.status != 200 || !strings.Contains(a.body, c.ans) || len(got) == 0 || got[len(got)-1].SetBy != c.setBy {
			t.Errorf("POST %.60s: %d %s; set_by recorded %+v, want %q", c.target, a.status, a.body, got, c.setBy)
		}
		if c.setBy == "oncall" && strings.Contains(a.body, "by_unverified") {
			t.Errorf("POST %s: %s marks a by that was not given", c.target, a.body)
		}
	}
}

// TestReloadCredentials: Reload replaces the credentials whole; the old
// token is refused from then on. Credentials that make no sense are
// refused and change nothing.
func TestReloadCredentials(t *testing.T) {
	a := New(newFake(), withCredentials(Options{}))
	h := a.Handler()
	next := []Credential{{Name: "oncall2", Scope: ScopeWrite, Token: "n-0123456789abcdef"}}
	if err := a.Reload(Access{Credentials: next}); err != nil {
		t.Fatal(err)
	}
	if r := do(t, h, "POST", "/api/tags/x/drain", "", asWriter); r.status != 401 {
		t.Errorf("the old write token after a reload: %d %s", r.status, r.body)
	}
	if r := do(t, h, "POST", "/api/tags/x/drain", "", "Authorization: Bearer n-0123456789abcdef"); r.status != 200 || !strings.Contains(r.body, `"set_by": "oncall2"`) {
		t.Errorf("the new write token: %d %s", r.status, r.body)
	}
	if err := a.Reload(Access{Credentials: append(next, Credential{Name: "x/y", Scope: ScopeRead, Token: "t"})}); err == nil {
		t.Error("a credential named x/y was accepted")
	}
	if r := do(t, h, "POST", "/api/tags/x/drain", "", "Authorization: Bearer n-0123456789abcdef"); r.status != 200 {
		t.Errorf("after a refused reload: %d %s", r.status, r.body)
	}
}

// TestPprofOff: profiles are served only when enabled.
func TestPprofOff(t *testing.T) {
	h := New(newFake(), Options{}).Handler()
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/goroutine"} {
		if r := do(t, h, "GET", path, ""); r.status != 404 {
			t.Errorf("%s with pprof off: %d", path, r.status)
		}
	}
	h = New(newFake(), Options{Pprof: true}).Handler()
	if r := do(t, h, "GET", "/debug/pprof/goroutine?debug=1", ""); r.status != 200 || !strings.Contains(r.body, "goroutine profile") {
		t.Errorf("pprof on: %d %.100s", r.status, r.body)
	}
}

// TestHostCheck: without a credential, a Host that is not an address of
// the listener (a DNS-rebinding page's own name) is refused for every API
// request, reads included; the page's shell is still served. With a
// credential any Host name is fine.
func TestHostCheck(t *testing.T) {
	f := newFake()
	h := New(f, withCredentials(Options{Access: Access{Listen: "127.0.0.1:6034"}})).Handler()
	for _, host := range []string{"127.0.0.1:6034", "localhost:6034", "LOCALHOST", "[::1]:6034", "10.1.2.3:6034"} {
		if r := do(t, h, "GET", "/api/tags", host); r.status != 200 {
			t.Errorf("Host %s: %d %s", host, r.status, r.body)
		}
	}
	for _, host := range []string{"rebind.example:6034", "127.0.0.1.nip.example:6034", "localhost.example", "holdfast-admin:6034", "-"} {
		for _, m := range []string{"GET /api/holders", "POST /api/tags/checkout/drain", "GET /api/status"} {
			method, path, _ := strings.Cut(m, " ")
			r := do(t, h, method, path, host)
			if r.status != 403 || !strings.Contains(r.body, "admin: host ") {
				t.Errorf("%s with Host %q: %d %s", m, host, r.status, r.body)
			}
		}
	}
	if r := do(t, h, "GET", "/", "rebind.example:6034"); r.status != 200 {
		t.Errorf("the shell under another host: %d", r.status)
	}
	if calls := f.recorded(); len(calls) != 0 {
		t.Errorf("a DNS-rebinding request reached the server: %q", calls)
	}
	if r := do(t, h, "GET", "/api/tags", "holdfast.internal:6034", asReader); r.status != 200 {
		t.Errorf("with a credential, Host holdfast.internal: %d %s", r.status, r.body)
	}
}

// TestOriginCheck: a change requested by a page of another origin is
// refused (and does not reach the server), whatever the method; the same
// request from the listener's own page, or from a client that is not a
// browser, passes. Reads from elsewhere are left to the browser's
// same-origin policy.
func TestOriginCheck(t *testing.T) {
	f := newFake()
	h := New(f, withCredentials(Options{})).Handler()
	const host = "127.0.0.1:6034"
	for _, hdr := range [][]string{
		{"Origin: http://evil.example"},
		{"Origin: http://127.0.0.1:8080"}, // same site, another port: another origin
		{"Origin: null"},
		{"Sec-Fetch-Site: cross-site", "Origin: http://evil.example"},
		{"Sec-Fetch-Site: same-site", "Origin: http://127.0.0.1:8080"},
		{"Sec-Fetch-Site: cross-site"},
	} {
		for _, m := range []string{"POST /api/tags/checkout/drain", "DELETE /api/tags/checkout/drain", "PUT /api/tags/checkout/limit?max=1"} {
			method, path, _ := strings.Cut(m, " ")
			r := do(t, h, method, path, host, append(hdr, asWriter)...)
			if r.status != 403 || !strings.Contains(r.body, "admin: cross-origin request refused") {
				t.Errorf("%s with %q: %d %s", m, hdr, r.status, r.body)
			}
		}
	}
	if calls := f.recorded(); len(calls) != 0 {
		t.Fatalf("cross-origin changes reached the server: %q", calls)
	}
	for _, hdr := range [][]string{
		{"Origin: http://127.0.0.1:6034", "Sec-Fetch-Site: same-origin"},
		{"Origin: http://127.0.0.1:6034"},
		nil, // holdfastctl, curl
	} {
		if r := do(t, h, "POST", "/api/tags/checkout/drain", host, append(hdr, asWriter)...); r.status != 200 {
			t.Errorf("drain with %q: %d %s", hdr, r.status, r.body)
		}
	}
	if r := do(t, h, "GET", "/api/tags", host, "Origin: http://evil.example", "Sec-Fetch-Site: cross-site"); r.status != 200 {
		t.Errorf("a cross-origin read: %d", r.status)
	}
	if got := len(f.recorded()); got != 3 {
		t.Errorf("%d drains reached the server, want 3", got)
	}
}

// TestShellHeaders: the page may not be framed (a hidden click on its
// drain button) and loads nothing from elsewhere.
func TestShellHeaders(t *testing.T) {
	h := New(newFake(), Options{}).Handler()
	r := do(t, h, "GET", "/", "")
	if r.status != 200 || !strings.Contains(r.body, `<script src="/static/status.js"`) {
		t.Fatalf("/: %d %.200s", r.status, r.body)
	}
	csp := r.header.Get("Content-Security-Policy")
	for _, want := range []string{"frame-ancestors 'none'", "default-src 'none'", "script-src 'self'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if r.header.Get("X-Frame-Options") != "DENY" {
		t.Error("no X-Frame-Options: DENY")
	}
	if r := do(t, h, "GET", "/static/index.html", ""); r.status != 404 {
		t.Errorf("/static/index.html: %d", r.status)
	}
	for _, f := range []string{"index.html", "status.js"} {
		b, err := pageFiles.ReadFile("page/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "http://") && f == "index.html" || strings.Contains(string(b), "https://") ||
			strings.Contains(string(b), "innerHTML") {
			t.Errorf("%s loads from elsewhere or writes markup", f)
		}
	}
}

// TestCollectorLint: the metrics keep the naming rules and their names.
func TestCollectorLint(t *testing.T) {
	c := NewCollector(newFake(), attribution.NewRecorder(attribution.Options{}))
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	n, err := testutil.GatherAndCount(func() *prometheus.Registry {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(c)
		return reg
	}(), "holdfast_pool_connections", "holdfast_pool_waiters", "holdfast_tag_held_connections", "holdfast_tag_drained")
	if err != nil || n < 4 {
		t.Errorf("%d series (%v)", n, err)
	}
}

// TestCollectorDocumented: every metric the collector describes has its
// row in README.md's table of metrics, and the login counters come from
// the server's stats.
func TestCollectorDocumented(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	f := newFake()
	f.stats.LoginFailures, f.stats.LoginsWaiting = 7, 2
	c := NewCollector(f, attribution.NewRecorder(attribution.Options{}))
	ch := make(chan *prometheus.Desc, 256)
	c.Describe(ch)
	close(ch)
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	n := 0
	for d := range ch {
		m := name.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no name in %s", d)
		}
		n++
		if !strings.Contains(string(readme), "| `"+m[1]+"` |") {
			t.Errorf("%s is not in README.md's table of metrics", m[1])
		}
	}
	if n < 20 {
		t.Fatalf("only %d metrics described", n)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP holdfast_login_failures_total Failed logins (wrong password, unknown or refused user), at the handshake and COM_CHANGE_USER.
# TYPE holdfast_login_failures_total counter
holdfast_login_failures_total 7
# HELP holdfast_logins_waiting Logins waiting out the delay after failed attempts from their user and address (auth.failure_delay).
# TYPE holdfast_logins_waiting gauge
holdfast_logins_waiting 2
`), "holdfast_login_failures_total", "holdfast_logins_waiting"); err != nil {
		t.Error(err)
	}
}

// TestServeClose: Serve samples and answers until Close, which is
// idempotent.
func TestServeClose(t *testing.T) {
	a := New(newFake(), Options{SampleEvery: time.Hour})
	ln := newListener(t)
	done := make(chan error, 1)
	go func() { done <- a.Serve(ln) }()
	resp, err := http.Get("http://" + ln.Addr().String() + "/api/pool")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/api/pool: %s", resp.Status)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Serve after Close = %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(a.hist.snapshot()) != 1 {
		t.Errorf("Serve took %d samples, want the first one", len(a.hist.snapshot()))
	}
}
