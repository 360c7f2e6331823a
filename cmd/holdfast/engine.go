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

func newEngine(cfg config.Config, srv *proxy.Server, t *tables, duties lifecycle.Duties, log *slog.Logger) (*engine, error) {
	rc := cfg.Reservation
	if rc.Refiller.PoolCap == 0 {
		rc.Refiller.PoolCap = rc.PoolCap
	}
	// The engine's transactions are borrows of the proxy's pool like any
	// other, attributed to their holdfast:* tags, as holdfast's own
	// account, in the schema of its tables.
	conns := engineConns(srv, t, log)
	ref, err := refiller.New(conns, rc.Refiller, log)
	if err != nil {
		return nil, err
	}
	ref.RunScanWhen(duties)
	e := &engine{ref: ref}
	var replica reservation.Conns
	if rc.ReplicaDSN != "" {
		// The DSN's account and server; the database is where the
		// tables are.
		dsn, err := mysql.ParseDSN(rc.ReplicaDSN)
		if err != nil {
			return nil, fmt.Errorf("reservation.replica_dsn: %w", err)
		}
		e.replica = followDB(dsn, t, srv)
		closeIdleOnChange(srv, e.replica, 2)
		replica = reservation.SQLConns(e.replica)
	}
	// A call that meets a switchover of the primary is held up to the
	// hold (failover.hold), and held whatever its borrow's
	// failure while the topology check sees no usable primary.
	switching := func() bool {
		st := srv.Topology().State
		return st == "no_primary" || st == "split_brain"
	}
	// failover.hold bounds a held call as it bounds a held statement;
	// its 0 (no holding) is the engine's negative.
	hold := cfg.Failover.Hold
	if hold == 0 {
		hold = -1
	}
	e.eng, err = reservation.New(rc.Engine, reservation.Options{Conns: conns, ReplicaConns: replica, Refiller: ref, Logger: log, Duties: duties,
		Hold: hold, Switching: switching})
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

// installed reports whether `holdfast migrate` has run where t found
// holdfast's tables. Tables not found (the backend did not answer) count
// as installed: the engine's own errors say what is wrong once it is back.
func installed(ctx context.Context, t *tables) bool {
	if !t.found.Load() {
		return true
	}
	ok, err := probe(ctx, t.own, t.Schema())
	return err != nil || ok
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
