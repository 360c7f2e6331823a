package dashboards

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// TestReplicaAlertRules: the replicas' alert against a real Prometheus
// scraping a real holdfast in front of a private primary and replica. The
// condition is false while the replica is in service and true once it is
// killed, Prometheus evaluates it without error, and the alert is pending
// or firing with its annotations rendered.
func TestReplicaAlertRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB, Prometheus and holdfast")
	}
	rules := loadGroups(t)[replicaGroup]
	for _, r := range rules {
		if r.Alert != "HoldfastReplicaOutOfService" {
			t.Errorf("alert %s: add it to this test", r.Alert)
		}
	}
	primary, replica := dbtest.StartReplicaPair(t)
	pdb := primary.Open("")
	defer pdb.Close()
	if _, err := pdb.Exec("CREATE DATABASE ra"); err != nil {
		t.Fatal(err)
	}
	addr, admin := dbtest.FreeAddr(t), dbtest.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "holdfast.yaml")
	dbtest.WriteHoldfastConfig(t, path, holdfastproc.Config{Listen: addr, Users: appUser, Admin: admin,
		Backend: holdfastproc.Backend{Address: primary.Addr, Database: "ra", Replicas: []string{replica.Addr}},
		YAML:    "routing:\n  check_interval: 50ms\nlog:\n  level: warn\n"})
	dbtest.StartHoldfast(t, holdfastproc.Options{Bin: dbtest.Command(t, "./cmd/holdfast"), Config: path, Listen: addr}, false)
	prom := startPrometheusJobs(t, map[string]string{"holdfast": admin})
	waitSeries(t, prom, "prometheus scraping the replica in service", `holdfast_replica_in_service == 1`, 20*time.Second)
	for _, r := range rules {
		if s := prom.mustQuery(t, r.Expr, time.Time{}); len(s) != 0 {
			t.Fatalf("alert %s: condition true with the replica in service: %s", r.Alert, describeAll(s))
		}
	}
	replica.Kill()
	for _, r := range rules {
		waitConditionTrue(t, prom, r)
	}
	waitAlertsPending(t, prom, replicaGroup, nil)
	checkMetricNamesOf(t, []string{admin}, rules)
}
