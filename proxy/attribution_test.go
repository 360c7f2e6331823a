package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// AdminHandlerForTest is the admin package's handler (API and /metrics)
// over a server with cfg's admin settings. admin imports proxy, so
// admin_test.go (package proxy_test) sets it.
var AdminHandlerForTest func(s *Server, cfg config.Admin) http.Handler

// admin serves the proxy's admin API for a test.
func (p *testProxy) admin(t *testing.T) *httptest.Server {
	ts := httptest.NewServer(AdminHandlerForTest(p.srv, p.cfg.Admin))
	t.Cleanup(ts.Close)
	return ts
}

// scrape fetches /metrics and parses it.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return mf
}

// metric returns the value of family name for the series whose labels
// include want (counter, gauge, or a histogram's sum; count with "_count").
func metric(mf map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	count := strings.HasSuffix(name, "_count")
	f := mf[strings.TrimSuffix(name, "_count")]
	if f == nil {
		return 0
	}
	total := 0.0
	for _, m := range f.Metric {
		ok := true
		for k, v := range want {
			found := false
			for _, l := range m.Label {
				if l.GetName() == k && l.GetValue() == v {
					found = true
				}
			}
			ok = ok && found
		}
		if !ok {
			continue
		}
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil && count:
			total += float64(m.Histogram.GetSampleCount())
		case m.Histogram != nil:
			total += m.Histogram.GetSampleSum()
		}
	}
	return total
}

func tagged(tag string) map[string]string { return map[string]string{"tag": tag} }

// TestAttributionSlowVsFast: a flow that holds its transaction 200 ms
// around a sleep in the client accounts for the larger share of hold time
// and nearly all idle-in-transaction time; counts and waits are exact.
func TestAttributionSlowVsFast(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Max, c.Pool.MaxIdle = 2, 2 })
	admin := p.admin(t)
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY, n INT)")
	mustExec(t, p.direct(t), "INSERT INTO t VALUES (1, 0), (2, 0)")
	db := p.open(t)
	db.SetMaxOpenConns(8)

	const slowClients, slowTxns = 3, 4
	const fastClients = 3
	var wg sync.WaitGroup
	var fastTxns, fastAuto atomic.Int64
	stop := make(chan struct{})
	errc := make(chan error, 16)
	for i := 0; i < slowClients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < slowTxns; k++ {
				tx, err := db.Begin()
				if err != nil {
					errc <- err
					return
				}
				if _, err := tx.Exec("/* conn_tag:slow_flow */ UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
					errc <- err
					return
				}
				time.Sleep(200 * time.Millisecond) // an RPC while holding the connection
				if _, err := tx.Exec("SELECT 1 /*conn_tag='slow_flow'*/"); err != nil {
					errc <- err
					return
				}
				if err := tx.Commit(); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	var fwg sync.WaitGroup
	for i := 0; i < fastClients; i++ {
		fwg.Add(1)
		go func() {
			defer fwg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				tx, err := db.Begin()
				if err != nil {
					errc <- err
					return
				}
				if _, err := tx.Exec("/* conn_tag:fast_flow */ UPDATE t SET n = n + 1 WHERE id = 2"); err != nil {
					errc <- err
					return
				}
				if err := tx.Commit(); err != nil {
					errc <- err
					return
				}
				fastTxns.Add(1)
				if _, err := db.Exec("/* application:shop,conn_tag:fast_flow */ SELECT 1"); err != nil {
					errc <- err
					return
				}
				fastAuto.Add(1)
			}
		}()
	}
	wg.Wait()
	close(stop)
	fwg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	mf := scrape(t, admin.URL)
	slowHold := metric(mf, "holdfast_tag_hold_seconds", tagged("slow_flow"))
	fastHold := metric(mf, "holdfast_tag_hold_seconds", tagged("fast_flow"))
	slowIdle := metric(mf, "holdfast_tag_idle_in_transaction_seconds_total", tagged("slow_flow"))
	allIdle := metric(mf, "holdfast_tag_idle_in_transaction_seconds_total", nil)
	t.Logf("hold: slow %.3fs fast %.3fs; idle in transaction: slow %.3fs of %.3fs; fast txns %d, autocommit %d",
		slowHold, fastHold, slowIdle, allIdle, fastTxns.Load(), fastAuto.Load())

	n := float64(slowClients * slowTxns)
	if slowHold <= fastHold {
		t.Errorf("slow_flow held %.3fs, fast_flow %.3fs: slow should dominate", slowHold, fastHold)
	}
	if slowIdle < 0.9*n*0.2 || slowIdle > slowHold {
		t.Errorf("slow_flow idle in transaction %.3fs, want at least %.3fs and at most its hold %.3fs", slowIdle, 0.9*n*0.2, slowHold)
	}
	if slowIdle < 0.9*allIdle {
		t.Errorf("slow_flow has %.3fs of %.3fs idle-in-transaction time, want nearly all", slowIdle, allIdle)
	}
	// Exact counts: one borrow and one transaction per slow transaction;
	// its statements are the two tagged ones plus COMMIT (untagged: it
	// inherits the transaction's tag). BEGIN is answered by holdfast and
	// starts on the backend with the first statement.
	for name, want := range map[string]float64{
		"holdfast_tag_borrows_total":      n,
		"holdfast_tag_transactions_total": n,
		"holdfast_tag_statements_total":   3 * n,
		"holdfast_tag_hold_seconds_count": n,
		"holdfast_tag_wait_seconds_count": n,
		"holdfast_tag_errors_total":       0,
	} {
		if got := metric(mf, name, tagged("slow_flow")); got != want {
			t.Errorf("%s{slow_flow} = %v, want %v", name, got, want)
		}
	}
	ft, fa := float64(fastTxns.Load()), float64(fastAuto.Load())
	for name, want := range map[string]float64{
		"holdfast_tag_borrows_total":      ft + fa,
		"holdfast_tag_transactions_total": ft,
		"holdfast_tag_statements_total":   2*ft + fa,
	} {
		if got := metric(mf, name, tagged("fast_flow")); got != want {
			t.Errorf("%s{fast_flow} = %v, want %v", name, got, want)
		}
	}
	// Three slow transactions on two connections: someone waited.
	if w := metric(mf, "holdfast_tag_wait_seconds", nil); w < 0.1 {
		t.Errorf("total wait %.3fs: with 3 slow transactions on 2 connections someone must wait ~200ms", w)
	}
	if metric(mf, "holdfast_pool_waits_total", nil) == 0 {
		t.Error("the pool counted no waits")
	}
	if got := metric(mf, "holdfast_tag_slow_transactions_total", tagged("slow_flow")); got != 0 {
		// 200ms of 1s threshold: not slow by the configured rule.
		t.Errorf("slow transactions %v under a 1s threshold", got)
	}

	// The admin API ranks tags by hold time.
	var tags struct {
		Tags []TagInfo `json:"tags"`
	}
	getJSON(t, admin.URL+"/api/tags", &tags)
	if len(tags.Tags) == 0 || tags.Tags[0].Tag != "slow_flow" {
		t.Fatalf("/api/tags not led by slow_flow: %+v", tags.Tags)
	}
}

func getJSON(t *testing.T, url string, v any) { t.Helper(); dbtest.FetchJSON(t, url, v) }

func call(t *testing.T, method, url string) { t.Helper(); dbtest.Fetch(t, method, url) }

func TestDrainTag(t *testing.T) {
	p := startProxy(t)
	admin := p.admin(t)
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY)")
	db := p.open(t)
	ctx := context.Background()

	// A transaction of the tag is in flight when the drain starts.
	inflight, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, inflight, "/* conn_tag:slow_flow */ INSERT INTO t VALUES (1)")
	call(t, "POST", admin.URL+"/api/tags/slow_flow/drain?reason=incident-42")

	start := time.Now()
	_, err = db.Exec("/* conn_tag:slow_flow */ INSERT INTO t VALUES (2)")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9001 || !strings.Contains(me.Message, "'slow_flow' is drained") || !strings.Contains(me.Message, "incident-42") {
		t.Fatalf("new statement of a drained tag: %v, want error 9001 naming the tag and the drain", err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("drained statement took %v to fail", time.Since(start))
	}
	// Other tags are untouched; the in-flight transaction commits.
	mustExec(t, db, "/* conn_tag:fast_flow */ INSERT INTO t VALUES (3)")
	mustExec(t, inflight, "/* conn_tag:slow_flow */ INSERT INTO t VALUES (4)")
	if err := inflight.Commit(); err != nil {
		t.Fatalf("in-flight transaction of the drained tag: %v", err)
	}
	if got := queryString(t, p.direct(t), "SELECT GROUP_CONCAT(id ORDER BY id) FROM t"); got != "1,3,4" {
		t.Fatalf("rows %s, want 1,3,4", got)
	}
	mf := scrape(t, admin.URL)
	if metric(mf, "holdfast_tag_drained", tagged("slow_flow")) != 1 ||
		metric(mf, "holdfast_tag_rejected_total", map[string]string{"tag": "slow_flow", "reason": "drained"}) != 1 {
		t.Fatal("drain not visible in metrics")
	}

	call(t, "DELETE", admin.URL+"/api/tags/slow_flow/drain")
	mustExec(t, db, "/* conn_tag:slow_flow */ INSERT INTO t VALUES (5)")

	// With a grace period, holders still inside a transaction when it ends
	// are disconnected (their transaction rolls back).
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	mustExec(t, holder, "BEGIN")
	mustExec(t, holder, "/* conn_tag:slow_flow */ INSERT INTO t VALUES (6)")
	call(t, "POST", admin.URL+"/api/tags/slow_flow/drain?grace=300ms")
	deadline := time.Now().Add(10 * time.Second)
	for {
		var holders struct {
			Holders []HolderInfo `json:"holders"`
		}
		getJSON(t, admin.URL+"/api/holders", &holders)
		if len(holders.Holders) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holders after the grace period: %+v", holders.Holders)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := holder.ExecContext(ctx, "COMMIT"); err == nil {
		t.Fatal("a holder past the drain grace period could still commit")
	}
	if got := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t WHERE id = 6"); got != "0" {
		t.Fatal("the killed holder's insert was committed")
	}
}

// TestLimitTag: with a limit of 2, MariaDB never runs more than 2 of the
// tag's statements at once, while other tags still get connections.
func TestLimitTag(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Max, c.Pool.MaxIdle = 4, 4
		c.Tags.Limits = map[string]int{"capped": 2}
	})
	admin := p.admin(t)
	db := p.open(t)
	db.SetMaxOpenConns(10)
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var n int64
			if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ? AND INFO LIKE '%conn_tag:capped%'", p.user).Scan(&n); err == nil && n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	errc := make(chan error, 10)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < 3; k++ {
				if _, err := db.Exec("/* conn_tag:capped */ SELECT SLEEP(0.2)"); err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	// Another tag gets a connection promptly meanwhile.
	time.Sleep(100 * time.Millisecond)
	if got := queryString(t, db, "/* conn_tag:free */ SELECT 'free'"); got != "free" {
		t.Fatal(got)
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if got := peak.Load(); got != 2 {
		t.Fatalf("MariaDB ran up to %d capped statements at once, want exactly the limit 2", got)
	}
	mf := scrape(t, admin.URL)
	if metric(mf, "holdfast_tag_connection_limit", tagged("capped")) != 2 {
		t.Fatal("limit not visible in metrics")
	}
	call(t, "DELETE", admin.URL+"/api/tags/capped/limit")
	var gates struct {
		Gates []GateState `json:"gates"`
	}
	getJSON(t, admin.URL+"/api/gates", &gates)
	if len(gates.Gates) != 0 {
		t.Fatalf("gates after lifting the limit: %+v", gates.Gates)
	}
}

// raceEnabled is set in builds with the race detector (race_test.go).
var raceEnabled bool

// TestTagCardinality sends one million distinct tags (100,000 under the
// race detector, which makes each statement several times dearer). Tag
// names are bounded (attribution.max_tags), the rest count as "other",
// and the metrics endpoint and memory stay small: the heap may grow by
// at most 64 bytes a tag.
func TestTagCardinality(t *testing.T) {
	const withWork = 2_000
	total := 1_000_000
	if raceEnabled {
		total = 100_000
	}
	p := startProxy(t, func(c *config.Config) { c.Attribution.MaxTags = 500 })
	admin := p.admin(t)
	db := p.open(t)
	db.SetMaxOpenConns(4)
	// Real statements for the first tags, so tags with activity exceed the
	// bound and "other" accumulates work.
	for i := 0; i < withWork; i++ {
		mustExec(t, db, fmt.Sprintf("/* conn_tag:flow_%d */ DO 0", i))
	}
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	// The rest pipelined on raw connections: holdfast parses and interns
	// each tag, then answers SELECT LAST_INSERT_ID() itself.
	var wg sync.WaitGroup
	const workers, batch = 4, 500
	per := (total - withWork) / workers
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			c, err := rawDial(p.addr, rawmysql.Options{User: "app", Password: "app", DB: p.db})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.NC.Close()
			c.LenientSeq = true
			var buf []byte
			for i := 0; i < per; i += batch {
				buf = buf[:0]
				for j := i; j < min(i+batch, per); j++ {
					buf = append(buf, rawmysql.Frame(0, fmt.Appendf([]byte{0x03}, "/* conn_tag:t%d_%d */ SELECT LAST_INSERT_ID()", w, j))...)
				}
				_ = c.NC.SetWriteDeadline(time.Now().Add(c.Guard))
				if _, err := c.NC.Write(buf); err != nil {
					t.Error(err)
					return
				}
				for j := i; j < min(i+batch, per); j++ {
					if _, err := c.ReadResults(false, false); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(w)
	}
	wg.Wait()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	grown := int64(after.HeapInuse) - int64(before.HeapInuse)

	resp, err := http.Get(admin.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	snap := p.srv.Recorder().Snapshot()
	t.Logf("%d tags sent: %d kept, %d folded; heap grew %d KiB; /metrics is %d KiB", total, len(snap), p.srv.Recorder().Folded(), grown>>10, len(body)>>10)
	if len(snap) > 502 {
		t.Fatalf("%d tags kept, want at most 500 plus untagged and other", len(snap))
	}
	if p.srv.Recorder().Folded() < uint64(total-500-withWork) {
		t.Fatalf("only %d tags folded", p.srv.Recorder().Folded())
	}
	var other float64
	for _, s := range snap {
		if s.Tag == "other" {
			other = float64(s.Statements)
		}
	}
	if other < withWork-500 {
		t.Fatalf("tag other ran %v statements, want the %d past the bound", other, withWork-500)
	}
	if grown > int64(total)*64 {
		t.Fatalf("heap grew %d KiB over %d tags", grown>>10, total)
	}
	if len(body) > 8<<20 {
		t.Fatalf("/metrics is %d MiB", len(body)>>20)
	}
}

// TestTagRetireIdle: with every max_tags slot taken, a tag idle for
// retire_idle gives its slot to a new tag; a busy one keeps its own.
func TestTagRetireIdle(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Attribution.MaxTags = 2
		c.Attribution.RetireIdle = 300 * time.Millisecond
	})
	admin := p.admin(t)
	db := p.open(t)
	start := time.Now() // retired_flow is idle from after this on
	mustExec(t, db, "/* conn_tag:retired_flow */ DO 0")
	mustExec(t, db, "/* conn_tag:busy_flow */ DO 0")
	mustExec(t, db, "/* conn_tag:new_flow */ DO 0")
	mf := scrape(t, admin.URL)
	if metric(mf, "holdfast_tag_statements_total", tagged("new_flow")) != 0 || metric(mf, "holdfast_tag_statements_total", tagged("other")) != 1 {
		t.Fatal("a third tag with max_tags 2 and nothing idle was not counted under other")
	}
	for {
		mustExec(t, db, "/* conn_tag:busy_flow */ DO 0")
		mustExec(t, db, "/* conn_tag:new_flow */ DO 0")
		mf = scrape(t, admin.URL)
		if metric(mf, "holdfast_tag_statements_total", tagged("new_flow")) > 0 {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatal("new_flow never got a slot although retired_flow was idle")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if idle := time.Since(start); idle < 300*time.Millisecond {
		t.Fatalf("a tag was retired after %v, before retire_idle", idle)
	}
	if f := mf["holdfast_tag_statements_total"]; f != nil {
		for _, m := range f.Metric {
			for _, l := range m.Label {
				if l.GetName() == "tag" && l.GetValue() == "retired_flow" {
					t.Fatal("the retired tag is still in /metrics")
				}
			}
		}
	}
	if metric(mf, "holdfast_tag_statements_total", tagged("busy_flow")) < 2 {
		t.Fatal("the busy tag lost its series")
	}
	if metric(mf, "holdfast_tags_retired_total", nil) != 1 {
		t.Fatalf("holdfast_tags_retired_total = %v, want 1", metric(mf, "holdfast_tags_retired_total", nil))
	}
}

func TestAdminToken(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Admin.Listen, c.Admin.Token, c.Admin.AllowPlaintext = "0.0.0.0:0", "s3cret", true
	})
	admin := p.admin(t)
	for _, path := range []string{"/metrics", "/api/tags", "/api/holders"} {
		resp, err := http.Get(admin.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s without a token: %s", path, resp.Status)
		}
		req, _ := http.NewRequest("GET", admin.URL+path, nil)
		req.Header.Set("Authorization", "Bearer wrong")
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s with a wrong token: %s", path, resp.Status)
		}
		req.Header.Set("Authorization", "Bearer s3cret")
		if resp, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s with the token: %s", path, resp.Status)
		}
	}
	// Off loopback a credential is mandatory.
	cfg := config.Default()
	cfg.Admin.Listen, cfg.Admin.AllowPlaintext = "0.0.0.0:6034", true
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "admin.credentials") {
		t.Fatalf("admin off loopback without a credential validated: %v", err)
	}
}

var _ = sql.ErrNoRows

// A limit that comes into force while the tag's statements run counts
// them in, and each gives its slot back as it ends: the tag goes on at
// the limit, its waiters served, and nothing is left counted once the
// load stops (a slot not given back would wedge the tag: waiters only,
// each refused after pool.acquire_timeout).
func TestLimitSetUnderLoad(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Max, c.Pool.MaxIdle = 8, 8
		c.Pool.AcquireTimeout = 3 * time.Second
	})
	db := p.open(t)
	db.SetMaxOpenConns(8)
	const clients = 4
	stop := make(chan struct{})
	var served, afterLimit atomic.Int64
	limited := make(chan struct{})
	errc := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := db.Exec("/* conn_tag:capz */ DO SLEEP(0.1)")
				if err != nil {
					errc <- err
					return
				}
				served.Add(1)
				select {
				case <-limited:
					afterLimit.Add(1)
				default:
				}
			}
		})
	}
	waitFor(t, "every client's statement running", func() bool { return p.srv.heldBy("capz") == clients })
	p.srv.LimitTag("capz", 2)
	close(limited)
	waitFor(t, "statements served under the limit", func() bool { return afterLimit.Load() >= 20 })
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("a statement under the limit: %v", err)
	}
	p.srv.gates.mu.Lock()
	gt := p.srv.gates.m["capz"]
	inUse, pre := gt.inUse, gt.pre
	p.srv.gates.mu.Unlock()
	if inUse != 0 || pre != 0 {
		t.Fatalf("after the load: %d slots counted (%d of holds before the limit); want 0", inUse, pre)
	}
	t.Logf("%d statements, %d after the limit", served.Load(), afterLimit.Load())
}
