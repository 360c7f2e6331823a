package admin

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/proxy"
)

// Server is what the admin listener needs from the proxy; *proxy.Server
// satisfies it. Every method may be called from any goroutine at any time;
// the snapshots returned are the caller's to keep.
type Server interface {
	Stats() proxy.ServerStats
	Waiting() proxy.Waiting
	Tags() []proxy.TagInfo
	TagsFolded() uint64
	Holders() []proxy.HolderInfo // longest held first
	Gates() []proxy.GateState
	DrainTag(tag, reason string, grace time.Duration)
	UndrainTag(tag string)
	LimitTag(tag string, n int)                        // n == 0 lifts the limit
	SetMaxTransactionTime(tag string, d time.Duration) // d == 0 lifts the tag's own bound
	// SetTagClass puts the tags matching pattern in an overload class on
	// this instance ("" lifts this instance's own); ClassOf is a tag's
	// class in force.
	SetTagClass(pattern, class string) error
	ClassOf(tag string) string
	ClassStats() []proxy.ClassStat  // per overload class since start
	Replicas() []proxy.ReplicaState // backend.replicas and their state (none: nil)
	// SetTagRoute gives the tags matching pattern a routing policy on this
	// instance ("" lifts this instance's own); RouteOf is a tag's policy
	// in force.
	SetTagRoute(pattern, policy string) error
	RouteOf(tag string) string
}

// Options configures an Admin. The zero value serves the API with no
// token, no profiles and no /metrics.
type Options struct {
	// Listen is admin.listen: where ListenAndServe listens. Its host is
	// one the Host check accepts (besides IP addresses and localhost).
	Listen string
	// Token, when not empty, must come with every request as
	// "Authorization: Bearer <token>", except for the status page's shell
	// (the page itself asks for the token and sends it).
	Token string
	// Pprof serves Go's profiles under /debug/pprof/ (behind the token like
	// the API); false serves none.
	Pprof bool
	// Gatherer is served at /metrics, and the status page reads the
	// reservation engine's health (holdfast_reservation_*) from it. nil
	// serves no /metrics and shows no engine.
	Gatherer prometheus.Gatherer
	// SampleEvery is how often Serve samples the server for the status
	// page's rates and sparklines (0: 5 s); History is how many samples it
	// keeps (0: 72, six minutes at 5 s).
	SampleEvery time.Duration
	History     int
	// Authority, when not nil, is the Redis-migration kill switch served at
	// /api/authority (authority.go); nil serves no such route.
	Authority Authority
	// Fleet, when not nil, is where on-call controls are written for the
	// whole fleet (package fleet): drains, limits, max_transaction_time
	// and classes set through this listener go there unless the request says local=1.
	// nil keeps them to this instance.
	Fleet Fleet
	// Log receives refused requests and the on-call changes made through
	// this listener; nil discards them.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Fleet is what the admin API needs of the fleet's controls.
type Fleet interface {
	Set(ctx context.Context, c fleet.Control, expires time.Duration) error
	Remove(ctx context.Context, tag string, kind fleet.Kind) (bool, error)
	Status() fleet.Status
}

// Admin is the admin listener's handler and lifecycle. Build it with New.
type Admin struct {
	srv     Server
	o       Options
	token   atomic.Pointer[string]
	handler http.Handler
	hist    history
	limits  limitReasons
	refusal refusalLog

	hs    atomic.Pointer[http.Server] // set once, by Serve
	loops lifecycle.Loops             // the sampler, from Serve to Close
}

// New returns the admin listener for srv. It starts nothing: Handler serves
// requests as they come, Serve also samples for the status page.
func New(srv Server, o Options) *Admin {
	if o.SampleEvery <= 0 {
		o.SampleEvery = 5 * time.Second
	}
	if o.History <= 0 {
		o.History = 72
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	a := &Admin{srv: srv, o: o}
	a.SetToken(o.Token)
	a.hist.max = o.History
	a.handler = a.routes()
	return a
}

// SetToken replaces the bearer token (on a configuration reload); "" drops
// the requirement.
func (a *Admin) SetToken(token string) { a.token.Store(&token) }

// Handler serves every route (see README.md, "Admin API").
func (a *Admin) Handler() http.Handler { return a.handler }

func (a *Admin) routes() http.Handler {
	api := http.NewServeMux()
	if a.o.Gatherer != nil {
		api.Handle("GET /metrics", promhttp.HandlerFor(a.o.Gatherer, promhttp.HandlerOpts{}))
	}
	if a.o.Pprof {
		api.HandleFunc("GET /debug/pprof/", pprof.Index)
		api.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		api.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		api.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		api.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	api.HandleFunc("GET /api/tags", a.apiTags)
	api.HandleFunc("GET /api/holders", a.apiHolders)
	api.HandleFunc("GET /api/pool", a.apiPool)
	api.HandleFunc("GET /api/gates", a.apiGates)
	api.HandleFunc("GET /api/status", a.apiStatus)
	api.HandleFunc("POST /api/tags/{tag}/drain", a.apiDrain)
	api.HandleFunc("DELETE /api/tags/{tag}/drain", a.apiUndrain)
	api.HandleFunc("PUT /api/tags/{tag}/limit", a.apiLimit)
	api.HandleFunc("DELETE /api/tags/{tag}/limit", a.apiUnlimit)
	api.HandleFunc("PUT /api/tags/{tag}/max_transaction_time", a.apiMaxTxn)
	api.HandleFunc("DELETE /api/tags/{tag}/max_transaction_time", a.apiUnMaxTxn)
	api.HandleFunc("PUT /api/tags/{tag}/class", a.apiClass)
	api.HandleFunc("DELETE /api/tags/{tag}/class", a.apiUnclass)
	api.HandleFunc("PUT /api/tags/{tag}/route", a.apiRoute)
	api.HandleFunc("DELETE /api/tags/{tag}/route", a.apiUnroute)
	api.HandleFunc("GET /api/replicas", a.apiReplicas)
	api.HandleFunc("GET /api/shapes", a.apiShapes)
	api.HandleFunc("PUT /api/shapes/{shape}/block", a.apiShapeBlock)
	api.HandleFunc("DELETE /api/shapes/{shape}/block", a.apiShapeUnblock)
	api.HandleFunc("PUT /api/shapes/{shape}/limit", a.apiShapeLimit)
	api.HandleFunc("DELETE /api/shapes/{shape}/limit", a.apiShapeUnlimit)
	api.HandleFunc("GET /api/controls", a.apiControls)
	api.HandleFunc("GET /api/fleet", a.apiFleet)
	if a.o.Authority != nil {
		api.HandleFunc("GET /api/authority", a.apiAuthority)
		api.HandleFunc("PUT /api/authority", a.apiSetAuthority)
	}
	api.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such request: %s %s (README.md, \"Admin API\", lists them)", r.Method, r.URL.Path)
	})

	mux := http.NewServeMux()
	mux.Handle("/", a.guard(api))
	// The status page's shell is static and public: a browser navigating to
	// it cannot send a bearer token. Its data requests carry one.
	mux.HandleFunc("GET /{$}", servePage)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(serveStatic)))
	return mux
}

// ListenAndServe listens on Options.Listen and serves until Close.
func (a *Admin) ListenAndServe() error {
	ln, err := net.Listen("tcp", a.o.Listen)
	if err != nil {
		return err
	}
	return a.Serve(ln)
}

// Serve serves on ln and samples the server every Options.SampleEvery until
// Close; it returns nil after Close. It closes ln.
func (a *Admin) Serve(ln net.Listener) error {
	// WriteTimeout bounds every answer; a CPU profile or trace may ask for
	// up to a minute and a half (?seconds=90).
	hs := &http.Server{Handler: a.handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: time.Minute, ErrorLog: slog.NewLogLogger(a.o.Log.Handler(), slog.LevelWarn)}
	// hs is stored before Start returns, under the lock Close takes: a
	// Close from then on shuts it down.
	if err := a.loops.StartAfter(context.Background(), func(context.Context) { a.hs.Store(hs) }, a.sampleLoop); err != nil {
		_ = ln.Close()
		return errors.New("admin: Serve after Close, or twice")
	}
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Close stops the sampler and the listener, letting requests in progress
// finish for up to two seconds. Idempotent.
func (a *Admin) Close() error {
	if !a.loops.Close() {
		return nil
	}
	hs := a.hs.Load()
	if hs == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return hs.Shutdown(ctx)
}

func (a *Admin) sampleLoop(ctx context.Context) {
	lifecycle.Every(ctx, a.o.SampleEvery, func(context.Context) { a.hist.add(a.sample()) })
}
