package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/refiller"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// The reservation engine on holdfast's own pool (BorrowEngine, as holdfast
// serve wires it) through a planned switchover under load: its calls meet
// the old primary's read-only refusals and the pool's retirement of the
// old primary's connections, are held, and are answered on the new
// primary, every one a success, each reserve made once and each claim
// deducted once.
func TestEngineOnPoolAcrossPlannedSwitchover(t *testing.T) {
	engineOnPoolAcross(t, func(p *switchoverProxy) error {
		steps, err := dbtest.Switchover(t.Context(), p.primary, p.replica, func() { p.vip.Retarget(p.replica.Addr) })
		t.Logf("read-only to VIP moved %v", steps.Moved.Sub(steps.ReadOnly))
		return err
	}, false)
}

// The same with the primary killed (SIGKILL) and its replica promoted 2 s
// later, replicating semi-synchronously: every answer is true (success,
// or 9108 for a COMMIT whose answer was lost), and what was answered is on
// the new primary, once.
func TestEngineOnPoolAcrossPrimaryKill(t *testing.T) {
	engineOnPoolAcross(t, func(p *switchoverProxy) error {
		// (Replication is semi-synchronous: every acknowledged write is on
		// the replica when the primary dies.)
		p.primary.Kill()
		time.Sleep(2 * time.Second)
		if err := p.replica.Promote(t.Context()); err != nil {
			return err
		}
		p.vip.Retarget(p.replica.Addr)
		return nil
	}, true)
}

// engineOnPoolAcross runs the engine on the proxy's pool under load
// across switch, which leaves p.replica the primary, and checks every
// answer on it; killed makes replication semi-synchronous first, and
// allows 9108.
func engineOnPoolAcross(t *testing.T, switch_ func(p *switchoverProxy) error, killed bool) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) {
		c.Pool.Max = 16
		c.Pool.AcquireTimeout = 2 * time.Second
	})
	if killed {
		restest.SemiSync(t, p.primary, p.replica)
	}
	pdb := p.primary.Open("sw")
	defer pdb.Close()
	if _, err := pdb.Exec("GRANT ALL ON sw.* TO hf"); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := reservation.Migrate(ctx, reservation.SQLConns(pdb)); err != nil {
		t.Fatal(err)
	}
	conns := reservation.TextConns(func(ctx context.Context, tag string) (reservation.TextConn, error) {
		return p.srv.BorrowEngine(ctx, tag)
	})
	ref, err := refiller.New(conns, refiller.Config{Interval: 20 * time.Millisecond, ScanInterval: -1, PoolCap: 1000}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg := restest.Config()
	cfg.PoolCap, cfg.CallTimeout = 1000, time.Second // shorter than the switch: the hold carries the calls
	eng, err := reservation.New(cfg, reservation.Options{Conns: conns, Refiller: ref, Logger: testLogger(t),
		Switching: func() bool { st := p.srv.Topology().State; return st == "no_primary" || st == "split_brain" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		eng.Close()
		ref.Close()
	})
	const items, onHand = 4, 5000
	for item := int64(1); item <= items; item++ {
		if _, _, err := eng.Call(ctx, "receive", []any{int64(1), item, int64(1), int64(onHand)}); err != nil {
			t.Fatalf("receive: %v", err)
		}
	}

	type op struct {
		key, token, outcome string
		item                int64
		err                 error
	}
	var mu sync.Mutex
	var ops []op
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var n atomic.Int64
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				o := op{key: fmt.Sprintf("p-%d-%d", w, i), item: int64(1 + w%items)}
				_, rows, err := eng.Call(context.Background(), "reserve", []any{int64(1), o.key, restest.LinesJSON(o.item, 1, 1), nil})
				if err == nil {
					o.token = rows[0][0].(string)
					_, rows, err = eng.Call(context.Background(), "claim", []any{o.token})
					if err == nil {
						o.outcome = rows[0][1].(string)
					}
				}
				o.err = err
				n.Add(1)
				mu.Lock()
				ops = append(ops, o)
				mu.Unlock()
			}
		})
	}
	dbtest.Eventually(t, "calls answered", func() bool { return n.Load() > 20 })
	if err := switch_(p); err != nil {
		close(stop)
		wg.Wait()
		t.Fatal(err)
	}
	before := n.Load()
	dbtest.Eventually(t, "calls answered after the switch", func() bool { return n.Load() > before+20 })
	close(stop)
	wg.Wait()

	ndb := p.replica.Open("sw") // the new primary
	defer ndb.Close()
	claimed := map[int64]int64{}
	unknown := 0
	for _, o := range ops {
		var id uint64
		var state int
		err := ndb.QueryRow("SELECT reservation_id, state FROM reservations WHERE shop_id = 1 AND idempotency_key = ?", o.key).Scan(&id, &state)
		code := restest.Code(o.err)
		switch {
		case o.err != nil && !(killed && code == reservation.CodeOutcomeUnknown):
			t.Errorf("key %s: %v (code %d)", o.key, o.err, code)
			continue
		case err == sql.ErrNoRows && o.err != nil && o.token == "":
			unknown++ // in doubt, and not made
			continue
		case err != nil:
			t.Errorf("key %s answered %s: %v", o.key, o.token, err)
			continue
		}
		if state == 1 {
			claimed[o.item]++
		}
		if o.err != nil {
			unknown++ // in doubt, and made (the reserve, or the claim too)
			continue
		}
		if reservation.FormatToken(id) != o.token || o.outcome != "claimed" || state != 1 {
			t.Errorf("key %s: answered %s %s, the reservation is %s in state %d", o.key, o.token, o.outcome, reservation.FormatToken(id), state)
		}
	}
	for item := int64(1); item <= items; item++ {
		if got := restest.Scalar(t, ndb, "SELECT on_hand FROM inventory_ledger WHERE shop_id = 1 AND inventory_item_id = ?", item); got != onHand-claimed[item] {
			t.Errorf("item %d: on_hand %d, want %d", item, got, onHand-claimed[item])
		}
	}
	t.Logf("%d keys answered, %d before the switch ended; in doubt (9108) %d", len(ops), before, unknown)
}
