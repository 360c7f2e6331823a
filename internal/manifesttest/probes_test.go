package manifesttest

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy"
)

// checkProbeRoutes: holdfast's own admin handler, set up as the pod's
// holdfast sets it up (admin.listen off loopback, the configuration's
// credentials), answers each httpGet probe of c as the kubelet sends it
// (from the pod network, to the pod's IP, with the probe's headers and no
// credential): the liveness probe 200 whether or not holdfast is ready,
// the readiness and startup probes 503 until it is and 200 once it is;
// while the same request to the rest of the listener is refused for want
// of a credential.
func checkProbeRoutes(t *testing.T, where string, cfg config.Config, c *corev1.Container, ports map[string]int32) {
	t.Helper()
	srv, err := proxy.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Errorf("%s: the configuration builds no server: %v", where, err)
		return
	}
	defer srv.Close()
	ac := admin.Access{Listen: cfg.Admin.Listen}
	for _, cr := range cfg.Admin.AllCredentials() {
		scope, err := admin.ParseScope(cr.Scope)
		if err != nil {
			t.Fatal(err)
		}
		ac.Credentials = append(ac.Credentials, admin.Credential{Name: cr.Name, Scope: scope, Token: cr.Token})
	}
	var ready atomic.Bool
	h := admin.New(srv, admin.Options{Access: ac, Ready: func() admin.Readiness {
		if ready.Load() {
			return admin.Readiness{Ready: true}
		}
		return admin.Readiness{Unmet: []string{"backend: no backend connection has opened since start"}}
	}}).Handler()
	send := func(pr *corev1.Probe, path string) int {
		g := pr.HTTPGet
		port := g.Port.IntVal
		if g.Port.StrVal != "" {
			port = ports[g.Port.StrVal]
		}
		scheme := "http"
		if g.Scheme == corev1.URISchemeHTTPS {
			scheme = "https"
		}
		req := httptest.NewRequest(http.MethodGet, fmt.Sprintf("%s://10.244.1.7:%d%s", scheme, port, path), nil)
		req.RemoteAddr = "10.244.1.1:51234" // the node's kubelet
		for _, hd := range g.HTTPHeaders {
			req.Header.Add(hd.Name, hd.Value)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, p := range []struct {
		name string
		pr   *corev1.Probe
	}{{"livenessProbe", c.LivenessProbe}, {"readinessProbe", c.ReadinessProbe}, {"startupProbe", c.StartupProbe}} {
		if p.pr == nil || p.pr.HTTPGet == nil {
			continue // reported by checkSidecar
		}
		path := p.pr.HTTPGet.Path
		if code := send(p.pr, "/metrics"); code != http.StatusUnauthorized {
			t.Errorf("%s: %s's request to /metrics instead: %d, want 401 (the admin listener off loopback asks a credential)", where, p.name, code)
		}
		for _, r := range []bool{false, true} {
			ready.Store(r)
			want := http.StatusOK
			if path == admin.ReadyPath && !r {
				want = http.StatusServiceUnavailable
			}
			if code := send(p.pr, path); code != want {
				t.Errorf("%s: %s %s with holdfast ready=%v: %d, want %d", where, p.name, path, r, code, want)
			}
		}
	}
}
