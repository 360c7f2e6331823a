package dashboards

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// TestOverloadAlertRules: overload protection's alerts against a real
// Prometheus scraping a real holdfast whose pool is saturated by flows of
// two classes. Both conditions are false before the load and true under it
// (background shed past its wait; critical work waiting past its budget),
// Prometheus evaluates both without error, and both alerts are pending or
// firing with their annotations rendered.
func TestOverloadAlertRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Prometheus and holdfast")
	}
	rules := loadGroups(t)[overloadGroup]
	want := map[string]bool{"HoldfastBackgroundShed": true, "HoldfastCriticalWaitOverBudget": true}
	for _, r := range rules {
		if !want[r.Alert] {
			t.Errorf("alert %s: add it to this test", r.Alert)
		}
	}
	// Two connections: one background may hold, one for critical work.
	// No pipelining, so that every statement borrows (and is counted).
	h := runHoldfast(t, dbtest.Command(t, "./cmd/holdfast"),
		"pool:\n  min: 0\n  max: 2\n  max_idle: 2\n  pipeline_depth: 0\n"+
			"overload:\n  classes: {critical: [\"crit_*\"], background: [\"bg_*\"]}\n"+
			"  reserve: 1\n  background_wait: 100ms\n  critical_wait: 1ms\nlog:\n  level: warn\n", false, nil)
	prom := startPrometheusJobs(t, map[string]string{"holdfast": h.admin})
	// The counters' zero must be scraped before the load, or increase()
	// sees no change; and no condition is true without it.
	waitSeries(t, prom, "prometheus scraping holdfast's class counters", `holdfast_class_shed_total{class="background"}`, 20*time.Second)
	for _, r := range rules {
		if s := prom.mustQuery(t, r.Expr, time.Time{}); len(s) != 0 {
			t.Fatalf("alert %s: condition true before any load: %s", r.Alert, describeAll(s))
		}
	}

	db := openApp(t, h)
	db.SetMaxOpenConns(16)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := "/* conn_tag:bg_report */ SELECT SLEEP(0.3)" // the one background slot; the rest are shed
			if i%2 == 1 {
				q = "/* conn_tag:crit_pay */ SELECT SLEEP(0.05)" // three critical clients on one connection
			}
			for ctx.Err() == nil {
				_, _ = db.ExecContext(ctx, q)
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()

	for _, r := range rules {
		waitConditionTrue(t, prom, r)
	}
	waitAlertsPending(t, prom, overloadGroup, nil)
	checkMetricNamesOf(t, []string{h.admin}, rules)
}

// waitAlertsPending waits until every rule of group is healthy, every
// alert it has renders its annotations, and each rule need accepts (every
// one when need is nil) has a pending or firing alert.
func waitAlertsPending(t *testing.T, prom prometheus, group string, need func(alert string) bool) {
	t.Helper()
	waitFor(t, "the alerts of "+group+" pending or firing", 10*time.Second, func() error {
		rg, err := prom.rules()
		if err != nil {
			return err
		}
		for _, g := range rg.Groups {
			if g.Name != group {
				continue
			}
			for _, rule := range g.Rules {
				if rule.Health != "ok" || rule.LastError != "" {
					return fmt.Errorf("alert %s: health %q, last error %q", rule.Name, rule.Health, rule.LastError)
				}
				if len(rule.Alerts) == 0 && (need == nil || need(rule.Name)) {
					return fmt.Errorf("alert %s: condition true but no pending or firing alert", rule.Name)
				}
				for _, al := range rule.Alerts {
					if text := al.Annotations["summary"] + al.Annotations["description"]; strings.Contains(text, "<no value>") {
						return fmt.Errorf("alert %s: annotations do not render: %v", rule.Name, al.Annotations)
					}
				}
				if len(rule.Alerts) > 0 {
					t.Logf("alert %s is %s: %s", rule.Name, rule.Alerts[0].State, rule.Alerts[0].Annotations["summary"])
				}
			}
			return nil
		}
		return fmt.Errorf("group %s not loaded", group)
	})
}
