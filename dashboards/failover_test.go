package dashboards

import (
	"database/sql"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// TestFailoverAlertRules: the topology's alerts and the dashboard's
// "Primary and failover" row against a real Prometheus scraping a real
// holdfast in front of a private primary and replica. Every condition is
// false while there is one primary. A pause holds a statement until
// failover.hold, then 9010; the primary turned read-only under a write
// has it answered 1290, retried, held (no primary: the replica still
// replicates) and answered 9010: statements refused switching turns true,
// and every panel of the row has data, the held, retried, 9010 and pause
// counts above 0. Promoting the replica while the primary is still
// writable is a split brain, and making both read-only leaves no primary:
// each condition turns true, Prometheus evaluates it without error, and
// the alert is pending or firing with its annotations rendered.
func TestFailoverAlertRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB, Prometheus and holdfast")
	}
	rules := loadGroups(t)[failoverGroup]
	byName := map[string]rule{}
	for _, r := range rules {
		byName[r.Alert] = r
		if r.Alert != "HoldfastNoPrimary" && r.Alert != "HoldfastSplitBrain" && r.Alert != "HoldfastStatementsRefusedSwitching" {
			t.Errorf("alert %s: add it to this test", r.Alert)
		}
	}
	primary, replica := dbtest.StartReplicaPair(t)
	pdb := primary.Open("")
	defer pdb.Close()
	// Ordinary accounts, as in production: read_only binds the backend's
	// (no SUPER), and holdfast's own may read replication status.
	for _, q := range []string{"CREATE DATABASE fa", "CREATE TABLE fa.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)",
		"CREATE USER app IDENTIFIED BY 'app'", "GRANT SELECT, INSERT, UPDATE, DELETE ON fa.* TO app",
		"CREATE USER hf IDENTIFIED BY 'hf'", "GRANT SLAVE MONITOR, CONNECTION ADMIN ON *.* TO hf"} {
		if _, err := pdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	addr, admin := dbtest.FreeAddr(t), dbtest.FreeAddr(t)
	path := filepath.Join(t.TempDir(), "holdfast.yaml")
	dbtest.WriteHoldfastConfig(t, path, holdfastproc.Config{Listen: addr, Users: appUser, Admin: admin,
		Backend: holdfastproc.Backend{Address: primary.Addr, User: "app", Password: "app", Database: "fa", Replicas: []string{replica.Addr}},
		Fleet:   holdfastproc.Fleet{User: "hf", Password: "hf"},
		YAML:    "routing:\n  check_interval: 1s\nfailover:\n  hold: 3s\nfleet:\n  disabled: true\nreservation:\n  enabled: false\nlog:\n  level: warn\n"})
	dbtest.StartHoldfast(t, holdfastproc.Options{Bin: dbtest.Command(t, "./cmd/holdfast"), Config: path, Listen: addr}, false)
	prom := startPrometheusJobs(t, map[string]string{"holdfast": admin})
	waitSeries(t, prom, "prometheus scraping the primary found", `holdfast_backend_role{role="primary"} == 1`, 20*time.Second)
	waitSeries(t, prom, "prometheus scraping the replica", `holdfast_backend_role{role="replica"} == 1`, 20*time.Second)
	for _, r := range rules {
		if s := prom.mustQuery(t, r.Expr, time.Time{}); len(s) != 0 {
			t.Fatalf("alert %s: condition true with one primary: %s", r.Alert, describeAll(s))
		}
	}
	heldAndRefused(t, prom, primary, addr, admin)
	waitSeries(t, prom, "the primary back", `holdfast_backend_role{role="primary"} == 1`, 20*time.Second)
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
	waitConditionTrue(t, prom, byName["HoldfastStatementsRefusedSwitching"])
	waitAlertsPending(t, prom, failoverGroup, func(a string) bool { return a == "HoldfastStatementsRefusedSwitching" })
	checkMetricNamesOf(t, []string{admin}, rules)
}

// heldAndRefused holds statements on holdfast (addr, admin listener
// admin; failover.hold 3s) in front of primary and checks the dashboard's
// failover row on prom: a pause holds one past failover.hold (9010), and a
// write meeting primary just turned read-only is answered 1290, retried,
// held for want of a primary and answered 9010. primary is writable again
// on return.
func heldAndRefused(t *testing.T, prom prometheus, primary *dbtest.Private, addr, admin string) {
	t.Helper()
	db, err := sql.Open("mysql", "app:app@tcp("+addr+")/fa")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	is9010 := func(err error) bool {
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == 9010
	}
	dbtest.Fetch(t, http.MethodPut, "http://"+admin+"/api/tags/paused_flow/pause?local=1&reason=dashboards+test")
	if _, err := db.Exec("/* conn_tag:paused_flow */ SELECT 1"); !is9010(err) {
		t.Fatalf("a statement of a paused tag past failover.hold: %v, want 9010", err)
	}
	dbtest.Fetch(t, http.MethodDelete, "http://"+admin+"/api/tags/paused_flow/pause?local=1")

	// The write must reach the primary before holdfast's next check sees
	// it read-only: a few tries.
	var topo struct {
		State    string `json:"state"`
		Failover struct {
			Retried uint64 `json:"retried"`
		} `json:"failover"`
	}
	for try := 0; topo.Failover.Retried == 0; try++ {
		if try == 3 {
			t.Fatal("no write was retried after the primary turned read-only")
		}
		if err := primary.SetReadOnly(t.Context(), true); err != nil {
			t.Fatal(err)
		}
		_, err := db.Exec("INSERT INTO t (v) VALUES (1)")
		t.Logf("a write as the primary turned read-only: %v", err)
		dbtest.FetchJSON(t, "http://"+admin+"/api/topology", &topo)
		if topo.Failover.Retried > 0 && !is9010(err) {
			t.Fatalf("a write retried with no primary to run on: %v, want 9010", err)
		}
		if err := primary.SetReadOnly(t.Context(), false); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for dbtest.FetchJSON(t, "http://"+admin+"/api/topology", &topo); topo.State != "primary"; dbtest.FetchJSON(t, "http://"+admin+"/api/topology", &topo) {
			if time.Now().After(deadline) {
				t.Fatalf("holdfast finds no primary after it was made writable again: %+v", topo)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	for _, expr := range []string{
		`max_over_time(holdfast_failover_held_statements[5m]) > 0`, `holdfast_failover_held_total > 0`,
		`holdfast_failover_held_seconds_count > 0`, `holdfast_failover_retried_total > 0`,
		`holdfast_failover_refused_total > 0`, `holdfast_failover_pause_waits_total > 0`,
	} {
		waitSeries(t, prom, expr, expr, 20*time.Second)
	}
	d := loadDashboard(t)
	row, shown := false, ""
	for _, p := range d.Panels {
		if p.Type == "row" {
			row = p.Title == "Primary and failover"
			continue
		}
		if !row {
			continue
		}
		for _, tg := range p.Targets {
			expr := grafanaVars.Replace(tg.Expr)
			shown += expr + "\n"
			s := prom.mustQuery(t, expr, time.Time{})
			if len(s) == 0 {
				t.Errorf("panel %q %s: no data\n%s", p.Title, tg.RefID, expr)
				continue
			}
			t.Logf("panel %q %s: %s", p.Title, tg.RefID, describeAll(s))
		}
	}
	for _, m := range []string{"holdfast_failover_held_statements", "holdfast_failover_held_total", "holdfast_failover_held_seconds_bucket",
		"holdfast_failover_retried_total", "holdfast_failover_refused_total", "holdfast_failover_pause_waits_total"} {
		if !strings.Contains(shown, m+"{") {
			t.Errorf("no panel of the Primary and failover row shows %s", m)
		}
	}
}
