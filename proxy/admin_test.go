package proxy_test

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/proxy"
)

// The proxy's tests reach its admin API through the admin package, wired
// as cmd/holdfast wires it.
func init() {
	proxy.AdminHandlerForTest = func(s *proxy.Server, cfg config.Admin) http.Handler {
		reg := prometheus.NewRegistry()
		reg.MustRegister(admin.NewCollector(s, s.Recorder()))
		// The configuration's credentials, and the harness's, with which
		// dbtest.Fetch sends changes.
		creds := []admin.Credential{{Name: holdfastproc.AdminCredential, Scope: admin.ScopeWrite, Token: holdfastproc.AdminToken}}
		for _, c := range cfg.AllCredentials() {
			scope, _ := admin.ParseScope(c.Scope)
			creds = append(creds, admin.Credential{Name: c.Name, Scope: scope, Token: c.Token})
		}
		return admin.New(s, admin.Options{Access: admin.Access{Listen: cfg.Listen, Credentials: creds}, Pprof: cfg.Pprof, Gatherer: reg}).Handler()
	}
}
