package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/holdfast-db/holdfast/config"
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
	// SetControl puts a control of any kind (package controls) on key in
	// force on this instance, recording setBy as its author; LiftControl
	// lifts this instance's own. Controls lists every control in force
	// here, from every source; ControlOf the one of kind in force for
	// key.
	SetControl(kind, key string, value int64, reason, setBy string) error
	LiftControl(kind, key string) error
	Controls() []proxy.ControlState
	ControlOf(kind, key string) (proxy.ControlState, bool)
}

// Options configures an Admin. The zero value serves the API on a
// loopback listener with no credential (reads only), no profiles and no
// /metrics.
type Options struct {
	// Access is who may reach the listener and how; Reload replaces it.
	Access
	// Pprof serves Go's profiles under /debug/pprof/ (reads, guarded like
	// the API's); false serves none.
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
	// Ready says whether the instance is ready, for ReadyPath and
	// GET /api/status (probes.go); nil: ready whenever the listener
	// answers.
	Ready func() Readiness
	// Reload, when not nil, serves POST /api/reload (reload.go): the
	// configuration read again and applied, as on SIGHUP. nil serves no
	// such route.
	Reload Reloader
	// Failover is the failover section in force (failover.hold and
	// failover.max_held, as the last reload left them), shown with the
	// topology; nil shows none.
	Failover func() config.Failover
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
	access  atomic.Pointer[access] // replaced whole by Reload
	handler http.Handler
	hist    history
	limits  limitReasons
	refusal refusalLog

	loops  lifecycle.Loops // the sampler, from Serve to Close
	failed chan error      // a listener's Serve failed (not by Close or Reload): Serve returns it
	closed chan struct{}   // closed by Close

	// reloading serializes Reload with itself and with the start of
	// Serve, across the binding of a listener; no request takes it.
	reloading sync.Mutex

	mu sync.Mutex // guards following
	hs *http.Server
	ln *servedListener // the listener serving now; nil before Serve
}

// servedListener is one listener Serve or Reload put in service.
type servedListener struct {
	net.Listener
	retired atomic.Bool // closed by Reload: its Serve's end is no failure
}

// New returns the admin listener for srv. It starts nothing: Handler serves
// requests as they come, Serve also samples for the status page. A
// credential that makes no sense (no name, no token: config.Validate
// refuses them first) is logged and left out.
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
	ac, err := newAccess(o.Access)
	if err != nil {
		o.Log.Error("admin: credentials left out", "err", err)
	}
	a := &Admin{srv: srv, o: o, failed: make(chan error, 1), closed: make(chan struct{})}
	a.access.Store(ac)
	a.hist.max = o.History
	a.handler = a.routes()
	return a
}

// Listen is the address the listener serves on now (admin.listen, as the
// last Reload that succeeded set it).
func (a *Admin) Listen() string { return a.access.Load().Listen }

// Reload replaces who may reach the listener and how: the credentials,
// the TLS configuration and the address. A new address is bound first;
// only when that succeeded is the new Access put in force and the old
// listener closed (requests in progress on it finish). When it fails,
// nothing changes: the old listener, credentials and certificate stay in
// force, and the error says why. Reload may be called from any goroutine;
// before Serve, or after Close, it binds nothing.
func (a *Admin) Reload(ac Access) error {
	next, err := newAccess(ac)
	if err != nil {
		return err
	}
	a.reloading.Lock()
	defer a.reloading.Unlock()
	cur := a.access.Load()
	a.mu.Lock()
	hs, serving := a.hs, a.ln != nil && !a.isClosed()
	a.mu.Unlock()
	if ac.Listen == cur.Listen || !serving {
		a.access.Store(next)
		return nil
	}
	ln, err := net.Listen("tcp", ac.Listen)
	if err != nil {
		return fmt.Errorf("admin: admin.listen %s: %w (still serving on %s)", ac.Listen, err, cur.Listen)
	}
	sl := &servedListener{Listener: ln}
	a.mu.Lock()
	old := a.ln
	a.ln = sl
	a.access.Store(next)
	a.mu.Unlock()
	// After a Close, hs.Serve returns at once and closes sl.
	go a.serveOn(hs, sl)
	old.retired.Store(true)
	_ = old.Close()
	a.o.Log.Info("admin: listening on a new address", "addr", ac.Listen, "was", cur.Listen)
	return nil
}

func (a *Admin) isClosed() bool {
	select {
	case <-a.closed:
		return true
	default:
		return false
	}
}

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
	api.HandleFunc("PUT /api/tags/{tag}/{kind}", a.apiSetControl)
	api.HandleFunc("DELETE /api/tags/{tag}/{kind}", a.apiLiftControl)
	api.HandleFunc("GET /api/replicas", a.apiReplicas)
	api.HandleFunc("GET /api/topology", a.apiTopology)
	api.HandleFunc("GET /api/shapes", a.apiShapes)
	api.HandleFunc("PUT /api/shapes/{shape}/block", a.apiShapeBlock)
	api.HandleFunc("DELETE /api/shapes/{shape}/block", a.apiShapeUnblock)
	api.HandleFunc("PUT /api/shapes/{shape}/limit", a.apiShapeLimit)
	api.HandleFunc("DELETE /api/shapes/{shape}/limit", a.apiShapeUnlimit)
	api.HandleFunc("GET /api/controls", a.apiControls)
	api.HandleFunc("GET /api/fleet", a.apiFleet)
	api.HandleFunc("GET /api/explain", a.apiExplain)
	if a.o.Authority != nil {
		api.HandleFunc("GET /api/authority", a.apiAuthority)
		api.HandleFunc("PUT /api/authority", a.apiSetAuthority)
	}
	if a.o.Reload != nil {
		api.HandleFunc("POST /api/reload", a.apiReload)
	}
	api.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such request: %s %s (README.md, \"Admin API\", lists them)", r.Method, r.URL.Path)
	})

	mux := http.NewServeMux()
	mux.Handle("/", a.guard(api))
	// The status page's shell is static and public: a browser navigating to
	// it cannot send a bearer token. Its requests carry one when the person
	// gave it.
	mux.HandleFunc("GET /{$}", servePage)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.HandlerFunc(serveStatic)))
	// The probes too: a kubelet sends no credential (probes.go).
	a.probeRoutes(mux)
	return mux
}

// ListenAndServe listens on the Access's Listen and serves until Close
// (see Serve).
func (a *Admin) ListenAndServe() error {
	a.reloading.Lock()
	ln, err := net.Listen("tcp", a.Listen())
	if err != nil {
		a.reloading.Unlock()
		return err
	}
	err = a.start(ln)
	a.reloading.Unlock()
	if err != nil {
		return err
	}
	return a.wait()
}

// Serve serves on ln, and on the listeners Reload puts in its place, and
// samples the server every Options.SampleEvery until Close; it returns nil
// after Close, or the error of a listener that failed. It closes ln.
// Connections are TLS while Access.TLS is set.
func (a *Admin) Serve(ln net.Listener) error {
	a.reloading.Lock()
	err := a.start(ln)
	a.reloading.Unlock()
	if err != nil {
		return err
	}
	return a.wait()
}

// start puts ln in service and starts the sampler. The caller holds
// reloading.
func (a *Admin) start(ln net.Listener) error {
	// WriteTimeout bounds every answer; a CPU profile or trace may ask for
	// up to a minute and a half (?seconds=90).
	hs := &http.Server{Handler: a.handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: time.Minute, ErrorLog: slog.NewLogLogger(a.o.Log.Handler(), slog.LevelWarn)}
	sl := &servedListener{Listener: ln}
	// hs and ln are stored before Start returns, under the lock Close
	// takes: a Close from then on shuts them down.
	err := a.loops.StartAfter(context.Background(), func(context.Context) {
		a.mu.Lock()
		a.hs, a.ln = hs, sl
		a.mu.Unlock()
	}, a.sampleLoop)
	if err != nil {
		_ = ln.Close()
		return errors.New("admin: Serve after Close, or twice")
	}
	go a.serveOn(hs, sl)
	return nil
}

// wait returns when Close is called (nil) or a listener fails.
func (a *Admin) wait() error {
	select {
	case err := <-a.failed:
		return err
	case <-a.closed:
		return nil
	}
}

// serveOn serves hs on ln until hs shuts down or Reload retires ln; any
// other end is a failure, for Serve to return.
func (a *Admin) serveOn(hs *http.Server, ln *servedListener) {
	err := hs.Serve(tlsListener{servedListener: ln, a: a})
	if errors.Is(err, http.ErrServerClosed) || ln.retired.Load() {
		return
	}
	select {
	case a.failed <- fmt.Errorf("admin: %w", err):
	default:
	}
}

// tlsListener makes each connection it accepts TLS while the Access in
// force has a TLS configuration, so a reload turns TLS on or off, or
// changes the certificate, for the connections that follow.
type tlsListener struct {
	*servedListener
	a *Admin
}

func (l tlsListener) Accept() (net.Conn, error) {
	c, err := l.servedListener.Accept()
	if err != nil {
		return nil, err
	}
	if cfg := l.a.access.Load().TLS; cfg != nil {
		return tls.Server(c, cfg), nil
	}
	return c, nil
}

// Close stops the sampler and the listener, letting requests in progress
// finish for up to two seconds. Idempotent.
func (a *Admin) Close() error {
	if !a.loops.Close() {
		return nil
	}
	a.mu.Lock()
	close(a.closed)
	hs := a.hs
	a.mu.Unlock()
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
