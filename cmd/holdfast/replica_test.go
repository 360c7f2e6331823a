package main

import (
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
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
	m := startOnPair(t, primary.Addr, "rt", nil, "reservation:\n  replica_dsn: root@tcp("+replica.Addr+")/rt\n  reconcile_interval: 200ms\n", true)
	db := m.client(t)
	if _, err := db.Exec("CALL holdfast.receive(1, 1001, 1, 50)"); err != nil {
		t.Fatal(err)
	}
	cycles := func() float64 { v, _ := m.metric(t, "holdfast_reservation_reconcile_cycles_total"); return v }
	c0, s0 := cycles(), dbtest.ComSelect(t, rdb)
	within(t, 10*time.Second, "three reconciler cycles", func() bool { return cycles() >= c0+3 })
	if n := dbtest.ComSelect(t, rdb) - s0; n == 0 {
		t.Fatal("the reconciler ran three cycles and read nothing on the replica")
	}
	if errs, _ := m.metric(t, "holdfast_reservation_reconcile_errors_total"); errs != 0 {
		t.Fatalf("the reconciler counted %v errors reading the replica", errs)
	}
}

// startOnPair starts a holdfast process in front of a private primary
// (database db, backend.replicas replicas, extra YAML), after `holdfast
// migrate` when migrate is set.
func startOnPair(t *testing.T, primary, db string, replicas []string, extra string, migrate bool) *fleetMember {
	t.Helper()
	p := newProcessOn(t, db)
	admin := dbtest.FreeAddr(t)
	dbtest.WriteHoldfastConfig(t, p.config, holdfastproc.Config{Listen: p.addr, Users: appUser, Admin: admin,
		Backend: holdfastproc.Backend{Address: primary, Database: db, Replicas: replicas}, YAML: extra})
	if migrate {
		p.migrate(t)
	}
	p.serve(t)
	return &fleetMember{process: p, admin: "http://" + admin}
}
