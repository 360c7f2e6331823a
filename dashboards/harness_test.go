package dashboards

// The real processes the end-to-end test drives: holdfast built from
// cmd/holdfast, Prometheus with its HTTP API, and a tagged workload.

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// startProcess starts cmd, killed at cleanup; its output is logged if the
// test fails.
func startProcess(t *testing.T, name string, cmd *exec.Cmd) *dbtest.SyncBuffer {
	t.Helper()
	out := &dbtest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s output (last 4 KiB):\n%s", name, tail(out.String(), 4096))
		}
	})
	return out
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// waitFor polls f every 100 ms until it returns nil or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v: %v", what, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitSeries waits up to timeout until expr has at least one series in
// prom, and returns them.
func waitSeries(t *testing.T, prom prometheus, what, expr string, timeout time.Duration) []sample {
	t.Helper()
	var got []sample
	waitFor(t, what, timeout, func() error {
		s, err := prom.query(expr, time.Time{})
		if err == nil && len(s) == 0 {
			err = fmt.Errorf("no data")
		}
		got = s
		return err
	})
	return got
}

// waitConditionTrue waits until the condition of alert rule r holds.
func waitConditionTrue(t *testing.T, prom prometheus, r rule) {
	t.Helper()
	s := waitSeries(t, prom, "alert "+r.Alert+": condition true", r.Expr, 30*time.Second)
	t.Logf("alert %s: condition true: %s", r.Alert, describeAll(s))
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// httpDo is dbtest.Fetch for callers that poll or read an error's body:
// it returns the failure instead of failing the test, and the body with
// it when the status is not 200.
func httpDo(method, u string) ([]byte, error) {
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("%s %s: %s: %s", method, u, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

type holdfast struct {
	addr, admin, db string
}

// startHoldfast builds cmd/holdfast and runs it against the test MariaDB
// with a pool of 4 backend connections, an acquire timeout short enough
// for the load to hit it, and a slow-transaction threshold below the
// slow flow's hold time.
func startHoldfast(t *testing.T) holdfast {
	t.Helper()
	return runHoldfast(t, dbtest.Command(t, "./cmd/holdfast"),
		"pool:\n  min: 0\n  max: 4\n  max_idle: 4\n  acquire_timeout: 300ms\n"+
			"attribution:\n  slow_transaction: 300ms\nlog:\n  level: warn\n", false, nil)
}

// appUser is the client account of the tests' holdfast.
var appUser = []holdfastproc.User{{Name: "app", Password: "app"}}

// runHoldfast runs bin serve on a fresh database with more configuration
// (YAML over holdfast's defaults and the test's addresses, account and
// database), after `holdfast migrate` and prep (on the migrated
// database) when migrate is set, and returns once its /metrics answers.
func runHoldfast(t *testing.T, bin string, more string, migrate bool, prep func(*sql.DB)) holdfast {
	t.Helper()
	h := holdfast{addr: dbtest.FreeAddr(t), admin: dbtest.FreeAddr(t), db: dbtest.NewDatabase(t)}
	path := filepath.Join(t.TempDir(), "holdfast.yaml")
	dbtest.WriteHoldfastConfig(t, path, holdfastproc.Config{Listen: h.addr, Users: appUser, Admin: h.admin,
		Backend: holdfastproc.Backend{Database: h.db}, YAML: more})
	p := dbtest.NewHoldfast(t, holdfastproc.Options{Bin: bin, Config: path, Ready: holdfastproc.MetricsReady(h.admin)})
	if migrate {
		p.MigrateOrFail(t)
		if prep != nil {
			prep(dbtest.Open(t, dbtest.TablesDB(h.db)))
		}
	}
	p.StartOrFail(t)
	return h
}

// prometheus is a real Prometheus server, queried through its HTTP API.
type prometheus struct{ base string }

// startPrometheus runs Prometheus scraping target every second, with
// AlertsFile loaded and evaluated every second.
func startPrometheus(t *testing.T, target string) prometheus {
	t.Helper()
	return startPrometheusJobs(t, map[string]string{"holdfast": target})
}

// startPrometheusJobs is startPrometheus with one scrape job per entry of
// jobs (job name: target).
func startPrometheusJobs(t *testing.T, jobs map[string]string) prometheus {
	t.Helper()
	bin := tool(t, "prometheus")
	rules, err := filepath.Abs(AlertsFile)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
`, rules)
	names := make([]string, 0, len(jobs))
	for j := range jobs {
		names = append(names, j)
	}
	sort.Strings(names)
	for _, j := range names {
		cfg += fmt.Sprintf("  - job_name: %q\n    static_configs:\n      - targets: [%q]\n", j, jobs[j])
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := dbtest.FreeAddr(t)
	startProcess(t, "prometheus", exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen,
		"--log.level=warn"))
	p := prometheus{base: "http://" + listen}
	waitFor(t, "prometheus ready", 30*time.Second, func() error {
		_, err := httpDo("GET", p.base+"/-/ready")
		return err
	})
	return p
}

// sample is one element of an instant vector.
type sample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// api GETs a Prometheus API path and returns its data field.
func (p prometheus) api(path string, params url.Values) (json.RawMessage, error) {
	body, err := httpDo("GET", p.base+path+"?"+params.Encode())
	var r struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
		Data      json.RawMessage `json:"data"`
	}
	if jerr := json.Unmarshal(body, &r); jerr != nil {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %v", path, jerr)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s: %s", path, r.ErrorType, r.Error)
	}
	return r.Data, nil
}

// query evaluates expr at time at (now when zero) and returns the samples
// of the result (a scalar counts as one sample without labels).
func (p prometheus) query(expr string, at time.Time) ([]sample, error) {
	params := url.Values{"query": {expr}}
	if !at.IsZero() {
		params.Set("time", strconv.FormatFloat(float64(at.UnixMilli())/1000, 'f', 3, 64))
	}
	data, err := p.api("/api/v1/query", params)
	if err != nil {
		return nil, err
	}
	var r struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, err
	}
	switch r.ResultType {
	case "vector":
		var v []sample
		err := json.Unmarshal(r.Result, &v)
		return v, err
	case "scalar":
		var v [2]any
		err := json.Unmarshal(r.Result, &v)
		return []sample{{Value: v}}, err
	}
	return nil, fmt.Errorf("unexpected result type %s", r.ResultType)
}

func (p prometheus) mustQuery(t *testing.T, expr string, at time.Time) []sample {
	t.Helper()
	s, err := p.query(expr, at)
	if err != nil {
		t.Fatalf("query %s: %v", expr, err)
	}
	return s
}

// describe summarises samples for the test log: count and, per sample,
// its identifying labels and value.
func describe(s []sample) string {
	parts := make([]string, 0, len(s))
	for _, x := range s {
		var ls []string
		for k, v := range x.Metric {
			if k == "tag" || k == "reason" || k == "state" {
				ls = append(ls, k+"="+v)
			}
		}
		sort.Strings(ls)
		parts = append(parts, fmt.Sprintf("{%s}=%v", strings.Join(ls, ","), x.Value[1]))
	}
	sort.Strings(parts)
	if len(parts) > 6 {
		parts = append(parts[:6], fmt.Sprintf("... (%d more)", len(parts)-6))
	}
	return fmt.Sprintf("%d samples %s", len(s), strings.Join(parts, " "))
}

// workload drives tagged traffic through holdfast until stopped.
type workload struct {
	dsn    string // app's DSN for holdfast
	db     *sql.DB
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ok     sync.Map // flow -> *atomic.Int64, successful units of work
	failed sync.Map // flow -> *atomic.Int64, failed units (timeouts, drains)
}

func newWorkload(t *testing.T, h holdfast) *workload {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = "app", "app", "tcp", h.addr, h.db
	c.Timeout, c.ReadTimeout, c.WriteTimeout = 5*time.Second, 10*time.Second, 10*time.Second
	dsn := c.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(32)
	db.SetMaxIdleConns(32)
	// Bounded: the whole workload stops by itself after two minutes.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	w := &workload{dsn: dsn, db: db, ctx: ctx, cancel: cancel}
	t.Cleanup(w.stop)
	return w
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
	w.db.Close()
}

func (w *workload) count(m *sync.Map, flow string) *atomic.Int64 {
	v, _ := m.LoadOrStore(flow, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// run starts n goroutines repeating unit until the workload stops.
func (w *workload) run(flow string, n int, unit func(ctx context.Context) error) {
	for range n {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			for w.ctx.Err() == nil {
				if err := unit(w.ctx); err != nil {
					if w.ctx.Err() == nil {
						w.count(&w.failed, flow).Add(1)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				w.count(&w.ok, flow).Add(1)
			}
		}()
	}
}

// fast is one short autocommit statement.
func (w *workload) fast(ctx context.Context) error {
	_, err := w.db.ExecContext(ctx, "/* conn_tag:fast_flow */ SELECT 1")
	return err
}

// slow is a transaction that holds its connection about 400 ms around two
// client-side sleeps, as the design documents' problem 6 describes.
func (w *workload) slow(ctx context.Context) error {
	conn, err := w.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	steps := []string{
		"/* conn_tag:slow_flow */ BEGIN",
		"/* conn_tag:slow_flow */ SELECT 1",
		"sleep",
		"/* conn_tag:slow_flow */ SELECT 2",
		"sleep",
		"/* conn_tag:slow_flow */ COMMIT",
	}
	for _, s := range steps {
		if s == "sleep" {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		if _, err := conn.ExecContext(ctx, s); err != nil {
			_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
			return err
		}
	}
	return nil
}

// pin sets a user variable, which pins the session to its backend
// connection, and disconnects.
func (w *workload) pin(ctx context.Context) error {
	conn, err := sql.Open("mysql", w.dsn)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetMaxIdleConns(0)
	var v int
	if _, err := conn.ExecContext(ctx, "/* conn_tag:pin_flow */ SET @hf_pin = 1"); err != nil {
		return err
	}
	return conn.QueryRowContext(ctx, "/* conn_tag:pin_flow */ SELECT 1").Scan(&v)
}
