package admin

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestProbes: /livez and /readyz answer without a credential, on a
// listener off loopback (every other route there needs one), from any
// Host; /livez whatever the readiness, /readyz 200 or 503 with the
// conditions unmet. GET /api/status carries the readiness and the build.
func TestProbes(t *testing.T) {
	var ready atomic.Bool
	o := withCredentials(Options{SampleEvery: time.Hour, Ready: func() Readiness {
		if ready.Load() {
			return Readiness{Ready: true}
		}
		return Readiness{Unmet: []string{"backend: no backend connection has opened since start", "fleet: not read"}}
	}})
	o.Listen = "0.0.0.0:6034"
	h := New(newFake(), o).Handler()
	pod := "Remote-Addr: 10.1.2.3:40000"
	for _, host := range []string{"10.1.2.4:6034", "checkout-7d9f.example:6034", "-"} {
		if r := do(t, h, "GET", "/api/status", host, pod); r.status != 401 {
			t.Fatalf("/api/status without a credential off loopback: %d %s", r.status, r.body)
		}
		if r := do(t, h, "GET", LivePath, host, pod); r.status != 200 || !strings.Contains(r.body, `"status": "ok"`) {
			t.Errorf("%s (host %s) while unready: %d %s", LivePath, host, r.status, r.body)
		}
		r := do(t, h, "GET", ReadyPath, host, pod)
		var ans probeJSON
		decode(t, r, &ans)
		if r.status != 503 || ans.Status != "unready" || len(ans.Unmet) != 2 || !strings.HasPrefix(ans.Unmet[0], "backend:") {
			t.Errorf("%s (host %s) while unready: %d %s", ReadyPath, host, r.status, r.body)
		}
		// A wrong credential does not matter to a probe.
		if r := do(t, h, "HEAD", ReadyPath, host, pod, "Authorization: Bearer wrong"); r.status != 503 {
			t.Errorf("HEAD %s with a wrong token: %d", ReadyPath, r.status)
		}
	}
	var st statusJSON
	decode(t, do(t, h, "GET", "/api/status", "", pod, asReader), &st)
	if st.Readiness.Ready || len(st.Readiness.Unmet) != 2 || st.Version == "" || st.Commit == "" {
		t.Errorf("/api/status while unready: readiness %+v, version %q, commit %q", st.Readiness, st.Version, st.Commit)
	}
	ready.Store(true)
	if r := do(t, h, "GET", ReadyPath, "", pod); r.status != 200 || !strings.Contains(r.body, `"status": "ok"`) {
		t.Errorf("%s when ready: %d %s", ReadyPath, r.status, r.body)
	}
	if r := do(t, h, "POST", ReadyPath, "", pod); r.status == 200 {
		t.Errorf("POST %s: %d, want it refused", ReadyPath, r.status)
	}
	decode(t, do(t, h, "GET", "/api/status", "", pod, asReader), &st)
	if !st.Readiness.Ready || len(st.Readiness.Unmet) != 0 {
		t.Errorf("/api/status when ready: %+v", st.Readiness)
	}
	// Without Options.Ready, ready whenever it answers.
	if r := do(t, New(newFake(), Options{}).Handler(), "GET", ReadyPath, "", ""); r.status != 200 {
		t.Errorf("%s with no Ready: %d %s", ReadyPath, r.status, r.body)
	}
}

// TestReloadRoute: POST /api/reload needs a credential of scope write (on
// loopback too), runs the Reloader as that credential, and answers what
// it did: 200, or 422 when nothing was applied. Without a Reloader there
// is no such route.
func TestReloadRoute(t *testing.T) {
	var calls []string
	res := ReloadResult{Reloaded: true, File: "/etc/holdfast/config.yaml", Changed: []string{"pool.max"}}
	o := withCredentials(Options{SampleEvery: time.Hour, Reload: func(_ context.Context, by string) ReloadResult {
		calls = append(calls, by)
		return res
	}})
	h := New(newFake(), o).Handler()
	if r := do(t, h, "POST", "/api/reload", ""); r.status != 401 {
		t.Errorf("without a credential: %d %s", r.status, r.body)
	}
	if r := do(t, h, "POST", "/api/reload", "", asReader); r.status != 403 {
		t.Errorf("with a read credential: %d %s", r.status, r.body)
	}
	if r := do(t, h, "GET", "/api/reload", "", asWriter); r.status != 404 && r.status != 405 {
		t.Errorf("GET /api/reload: %d %s", r.status, r.body)
	}
	if len(calls) != 0 {
		t.Fatalf("reloads run by refused requests: %q", calls)
	}
	r := do(t, h, "POST", "/api/reload?by=alice", "", asWriter)
	var got ReloadResult
	decode(t, r, &got)
	if r.status != 200 || !got.Reloaded || len(got.Changed) != 1 || got.RestartRequired == nil || got.Refused == nil {
		t.Errorf("reload: %d %s", r.status, r.body)
	}
	res = ReloadResult{File: "/etc/holdfast/config.yaml", Error: "config: pool.max: must be positive"}
	r = do(t, h, "POST", "/api/reload", "", asWriter)
	decode(t, r, &got)
	if r.status != 422 || got.Reloaded || !strings.Contains(got.Error, "pool.max") || got.Changed == nil {
		t.Errorf("refused reload: %d %s", r.status, r.body)
	}
	if len(calls) != 2 || calls[0] != "oncall/alice" || calls[1] != "oncall" {
		t.Errorf("reloads run as %q, want [oncall/alice oncall]", calls)
	}
	if r := do(t, New(newFake(), withCredentials(Options{})).Handler(), "POST", "/api/reload", "", asWriter); r.status != 404 {
		t.Errorf("without a Reloader: %d %s", r.status, r.body)
	}
}
