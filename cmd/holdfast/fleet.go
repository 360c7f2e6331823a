package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/reservation"
)

// newFleet is this instance's membership of the fleet of holdfast
// instances in front of the backend (package fleet), on a database/sql
// pool of its own, applying the fleet's controls to srv once started
// (joinFleet). It starts nothing and reaches no database. It returns nil
// when fleet.disabled; the func it returns leaves the fleet and closes
// the pool.
func newFleet(cfg config.Config, srv *proxy.Server, t *tables, duties []string, log *slog.Logger) (*fleet.Fleet, func(), error) {
	if cfg.Fleet.Disabled {
		return nil, func() {}, nil
	}
	// As holdfast's own account, in the schema of its tables, following
	// them when they move.
	user, password := cfg.Own()
	dc, err := driverConfig(cfg, user, password, "")
	if err != nil {
		return nil, nil, fmt.Errorf("fleet: %w", err)
	}
	// DATETIMEs are read as UTC: they are compared only with the
	// database's own NOW(6), never with this host's clock.
	dc.ParseTime = true
	db := followDB(dc, t, srv)
	db.SetMaxOpenConns(fleet.MaxConns)
	db.SetMaxIdleConns(fleet.MaxConns)
	// After a switchover its connections go to the new primary: those to
	// the former one close (idle ones at once) rather than answer every
	// write with 1290 for as long as they live.
	closeIdleOnChange(srv, db, fleet.MaxConns)
	self := fleet.Member{ID: instanceID(), Address: advertised(cfg.Listen), Version: buildVersion(), PoolMax: cfg.Pool.Max,
		SchemaMin: reservation.SchemaMin, SchemaMax: reservation.SchemaVersion(), Kinds: fleet.KnownKinds()}
	f := fleet.New(fleet.Options{Store: fleet.NewStore(db), Applier: srv, Self: self,
		Poll: cfg.Fleet.PollInterval, TTL: cfg.Fleet.TTL, Duties: duties, StmtBudget: srv.StatementBudget,
		ConnReserve: cfg.Fleet.ConnectionReserve, StmtShare: cfg.Sessions.PreparedStatementShare, Log: log,
		SwitchHold: cfg.Failover.Hold})
	return f, func() { _ = f.Close(); db.Close() }, nil
}

// joinFleet starts f (nil: fleet.disabled): its first read of the
// controls, tried for up to fleet.ttl, then its polls.
func joinFleet(ctx context.Context, cfg config.Config, f *fleet.Fleet, log *slog.Logger) error {
	if f == nil {
		return nil
	}
	if err := f.Start(ctx); err != nil {
		return err
	}
	log.Info("fleet: joined", "instance", f.Status().Instance, "poll_interval", cfg.Fleet.PollInterval, "ttl", cfg.Fleet.TTL)
	return nil
}

// fleetView is the fleet as the admin API shows it: its status says where
// holdfast's tables are.
type fleetView struct {
	*fleet.Fleet
	t *tables
}

func (v fleetView) Status() fleet.Status {
	st := v.Fleet.Status()
	st.Tables, st.TablesLegacy = v.t.Schema(), v.t.Legacy()
	return st
}

// fleetDuties are the fleet duties this instance's configuration runs
// (see lifecycle.Duties).
func fleetDuties(cfg config.Config) []string {
	rc := cfg.Reservation
	if !rc.Enabled {
		return nil
	}
	d := []string{lifecycle.DutySweeper, lifecycle.DutyReconciler}
	if rc.Refiller.ScanInterval >= 0 { // 0: the default interval; negative: off
		d = append(d, lifecycle.DutyPoolScan)
	}
	if rc.Redis.Enabled() {
		d = append(d, lifecycle.DutyRedisSweeper)
		if rc.Redis.WithDefaults(0).DriftInterval > 0 {
			d = append(d, lifecycle.DutyRedisDrift)
		}
	}
	return d
}

// dutiesOf is the duty gate of fl: with no fleet (fleet.disabled) every
// duty runs here.
func dutiesOf(fl *fleet.Fleet) lifecycle.Duties {
	if fl == nil {
		return nil
	}
	return fl.Holds
}

// instanceID names this process in the fleet: host, pid and a random
// suffix (a restarted pod gets a new id).
func instanceID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// advertised is the address clients reach this instance at: listen with
// the host's name when it listens on every interface.
func advertised(listen string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil || (host != "" && host != "0.0.0.0" && host != "::") {
		return listen
	}
	h, _ := os.Hostname()
	return net.JoinHostPort(h, port)
}
