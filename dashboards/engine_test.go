package dashboards

import (
	"bufio"
	"database/sql"
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation/legacy/redistest"
)

// engineHoldfast starts cmd/holdfast on a fresh database after `holdfast
// migrate`, with extra configuration; before serving, prep runs on the
// migrated database.
func engineHoldfast(t *testing.T, bin, extra string, prep func(*sql.DB)) holdfast {
	t.Helper()
	return runHoldfast(t, bin, "log:\n  level: info\n"+extra, true, prep)
}

// redisSet sets key to value on the Redis at addr (one RESP command).
func redisSet(t *testing.T, addr, key, value string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(key), key, len(value), value)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("SET %s: %q %v", key, line, err)
	}
}

// The engine's and the fleet's alerts, in a real Prometheus scraping real
// holdfast processes in which each condition is made true the way it
// happens in production:
//
//   - job holdfast: a claim arrives after its reservation was swept and
//     its units reserved by another buyer: holdfast forces the deduction
//     (HoldfastLateClaimForced) and the pool is over-promised
//     (HoldfastReconcilerViolation); the pool-scan duty's lease is held by
//     an instance that is gone but whose lease row was left far in the
//     future (HoldfastFleetDutyUnheld); fleet.connection_reserve leaves no
//     room for the instance's pool (HoldfastFleetOvercommitted);
//   - job holdfast-redis: a legacy Redis counter changed behind holdfast's
//     back (HoldfastRedisDrift).
//
// HoldfastFleetControlsStale needs the database unreachable; here it must
// evaluate, false, over series that exist.
func TestEngineAlertRules(t *testing.T) {
	t.Parallel()
	rules := loadGroups(t)[engineGroup]
	bin := dbtest.Command(t, "./cmd/holdfast")
	const ttlRule = "  payment_timeout: 100ms\n  callback_retry_window: 100ms\n  clock_skew: 100ms\n  default_ttl: 60s\n"
	a := engineHoldfast(t, bin, "reservation:\n"+ttlRule+
		"  sweep_interval: 100ms\n  reconcile_interval: 200ms\n  reconcile_alert_after: 2\n"+
		"fleet:\n  connection_reserve: 1000000\n",
		func(db *sql.DB) {
			if _, err := db.Exec("INSERT INTO holdfast_duties (duty, holder, expires_at) VALUES ('pool-scan', 'gone-instance', NOW(6) + INTERVAL 1 DAY)"); err != nil {
				t.Fatal(err)
			}
		})
	r := redistest.Start(t)
	b := engineHoldfast(t, bin, "reservation:\n"+ttlRule+"  redis:\n    address: "+r.Addr+"\n    authority: redis\n    drift_interval: 200ms\n    drift_alert_after: 1\n", nil)
	prom := startPrometheusJobs(t, map[string]string{"holdfast": a.admin, "holdfast-redis": b.admin})
	// The counters' zero must be scraped before the faults, or increase()
	// sees no change.
	waitFor(t, "prometheus scraping both", 20*time.Second, func() error {
		s, err := prom.query(`up == 1`, time.Time{})
		if err == nil && len(s) < 2 {
			err = fmt.Errorf("%d targets up", len(s))
		}
		return err
	})

	// Job holdfast: a forced late claim over-promises the pool.
	dba := openApp(t, a)
	call := func(db *sql.DB, q string) []string {
		t.Helper()
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer rows.Close()
		var first []string
		for rows.Next() {
			v, err := dbtest.ScanStrings(rows)
			if err != nil {
				t.Fatal(err)
			}
			if first == nil {
				first = v
			}
		}
		return first
	}
	call(dba, "CALL holdfast.receive(1, 1001, 1, 10)")
	late := call(dba, `CALL holdfast.reserve(1, 'late', '[{"item":1001,"qty":3,"locations":[1]}]', 1)`)[0]
	direct := dbtest.Open(t, dbtest.TablesDB(a.db))
	waitFor(t, "the sweeper expires the late reservation", 20*time.Second, func() error {
		var n int
		if err := direct.QueryRow("SELECT COUNT(*) FROM reserved_quantities").Scan(&n); err != nil || n != 0 {
			return fmt.Errorf("%d reserved lines left (%v)", n, err)
		}
		return nil
	})
	call(dba, `CALL holdfast.reserve(1, 'buyer', '[{"item":1001,"qty":9,"locations":[1]}]', 600)`)
	if res := call(dba, fmt.Sprintf("CALL holdfast.claim('%s')", late)); res[1] != "forced" {
		t.Fatalf("late claim after the sweep: %v, want forced", res)
	}

	// Job holdfast-redis: a counter changed behind holdfast's back.
	dbb := openApp(t, b)
	call(dbb, "CALL holdfast.receive(1, 1001, 1, 10)")
	call(dbb, `CALL holdfast.reserve(1, 'r1', '[{"item":1001,"qty":1,"locations":[1]}]', NULL)`)
	redisSet(t, r.Addr, "stock:1:1001:1", "999")

	want := map[string]bool{"HoldfastReconcilerViolation": true, "HoldfastLateClaimForced": true, "HoldfastRedisDrift": true,
		"HoldfastFleetDutyUnheld": true, "HoldfastFleetOvercommitted": true, "HoldfastFleetControlsStale": false}
	for _, r := range rules {
		if _, ok := want[r.Alert]; !ok {
			t.Errorf("alert %s: add it to this test", r.Alert)
		}
	}
	for _, r := range rules {
		if !want[r.Alert] {
			continue
		}
		waitConditionTrue(t, prom, r)
	}
	for _, r := range rules {
		if want[r.Alert] {
			continue
		}
		if s := prom.mustQuery(t, r.Expr, time.Time{}); len(s) != 0 {
			t.Errorf("alert %s: condition true without its fault: %s", r.Alert, describeAll(s))
		}
		for _, sel := range selectors(r.Expr) {
			if s := prom.mustQuery(t, sel, time.Time{}); len(s) == 0 {
				t.Errorf("alert %s: series %s: no data", r.Alert, sel)
			}
		}
	}
	checkMetricNamesOf(t, []string{a.admin, b.admin}, rules)

	// Prometheus evaluates each rule without error, and each whose
	// condition is true is pending or firing with its annotations
	// rendered.
	waitAlertsPending(t, prom, engineGroup, func(alert string) bool { return want[alert] })
}

// describeAll is describe with every label.
func describeAll(s []sample) string {
	parts := make([]string, 0, len(s))
	for _, x := range s {
		parts = append(parts, fmt.Sprintf("%v=%v", x.Metric, x.Value[1]))
	}
	return strings.Join(parts, " ")
}

// openApp is a database/sql pool of user app through h.
func openApp(t *testing.T, h holdfast) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s", h.addr, h.db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// checkMetricNamesOf checks that every holdfast metric the rules'
// expressions read is exposed by one of the holdfast admin listeners
// admins. (Their descriptions name tables such as holdfast_duties too.)
func checkMetricNamesOf(t *testing.T, admins []string, rules []rule) {
	t.Helper()
	exposed := map[string]bool{}
	for _, a := range admins {
		body, err := httpDo("GET", "http://"+a+"/metrics")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(body), "\n") {
			if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
				exposed[f[2]] = true
			}
		}
	}
	for _, r := range rules {
		for _, name := range selectorName.FindAllString(r.Expr, -1) {
			if !exposed[name] {
				t.Errorf("alert %s uses %s, which holdfast does not expose", r.Alert, name)
			}
		}
	}
}

var selectorName = regexp.MustCompile(`holdfast_[a-z0-9_]+`)
