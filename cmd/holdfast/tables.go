package main

import (
	"context"
	"database/sql"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/reservation"
)

// Where holdfast's own tables are. They live in fleet.database, a schema
// of holdfast's own that application accounts get no grants on, except on
// an install made before that setting: there they are in the application's
// backend.database (the legacy location) until `holdfast migrate
// -move-tables` renames them into fleet.database. Old and new versions of
// holdfast must share one set of tables during a rolling upgrade, so the
// location is found, never chosen:
//
//  1. fleet.database, when it holds the migrations table;
//  2. else backend.database, when it does (the legacy location: used,
//     with a warning at start-up, a gauge and the fleet's status);
//  3. else a new install: fleet.database (`holdfast migrate` creates it).
//
// Every connection of holdfast's own work opens with that schema as its
// current database, so the engine's and the fleet's unqualified table
// names resolve there. When one of their statements meets a missing table
// (1146), the location is found again: that is how running instances
// follow a move without a restart (see tables.moved).

// tables is the location of holdfast's tables, found at start-up
// (locate) and again when a statement finds a table missing (moved). Its
// methods are safe for concurrent use.
type tables struct {
	fleetDB, backendDB string
	log                *slog.Logger
	// own and svc are where the probes run: holdfast's own account, and
	// backend.user (who can see backend.database whatever fleet.user may
	// see). Both without a current database; opened by newTables.
	own, svc *sql.DB

	schema atomic.Pointer[string] // where the tables are now
	legacy atomic.Bool            // schema is backend.database, not fleet.database
	found  atomic.Bool            // schema was found, not guessed (the backend was unreachable)

	setMu sync.Mutex // serialises set, so that hooks see changes in order

	// The search that start leaves running when the backend did not
	// answer: close stops it and waits for it.
	stop context.CancelFunc // nil: none
	wg   sync.WaitGroup

	mu      sync.Mutex    // guards following
	probing chan struct{} // closed when the probe in flight ends; nil: none
	probed  time.Time     // when the last probe ended
	hooks   []func(schema string)
}

// serveTables is the location of holdfast's tables for serve, not found
// yet (findTables finds them): srv's engine borrows point at them and
// follow them, and the location's metric is registered on reg. It reaches
// no database.
func serveTables(cfg config.Config, srv *proxy.Server, reg prometheus.Registerer, log *slog.Logger) (*tables, error) {
	user, password := cfg.Own()
	if cfg.Fleet.User == "" {
		log.Warn("fleet.user is empty: holdfast's own work (the fleet, the engine, kills, the replica checks) connects as backend.user, so an application logged in as that account can change holdfast's tables and end its connections; give holdfast an account of its own (see holdfast migrate -print-grants)",
			"backend.user", cfg.Backend.User)
	}
	t, err := newTables(cfg, user, password, log)
	if err != nil {
		return nil, err
	}
	// Everything that depends on where holdfast's tables are follows
	// them here.
	t.onChange(func(schema string) {
		srv.SetTablesSchema(schema)
		protectTables(srv, schema)
	})
	reg.MustRegister(t.collector())
	return t, nil
}

// findTables finds the tables at start-up (see start), for up to
// backend.dial_timeout; life bounds the search that goes on when the
// backend does not answer yet.
func (t *tables) findTables(life context.Context, cfg config.Config) {
	ctx, cancel := context.WithTimeout(life, cfg.Backend.DialTimeout)
	defer cancel()
	t.start(ctx, life)
}

// newTables is the location of cfg's tables, not found yet: Schema is
// fleet.database until locate or moved finds it. ownUser, ownPassword are
// the account of the probes of fleet.database.
func newTables(cfg config.Config, ownUser, ownPassword string, log *slog.Logger) (*tables, error) {
	t := &tables{fleetDB: cfg.Fleet.Database, backendDB: cfg.Backend.Database, log: log}
	t.schema.Store(&t.fleetDB)
	var err error
	if t.own, err = dbAs(cfg, ownUser, ownPassword, "", nil); err != nil {
		return nil, err
	}
	if t.svc, err = dbAs(cfg, cfg.Backend.User, cfg.Backend.Password, "", nil); err != nil {
		t.own.Close()
		return nil, err
	}
	for _, db := range []*sql.DB{t.own, t.svc} {
		// Probes are rare: a connection each, closed after it.
		db.SetMaxOpenConns(1)
		db.SetMaxIdleConns(0)
	}
	return t, nil
}

// close stops the search start may have left running, and closes the
// probes' handles. Not safe to call twice.
func (t *tables) close() {
	if t.stop != nil {
		t.stop()
	}
	t.wg.Wait()
	t.own.Close()
	t.svc.Close()
}

// Schema is the schema of holdfast's tables now (fleet.database until
// found otherwise). Whatever must follow them registers with onChange.
func (t *tables) Schema() string { return *t.schema.Load() }

// Legacy reports whether the tables are in backend.database.
func (t *tables) Legacy() bool { return t.legacy.Load() }

// onChange calls f with the schema now, and again whenever the tables are
// found elsewhere. Everything that depends on where they are (the proxy's
// engine borrows, ...) follows them through it. f must not block.
func (t *tables) onChange(f func(schema string)) {
	t.setMu.Lock()
	defer t.setMu.Unlock()
	t.mu.Lock()
	t.hooks = append(t.hooks, f)
	t.mu.Unlock()
	f(t.Schema())
}

// location is where locate found the tables.
type location struct {
	schema string
	legacy bool // schema is backend.database
	// noAccess, when not nil, says that holdfast's own account may not
	// read fleet.database: the tables were taken to be elsewhere, or
	// missing, and nothing of holdfast's own will work there until it is
	// granted.
	noAccess error
}

// locate finds the tables (see the top of this file). An error means the
// backend could not be asked.
func (t *tables) locate(ctx context.Context) (location, error) {
	if t.fleetDB == t.backendDB {
		return location{schema: t.fleetDB}, nil
	}
	var loc location
	inFleet, err := probe(ctx, t.own, t.fleetDB)
	switch {
	case errors.Is(err, reservation.ErrNoAccess):
		// The legacy location may still hold them (an install upgraded
		// with fleet.user empty, whose backend.user has no grant on
		// fleet.database): look there.
		loc.noAccess = err
	case err != nil:
		return location{}, err
	case inFleet:
		return location{schema: t.fleetDB}, nil
	}
	inBackend, err := probe(ctx, t.svc, t.backendDB)
	switch {
	case errors.Is(err, reservation.ErrNoAccess):
		// backend.user cannot read its own database: none of its tables
		// can be holdfast's.
	case err != nil:
		return location{}, err
	case inBackend:
		return location{schema: t.backendDB, legacy: true}, nil
	}
	loc.schema = t.fleetDB
	return loc, nil
}

// probe reports whether schema holds holdfast's tables, asking on db. An
// account without privileges there gets an error wrapping
// reservation.ErrNoAccess.
func probe(ctx context.Context, db *sql.DB, schema string) (bool, error) {
	c, err := reservation.SQLConns(db).Borrow(ctx, reservation.TagMigrate)
	if err != nil {
		return false, err
	}
	ok, err := reservation.HasTables(ctx, c, schema)
	c.Release(err != nil && !errors.Is(err, reservation.ErrNoAccess))
	return ok, err
}

// set records where the tables are, and tells the hooks when that changed.
func (t *tables) set(loc location) {
	schema, legacy := loc.schema, loc.legacy
	t.setMu.Lock()
	defer t.setMu.Unlock()
	t.found.Store(true)
	t.legacy.Store(legacy)
	old := t.schema.Swap(&schema)
	if *old == schema {
		return
	}
	t.log.Info("holdfast's tables found", "schema", schema, "before", *old, "legacy_location", legacy)
	t.mu.Lock()
	hooks := append([]func(string){}, t.hooks...)
	t.mu.Unlock()
	for _, f := range hooks {
		f(schema)
	}
}

// start finds the tables at start-up, within ctx. A backend that does not
// answer is not fatal: the tables are taken to be in fleet.database
// meanwhile, and looked for again every second, within life and until
// close, until found. start is called once.
func (t *tables) start(ctx, life context.Context) {
	loc, err := t.locate(ctx)
	if err != nil {
		t.log.Warn("could not find where holdfast's tables are (the backend did not answer): taking fleet.database until it does",
			"fleet.database", t.fleetDB, "err", err)
		life, t.stop = context.WithCancel(life)
		t.wg.Add(1)
		go func() {
			defer t.wg.Done()
			t.retry(life)
		}()
		return
	}
	t.set(loc)
	t.warn(life, loc)
}

// retry looks for the tables every second until found or life ends.
func (t *tables) retry(life context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for !t.found.Load() {
		select {
		case <-life.Done():
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(life, 5*time.Second)
		loc, err := t.locate(ctx)
		cancel()
		if err == nil {
			t.set(loc)
			t.warn(life, loc)
		}
	}
}

// warn says, once found, what an operator should do about the tables'
// location.
func (t *tables) warn(ctx context.Context, loc location) {
	if loc.noAccess != nil {
		t.log.Error("holdfast's own account (fleet.user, else backend.user) has no privileges on fleet.database: holdfast's fleet and engine fail there until it is granted them (see holdfast migrate -print-grants)",
			"fleet.database", t.fleetDB, "err", loc.noAccess)
	}
	if loc.legacy {
		t.log.Warn("holdfast's tables are in backend.database, where the application's grants reach them: once every instance runs this version, move them to fleet.database with `holdfast migrate -move-tables` (running instances follow)",
			"backend.database", t.backendDB, "fleet.database", t.fleetDB)
		if _, err := probe(ctx, t.own, t.backendDB); errors.Is(err, reservation.ErrNoAccess) {
			t.log.Error("holdfast's own account (fleet.user) has no privileges on its tables in backend.database: holdfast's fleet and engine fail until it is granted them (see the commented grants of holdfast migrate -print-grants)",
				"backend.database", t.backendDB, "err", err)
		}
		return
	}
	if t.fleetDB == t.backendDB {
		return
	}
	// Found in fleet.database: tables left in backend.database too mean
	// instances of an older holdfast may still use those.
	if both, err := probe(ctx, t.svc, t.backendDB); err == nil && both {
		t.log.Warn("holdfast's tables are in both fleet.database (used) and backend.database: instances of a holdfast older than fleet.database use the latter, apart from this fleet; drop them from backend.database once none runs",
			"backend.database", t.backendDB, "fleet.database", t.fleetDB)
	}
}

// movedProbeGap is the least time between two probes that a missing table
// starts: on an install whose tables are truly missing, every statement
// would start one.
const movedProbeGap = time.Second

// moved is called when a statement run with have as its current database
// met a missing table (1146). It returns the schema holding the tables
// now, and whether that is not have: then the caller switches its
// connection there and may run the statement again (a 1146 means it did
// nothing, and a transaction that had used any of the tables would have
// kept the move waiting on its locks). Concurrent callers share one
// probe.
func (t *tables) moved(ctx context.Context, have string) (string, bool) {
	if cur := t.Schema(); cur != have {
		return cur, true
	}
	t.mu.Lock()
	wait := t.probing
	if wait == nil && time.Since(t.probed) < movedProbeGap {
		t.mu.Unlock()
		return have, false
	}
	if wait == nil {
		t.probing = make(chan struct{})
	}
	t.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
		cur := t.Schema()
		return cur, cur != have
	}
	if loc, err := t.locate(ctx); err == nil {
		t.set(loc)
	}
	t.mu.Lock()
	close(t.probing)
	t.probing, t.probed = nil, time.Now()
	t.mu.Unlock()
	cur := t.Schema()
	return cur, cur != have
}

// collector exposes the location as metrics.
func (t *tables) collector() prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "holdfast_tables_legacy_location",
		Help: "1 while holdfast's tables are in backend.database, where the application's grants reach them (move them: holdfast migrate -move-tables)",
	}, func() float64 {
		if t.Legacy() {
			return 1
		}
		return 0
	})
}

// dbAs opens database/sql on the configured backend as user, in database
// (none when ""); adjust, when not nil, changes the driver's
// configuration first.
func dbAs(cfg config.Config, user, password, database string, adjust func(*mysql.Config)) (*sql.DB, error) {
	c, err := driverConfig(cfg, user, password, database)
	if err != nil {
		return nil, err
	}
	if adjust != nil {
		adjust(c)
	}
	conn, err := mysql.NewConnector(c) // not a DSN: it carries the TLS configuration
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// driverConfig is go-sql-driver's configuration for the backend as user.
func driverConfig(cfg config.Config, user, password, database string) (*mysql.Config, error) {
	c := mysql.NewConfig()
	c.Net, c.Addr, c.User, c.Passwd, c.DBName = "tcp", cfg.Backend.Address, user, password, database
	c.Timeout = cfg.Backend.DialTimeout
	var err error
	if c.TLS, c.AllowFallbackToPlaintext, err = proxy.BackendTLSConfig(cfg.Backend); err != nil {
		return nil, err
	}
	return c, nil
}
