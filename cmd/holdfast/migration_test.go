package main

import (
	"database/sql"
	"fmt"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/reservation/legacy/redistest"
)

// migrationProcess starts holdfast with a private Redis as the legacy
// counter (the switch seeded with authority), its admin listener on, after
// migrate.
func migrationProcess(t *testing.T, redisAddr, authority string) (p *process, adminAddr string) {
	t.Helper()
	p = newProcess(t)
	adminAddr = dbtest.FreeAddr(t)
	extra := fmt.Sprintf(`log:
  level: info
reservation:
  payment_timeout: 0s
  callback_retry_window: 0s
  clock_skew: 0s
  default_ttl: 1m
  sweep_interval: 100ms
  call_timeout: 20s
  redis:
    address: %s
    authority: %s
    timeout: 500ms
    switch_poll_interval: 200ms
    sweep_interval: 100ms
    drift_interval: -1s
`, redisAddr, authority)
	dbtest.WriteHoldfastConfig(t, p.config, holdfastproc.Config{Listen: p.addr, Users: appUser, Admin: adminAddr,
		Backend: holdfastproc.Backend{Database: p.db}, YAML: "pool:\n  min: 0\n  max: 24\n  max_idle: 24\n" + extra})
	p.migrate(t)
	return p.serve(t), adminAddr
}

// metricsLines reads /metrics from the admin listener at adminAddr.
func metricsLines(t *testing.T, adminAddr string) []string {
	t.Helper()
	return strings.Split(string(dbtest.Fetch(t, http.MethodGet, "http://"+adminAddr+"/metrics")), "\n")
}

// scrape returns the value of one series of /metrics, matched by its name
// and label text (e.g. `procedure="reserve",redis="ok",holdfast="ok"`), or
// -1.
func scrape(t *testing.T, adminAddr, series string) float64 {
	t.Helper()
	for _, line := range metricsLines(t, adminAddr) {
		if name, val, ok := strings.Cut(line, " "); ok && name == series {
			v, _ := strconv.ParseFloat(val, 64)
			return v
		}
	}
	return -1
}

// disagreeing lists the comparison series of /metrics whose two answers
// differ.
func disagreeing(t *testing.T, adminAddr string) []string {
	t.Helper()
	re := regexp.MustCompile(`^holdfast_shadow_comparisons_total\{holdfast="([a-z_]+)",procedure="([a-z]+)",redis="([a-z_]+)"\} (\d+)`)
	var out []string
	for _, line := range metricsLines(t, adminAddr) {
		if m := re.FindStringSubmatch(line); m != nil && m[1] != m[3] {
			out = append(out, line)
		}
	}
	return out
}

type sqlCheckout struct {
	token, fate string
	qty         int64
}

// checkouts runs clients clients of n checkouts (reserve, then claim,
// release or abandon) through holdfast; any failed call fails the test.
func checkouts(t *testing.T, db *sql.DB, tag string, clients, n int, ttl int) []sqlCheckout {
	t.Helper()
	var (
		mu   sync.Mutex
		out  []sqlCheckout
		errs []string
		wg   sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for i := range n {
				shop, item, qty := 1+rng.Int64N(2), 1001+rng.Int64N(2), 1+rng.Int64N(3)
				co := sqlCheckout{qty: qty}
				err := db.QueryRow("CALL holdfast.reserve(?, ?, ?, ?)", shop, fmt.Sprintf("%s-%d-%d", tag, c, i),
					fmt.Sprintf(`[{"item":%d,"qty":%d,"locations":[1,2]}]`, item, qty), ttl).
					Scan(&co.token, new(string), new(int), new(int), new(int), new(int), new(string), new(int))
				if err == nil {
					switch p := rng.IntN(10); {
					case p < 4:
						co.fate = "claimed"
						var outcome string
						if err = db.QueryRow("CALL holdfast.claim(?)", co.token).Scan(new(string), &outcome, new(int), new(int), new(int), new(int)); err == nil && outcome != "claimed" {
							err = fmt.Errorf("claim answered %s", outcome)
						}
					case p < 7:
						co.fate = "released"
						var outcome string
						if err = db.QueryRow("CALL holdfast.release(?)", co.token).Scan(new(string), &outcome, new(int)); err == nil && outcome != "released" {
							err = fmt.Errorf("release answered %s", outcome)
						}
					default:
						co.fate = "abandoned"
					}
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, err.Error())
				} else {
					out = append(out, co)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed, e.g. %v", len(errs), errs[:min(3, len(errs))])
	}
	return out
}

// TestMigrationThroughHoldfast drives the migration as an operator would,
// through the holdfast binary with a real Redis: 64 MySQL clients check out
// in shadow mode (authority redis) and both sides agree, as /metrics shows;
// then holdfastctl flips the authority redis → holdfast → redis twice
// while the clients go on, the fleet's version shows in /metrics, and at
// the end MySQL conserved its stock and `holdfast resync-redis -dry-run`
// finds every counter equal to the engine's availability.
func TestMigrationThroughHoldfast(t *testing.T) {
	rs := redistest.Start(t)
	p, adminAddr := migrationProcess(t, rs.Addr, "redis")
	ctlBin := dbtest.Command(t, "./cmd/holdfastctl")
	ctl := func(args ...string) string {
		t.Helper()
		cmd := holdfastctl(t, ctlBin, append([]string{"-addr", adminAddr}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("holdfastctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	db := p.open(t, "app", "app")
	db.SetMaxOpenConns(64)
	const perPool = 100000
	for shop := 1; shop <= 2; shop++ {
		for item := 1001; item <= 1002; item++ {
			for loc := 1; loc <= 2; loc++ {
				if _, err := db.Exec("CALL holdfast.receive(?, ?, ?, ?)", shop, item, loc, perPool); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if out := ctl("authority"); !strings.Contains(out, "version 1: Redis decides every shop's reserves") {
		t.Fatalf("holdfastctl authority: %s", out)
	}
	const ttl = 3
	start := time.Now()
	shadow := checkouts(t, db, "shadow", 64, 8, ttl)
	if got := scrape(t, adminAddr, `holdfast_shadow_comparisons_total{holdfast="ok",procedure="reserve",redis="ok"}`); got != float64(len(shadow)) {
		t.Fatalf("reserve ok/ok comparisons %v, want %d", got, len(shadow))
	}
	if d := disagreeing(t, adminAddr); len(d) > 0 {
		t.Fatalf("the sides disagreed in shadow mode: %v", d)
	}

	// Flip twice each way while the clients go on.
	var flipped []sqlCheckout
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		flipped = checkouts(t, db, "flip", 64, 30, ttl)
	}()
	for _, a := range []string{"holdfast", "redis", "holdfast", "redis"} {
		time.Sleep(300 * time.Millisecond)
		if out := ctl("authority", a, "-reason", "test"); !strings.Contains(out, "switched: authority switch version") {
			t.Fatalf("holdfastctl authority %s: %s", a, out)
		}
	}
	wg.Wait()
	if v := scrape(t, adminAddr, "holdfast_authority_switch_version"); v != 5 {
		t.Fatalf("holdfast_authority_switch_version %v, want 5", v)
	}
	if h, r := scrape(t, adminAddr, `holdfast_authority_reserves_total{authority="holdfast"}`), scrape(t, adminAddr, `holdfast_authority_reserves_total{authority="redis"}`); h <= 0 || r <= 0 {
		t.Fatalf("reserves decided by holdfast %v, by redis %v: the flips did not take effect", h, r)
	}
	if d := disagreeing(t, adminAddr); len(d) > 0 {
		t.Fatalf("the sides disagreed: %v", d)
	}

	// Everything expires; MySQL conserved its stock; the counters equal the
	// engine's availability.
	all := append(shadow, flipped...)
	time.Sleep(time.Until(start.Add(time.Duration(ttl)*time.Second)) + time.Since(start)/4)
	direct := dbtest.Open(t, dbtest.TablesDB(p.db))
	dbtest.Eventually(t, "every reservation expired and swept", func() bool {
		var n int
		_ = direct.QueryRow("SELECT COUNT(*) FROM reserved_quantities").Scan(&n)
		return n == 0
	})
	var claimed int64
	for _, c := range all {
		if c.fate == "claimed" {
			claimed += c.qty
		}
	}
	var onHand int64
	if err := direct.QueryRow("SELECT SUM(on_hand) FROM inventory_ledger").Scan(&onHand); err != nil {
		t.Fatal(err)
	}
	if onHand+claimed != 8*perPool {
		t.Fatalf("conservation: on_hand %d + claimed %d != %d", onHand, claimed, 8*perPool)
	}
	time.Sleep(300 * time.Millisecond) // the Redis sweeper's interval, twice
	// Redis decides every shop now: resync-redis refuses to write its
	// counters without -force; a dry run reads them all.
	out, err := guarded(t, binary(t), "resync-redis", "-config", p.config).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "lets Redis decide") {
		t.Fatalf("resync-redis under authority redis: %v\n%s", err, out)
	}
	out, err = guarded(t, binary(t), "resync-redis", "-dry-run", "-config", p.config).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "checked (dry run, nothing written) 8 pools") || !strings.Contains(string(out), ": 0 counters differed") {
		t.Fatalf("resync-redis -dry-run: %v\n%s", err, out)
	}
	t.Logf("%d checkouts in shadow mode, %d across four flips; %s", len(shadow), len(flipped), strings.TrimSpace(string(out)))
}

// TestRedisKilledThroughHoldfast: with authority holdfast, Redis is killed
// while 32 MySQL clients check out through the binary and comes back empty;
// no checkout fails, /metrics shows the counters stale, and after
// `holdfast resync-redis` (run while the clients go on) a dry run finds
// every counter equal to the engine's availability and the mark cleared.
func TestRedisKilledThroughHoldfast(t *testing.T) {
	rs := redistest.Start(t)
	p, adminAddr := migrationProcess(t, rs.Addr, "holdfast")
	db := p.open(t, "app", "app")
	db.SetMaxOpenConns(32)
	for shop := 1; shop <= 2; shop++ {
		for item := 1001; item <= 1002; item++ {
			for loc := 1; loc <= 2; loc++ {
				if _, err := db.Exec("CALL holdfast.receive(?, ?, ?, ?)", shop, item, loc, 100000); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	const ttl = 60
	go func() {
		time.Sleep(200 * time.Millisecond)
		rs.Kill()
	}()
	checkouts(t, db, "outage", 32, 20, ttl) // fails the test if any call fails
	checkouts(t, db, "down", 32, 5, ttl)
	dbtest.Eventually(t, "holdfast_redis_stale = 1", func() bool { return scrape(t, adminAddr, "holdfast_redis_stale") == 1 })
	if scrape(t, adminAddr, `holdfast_redis_errors_total{operation="mirror"}`) <= 0 {
		t.Fatal("no failed mirror counted")
	}
	rs.Restart()
	time.Sleep(1500 * time.Millisecond) // the client redials within a second
	checkouts(t, db, "back", 32, 5, ttl)

	dry := func() string {
		out, err := guarded(t, binary(t), "resync-redis", "-dry-run", "-config", p.config).CombinedOutput()
		if err != nil {
			t.Fatalf("resync-redis -dry-run: %v\n%s", err, out)
		}
		return string(out)
	}
	if out := dry(); strings.Contains(out, ": 0 counters differed") {
		t.Fatalf("nothing differs although Redis lost everything: %s", out)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		checkouts(t, db, "during", 16, 10, ttl)
	}()
	out, err := guarded(t, binary(t), "resync-redis", "-config", p.config).CombinedOutput()
	wg.Wait()
	if err != nil || !strings.Contains(string(out), "resynced 8 pools") || !strings.Contains(string(out), "no longer marked stale") {
		t.Fatalf("resync-redis: %v\n%s", err, out)
	}
	checkouts(t, db, "after", 32, 5, ttl)
	if out := dry(); !strings.Contains(out, ": 0 counters differed") {
		t.Fatalf("after resync-redis: %s", out)
	}
	dbtest.Eventually(t, "holdfast_redis_stale = 0", func() bool { return scrape(t, adminAddr, "holdfast_redis_stale") == 0 })
	t.Logf("resync-redis: %s", strings.TrimSpace(string(out)))
}
