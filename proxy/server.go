package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pingcap/tidb/pkg/parser/charset"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// fallbackVersion is advertised until the backend's own version is known.
const fallbackVersion = "8.0.0-holdfast"

// Handshakes take a slot of maxHandshakes (go-mysql allocates about 80 KiB
// of buffers for each), so a storm of reconnecting clients queues briefly
// instead of ballooning memory. A client waits at most slotWait for a slot
// and then goes ahead anyway: clients that connect and stay silent can
// fill the slots, but they cannot lock anyone out. Each handshake must
// finish within handshakeTimeout, as with MySQL's connect_timeout.
const (
	maxHandshakes    = 256
	slotWait         = 100 * time.Millisecond
	handshakeTimeout = 10 * time.Second
)

// Server is the MySQL-protocol front end: it accepts client connections,
// authenticates them, and runs one session per client over the shared pool.
//
// Lock order, once for the whole package (a lock may be taken while
// holding any before it, never after): Server.mu, then session.killMu,
// then session.mu, then pipes.mu, then pipe.mu, then the pool's and the
// wait queues' own locks; the controls table's lock (s.ctrl) before
// Server.mu and gates.mu; gates.mu before Server.mu (a limit coming into
// force counts the sessions' holds: markHolders) and before its queues'
// locks; killer.mu is
// taken with session.killMu held and nothing else; limitsMu before the
// pool's and accounts.mu; the backendUsers lookup slot before
// backendUsers.mu. No lock is held across I/O except killer.mu (one kill
// at a time, bounded), session.killMu (held while a kill is delivered) and
// the backendUsers lookup slot (one account lookup at a time; the wait for
// it and the lookup together are bounded by backend.exchange_timeout).
type Server struct {
	log   *slog.Logger
	pool  *pool.Pool[variant, *backendConn]
	users users
	procs Procedures
	rec   *attribution.Recorder
	gates gates
	// shapeGates hold the controls on statement shapes (shapes.go).
	shapeGates gates
	// classes are the overload classes of tags (classes.go).
	classes classes
	slow    slowLog
	engine  engineRegistry
	cmds    atomic.Uint64
	pipes   *pipes
	// pipelined counts statements run on a shared (pipelined) connection,
	// pipeReruns those run again after a kill meant for another.
	pipelined  atomic.Uint64
	pipeReruns atomic.Uint64
	// beginsAhead counts deferred BEGINs sent with the transaction's first
	// statement (see begin.go).
	beginsAhead atomic.Uint64
	attr        bool // per-tag accounting on (attribution.disabled false)

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc

	cfg     atomic.Pointer[config.Config]
	tlsConf atomic.Pointer[tls.Config]
	version atomic.Pointer[string]
	// primary is the backend holdfast sends everything to (backend.address)
	// but the reads routing sends to a replica.
	primary backend
	routing *routing // nil without backend.replicas
	// topo is which server is the primary (topology.go); never nil.
	topo *topology
	// fo counts the statements held while it has none (failover.go).
	fo failover
	// ctrl is the on-call controls of every source, and those in force
	// (controls.go).
	ctrl       controls.Table
	nextConnID atomic.Uint32
	salt       func() []byte // nil: random salts (tests fix them)
	clock      atomic.Int64  // UnixNano, advanced by the janitor (see now)
	// Prepared statements (see stmtcache.go).
	backendStmts atomic.Int64  // statements open on backend connections
	stmtRetries  atomic.Uint64 // prepares retried after 1461
	fleetSize    atomic.Int64  // live instances sharing the backend (SetFleetSize); 0: not known
	stmtRefs     stmtRefs
	slowHead     atomic.Int64  // nanoseconds; see defaultSlowHead
	killDelay    time.Duration // tests: a pause before each kill is sent, widening its window
	// protected is holdfast's own tables, which client statements may not
	// write, lock or alter (ProtectTables); nil: none.
	protected atomic.Pointer[sqlscan.Protected]

	// Backend accounts (the pool keys' high bits), and the logins that
	// reach them.
	accts      accounts
	limitsMu   sync.Mutex   // serialises SetLimits calls (see applyLimits)
	backendTLS backendTLS   // backend.tls, loaded
	beUsers    backendUsers // auth.from_backend's lookups and cache
	logins     loginDelays  // failed logins, per user and address
	userTable  userTable    // users' tags and client bounds, and their counters

	handshakes chan struct{}
	draining   atomic.Bool
	accepting  atomic.Bool               // Serve's accept loop runs (see Readiness)
	hold       atomic.Pointer[loginHold] // nil: no login waits (HoldLogins)
	wg         sync.WaitGroup

	mu       sync.Mutex // guards the fields below
	ln       net.Listener
	sessions map[uint32]*session
	closed   bool
	st       ServerStats
}

// Procedures answers CALL holdfast.<name>(...). Arguments are nil, int64,
// uint64, float64 or string; row values nil, int64, uint64, float64, string,
// []byte or time.Time. An error with a method
// MySQLError() (code uint16, sqlState, message string) reaches the client
// with that code; any other error as 1105.
type Procedures interface {
	Call(ctx context.Context, name string, args []any) (columns []string, rows [][]any, err error)
}

// ServerStats is a snapshot of the front end.
type ServerStats struct {
	ClientsActive     int
	ClientsTotal      uint64
	HandshakeFailures uint64
	Rejected          uint64      // over sessions.max_clients
	RejectedUser      uint64      // over a user's max_clients (users[] or auth.from_backend)
	Users             []UserStats // every user that logged in since start
	Commands          uint64
	Pipelined         uint64 // statements run on a shared connection
	PipelineReruns    uint64 // ... run again after a kill meant for the statement before them
	BeginsAhead       uint64 // deferred BEGINs sent in one write with the first statement
	PinnedSessions    int
	Pins              map[string]uint64 // pins by reason, since start
	Pool              pool.Stats
	// Prepared statements open on backend connections, the most this
	// instance keeps (0 until the backend's max_prepared_stmt_count is
	// known), and prepares retried after the server ran out (1461).
	BackendStatements int64
	StatementBudget   int
	StatementRetries  uint64
	// LoginFailures counts wrong passwords and unknown or refused users
	// (at the handshake and COM_CHANGE_USER); LoginsWaiting is logins
	// waiting out the delay earlier failures imposed, now.
	LoginFailures uint64
	LoginsWaiting int64
}

// New builds a server from cfg. It opens nothing; Serve starts it.
func New(cfg config.Config, log *slog.Logger) (*Server, error) {
	tc, err := tlsFiles(cfg.TLS.CertFile, cfg.TLS.KeyFile)
	if err != nil {
		return nil, err
	}
	btls, err := loadBackendTLS(cfg.Backend.TLS, cfg.Backend.Address)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		log:        log,
		ctx:        ctx,
		cancel:     cancel,
		handshakes: make(chan struct{}, maxHandshakes),
		sessions:   map[uint32]*session{},
		pipes:      newPipes(),
		backendTLS: btls,
		shapeGates: gates{shapes: true},
		topo:       newTopology(cfg.Routing.CheckInterval),
	}
	s.ctrl.OnChange = s.controlsChanged
	s.st.Pins = map[string]uint64{}
	s.rec = attribution.NewRecorder(attribution.Options{MaxTags: cfg.Attribution.MaxTags, RetireIdle: cfg.Attribution.RetireIdle})
	s.attr = !cfg.Attribution.Disabled
	s.cfg.Store(&cfg)
	s.tlsConf.Store(tc)
	if err := s.setUsers(cfg); err != nil {
		cancel()
		return nil, err
	}
	s.userTable.set(cfg)
	if err := s.setOwnAccount(cfg); err != nil {
		cancel()
		return nil, err
	}
	v := cfg.ServerVersion
	if v == "" {
		v = fallbackVersion
	}
	s.version.Store(&v)
	s.pool, err = pool.New(pool.Options[variant, *backendConn]{
		Dial: func(ctx context.Context, v variant) (*backendConn, error) {
			bs, err := s.dialSettings(v)
			if err != nil {
				return nil, err
			}
			bc, err := dialBackend(ctx, bs, v)
			if err == nil {
				bc.be = &s.primary
			}
			return bc, err
		},
		OnFirstDial: s.learnBackend,
		OnFree:      s.pipes.wakeOne,
		Log:         log,
	}, limitsFrom(cfg.Pool))
	if err != nil {
		cancel()
		return nil, fmt.Errorf("proxy: %w", err)
	}
	s.primary.pool = s.pool
	if s.routing, err = s.newRouting(cfg); err != nil {
		cancel()
		return nil, err
	}
	s.nextConnID.Store(firstConnID - 1)
	s.slowHead.Store(int64(defaultSlowHead))
	s.applyConfigGates(cfg.Tags)
	s.applyConfigClasses(cfg.Overload)
	return s, nil
}

// CheckBackend opens one backend connection with cfg's settings, closes it,
// and returns the server's version.
func CheckBackend(ctx context.Context, cfg config.Config) (string, error) {
	s := &Server{}
	s.cfg.Store(&cfg)
	var err error
	if s.backendTLS, err = loadBackendTLS(cfg.Backend.TLS, cfg.Backend.Address); err != nil {
		return "", err
	}
	bc, err := dialBackend(ctx, s.backendSettings(), 0)
	if err != nil {
		return "", err
	}
	bc.close()
	return bc.version, nil
}

func limitsFrom(p config.Pool) pool.Limits[variant] {
	return pool.Limits[variant]{Min: p.Min, Max: p.Max, MaxIdle: p.IdleCap(), IdleTimeout: p.IdleTimeout,
		MaxLifetime: p.MaxLifetime, LifetimeJitter: p.LifetimeJitter, AcquireTimeout: p.AcquireTimeout,
		MaxWaiters: p.MaxWaiters, PingAfterIdle: p.PingAfterIdle}
}

func (s *Server) config() *config.Config { return s.cfg.Load() }

// backendSettings is how to reach the backend as the service account
// (backend.user): the pool minimum's connections and clients' without an
// account of their own; dialSettings gives other accounts', ownSettings
// holdfast's own.
func (s *Server) backendSettings() BackendSettings {
	b := s.config().Backend
	return BackendSettings{Address: b.Address, User: b.User, Password: b.Password, Database: b.Database,
		Collation: b.Collation, DialTimeout: b.DialTimeout, TLS: s.backendTLS}
}

func (s *Server) maxPacket() int { return int(s.config().MaxAllowedPacket) }

// exchangeTimeout bounds each of holdfast's own exchanges on a backend
// connection (backend.exchange_timeout).
func (s *Server) exchangeTimeout() time.Duration { return s.config().Backend.ExchangeTimeout }

// firstConnID is the first client connection id holdfast gives out.
const firstConnID = 10000

// collationID returns the id of a collation name, when it has one below 256.
func collationID(name string) (uint8, bool) {
	c, err := charset.GetCollationByName(name)
	if err != nil || c.ID <= 0 || c.ID >= 256 {
		return 0, false
	}
	return uint8(c.ID), true
}

// learnBackend runs on the first backend connection: it records the
// backend's version, its collations, and the session character set a fresh
// backend connection has (the base every restore starts from).
func (s *Server) learnBackend(bc *backendConn) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.exchangeTimeout())
	defer cancel()
	base, maxPrepared, err := s.readBase(ctx, bc)
	if err != nil {
		return err
	}
	if maxPrepared > 0 {
		s.primary.maxPrepared.Store(maxPrepared)
	}
	info := bc.info
	s.primary.info.Store(&info)
	s.primary.base.Store(base)
	bc.vars = base.Vars
	if s.config().ServerVersion == "" && bc.version != "" {
		v := bc.version
		s.version.Store(&v)
	}
	s.log.Info("backend connected", "addr", s.config().Backend.Address, "version", bc.version,
		"collation", base.Vars.Get("collation_connection"))
	return nil
}

// readBase reads what a backend's fresh connections start with: the
// session character set and sql_mode, the kept variables' global values,
// the collations, and max_prepared_stmt_count (0 when unreadable).
func (s *Server) readBase(ctx context.Context, bc *backendConn) (*varstate.Base, int64, error) {
	res, err := bc.query(ctx, "SELECT @@character_set_client, @@character_set_connection, @@character_set_results, @@collation_connection, @@session.sql_mode")
	if err != nil {
		return nil, 0, err
	}
	if len(res.rows) != 1 || len(res.rows[0]) != 5 {
		return nil, 0, fmt.Errorf("proxy: unexpected reply reading session character set")
	}
	fresh := map[string]string{}
	for i, name := range varstate.CharsetVars {
		fresh[name] = string(res.rows[0][i])
	}
	fresh["sql_mode"] = string(res.rows[0][4])
	// The kept variables' global values: what a client's session starts
	// with (see varstate.KeptVars).
	res, err = bc.query(ctx, varstate.SelectKept("global"))
	if err != nil {
		return nil, 0, err
	}
	if len(res.rows) != 1 || len(res.rows[0]) != len(varstate.KeptNames) {
		return nil, 0, fmt.Errorf("proxy: unexpected reply reading global session defaults")
	}
	global := map[string]string{}
	for i, n := range varstate.KeptNames {
		global[n] = string(res.rows[0][i])
	}
	var maxPrepared int64
	if res, err := bc.query(ctx, "SELECT @@global.max_prepared_stmt_count"); err == nil && len(res.rows) == 1 && len(res.rows[0]) == 1 {
		maxPrepared, _ = strconv.ParseInt(string(res.rows[0][0]), 10, 64)
	}
	res, err = bc.query(ctx, "SELECT ID, CHARACTER_SET_NAME, COLLATION_NAME, IS_DEFAULT FROM information_schema.COLLATIONS")
	if err != nil {
		return nil, 0, err
	}
	var colls []varstate.Collation
	for _, r := range res.rows {
		if len(r) != 4 {
			continue
		}
		id, err := strconv.Atoi(string(r[0]))
		if err != nil {
			continue
		}
		colls = append(colls, varstate.Collation{ID: id, Charset: string(r[1]), Name: string(r[2]), DefaultOfCharset: strings.EqualFold(string(r[3]), "yes")})
	}
	return varstate.NewBase(fresh, global, colls), maxPrepared, nil
}

// baseVars is the session state of a fresh backend connection (nil until
// the backend is known).
func (s *Server) baseVars() *varstate.State {
	if b := s.primary.base.Load(); b != nil {
		return b.Vars
	}
	return nil
}

// keptBase is the kept variables a client session starts with (nil until
// the backend is known).
func (s *Server) keptBase() *varstate.KeptVars {
	if b := s.primary.base.Load(); b != nil {
		return b.Kept
	}
	return nil
}

// hfKept is the kept variables' values on holdfast's backend connections
// (nil until the backend is known).
func (s *Server) hfKept() map[string]string {
	if b := s.primary.base.Load(); b != nil {
		return b.Holdfast
	}
	return nil
}

// ListenAndServe listens on the configured address and serves until Close.
func (s *Server) ListenAndServe() error {
	ln, err := net.Listen("tcp", s.config().Listen)
	if err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	return s.Serve(ln)
}

// Serve accepts clients on ln until Drain or Close. It starts the pool.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return pool.ErrClosed
	}
	s.ln = ln
	s.wg.Add(2) // the janitor and the monitor, below: counted before Close can wait
	s.mu.Unlock()
	s.pool.Start()
	go s.janitor()
	if s.routing != nil {
		for _, r := range s.routing.replicas {
			r.be.pool.Start()
		}
	}
	go s.monitor() // the topology and replica checks (topologymon.go)
	if err := s.warm(); err != nil {
		_ = ln.Close()
		return err
	}
	s.log.Info("holdfast listening", "addr", ln.Addr().String())
	s.accepting.Store(true)
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.draining.Load() || s.isClosed() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("proxy: accept: %w", err)
		}
		backoff = 0
		if !s.spawn(func() { s.handle(nc) }) {
			_ = nc.Close()
		}
	}
}

// spawn runs f in a goroutine that Close waits for (f calls s.wg.Done),
// unless the server is closed: it reports whether f runs. The count is
// taken under s.mu, where Close marks the server closed before it waits,
// so no goroutine is counted in while Close waits (a WaitGroup's Add
// racing its Wait).
func (s *Server) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go f()
	return true
}

// warm opens a first backend connection so that the greeting carries the
// backend's version from the first client on. A backend that is down now is
// not fatal: clients get a clear error until it is back. A setting that
// cannot work (a TLS certificate that does not verify) is: holdfast does
// not start.
func (s *Server) warm() error {
	ctx, cancel := context.WithTimeout(s.ctx, s.config().Backend.DialTimeout)
	defer cancel()
	bc, err := s.pool.Acquire(ctx, 0)
	if err != nil && !errors.Is(err, errBackendSetting) {
		// The pool reports its last dial's error, which may be a transient
		// one (a timeout on a loaded machine) that came after a setting's:
		// one dial of its own tells which it is.
		dctx, dcancel := context.WithTimeout(s.ctx, s.config().Backend.DialTimeout)
		if c, derr := dialBackend(dctx, s.backendSettings(), 0); errors.Is(derr, errBackendSetting) {
			err = derr
		} else if derr == nil {
			c.close()
		}
		dcancel()
	}
	if errors.Is(err, errBackendSetting) {
		return fmt.Errorf("proxy: cannot connect to the backend %s: %w", s.config().Backend.Address, err)
	}
	if err != nil {
		s.log.Warn("backend not reachable at start; will keep trying", "addr", s.config().Backend.Address, "err", err)
		s.spawn(s.warmLater)
		return nil
	}
	s.pool.Release(bc, true)
	return nil
}

// Addr returns the listening address (after Serve started), or nil.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ln == nil {
		return nil
	}
	return s.ln.Addr()
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// handle runs one client connection's handshake, then hands the session
// to a goroutine of its own (serveSession). The handshake's deep stack
// (TLS, authentication, go-mysql) is then freed with this goroutine
// rather than kept, grown, for as long as the client stays connected: an
// idle client costs the small stack of its session loop only.
func (s *Server) handle(nc net.Conn) {
	defer s.wg.Done()
	served := false
	defer func() {
		if !served {
			nc.Close()
		}
	}()
	defer s.recoverSession(nc)
	if max := s.config().Sessions.MaxClients; max > 0 && s.activeClients() >= max {
		s.mu.Lock()
		s.st.Rejected++
		s.mu.Unlock()
		w := mysqlwire.Writer{Buf: mysqlwire.NewSmallWriter(nc)}
		_ = w.WritePacket(mysqlwire.AppendErr(nil, newErr(codeConCount, "08004", "Too many connections (holdfast sessions.max_clients = %d)", max)))
		_ = w.Flush()
		return
	}
	if !s.admitLogin(nc) {
		return
	}
	sess := s.handshake(nc)
	if sess == nil {
		return
	}
	s.mu.Lock()
	s.sessions[sess.id] = sess
	s.st.ClientsTotal++
	s.mu.Unlock()
	s.wg.Add(1)
	served = true
	go s.serveSession(sess, nc)
}

// serveSession runs a logged-in client's session until it ends.
func (s *Server) serveSession(sess *session, nc net.Conn) {
	defer s.wg.Done()
	defer nc.Close()
	defer s.recoverSession(nc)
	defer func() {
		s.mu.Lock()
		delete(s.sessions, sess.id)
		s.mu.Unlock()
		sess.user.entry.release()
	}()
	sess.serve()
}

// recoverSession logs a panic of a client's goroutine; the deferred close
// of its connection then ends that client only.
func (s *Server) recoverSession(nc net.Conn) {
	if r := recover(); r != nil {
		s.log.Error("panic in client session", "remote", nc.RemoteAddr().String(), "panic", r, "stack", string(debug.Stack()))
	}
}

func (s *Server) handshake(nc net.Conn) *session {
	t := time.NewTimer(slotWait)
	slot := false
	select {
	case s.handshakes <- struct{}{}:
		slot = true
	case <-t.C:
	case <-s.ctx.Done():
		t.Stop()
		return nil
	}
	t.Stop()
	// A login waiting out earlier failures gives its slot up (see login).
	release := func() {
		if slot {
			slot = false
			<-s.handshakes
		}
	}
	defer release()
	_ = nc.SetDeadline(handshakeDeadline())
	id := s.nextConnID.Add(1)
	if id == 0 {
		id = s.nextConnID.Add(1)
	}
	hello, u, conn, err := s.connect(nc, id, release)
	if err != nil {
		s.mu.Lock()
		s.st.HandshakeFailures++
		s.mu.Unlock()
		s.log.Debug("client handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
		return nil
	}
	_ = conn.SetDeadline(time.Time{})
	sess := newSession(s, id, conn, u, hello)
	sess.variant = sess.variant.withAccount(u.account)
	s.useKey(sess.variant)
	return sess
}

// firstLine trims go-mysql's traced errors (which carry stack traces in
// their text) to their message.
func firstLine(err error) string {
	msg := err.Error()
	var out []string
	for _, l := range strings.Split(msg, "\n") {
		if l == "" || strings.HasPrefix(l, "\t") || strings.Contains(l, ".go:") || strings.HasPrefix(l, "github.com/") || strings.HasPrefix(l, "runtime.") {
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, ": ")
}

func (s *Server) activeClients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

func (s *Server) session(id uint64) *session {
	if id > 0xffffffff {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[uint32(id)]
}

func (s *Server) countPin(reason string) {
	s.mu.Lock()
	s.st.Pins[reason]++
	s.mu.Unlock()
}

func (s *Server) countCommand() { s.cmds.Add(1) }

// StatementBudget is the most prepared statements this instance keeps on
// its backend connections together (0 until the backend's
// max_prepared_stmt_count is known).
func (s *Server) StatementBudget() int {
	if s.primary.maxPrepared.Load() <= 0 {
		return 0
	}
	return s.stmtCacheSize() * s.config().Pool.Max
}

// Stats returns a snapshot of the front end and the pool.
func (s *Server) Stats() ServerStats {
	s.mu.Lock()
	st := s.st
	st.Pins = maps.Clone(s.st.Pins)
	st.ClientsActive = len(s.sessions)
	st.Commands = s.cmds.Load()
	st.Pipelined = s.pipelined.Load()
	st.PipelineReruns = s.pipeReruns.Load()
	st.BeginsAhead = s.beginsAhead.Load()
	sess := make([]*session, 0, len(s.sessions))
	for _, x := range s.sessions {
		sess = append(sess, x)
	}
	s.mu.Unlock()
	for _, x := range sess {
		if x.pinned.Load() {
			st.PinnedSessions++
		}
	}
	st.Pool = s.pool.Stats()
	st.BackendStatements = s.backendStmts.Load()
	st.StatementBudget = s.StatementBudget()
	st.StatementRetries = s.stmtRetries.Load()
	st.LoginFailures, st.LoginsWaiting = s.logins.failures.Load(), s.logins.waiting.Load()
	st.RejectedUser = s.userTable.rejected.Load()
	st.Users = s.userStats()
	return st
}

// Reload applies a new configuration's users and pool limits without
// dropping clients. Other fields need a restart; they are logged.
func (s *Server) Reload(cfg config.Config) error {
	old := s.config()
	if cfg.Listen != old.Listen || !reflect.DeepEqual(cfg.Backend, old.Backend) || cfg.TLS != old.TLS || !reflect.DeepEqual(cfg.Routing, old.Routing) {
		s.log.Warn("reload: listen, backend, routing and tls settings take effect only after a restart")
		cfg.Listen, cfg.Backend, cfg.TLS, cfg.Routing = old.Listen, old.Backend, old.TLS, old.Routing
	}
	s.cfg.Store(&cfg)
	if err := s.setUsers(cfg); err != nil {
		return err
	}
	s.userTable.set(cfg)
	s.beUsers.forget()
	if err := s.applyLimits(); err != nil {
		return fmt.Errorf("proxy: %w", err)
	}
	s.applyConfigGates(cfg.Tags)
	s.applyConfigClasses(cfg.Overload)
	s.log.Info("configuration reloaded", "users", len(cfg.Users), "pool_max", cfg.Pool.Max)
	return nil
}

// Drain stops accepting connections and lets clients finish: idle clients
// are closed at once, a client inside a transaction when its transaction
// ends. It returns when every client is gone or ctx ends (then it closes
// the rest).
func (s *Server) Drain(ctx context.Context) error {
	s.draining.Store(true)
	s.mu.Lock()
	ln := s.ln
	s.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		s.mu.Lock()
		n := len(s.sessions)
		idle := make([]*session, 0, n)
		for _, x := range s.sessions {
			if !x.holding.Load() {
				idle = append(idle, x)
			}
		}
		s.mu.Unlock()
		if n == 0 {
			return nil
		}
		for _, x := range idle {
			_ = x.nc.SetReadDeadline(time.Unix(1, 0))
		}
		select {
		case <-ctx.Done():
			s.log.Warn("drain grace period over; closing remaining clients", "clients", n)
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close closes every client connection and the pool, and waits for session
// goroutines. Idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	ln := s.ln
	var ncs []net.Conn
	for _, x := range s.sessions {
		ncs = append(ncs, x.nc)
	}
	s.mu.Unlock()
	s.draining.Store(true)
	s.cancel()
	if ln != nil {
		_ = ln.Close()
	}
	for _, nc := range ncs {
		_ = nc.Close()
	}
	s.wg.Wait()
	s.primary.killer.close()
	s.beUsers.close()
	s.pool.Close()
	if s.routing != nil {
		for _, r := range s.routing.replicas {
			r.be.killer.close()
			r.be.pool.Close()
		}
	}
	return nil
}
