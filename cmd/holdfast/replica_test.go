package main

import (
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// The reconciler reads a real replica (reservation.replica_dsn): with
// holdfast in front of a private primary and replica, its cycles run
// without errors and their reads land on the replica (its Com_select
// moves, while nothing else reads there).
func TestReconcilerReadsReplica(t *testing.T) {
	primary, replica := dbtest.StartReplicaPair(t)
	pdb, rdb := primary.Open(""), replica.Open("")
	defer pdb.Close()
	defer rdb.Close()
	if _, err := pdb.Exec("CREATE DATABASE rt"); err != nil {
		t.Fatal(err)
	}
	m := startOnPair(t, primary.Addr, "rt", "", "reservation:\n  replica_dsn: root@tcp("+replica.Addr+")/rt\n  reconcile_interval: 200ms\n", true)
	db := m.client(t)
	if _, err := db.Exec("CALL holdfast.receive(1, 1001, 1, 50)"); err != nil {
		t.Fatal(err)
	}
	cycles := func() float64 { v, _ := m.metric(t, "holdfast_reservation_reconcile_cycles_total"); return v }
	c0, s0 := cycles(), comSelect(t, rdb)
	within(t, 10*time.Second, "three reconciler cycles", func() bool { return cycles() >= c0+3 })
	if n := comSelect(t, rdb) - s0; n == 0 {
		t.Fatal("the reconciler ran three cycles and read nothing on the replica")
	}
	if errs, _ := m.metric(t, "holdfast_reservation_reconcile_errors_total"); errs != 0 {
		t.Fatalf("the reconciler counted %v errors reading the replica", errs)
	}
}

// startOnPair starts a holdfast process in front of a private primary
// (database db, backend.more added to backend, extra top-level YAML),
// after `holdfast migrate` when migrate is set.
func startOnPair(t *testing.T, primary, db, backendMore, extra string, migrate bool) *fleetMember {
	t.Helper()
	bin := binary(t)
	p := &process{addr: dbtest.FreeAddr(t), db: db, config: filepath.Join(t.TempDir(), "holdfast.yaml"),
		out: &dbtest.SyncBuffer{}, exited: make(chan error, 1)}
	admin := dbtest.FreeAddr(t)
	dbtest.WriteHoldfastYAML(t, p.config, dbtest.HoldfastYAML{Listen: p.addr, Users: appUser, Backend: primary, Database: db,
		BackendMore: backendMore, Admin: "  listen: " + admin + "\n", Extra: extra})
	if migrate {
		p.migrate(t, bin)
	}
	p.serve(t, bin)
	return &fleetMember{process: p, admin: "http://" + admin, bin: bin}
}

// comSelect reads a server's Com_select.
func comSelect(t *testing.T, db *sql.DB) int {
	t.Helper()
	n, err := dbtest.GlobalStatus(t.Context(), db, "Com_select")
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}
