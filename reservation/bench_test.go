package reservation_test

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// BenchmarkReserveHotItem measures, in one run, reservations per second on
// ONE hot item/location with N concurrent clients, through a relay adding
// latency each way between client and MariaDB (these machines have no
// netem), for:
//
//	txcounter  transactional counter: UPDATE counter ... WHERE available >= 1 and INSERT a reservation row, one transaction
//	update     one autocommit UPDATE ... WHERE available >= 1 (keeps no reservation record)
//	naive      the engine, one transaction per reserve (Config.DisableCoalescing)
//	coalesced  the engine with the per-pool combiner (the default)
//	coalesced_tx  the combiner without sessions (Config.DisableSessions): a borrow per batch
//
// and reports each mode's rate, p50 and p99, and the ratios coalesced/naive,
// coalesced/update and coalesced/txcounter, so the design choice is
// measured against baselines taken in the same run. It asserts no absolute
// time. Not part of the default test run:
//
//	go test -run '^$' -bench BenchmarkReserveHotItem -benchtime 1x ./reservation/
//
// Knobs: HOLDFAST_BENCH_CLIENTS (comma list, default 64), HOLDFAST_BENCH_SECONDS
// (per mode, default 3), HOLDFAST_BENCH_DELAY (each way, default 500us),
// HOLDFAST_BENCH_MODES (comma list, default all five), and engine tuning
// HOLDFAST_BENCH_BATCHES_PER_POOL, HOLDFAST_BENCH_WATERMARK (refiller).
func BenchmarkReserveHotItem(b *testing.B) {
	clientsList := envList("HOLDFAST_BENCH_CLIENTS", "64")
	seconds, _ := strconv.ParseFloat(envOr("HOLDFAST_BENCH_SECONDS", "3"), 64)
	delay, err := time.ParseDuration(envOr("HOLDFAST_BENCH_DELAY", "500us"))
	if err != nil {
		b.Fatal(err)
	}
	modes := envList("HOLDFAST_BENCH_MODES", "txcounter,update,naive,coalesced_tx,coalesced")
	dur := time.Duration(seconds * float64(time.Second))

	_, name := restest.NewDB(b, 4)
	relay := dbtest.StartRelay(b, restest.Target(b), delay).Addr().String()
	direct := restest.OpenVia(b, name, restest.Target(b), 8)
	for _, q := range []string{
		"CREATE TABLE bench_counter (item BIGINT PRIMARY KEY, available BIGINT NOT NULL)",
		"CREATE TABLE bench_counter_log (id BIGINT AUTO_INCREMENT PRIMARY KEY, item BIGINT NOT NULL, created_at DATETIME(6) NOT NULL)",
		"INSERT INTO bench_counter VALUES (1, 1000000000)",
		"INSERT INTO inventory_ledger VALUES (1, 1, 1, 1000000000, UTC_TIMESTAMP(6))",
	} {
		if _, err := direct.Exec(q); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, cs := range clientsList {
			clients, _ := strconv.Atoi(cs)
			res := map[string]benchResult{}
			for _, mode := range modes {
				r := runMode(b, mode, name, relay, clients, dur)
				res[mode] = r
				fmt.Printf("clients=%-3d %-9s %8.0f res/s  p50 %6.2fms  p99 %6.2fms  (%d ok, %d errors)\n",
					clients, mode, r.rate, ms(r.p50), ms(r.p99), r.ok, r.errs)
				b.ReportMetric(r.rate, fmt.Sprintf("%s_c%d_res/s", mode, clients))
				b.ReportMetric(ms(r.p99), fmt.Sprintf("%s_c%d_p99_ms", mode, clients))
			}
			for _, base := range []string{"naive", "coalesced_tx", "update", "txcounter"} {
				if c, ok := res["coalesced"]; ok {
					if r, ok := res[base]; ok && r.rate > 0 {
						fmt.Printf("clients=%-3d coalesced/%s = %.2f\n", clients, base, c.rate/r.rate)
						b.ReportMetric(c.rate/r.rate, fmt.Sprintf("coalesced/%s_c%d", base, clients))
					}
				}
			}
		}
	}
	b.StopTimer()
	var onHand, pooled, reserved int64
	direct.QueryRow(`SELECT (SELECT on_hand FROM inventory_ledger), (SELECT COUNT(*) FROM reservation_units),
 (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities)`).Scan(&onHand, &pooled, &reserved)
	if pooled+reserved > onHand {
		b.Errorf("oversold: pool %d + reserved %d > on_hand %d", pooled, reserved, onHand)
	}
}

// BenchmarkClaimHotItem measures claims of reservations of ONE hot
// item/location (a sale's checkouts completing) with N concurrent clients,
// through the same relay as BenchmarkReserveHotItem, for the claim's
// transaction in one round trip (one_trip, the default) and in two
// (two_trip, Config.DisableOneTrip), alternating in the same run. Every
// claim locks the item's ledger row, so the rate is bounded by how long
// each holds it. Each round reserves HOLDFAST_BENCH_CLAIMS reservations
// per mode (default 2000, untimed), then times claiming them all; it
// reports claims/s, p50, p99 per mode (medians over rounds) and the ratio
// one_trip/two_trip. HOLDFAST_BENCH_ITEMS=n spreads the reservations over
// n items instead of one, so that the server's CPU rather than one ledger
// row bounds the rate. Not part of the default test run:
//
//	go test -run '^$' -bench BenchmarkClaimHotItem -benchtime 1x ./reservation/
//
// Knobs: HOLDFAST_BENCH_CLIENTS (default 1,16), HOLDFAST_BENCH_ROUNDS
// (default 3), HOLDFAST_BENCH_CLAIMS, HOLDFAST_BENCH_DELAY (default 500us),
// HOLDFAST_BENCH_ITEMS (default 1).
func BenchmarkClaimHotItem(b *testing.B) {
	items, _ := strconv.Atoi(envOr("HOLDFAST_BENCH_ITEMS", "1"))
	items = max(items, 1)
	clientsList := envList("HOLDFAST_BENCH_CLIENTS", "1,16")
	rounds, _ := strconv.Atoi(envOr("HOLDFAST_BENCH_ROUNDS", "3"))
	claims, _ := strconv.Atoi(envOr("HOLDFAST_BENCH_CLAIMS", "2000"))
	delay, err := time.ParseDuration(envOr("HOLDFAST_BENCH_DELAY", "500us"))
	if err != nil {
		b.Fatal(err)
	}
	_, name := restest.NewDB(b, 4)
	relay := dbtest.StartRelay(b, restest.Target(b), delay).Addr().String()
	direct := restest.OpenVia(b, name, restest.Target(b), 8)
	if _, err := direct.Exec("INSERT INTO inventory_ledger SELECT 1, seq, 1, 1000000000, UTC_TIMESTAMP(6) FROM seq_1_to_" + strconv.Itoa(items)); err != nil {
		b.Fatal(err)
	}
	modes := []string{"one_trip", "two_trip"}
	engines := map[string]*reservation.Engine{}
	for _, mode := range modes {
		db := restest.OpenVia(b, name, relay, 64)
		b.Cleanup(func() { db.Close() })
		engines[mode] = benchEngine(b, db, mode, func(c *reservation.Config) { c.DisableOneTrip = mode == "two_trip" })
	}
	b.ResetTimer()
	for range b.N {
		for _, cs := range clientsList {
			clients, _ := strconv.Atoi(cs)
			res := map[string][]benchResult{}
			for round := range rounds {
				order := modes
				if round%2 == 1 {
					order = []string{modes[1], modes[0]}
				}
				for _, mode := range order {
					toks := reserveTokens(b, engines[mode], claims, items, fmt.Sprintf("claim-%s-%d-%d", mode, clients, round))
					r := timeClaims(engines[mode], toks, clients, mode)
					res[mode] = append(res[mode], r)
					fmt.Printf("clients=%-3d round %d %-8s %8.0f claims/s  p50 %6.2fms  p99 %6.2fms  (%d ok, %d errors)\n",
						clients, round+1, mode, r.rate, ms(r.p50), ms(r.p99), r.ok, r.errs)
				}
			}
			med := func(mode string, f func(benchResult) float64) float64 {
				v := make([]float64, 0, len(res[mode]))
				for _, r := range res[mode] {
					v = append(v, f(r))
				}
				slices.Sort(v)
				return v[len(v)/2]
			}
			rate := func(r benchResult) float64 { return r.rate }
			for _, mode := range modes {
				fmt.Printf("clients=%-3d %-8s median %8.0f claims/s  p50 %6.2fms  p99 %6.2fms\n", clients, mode, med(mode, rate),
					med(mode, func(r benchResult) float64 { return ms(r.p50) }), med(mode, func(r benchResult) float64 { return ms(r.p99) }))
				b.ReportMetric(med(mode, rate), fmt.Sprintf("%s_c%d_claims/s", mode, clients))
			}
			ratio := med("one_trip", rate) / med("two_trip", rate)
			fmt.Printf("clients=%-3d one_trip/two_trip = %.2f\n", clients, ratio)
			b.ReportMetric(ratio, fmt.Sprintf("one_trip/two_trip_c%d", clients))
		}
	}
}

// reserveTokens makes n reservations of one unit on eng, over items items
// (shop 1, location 1), keyed prefix-<i>, 64 at a time, and returns their
// tokens.
func reserveTokens(b *testing.B, eng *reservation.Engine, n, items int, prefix string) []string {
	toks := make([]string, n)
	var wg sync.WaitGroup
	var seq atomic.Int64
	for range 64 {
		wg.Go(func() {
			for i := seq.Add(1); i <= int64(n); i = seq.Add(1) {
				lines := restest.LinesJSON(1+i%int64(items), 1, 1)
				_, rows, err := eng.Call(context.Background(), "reserve", []any{int64(1), fmt.Sprintf("%s-%d", prefix, i), lines, int64(600)})
				if err != nil {
					b.Error(err)
					return
				}
				toks[i-1] = rows[0][0].(string)
			}
		})
	}
	wg.Wait()
	return toks
}

// timeClaims claims every token on eng with clients concurrent callers and
// returns the rate and latencies of the claims answered "claimed".
func timeClaims(eng *reservation.Engine, toks []string, clients int, mode string) benchResult {
	next := make(chan string, len(toks))
	for _, tok := range toks {
		if tok != "" {
			next <- tok
		}
	}
	close(next)
	var mu sync.Mutex // guards lat
	var lat []time.Duration
	var errs atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range clients {
		wg.Go(func() {
			var mine []time.Duration
			for tok := range next {
				t0 := time.Now()
				if _, rows, err := eng.Call(context.Background(), "claim", []any{tok}); err != nil || rows[0][1] != "claimed" {
					if errs.Add(1) == 1 {
						fmt.Printf("  %s: claim answered %v, %v\n", mode, rows, err)
					}
					continue
				}
				mine = append(mine, time.Since(t0))
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	return benchResult{rate: float64(len(lat)) / elapsed.Seconds(), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), ok: int64(len(lat)), errs: errs.Load()}
}

type benchResult struct {
	rate     float64
	p50, p99 time.Duration
	ok, errs int64
}

func runMode(b *testing.B, mode, name, addr string, clients int, dur time.Duration) benchResult {
	db := restest.OpenVia(b, name, addr, min(clients, 64))
	var op func(ctx context.Context, i int) error
	switch mode {
	case "update":
		op = func(ctx context.Context, _ int) error {
			_, err := db.ExecContext(ctx, "UPDATE bench_counter SET available = available - 1 WHERE item = 1 AND available >= 1")
			return err
		}
	case "txcounter":
		op = func(ctx context.Context, _ int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "UPDATE bench_counter SET available = available - 1 WHERE item = 1 AND available >= 1"); err != nil {
				tx.Rollback()
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO bench_counter_log (item, created_at) VALUES (1, UTC_TIMESTAMP(6))"); err != nil {
				tx.Rollback()
				return err
			}
			return tx.Commit()
		}
	case "naive", "coalesced", "coalesced_tx":
		eng := benchEngine(b, db, mode, func(c *reservation.Config) {
			c.DisableCoalescing = mode == "naive"
			c.DisableSessions = mode == "coalesced_tx"
		})
		lines := restest.LinesJSON(1, 1, 1)
		op = func(ctx context.Context, i int) error {
			_, _, err := eng.Call(ctx, "reserve", []any{int64(1), fmt.Sprintf("%s-%d-%d", mode, clients, i), lines, int64(600)})
			return err
		}
	default:
		b.Fatalf("unknown mode %q", mode)
	}
	// Warm the pool and the connections.
	warm, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = op(warm, -1)
	cancel()

	ctx, stop := context.WithTimeout(context.Background(), dur)
	defer stop()
	var seq, ok, errs atomic.Int64
	var firstErr atomic.Value
	var mu sync.Mutex // guards lat
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for ctx.Err() == nil {
				t0 := time.Now()
				if err := op(context.Background(), int(seq.Add(1))); err != nil {
					if errs.Add(1) == 1 {
						firstErr.Store(err.Error())
					}
					continue
				}
				if ctx.Err() == nil {
					mine = append(mine, time.Since(t0))
					ok.Add(1)
				}
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if e := firstErr.Load(); e != nil {
		fmt.Printf("  %s: first error: %v\n", mode, e)
	}
	db.Close()
	slices.Sort(lat)
	return benchResult{rate: float64(ok.Load()) / elapsed.Seconds(), p50: quantile(lat, 0.5), p99: quantile(lat, 0.99), ok: ok.Load(), errs: errs.Load()}
}

// benchEngine starts an engine (and its refiller) over db with the tests'
// configuration, changed by set and the HOLDFAST_BENCH_* tuning knobs, and
// prints its batch statistics, under name, when the benchmark ends.
func benchEngine(b *testing.B, db *sql.DB, name string, set func(*reservation.Config)) *reservation.Engine {
	conns := reservation.SQLConns(db)
	rc := refiller.Config{ScanInterval: -1}
	if v, err := strconv.ParseFloat(os.Getenv("HOLDFAST_BENCH_WATERMARK"), 64); err == nil {
		rc.Watermark = v
	}
	ref, err := refiller.New(conns, rc, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := restest.Config()
	set(&cfg)
	if v, err := strconv.Atoi(os.Getenv("HOLDFAST_BENCH_BATCHES_PER_POOL")); err == nil {
		cfg.BatchesPerPool = v
	}
	cfg.CallTimeout = 30 * time.Second
	eng, err := reservation.New(cfg, reservation.Options{Conns: conns, Refiller: ref})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ref.Start(ctx)
	b.Cleanup(func() {
		cancel()
		eng.Close()
		ref.Close()
		s, rs := eng.Stats(), ref.Stats()
		fmt.Printf("  engine %s: %d reserve transactions, batch size p50 %v p99 %v, %d backoffs, %d reserves waited for inline refills, refills %v\n",
			name, s.Batches, s.BatchSize.Quantile(0.5), s.BatchSize.Quantile(0.99), s.Backoffs, s.InlineRefills, rs.Refills)
	})
	return eng
}

// quantile is the p quantile of sorted; 0 when it is empty.
func quantile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(math.Min(float64(len(sorted)-1), p*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func envList(k, def string) []string {
	var out []string
	for _, s := range strings.Split(envOr(k, def), ",") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}
