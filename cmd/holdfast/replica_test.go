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
	bin := binary(t)
	p := &process{addr: dbtest.FreeAddr(t), db: "rt", config: filepath.Join(t.TempDir(), "holdfast.yaml"),
		out: &dbtest.SyncBuffer{}, exited: make(chan error, 1)}
	admin := dbtest.FreeAddr(t)
	dbtest.WriteHoldfastYAML(t, p.config, dbtest.HoldfastYAML{Listen: p.addr, Users: appUser, Backend: primary.Addr, Database: "rt",
		Admin: "  listen: " + admin + "\n",
		Extra: "reservation:\n  replica_dsn: root@tcp(" + replica.Addr + ")/rt\n  reconcile_interval: 200ms\n"})
	p.migrate(t, bin)
	p.serve(t, bin)
	m := &fleetMember{process: p, admin: "http://" + admin, bin: bin}
	db := m.client(t)
	if _, err := db.Exec("CALL holdfast.receive(1, 1001, 1, 50)"); err != nil {
		t.Fatal(err)
	}
	comSelect := func(db *sql.DB) int {
		var name string
		var n int
		if err := db.QueryRow("SHOW GLOBAL STATUS LIKE 'Com_select'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cycles := func() float64 { v, _ := m.metric(t, "holdfast_reservation_reconcile_cycles_total"); return v }
	c0, s0 := cycles(), comSelect(rdb)
	within(t, 10*time.Second, "three reconciler cycles", func() bool { return cycles() >= c0+3 })
	if n := comSelect(rdb) - s0; n == 0 {
		t.Fatal("the reconciler ran three cycles and read nothing on the replica")
	}
	if errs, _ := m.metric(t, "holdfast_reservation_reconcile_errors_total"); errs != 0 {
		t.Fatalf("the reconciler counted %v errors reading the replica", errs)
	}
}
