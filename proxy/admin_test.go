package proxy_test

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy"
)

// The proxy's tests reach its admin API through the admin package, wired
// as cmd/holdfast wires it.
func init() {
	proxy.AdminHandlerForTest = func(s *proxy.Server, cfg config.Admin) http.Handler {
		reg := prometheus.NewRegistry()
		reg.MustRegister(admin.NewCollector(s, s.Recorder()))
		return admin.New(s, admin.Options{Listen: cfg.Listen, Token: cfg.Token, Pprof: cfg.Pprof, Gatherer: reg}).Handler()
	}
}
