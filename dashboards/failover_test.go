package dashboards

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// TestFailoverAlertRules: the topology's alerts against a real Prometheus
// scraping a real holdfast in front of a private primary and replica. Both
// conditions are false while there is one primary; promoting the replica
// while the primary is still writable is a split brain, and making both
// read-only leaves no primary: each condition turns true, Prometheus
// evaluates it without error, and the alert is pending or firing with its
// annotations rendered.
func TestFailoverAlertRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB, Prometheus and holdfast")
	}
	rules := loadGroups(t)[failoverGroup]
	byName := map[string]rule{}
	for _, r := range rules {
		byName[r.Alert] = r
		if r.Alert != "HoldfastNoPrimary" && r.Alert != "HoldfastSplitBrain" {
			t.Errorf("alert %s: add it to this test", r.Alert)
		}
	}
	primary, replica := dbtest.StartReplicaPair(t)
	pdb := primary.Open("")
	defer pdb.Close()
	if _, err := pdb.Exec("CREATE DATABASE fa"); err != nil {
		t.Fatal(err)
	}
	addr, admin := dbtest.FreeAddr(t), dbtest.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "holdfast.yaml")
	dbtest.WriteHoldfastConfig(t, path, holdfastproc.Config{Listen: addr, Users: appUser, Admin: admin,
		Backend: holdfastproc.Backend{Address: primary.Addr, Database: "fa", Replicas: []string{replica.Addr}},
		YAML:    "routing:\n  check_interval: 50ms\nlog:\n  level: warn\n"})
	dbtest.StartHoldfast(t, holdfastproc.Options{Bin: dbtest.Command(t, "./cmd/holdfast"), Config: path, Listen: addr}, false)
	prom := startPrometheusJobs(t, map[string]string{"holdfast": admin})
	waitSeries(t, prom, "prometheus scraping the primary found", `holdfast_backend_role{role="primary"} == 1`, 20*time.Second)
	waitSeries(t, prom, "prometheus scraping the replica", `holdfast_backend_role{role="replica"} == 1`, 20*time.Second)
	for _, r := range rules {
		if s := prom.mustQuery(t, r.Expr, time.Time{}); len(s) != 0 {
			t.Fatalf("alert %s: condition true with one primary: %s", r.Alert, describeAll(s))
		}
	}
	if err := replica.Promote(t.Context()); err != nil { // the primary is still writable
		t.Fatal(err)
	}
	waitConditionTrue(t, prom, byName["HoldfastSplitBrain"])
	waitAlertsPending(t, prom, failoverGroup, func(a string) bool { return a == "HoldfastSplitBrain" })
	for _, p := range []*dbtest.Private{primary, replica} {
		if err := p.SetReadOnly(t.Context(), true); err != nil {
			t.Fatal(err)
		}
	}
	waitConditionTrue(t, prom, byName["HoldfastNoPrimary"])
	waitAlertsPending(t, prom, failoverGroup, func(a string) bool { return a == "HoldfastNoPrimary" })
	checkMetricNamesOf(t, []string{admin}, rules)
}
