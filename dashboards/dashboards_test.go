package dashboards

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// ---------------------------------------------------------------------------
// The files, parsed.

// dashboard is the part of a Grafana dashboard model these tests read.
type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int      `json:"id"`
	Type       string   `json:"type"`
	Title      string   `json:"title"`
	GridPos    *gridPos `json:"gridPos"`
	Datasource *dsRef   `json:"datasource"`
	Targets    []target `json:"targets"`
	Panels     []panel  `json:"panels"` // a row's collapsed panels
}

type gridPos struct{ X, Y, W, H int }

type dsRef struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type target struct {
	RefID      string `json:"refId"`
	Expr       string `json:"expr"`
	Datasource *dsRef `json:"datasource"`
}

type variable struct {
	Type       string `json:"type"`
	Name       string `json:"name"`
	Query      any    `json:"query"`
	Definition string `json:"definition"`
	Datasource *dsRef `json:"datasource"`
	Multi      bool   `json:"multi"`
	IncludeAll bool   `json:"includeAll"`
	AllValue   string `json:"allValue"`
}

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Alert       string            `yaml:"alert"`
	Record      string            `yaml:"record"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	raw, err := Files.ReadFile(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", DashboardFile, err)
	}
	return d
}

// The rule groups: the tag and pool alerts, the engine's and fleet's,
// overload protection's, the replicas', and the topology's.
const (
	tagGroup      = "holdfast"
	engineGroup   = "holdfast-engine"
	overloadGroup = "holdfast-overload"
	replicaGroup  = "holdfast-replicas"
	failoverGroup = "holdfast-failover"
)

// loadGroups returns the rule groups of AlertsFile by name, which must be
// exactly tagGroup, engineGroup, overloadGroup, replicaGroup and
// failoverGroup.
func loadGroups(t *testing.T) map[string][]rule {
	t.Helper()
	raw, err := Files.ReadFile(AlertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var f ruleFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatalf("%s: %v", AlertsFile, err)
	}
	out := map[string][]rule{}
	for _, g := range f.Groups {
		out[g.Name] = g.Rules
	}
	if len(f.Groups) != 5 || out[tagGroup] == nil || out[engineGroup] == nil || out[overloadGroup] == nil || out[replicaGroup] == nil || out[failoverGroup] == nil {
		t.Fatalf("%s: want exactly the rule groups %s, %s, %s, %s and %s", AlertsFile, tagGroup, engineGroup, overloadGroup, replicaGroup, failoverGroup)
	}
	return out
}

// loadRules returns the tag and pool alerts.
func loadRules(t *testing.T) []rule { return loadGroups(t)[tagGroup] }

// query is one PromQL expression from the files, ready to evaluate.
type query struct {
	source string // where it comes from, for messages
	expr   string // Grafana variables substituted
}

// grafanaVars substitutes what Grafana would for the dashboard's variables
// with "All" selected: allValue is ".*" for $instance and $tag (selectors
// use =~), and the test's data is about a minute long.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__range", "1m",
	"$instance", ".*",
	"$tag", ".*",
)

// dashboardQueries returns every target expression of every panel (rows'
// collapsed panels included).
func dashboardQueries(t *testing.T, d dashboard) []query {
	t.Helper()
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				e := grafanaVars.Replace(tg.Expr)
				if strings.Contains(e, "$") {
					t.Errorf("panel %q target %s: unknown variable left after substitution: %s", p.Title, tg.RefID, e)
				}
				out = append(out, query{source: fmt.Sprintf("panel %q %s", p.Title, tg.RefID), expr: e})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// ---------------------------------------------------------------------------
// Static checks.

// tool returns the path of a command the tests need, installing the
// project's test tools when it is missing. It never skips.
func tool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	toolsOnce.Do(func() {
		cmd := exec.Command("../scripts/tools-up.sh")
		toolsOut, toolsErr = cmd.CombinedOutput()
	})
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	t.Fatalf("%s is not installed and ../scripts/tools-up.sh did not install it (Debian package prometheus): %v\n%s", name, toolsErr, toolsOut)
	return ""
}

var (
	toolsOnce sync.Once
	toolsOut  []byte
	toolsErr  error
)

func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(tool(t, "promtool"), "check", "rules", AlertsFile).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules %s: %v\n%s", AlertsFile, err, out)
	}
	t.Logf("%s", out)
}

// TestAlertRulesShape checks what promtool does not: every rule is an alert
// with a summary and a description that name the tag.
func TestAlertRulesShape(t *testing.T) {
	t.Parallel()
	groups := loadGroups(t)
	names := map[string]bool{}
	for _, r := range slices.Concat(groups[engineGroup], groups[overloadGroup], groups[replicaGroup], groups[failoverGroup]) {
		if r.Alert == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("engine rule %q: want an alert with a severity, a summary and a description", r.Alert+r.Record)
		}
		if names[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		names[r.Alert] = true
	}
	rules := groups[tagGroup]
	if len(rules) == 0 {
		t.Fatal("no rules")
	}
	for _, r := range rules {
		if r.Alert == "" {
			t.Errorf("rule %q: only alert rules belong in %s", r.Record, AlertsFile)
			continue
		}
		if names[r.Alert] {
			t.Errorf("alert %s defined twice", r.Alert)
		}
		names[r.Alert] = true
		if r.Labels["severity"] == "" {
			t.Errorf("alert %s: no severity label", r.Alert)
		}
		for _, a := range []string{"summary", "description"} {
			text := r.Annotations[a]
			if text == "" {
				t.Errorf("alert %s: no %s annotation", r.Alert, a)
			}
			// A tag alert says $labels.tag; a pool alert names the tag
			// found by a query in the annotation (.Labels.tag).
			if a == "description" && !strings.Contains(text, "$labels.tag") && !strings.Contains(text, ".Labels.tag") {
				t.Errorf("alert %s: the description does not name the tag", r.Alert)
			}
		}
	}
	for _, want := range []string{"HoldfastPoolSaturated", "HoldfastTagHoldShareJump", "HoldfastTagWaiting",
		"HoldfastPoolTimeouts", "HoldfastDrainedTagStillHolding", "HoldfastReconcilerViolation", "HoldfastLateClaimForced",
		"HoldfastRedisDrift", "HoldfastFleetDutyUnheld", "HoldfastFleetOvercommitted"} {
		if !names[want] {
			t.Errorf("alert %s is missing", want)
		}
	}
}

// TestDashboardStructure checks what Grafana needs to import the dashboard
// and what holdfast's users rely on: the variables, one Prometheus data
// source variable used everywhere, panels laid out without overlaps.
func TestDashboardStructure(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.Title == "" || d.UID == "" || len(d.UID) > 40 {
		t.Errorf("title %q, uid %q: both are required, uid at most 40 characters", d.Title, d.UID)
	}
	if d.SchemaVersion < 36 {
		t.Errorf("schemaVersion %d: want at least 36", d.SchemaVersion)
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		if v.Name == "" || v.Type == "" {
			t.Errorf("variable %+v: name and type are required", v)
		}
		if _, dup := vars[v.Name]; dup {
			t.Errorf("variable %s defined twice", v.Name)
		}
		vars[v.Name] = v
	}
	if ds := vars["datasource"]; ds.Type != "datasource" || ds.Query != "prometheus" {
		t.Errorf("variable datasource: want a datasource variable of type prometheus, got %+v", ds)
	}
	for name, want := range map[string]string{
		"tag":      `label_values(holdfast_tag_borrows_total{instance=~"$instance"}, tag)`,
		"instance": `label_values(holdfast_pool_max_connections, instance)`,
	} {
		v := vars[name]
		q, _ := v.Query.(map[string]any)
		if v.Type != "query" || v.Definition != want || q["query"] != want || !v.Multi || !v.IncludeAll || v.AllValue != ".*" {
			t.Errorf("variable %s: want a multi-value query variable %s with All = .*, got %+v", name, want, v)
		}
		if v.Datasource == nil || *v.Datasource != (dsRef{Type: "prometheus", UID: "${datasource}"}) {
			t.Errorf("variable %s: datasource %+v, want the ${datasource} variable", name, v.Datasource)
		}
	}

	ids := map[int]bool{}
	type rect struct {
		title string
		g     gridPos
	}
	var placed []rect
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if p.Type == "" || p.Title == "" || p.GridPos == nil {
				t.Errorf("panel %d %q: type, title and gridPos are required", p.ID, p.Title)
				continue
			}
			if ids[p.ID] || p.ID == 0 {
				t.Errorf("panel %q: id %d missing or not unique", p.Title, p.ID)
			}
			ids[p.ID] = true
			g := *p.GridPos
			if g.W < 1 || g.H < 1 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
				t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
			}
			for _, o := range placed {
				if g.X < o.g.X+o.g.W && o.g.X < g.X+g.W && g.Y < o.g.Y+o.g.H && o.g.Y < g.Y+g.H {
					t.Errorf("panels %q and %q overlap", p.Title, o.title)
				}
			}
			placed = append(placed, rect{p.Title, g})
			if p.Type == "row" {
				walk(p.Panels)
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no targets", p.Title)
			}
			if p.Datasource == nil || *p.Datasource != (dsRef{Type: "prometheus", UID: "${datasource}"}) {
				t.Errorf("panel %q: datasource %+v, want the ${datasource} variable", p.Title, p.Datasource)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if tg.Expr == "" || tg.RefID == "" || refs[tg.RefID] {
					t.Errorf("panel %q: target %q needs an expr and a unique refId", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				if tg.Datasource == nil || *tg.Datasource != *p.Datasource {
					t.Errorf("panel %q target %s: datasource %+v differs from the panel's", p.Title, tg.RefID, tg.Datasource)
				}
			}
		}
	}
	walk(d.Panels)
}

// TestDashboardGrafanaSchema validates holdfast.json against Grafana's own
// dashboard schema: the schemacheck module beside this file decodes it
// with the Grafana Foundation SDK's strict decoders, generated from the
// schemas Grafana ships (dashboard, each panel plugin's options and field
// config, the Prometheus query model). It is a separate module so that
// holdfast's go.mod does not carry the SDK; `go run` fetches it through
// the module proxy on a machine that has not built it yet.
func TestDashboardGrafanaSchema(t *testing.T) {
	t.Parallel()
	abs, err := filepath.Abs(DashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", ".", abs)
	cmd.Dir = "schemacheck"
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("Grafana dashboard schema: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}

// ---------------------------------------------------------------------------
// The end-to-end test.

// TestEveryExpressionHasData runs holdfast under tagged load, lets a real
// Prometheus scrape it and evaluate AlertsFile, and evaluates every PromQL
// expression of both files through Prometheus's HTTP API: every dashboard
// target and variable must return data; alerts as checkAlertExpressions
// says; and Prometheus must evaluate every rule without error, with
// annotations that name a tag on every alert that is pending or firing.
//
// The load runs in phases, so that each expression has something to show:
//
//  0. a batch_flow transaction opens and stays open (drained later);
//     pin_flow sessions set a user variable (pins);
//  1. ten seconds of fast_flow only: two goroutines of
//     `/* conn_tag:fast_flow */ SELECT 1`;
//  2. slow_flow joins: six goroutines of transactions holding their
//     connection ~400 ms around client sleeps. With three free backend
//     connections and a 300 ms acquire timeout, borrowers wait and some
//     time out; slow_flow's share of hold time jumps from 0 to most;
//  3. on-call drains batch_flow through the admin API (its open transaction
//     still holds a connection; a new batch_flow statement is refused) and
//     caps fast_flow at 2 connections.
func TestEveryExpressionHasData(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := loadDashboard(t)
	rules := loadRules(t)
	h := startHoldfast(t)
	prom := startPrometheus(t, h.admin)
	waitFor(t, "prometheus scraping holdfast", 20*time.Second, func() error {
		s, err := prom.query(`up{job="holdfast"} == 1`, time.Time{})
		if err == nil && len(s) == 0 {
			err = fmt.Errorf("target not up yet")
		}
		return err
	})
	t.Logf("holdfast and prometheus up after %v", time.Since(start).Round(time.Millisecond))

	w := newWorkload(t, h)

	// Phase 0: a batch_flow transaction that stays open, and pins.
	batch, err := w.db.Conn(w.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"/* conn_tag:batch_flow */ BEGIN", "/* conn_tag:batch_flow */ SELECT 1"} {
		if _, err := batch.ExecContext(w.ctx, s); err != nil {
			t.Fatalf("batch_flow: %s: %v", s, err)
		}
	}
	for range 3 {
		if err := w.pin(w.ctx); err != nil {
			t.Fatalf("pin_flow: %v", err)
		}
	}

	// Phase 1: fast_flow alone.
	w.run("fast_flow", 2, w.fast)
	time.Sleep(10 * time.Second)

	// Phase 2: slow_flow takes over.
	phase2 := time.Now()
	w.run("slow_flow", 6, w.slow)
	time.Sleep(11 * time.Second)

	// Phase 3: on-call drains batch_flow while its transaction is open, and
	// caps fast_flow.
	admin := "http://" + h.admin
	dbtest.Fetch(t, "POST", admin+"/api/tags/batch_flow/drain?reason=dashboards+test")
	dbtest.Fetch(t, "PUT", admin+"/api/tags/fast_flow/limit?max=2")
	if _, err := w.db.ExecContext(w.ctx, "/* conn_tag:batch_flow */ SELECT 1"); err == nil || !strings.Contains(err.Error(), "drained") {
		t.Errorf("a new batch_flow statement after the drain: got %v, want the drained error", err)
	}
	time.Sleep(6 * time.Second)

	// Every metric the files name is one holdfast exposes.
	checkMetricNames(t, h, d, rules)

	// The dashboard's variables.
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`).FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		data, err := prom.api("/api/v1/label/"+m[2]+"/values", url.Values{"match[]": {grafanaVars.Replace(m[1])}})
		var values []string
		if err == nil {
			err = json.Unmarshal(data, &values)
		}
		if err != nil || len(values) == 0 {
			t.Errorf("variable %s (%s): no values: %v", v.Name, v.Definition, err)
			continue
		}
		t.Logf("variable %s: %s", v.Name, strings.Join(values, ", "))
	}

	// Every dashboard target.
	for _, q := range dashboardQueries(t, d) {
		s, err := prom.query(q.expr, time.Time{})
		switch {
		case err != nil:
			t.Errorf("%s: %v\n%s", q.source, err, q.expr)
		case len(s) == 0:
			t.Errorf("%s: no data\n%s", q.source, q.expr)
		default:
			t.Logf("%s: %s", q.source, describe(s))
		}
	}

	firing := checkAlertExpressions(t, prom, rules, phase2.Add(10*time.Second))
	checkRuleHealth(t, prom, firing)

	ok, failed := map[string]int64{}, map[string]int64{}
	w.ok.Range(func(k, v any) bool { ok[k.(string)] = v.(*atomic.Int64).Load(); return true })
	w.failed.Range(func(k, v any) bool { failed[k.(string)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("workload: done %v, failed %v; test took %v", ok, failed, time.Since(start).Round(time.Millisecond))

	// The drained tag's open transaction still commits.
	if _, err := batch.ExecContext(context.Background(), "COMMIT"); err != nil {
		t.Errorf("commit of batch_flow's transaction after the drain: %v", err)
	}
	batch.Close()
}

func hasTag(s []sample, tag string) bool {
	return slices.ContainsFunc(s, func(x sample) bool { return x.Metric["tag"] == tag })
}

// selectorRE matches a metric selector in an expression: a holdfast metric
// name and its label matchers, if any.
var selectorRE = regexp.MustCompile(`holdfast_[a-z0-9_]+(\{[^}]*\})?`)

// selectors returns the distinct metric selectors expr reads.
func selectors(expr string) []string {
	var out []string
	for _, s := range selectorRE.FindAllString(expr, -1) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// checkMetricNames checks that every holdfast metric the files use is
// exposed on holdfast's /metrics (a typo would otherwise show up only as
// "no data").
func checkMetricNames(t *testing.T, h holdfast, d dashboard, rules []rule) {
	t.Helper()
	body := dbtest.Fetch(t, "GET", "http://"+h.admin+"/metrics")
	exposed := map[string]string{} // family -> type
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			exposed[f[2]] = f[3]
		}
	}
	var exprs []string
	for _, q := range dashboardQueries(t, d) {
		exprs = append(exprs, q.expr)
	}
	for _, r := range rules {
		exprs = append(exprs, r.Expr, r.Annotations["description"], r.Annotations["summary"])
	}
	for _, v := range d.Templating.List {
		exprs = append(exprs, v.Definition)
	}
	seen := map[string]bool{}
	for _, e := range exprs {
		for _, name := range regexp.MustCompile(`holdfast_[a-z0-9_]+`).FindAllString(e, -1) {
			if seen[name] {
				continue
			}
			seen[name] = true
			family := name
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(name, suf); ok && exposed[b] == "histogram" {
					family = b
				}
			}
			if _, ok := exposed[family]; !ok {
				t.Errorf("metric %s is used by the dashboard or alerts but holdfast does not expose it", name)
			}
		}
	}
}

// ruleGroups is Prometheus's answer to /api/v1/rules.
type ruleGroups struct {
	Groups []struct {
		Name  string `json:"name"`
		Rules []struct {
			Name      string `json:"name"`
			Health    string `json:"health"`
			LastError string `json:"lastError"`
			Alerts    []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
				State       string            `json:"state"`
			} `json:"alerts"`
		} `json:"rules"`
	} `json:"groups"`
}

// rules returns the rule groups Prometheus has loaded, with their state.
func (p prometheus) rules() (ruleGroups, error) {
	var r ruleGroups
	data, err := p.api("/api/v1/rules", url.Values{})
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(data, &r)
}

// checkRuleHealth checks that Prometheus evaluates every rule without error,
// and that each alert whose condition is true is pending or firing with
// annotations that name a tag of the load.
func checkRuleHealth(t *testing.T, prom prometheus, firing map[string]bool) {
	t.Helper()
	r, err := prom.rules()
	if err != nil {
		t.Fatal(err)
	}
	var tagRules []int
	for i, g := range r.Groups {
		if g.Name == tagGroup {
			tagRules = append(tagRules, i)
		}
	}
	if len(r.Groups) != 5 || len(tagRules) != 1 {
		t.Fatalf("prometheus loaded rule groups %+v, want %s, %s, %s, %s and %s", r.Groups, tagGroup, engineGroup, overloadGroup, replicaGroup, failoverGroup)
	}
	tags := []string{"fast_flow", "slow_flow", "batch_flow", "pin_flow"}
	for _, rule := range r.Groups[tagRules[0]].Rules {
		if rule.Health != "ok" || rule.LastError != "" {
			t.Errorf("alert %s: health %q, last error %q", rule.Name, rule.Health, rule.LastError)
		}
		if !firing[rule.Name] {
			continue
		}
		if len(rule.Alerts) == 0 {
			t.Errorf("alert %s: condition true but Prometheus has no pending or firing alert", rule.Name)
			continue
		}
		for _, a := range rule.Alerts {
			text := a.Annotations["summary"] + "\n" + a.Annotations["description"]
			if !slices.ContainsFunc(tags, func(tag string) bool { return strings.Contains(text, tag) }) {
				t.Errorf("alert %s (%s): annotations name no tag:\n%s", rule.Name, a.State, text)
			}
		}
		a := rule.Alerts[0]
		t.Logf("alert %s is %s: %s | %s", rule.Name, a.State, a.Annotations["summary"],
			strings.Join(strings.Fields(a.Annotations["description"]), " "))
	}
}

// scaleWindows rewrites an alert expression's windows to this test's time
// scale: 5 minutes become 10 seconds, and the hour before the last 5
// minutes becomes the 10 seconds before the last 10.
var scaleWindows = strings.NewReplacer("[1h] offset 5m", "[10s] offset 10s", "[5m]", "[10s]")

// scaledFiresFor is the tag each alert's scaled condition must report
// under the test's load ("" for the per-instance pool alerts).
var scaledFiresFor = map[string]string{
	"HoldfastPoolSaturated":          "",
	"HoldfastTagHoldShareJump":       "slow_flow",
	"HoldfastTagWaiting":             "slow_flow",
	"HoldfastPoolTimeouts":           "",
	"HoldfastDrainedTagStillHolding": "batch_flow",
	"HoldfastTagIdleInTransaction":   "slow_flow",
}

// checkAlertExpressions evaluates every alert expression twice and returns
// the alerts whose condition is true as written.
//
// As written, now: it must evaluate, and return data when its condition is
// true. Conditions over 5-minute windows are diluted by a test shorter than
// that (a rate over [5m] divides by 300 s), and the hold-share jump needs
// the previous hour, which this Prometheus does not have: for a condition
// that is false, every series the expression reads must have data.
//
// Scaled (scaleWindows): every condition must be true for the tag the load
// makes it true for. The share jump is evaluated at the moment phase 2 has
// run 10 s (jumpAt), where its "5 minutes" are phase 2 and its "previous
// hour" is phase 1; the others now.
func checkAlertExpressions(t *testing.T, prom prometheus, rules []rule, jumpAt time.Time) map[string]bool {
	t.Helper()
	firing := map[string]bool{}
	for _, r := range rules {
		s, err := prom.query(r.Expr, time.Time{})
		switch {
		case err != nil:
			t.Errorf("alert %s: %v", r.Alert, err)
		case len(s) > 0:
			firing[r.Alert] = true
			t.Logf("alert %s as written: condition true: %s", r.Alert, describe(s))
		default:
			t.Logf("alert %s as written: condition false under this short load; checking the series it reads", r.Alert)
			for _, sel := range selectors(r.Expr) {
				s, err := prom.query(sel, time.Time{})
				switch {
				case err != nil:
					t.Errorf("alert %s: %s: %v", r.Alert, sel, err)
				case len(s) == 0:
					t.Errorf("alert %s: series %s: no data", r.Alert, sel)
				default:
					t.Logf("alert %s: series %s: %s", r.Alert, sel, describe(s))
				}
			}
		}

		scaled := scaleWindows.Replace(r.Expr)
		if m := regexp.MustCompile(`\[\d+[smhd]\](\s*offset\s+\d+[smhd])?`).FindAllString(scaled, -1); slices.ContainsFunc(m, func(w string) bool {
			return w != "[10s]" && w != "[10s] offset 10s"
		}) {
			t.Errorf("alert %s: windows %v are not scaled by this test; extend scaleWindows", r.Alert, m)
		}
		var at time.Time
		if r.Alert == "HoldfastTagHoldShareJump" {
			at = jumpAt
		}
		want, known := scaledFiresFor[r.Alert]
		if !known {
			t.Errorf("alert %s: add it to scaledFiresFor", r.Alert)
		}
		s, err = prom.query(scaled, at)
		switch {
		case err != nil:
			t.Errorf("alert %s scaled: %v", r.Alert, err)
		case len(s) == 0 || (want != "" && !hasTag(s, want)):
			t.Errorf("alert %s scaled to 10 s windows: want it true for tag %q, got %s\n%s", r.Alert, want, describe(s), scaled)
		default:
			t.Logf("alert %s scaled to 10 s windows: condition true: %s", r.Alert, describe(s))
		}
	}
	// These conditions do not depend on the window length: this load must
	// make them true as written.
	for _, name := range []string{"HoldfastPoolSaturated", "HoldfastPoolTimeouts", "HoldfastDrainedTagStillHolding"} {
		if !firing[name] {
			t.Errorf("alert %s: its condition should be true as written under this load", name)
		}
	}
	return firing
}
