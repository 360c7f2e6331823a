package legacy_test

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/legacy"
	"github.com/holdfast-db/holdfast/reservation/legacy/redistest"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// env is one private database and one private Redis, with one or more
// holdfast instances (engine, refiller, router) on them.
type env struct {
	t     *testing.T
	db    *sql.DB
	conns reservation.Conns
	redis *redistest.Server
	cfg   legacy.Config
	logs  *dbtest.SyncBuffer
	r     *legacy.Router      // the first instance
	eng   *reservation.Engine // its engine, for calls that bypass the router
}

type envOpts struct {
	authority string // seed; "" means redis
	percent   int
	ttlRule   bool // keep the payment-side TTL rule (default: zeroed so tests use short TTLs)
	redisPool int  // reservation.redis.pool_size; 0 means the default
}

func newEnv(t *testing.T, o envOpts) *env {
	t.Helper()
	db, _ := restest.NewDB(t, 48)
	v := &env{t: t, db: db, conns: reservation.SQLConns(db), redis: redistest.Start(t), logs: &dbtest.SyncBuffer{}}
	if o.authority == "" {
		o.authority = "redis"
	}
	v.cfg = legacy.Config{Address: v.redis.Addr, Authority: o.authority, Percent: o.percent,
		SwitchPollInterval: 50 * time.Millisecond, SweepInterval: 50 * time.Millisecond, DriftInterval: -1,
		Timeout: 500 * time.Millisecond, PoolSize: o.redisPool}.WithDefaults(72 * time.Hour)
	v.r = v.addInstance()
	return v
}

// addInstance starts another holdfast instance's engine, refiller and
// router on the env's database and Redis.
func (v *env) addInstance() *legacy.Router {
	t := v.t
	t.Helper()
	logger := restest.Logger(v.logs)
	ref, err := refiller.New(v.conns, refiller.Config{Interval: 20 * time.Millisecond, ScanInterval: -1}, logger)
	if err != nil {
		t.Fatal(err)
	}
	cfg := restest.Config()
	cfg.SweepInterval = 50 * time.Millisecond
	cfg.CallTimeout = 20 * time.Second
	eng, err := reservation.New(cfg, reservation.Options{Conns: v.conns, Refiller: ref, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	st := legacy.NewStore(v.cfg, nil)
	seed := legacy.State{Authority: v.cfg.Authority, Shops: v.cfg.Shops, Percent: v.cfg.Percent}
	sw, err := legacy.NewSwitch(v.conns, seed, v.cfg.SwitchPollInterval, logger)
	if err != nil {
		t.Fatal(err)
	}
	r, err := legacy.New(legacy.Options{Engine: eng, Store: st, Switch: sw, Config: v.cfg, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if v.eng == nil {
		v.eng = eng
	}
	ctx, cancel := context.WithCancel(context.Background())
	for _, s := range []func(context.Context) error{ref.Start, eng.Start, r.Start} {
		if err := s(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		cancel()
		r.Close()
		eng.Close()
		ref.Close()
		st.Close()
	})
	return r
}

func (v *env) call(r *legacy.Router, name string, args ...any) ([]string, [][]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Call(ctx, name, args)
}

func (v *env) must(r *legacy.Router, name string, args ...any) [][]any {
	v.t.Helper()
	_, rows, err := v.call(r, name, args...)
	if err != nil {
		v.t.Fatalf("CALL holdfast.%s%v: %v", name, args, err)
	}
	return rows
}

func (v *env) scalar(q string, args ...any) int64 {
	v.t.Helper()
	return restest.Scalar(v.t, v.db, q, args...)
}

// pools lists every pool in the ledger.
func (v *env) pools() []reservation.PoolKey {
	v.t.Helper()
	keys, err := legacy.ListPools(context.Background(), v.conns, nil, reservation.PoolKey{}, 10000)
	if err != nil {
		v.t.Fatal(err)
	}
	return keys
}

// drift compares every pool's counter with the engine's availability and
// returns the pools that differ.
func (v *env) drift(r *legacy.Router) []legacy.Drift {
	v.t.Helper()
	ds, err := r.DriftOnce(context.Background(), v.pools())
	if err != nil {
		v.t.Fatal(err)
	}
	var bad []legacy.Drift
	for _, d := range ds {
		if d.Drift != 0 {
			bad = append(bad, d)
		}
	}
	return bad
}

func (v *env) setAuthority(r *legacy.Router, st legacy.State) legacy.State {
	v.t.Helper()
	got, err := r.Switch().Set(context.Background(), st, false)
	if err != nil {
		v.t.Fatal(err)
	}
	return got
}

// comparisons returns the router's comparison counts keyed
// "procedure redis holdfast".
func comparisons(r *legacy.Router) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range r.Stats().Comparisons {
		out[c.Procedure+" "+c.Redis+" "+c.Holdfast] += c.Count
	}
	return out
}

// disagreements are the comparisons whose two business answers differ.
func disagreements(r *legacy.Router) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range r.Stats().Comparisons {
		if c.Redis != c.Holdfast {
			out[c.Procedure+" "+c.Redis+" "+c.Holdfast] += c.Count
		}
	}
	return out
}

// checkout is the traffic of one client: reserve, then claim, release or
// abandon, and what it was told.
type checkout struct {
	token   string
	shop    int64
	item    int64
	qty     int64
	fate    string // claimed, released, abandoned
	replies []string
}

// traffic runs clients clients of n checkouts each against the routers
// (client i uses routers[i % len]) on shops × items at locations 1 and 2,
// with ttl seconds, and returns what each checkout did. Every call must
// succeed: a failure fails the test.
func traffic(t *testing.T, v *env, routers []*legacy.Router, clients, n int, shops, items []int64, ttl int64) []checkout {
	t.Helper()
	var (
		mu   sync.Mutex
		out  []checkout
		errs []string
		wg   sync.WaitGroup
	)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := routers[c%len(routers)]
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := range n {
				co := checkout{shop: shops[rng.IntN(len(shops))], item: items[rng.IntN(len(items))], qty: 1 + rng.Int64N(3)}
				key := fmt.Sprintf("c%d-%d", c, i)
				_, rows, err := v.call(r, "reserve", co.shop, key, restest.LinesJSON(co.item, co.qty, 1, 2), ttl)
				if err != nil {
					mu.Lock()
					errs = append(errs, fmt.Sprintf("reserve %s: %v", key, err))
					mu.Unlock()
					continue
				}
				co.token = rows[0][0].(string)
				switch p := rng.IntN(10); {
				case p < 4:
					co.fate = "claimed"
					_, rows, err = v.call(r, "claim", co.token)
					if err == nil {
						co.replies = append(co.replies, rows[0][1].(string))
					}
				case p < 7:
					co.fate = "released"
					_, rows, err = v.call(r, "release", co.token)
					if err == nil {
						co.replies = append(co.replies, rows[0][1].(string))
					}
				default:
					co.fate = "abandoned"
				}
				mu.Lock()
				if err != nil {
					errs = append(errs, fmt.Sprintf("%s %s: %v", co.fate, co.token, err))
				}
				out = append(out, co)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d calls failed, e.g. %s\nlogs:\n%.3000s", len(errs), strings.Join(errs[:min(5, len(errs))], "; "), v.logs.String())
	}
	return out
}
