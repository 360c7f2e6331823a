package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"

	"github.com/go-sql-driver/mysql"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
)

// engine is the reservation engine and its refiller, wired to the pool,
// and, when reservation.redis.address is set, the router that keeps the
// legacy Redis counter beside it (package reservation/legacy).
type engine struct {
	eng     *reservation.Engine
	ref     *refiller.Refiller
	replica *sql.DB
	router  *legacy.Router // nil without Redis
	store   *legacy.Store
}

func newEngine(cfg config.Config, srv *proxy.Server, duties lifecycle.Duties, log *slog.Logger) (*engine, error) {
	rc := cfg.Reservation
	if rc.Refiller.PoolCap == 0 {
		rc.Refiller.PoolCap = rc.PoolCap
	}
	// The engine's transactions are borrows of the proxy's pool like any
	// other, attributed to their holdfast:* tags.
	conns := reservation.TextConns(func(ctx context.Context, tag string) (reservation.TextConn, error) {
		return srv.BorrowEngine(ctx, tag)
	})
	ref, err := refiller.New(conns, rc.Refiller, log)
	if err != nil {
		return nil, err
	}
	ref.RunScanWhen(duties)
	e := &engine{ref: ref}
	var replica reservation.Conns
	if rc.ReplicaDSN != "" {
		if e.replica, err = sql.Open("mysql", rc.ReplicaDSN); err != nil {
			return nil, fmt.Errorf("reservation.replica_dsn: %w", err)
		}
		replica = reservation.SQLConns(e.replica)
	}
	e.eng, err = reservation.New(rc.Engine, reservation.Options{Conns: conns, ReplicaConns: replica, Refiller: ref, Logger: log, Duties: duties})
	if err != nil {
		return nil, err
	}
	if !rc.Redis.Enabled() {
		srv.SetProcedures(e.eng)
		return e, nil
	}
	redisCfg := rc.Redis.WithDefaults(e.eng.Config().Retention)
	e.store = legacy.NewStore(redisCfg, nil)
	sw, err := legacy.NewSwitch(conns, legacy.State{Authority: redisCfg.Authority, Shops: redisCfg.Shops, Percent: redisCfg.Percent},
		redisCfg.SwitchPollInterval, log)
	if err != nil {
		return nil, err
	}
	if e.router, err = legacy.New(legacy.Options{Engine: e.eng, Store: e.store, Switch: sw, Config: redisCfg, Logger: log, Duties: duties}); err != nil {
		return nil, err
	}
	srv.SetProcedures(e.router)
	log.Info("reservation: legacy Redis counter beside the engine", "redis", redisCfg.Address, "seed_authority", redisCfg.Authority,
		"switch_poll_interval", redisCfg.SwitchPollInterval)
	return e, nil
}

// collectors are the engine's metrics (and the router's, with Redis).
func (e *engine) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{reservation.NewCollector(e.eng), refiller.NewCollector(e.ref)}
	if e.router != nil {
		cs = append(cs, legacy.NewCollector(e.router))
	}
	return cs
}

// authority is the kill switch for the admin API; nil without Redis.
func (e *engine) authority() admin.Authority {
	if e == nil || e.router == nil {
		return nil
	}
	return authoritySwitch{e.router.Switch()}
}

func (e *engine) start(ctx context.Context) error {
	if err := e.ref.Start(ctx); err != nil {
		return err
	}
	if err := e.eng.Start(ctx); err != nil {
		return err
	}
	if e.router != nil {
		return e.router.Start(ctx)
	}
	return nil
}

func (e *engine) close() {
	if e.router != nil {
		_ = e.router.Close()
		_ = e.store.Close()
	}
	_ = e.eng.Close()
	_ = e.ref.Close()
	if e.replica != nil {
		_ = e.replica.Close()
	}
}

// backendDB opens database/sql on the configured backend, for holdfast's
// command-line tools (migrate, resync-redis); adjust, when not nil, changes
// the driver's configuration first.
func backendDB(cfg config.Config, adjust func(*mysql.Config)) (*sql.DB, error) {
	c := mysql.NewConfig()
	c.Net, c.Addr, c.User, c.Passwd, c.DBName = "tcp", cfg.Backend.Address, cfg.Backend.User, cfg.Backend.Password, cfg.Backend.Database
	c.Timeout = cfg.Backend.DialTimeout
	if adjust != nil {
		adjust(c)
	}
	var err error
	if c.TLS, c.AllowFallbackToPlaintext, err = proxy.BackendTLSConfig(cfg.Backend); err != nil {
		return nil, err
	}
	conn, err := mysql.NewConnector(c) // not a DSN: it carries the TLS configuration
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(conn), nil
}

// schemaInstalled reports whether `holdfast migrate` has run on the
// backend's database. An unreachable backend counts as installed (the
// engine's own errors will say what is wrong once it is back).
func schemaInstalled(ctx context.Context, cfg config.Config) bool {
	db, err := backendDB(cfg, nil)
	if err != nil {
		return true
	}
	defer db.Close()
	var v sql.NullInt64
	err = db.QueryRowContext(ctx, "SELECT MAX(version) FROM holdfast_schema_migrations").Scan(&v)
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 {
		return false
	}
	return err != nil || v.Valid
}

// migrate creates or upgrades the reservation schema.
func migrate(ctx context.Context, cfg config.Config) error {
	db, err := backendDB(cfg, nil)
	if err != nil {
		return err
	}
	defer db.Close()
	applied, err := reservation.Migrate(ctx, reservation.SQLConns(db))
	if err != nil {
		return err
	}
	if len(applied) == 0 {
		fmt.Printf("reservation schema is up to date (version %d) in %s/%s\n", reservation.SchemaVersion(), cfg.Backend.Address, cfg.Backend.Database)
	} else {
		fmt.Printf("applied reservation schema migrations %v in %s/%s\n", applied, cfg.Backend.Address, cfg.Backend.Database)
	}
	return nil
}

// authoritySwitch serves the admin API's /api/authority from the switch.
type authoritySwitch struct{ sw *legacy.Switch }

func (a authoritySwitch) AuthorityState(ctx context.Context) (admin.AuthorityState, error) {
	return adminState(a.sw), nil
}

func (a authoritySwitch) SetAuthority(ctx context.Context, c admin.AuthorityChange) (admin.AuthorityState, error) {
	next := legacy.State{Authority: c.Authority, Shops: c.Shops, Percent: c.Percent, ChangedBy: c.By, Reason: c.Reason}
	_, err := a.sw.Set(ctx, next, c.Force)
	switch {
	case errors.Is(err, legacy.ErrStale):
		return admin.AuthorityState{}, fmt.Errorf("%w: %w", admin.ErrAuthorityRefused, err)
	case errors.Is(err, legacy.ErrInvalid):
		return admin.AuthorityState{}, fmt.Errorf("%w: %w", admin.ErrAuthorityInvalid, err)
	case err != nil:
		return admin.AuthorityState{}, err
	}
	return adminState(a.sw), nil
}

func adminState(sw *legacy.Switch) admin.AuthorityState {
	st, rs := sw.Current(), sw.Redis()
	shops := st.Shops
	if shops == nil {
		shops = []int64{}
	}
	return admin.AuthorityState{Version: st.Version, Authority: st.Authority, Shops: shops, Percent: st.Percent,
		ChangedAt: st.ChangedAt, ChangedBy: st.ChangedBy, Reason: st.Reason, PollIntervalSeconds: sw.Interval().Seconds(),
		RedisStale: rs.Stale, RedisStaleSince: rs.StaleSince, RedisStaleReason: rs.StaleReason}
}
