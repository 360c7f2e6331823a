package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// Fleet-wide caps shared under sustained load, as on-call uses them:
// holdfast instances on one database, clients on each running a capped
// statement back to back. The numbers: statements of 0.1 s, a cap of 3,
// 8 clients an instance, so a client's fair wait for a slot is about
// 8 × 0.1 s = 0.8 s; pool.acquire_timeout 8 s, above the longest a turn
// keeps an instance without a slot (two rounds of 2 s, see
// fleet/share.go) plus a hand-over, so no client should wait it out.

// capBound is the convergence bound docs/fleet.md states: three poll
// intervals (1 s each) plus the longest hold under the cap (0.1 s).
const capBound = 3*time.Second + 100*time.Millisecond

const capConfig = "pool:\n  acquire_timeout: 8s\n"

// capLoad is what each instance's clients got.
type capLoad struct {
	mu      sync.Mutex // guards following
	served  [][]time.Time
	refused []int    // the cap's refusal (9002 or 9008)
	failed  []int    // any other error
	first   []string // the first refusal's message, per instance
}

// runCapLoad runs clients[i] clients through ms[i], from when starts[i] is
// closed (nil: at once) until d after now, each running q back to back;
// refusal is the cap's error code.
func runCapLoad(t *testing.T, ms []*fleetMember, clients []int, starts []chan struct{}, q string, refusal uint16, d time.Duration) *capLoad {
	t.Helper()
	n := len(ms)
	l := &capLoad{served: make([][]time.Time, n), refused: make([]int, n), failed: make([]int, n), first: make([]string, n)}
	t0 := time.Now()
	deadline := t0.Add(d)
	var wg sync.WaitGroup
	for i, m := range ms {
		if clients[i] == 0 {
			continue
		}
		wg.Go(func() {
			if starts != nil && starts[i] != nil {
				<-starts[i]
			}
			db := m.client(t)
			db.SetMaxOpenConns(clients[i])
			var cw sync.WaitGroup
			for range clients[i] {
				cw.Go(func() {
					for time.Now().Before(deadline) {
						// A wait still running at the end is cut short, and
						// not counted.
						ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(200*time.Millisecond))
						_, err := db.ExecContext(ctx, q)
						cancel()
						if err != nil && time.Now().After(deadline) {
							break
						}
						l.mu.Lock()
						var me *mysql.MySQLError
						switch {
						case err == nil:
							l.served[i] = append(l.served[i], time.Now())
						case errors.As(err, &me) && me.Number == refusal:
							l.refused[i]++
							if l.first[i] == "" {
								l.first[i] = me.Message
							}
						default:
							l.failed[i]++
							if l.failed[i] == 1 {
								t.Logf("instance %d: %v", i, err)
							}
						}
						l.mu.Unlock()

					}
				})
			}
			cw.Wait()
		})
	}
	wg.Wait()
	return l
}

// shares are each instance's part of the statements served from..until
// (after the load's start), logged with the counts and errors.
func (l *capLoad) shares(t *testing.T, what string, t0 time.Time, from, until time.Duration) []float64 {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	counts := make([]int, len(l.served))
	total := 0
	for i, ts := range l.served {
		for _, at := range ts {
			if !at.Before(t0.Add(from)) && at.Before(t0.Add(until)) {
				counts[i]++
			}
		}
		total += counts[i]
	}
	out := make([]float64, len(counts))
	var b strings.Builder
	for i, c := range counts {
		out[i] = float64(c) / float64(max(total, 1))
		fmt.Fprintf(&b, "\n  instance %d: %d statements (%.0f%%), %d in all, %d refused by the cap, %d other errors", i, c, 100*out[i], len(l.served[i]), l.refused[i], l.failed[i])
		if l.first[i] != "" {
			fmt.Fprintf(&b, " (%s)", l.first[i])
		}
	}
	t.Logf("%s, statements served %v..%v after the start:%s", what, from, until, b.String())
	return out
}

// gateOf is the gate of key on m (GET /api/gates), and whether it has one.
type gateAnswer struct {
	Tag        string `json:"tag"`
	Limit      int    `json:"limit"`
	Limited    bool   `json:"limited"`
	FleetLimit int    `json:"fleet_limit"`
	Grants     []struct {
		Instance string `json:"instance_id"`
		Granted  int    `json:"granted"`
		Wanted   int    `json:"wanted"`
		Share    int    `json:"share"`
	} `json:"grants"`
}

func gateOf(t *testing.T, m *fleetMember, key string) (gateAnswer, bool) {
	var ans struct{ Gates []gateAnswer }
	dbtest.FetchJSON(t, m.admin+"/api/gates", &ans)
	for _, g := range ans.Gates {
		if g.Tag == key {
			return g, true
		}
	}
	return gateAnswer{}, false
}

// watchShares records when, after t0, every instance of ms first admits
// exactly share of key's cap, with the grants settled on it.
func watchShares(t *testing.T, ms []*fleetMember, key string, share int, stop <-chan struct{}) <-chan time.Duration {
	out := make(chan time.Duration, 1)
	t0 := time.Now()
	go func() {
		defer close(out)
		for {
			all := true
			for _, m := range ms {
				g, ok := gateOf(t, m, key)
				all = all && ok && g.Limit == share && len(g.Grants) == len(ms)
				for _, gr := range g.Grants {
					all = all && gr.Granted == share
				}
			}
			if all {
				out <- time.Since(t0)
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return out
}

func between(t *testing.T, what string, v, lo, hi float64) {
	t.Helper()
	if v < lo || v > hi {
		t.Errorf("%s: %.0f%% of the statements, want %.0f%%..%.0f%%", what, 100*v, 100*lo, 100*hi)
	}
}

// A tag capped at 3 across the fleet, under sustained load: with the load
// spread evenly over three instances each serves about a third within the
// bound and no client waits out the acquire timeout (before, the first
// instance to take the grant kept it and the others' clients got 9002);
// with skewed load (16 / 4 / 0 clients) the shares follow the demand; a
// fourth instance joining gets its share (3/4 of a slot, by turns) within
// the bound and a round of turns. /api/gates shows each instance's grant,
// share and demand.
func TestFleetCapShares(t *testing.T) {
	ms := fleetWith(t, 3, capConfig)
	ms[0].api(t, http.MethodPut, "/api/tags/capx/limit?max=3&reason=capx-incident")
	for i, m := range ms {
		within(t, 2*time.Second, fmt.Sprintf("instance %d applies the cap", i), func() bool {
			_, ok := gateOf(t, m, "capx")
			return ok
		})
	}
	const q = "/* conn_tag:capx */ SELECT SLEEP(0.1)"

	// Evenly spread.
	stop := make(chan struct{})
	conv := watchShares(t, ms, "capx", 1, stop)
	t0 := time.Now()
	l := runCapLoad(t, ms, []int{8, 8, 8}, nil, q, 9002, 10*time.Second)
	close(stop)
	if took, ok := <-conv; ok {
		t.Logf("8/8/8 clients: every instance admitted 1 of the cap, with the grants settled 1/1/1, %v after the load started (bound %v)", took.Round(10*time.Millisecond), capBound)
	} else {
		t.Errorf("8/8/8 clients: the instances never settled on 1 each")
	}
	for i, p := range l.shares(t, "8/8/8 clients, cap 3", t0, capBound, 10*time.Second) {
		between(t, fmt.Sprintf("instance %d with a third of the load", i), p, 0.25, 0.42)
		if l.refused[i] > 0 {
			t.Errorf("instance %d: %d clients got 9002, though the cap serves each within about 0.8 s", i, l.refused[i])
		}
	}
	if g, _ := gateOf(t, ms[1], "capx"); g.FleetLimit != 3 || len(g.Grants) != 3 {
		t.Errorf("/api/gates on instance 1: %+v, want the fleet cap 3 and three instances' grants", g)
	}

	// Skewed: 16 / 4 / 0 clients: 2.4 / 0.6 / 0 of the cap.
	t0 = time.Now()
	l = runCapLoad(t, ms, []int{16, 4, 0}, nil, q, 9002, 9*time.Second)
	p := l.shares(t, "16/4/0 clients, cap 3", t0, capBound, 9*time.Second)
	between(t, "instance 0 with 16 clients of 20", p[0], 0.65, 0.92)
	between(t, "instance 1 with 4 clients of 20", p[1], 0.08, 0.35)
	for i := range ms {
		if l.refused[i] > 0 {
			t.Errorf("skewed: instance %d: %d clients got 9002", i, l.refused[i])
		}
	}

	// A fourth instance joins 3 s into the load.
	p4 := newProcessOn(t, ms[0].db)
	admin := dbtest.FreeAddr(t)
	writeConfigAdmin(t, p4.config, p4.addr, ms[0].db, appUser, admin, capConfig)
	fourth := &fleetMember{process: p4, admin: "http://" + admin}
	t0 = time.Now()
	joined := make(chan struct{})
	var at time.Time
	go func() {
		time.Sleep(3 * time.Second)
		p4.serve(t)
		at = time.Now()
		close(joined)
	}()
	all := append(ms[:3:3], fourth)
	l = runCapLoad(t, all, []int{8, 8, 8, 8}, []chan struct{}{nil, nil, nil, joined}, q, 9002, 16*time.Second)
	<-joined
	join := at.Sub(t0)
	first := "never"
	if len(l.served[3]) > 0 {
		first = l.served[3][0].Sub(at).Round(10 * time.Millisecond).String()
	}
	t.Logf("the fourth instance served its first capped statement %s after it started serving (bound %v plus a round of turns, 2 s)", first, capBound)
	if len(l.served[3]) == 0 || l.served[3][0].Sub(at) > capBound+2*time.Second {
		t.Errorf("the fourth instance's first capped statement: %s after it joined", first)
	}
	for i, p := range l.shares(t, "8/8/8 clients, then a fourth instance with 8, cap 3", t0, join+capBound+2*time.Second, 16*time.Second) {
		between(t, fmt.Sprintf("instance %d of four", i), p, 0.15, 0.36)
		if l.refused[i] > 0 {
			t.Errorf("with four instances: instance %d: %d clients got 9002", i, l.refused[i])
		}
	}
}

// The same for a statement shape capped at 3 across three instances.
func TestFleetShapeCapShares(t *testing.T) {
	ms := fleetWith(t, 3, capConfig)
	const q = "DO SLEEP(0.1) /* shape-cap */"
	key := fmt.Sprintf("shape/%016x", shapeHash(q))
	ms[2].api(t, http.MethodPut, "/api/"+strings.Replace(key, "shape/", "shapes/", 1)+"/limit?max=3&reason=hot-query")
	for i, m := range ms {
		within(t, 2*time.Second, fmt.Sprintf("instance %d applies the shape's cap", i), func() bool {
			_, ok := gateOf(t, m, key)
			return ok
		})
	}
	stop := make(chan struct{})
	conv := watchShares(t, ms, key, 1, stop)
	t0 := time.Now()
	l := runCapLoad(t, ms, []int{8, 8, 8}, nil, q, 9008, 10*time.Second)
	close(stop)
	if took, ok := <-conv; ok {
		t.Logf("shape cap, 8/8/8 clients: settled on 1/1/1 %v after the load started (bound %v)", took.Round(10*time.Millisecond), capBound)
	} else {
		t.Errorf("shape cap, 8/8/8 clients: the instances never settled on 1 each")
	}
	for i, p := range l.shares(t, "shape cap 3, 8/8/8 clients", t0, capBound, 10*time.Second) {
		between(t, fmt.Sprintf("instance %d with a third of the load", i), p, 0.25, 0.42)
		if l.refused[i] > 0 {
			t.Errorf("instance %d: %d clients got 9008", i, l.refused[i])
		}
	}
}

// Control rows written straight into holdfast_controls (by hand, or by a
// newer holdfast during an upgrade) that this version does not accept,
// an unknown kind and an out-of-range class, are ignored: not applied,
// not listed among the controls in force, but shown as ignored with the
// reason by /api/controls and holdfastctl controls, and counted. Before,
// an unknown kind was dropped silently while /api/controls listed it as
// in force.
func TestFleetIgnoresBadControlRows(t *testing.T) {
	m := fleetWith(t, 1, "")[0]
	root := dbtest.Root(t)
	for _, row := range []string{
		"('checkout', 'throttle', 5, 'by-hand', 'INC-9', NOW(6), NULL)",
		"('report_x', 'class', 7, 'by-hand', '', NOW(6), NULL)",
		"('search', 'drain', 0, 'by-hand', 'real', NOW(6), NULL)",
	} {
		if _, err := root.Exec("INSERT INTO `" + dbtest.TablesDB(m.db) + "`.holdfast_controls (tag, kind, value, set_by, reason, set_at, expires_at) VALUES " + row); err != nil {
			t.Fatal(err)
		}
	}
	db := m.client(t)
	within(t, 3*time.Second, "the valid drain is in force", func() bool { return refuses(db, "search") })
	var ans struct {
		Controls []struct{ Tag, Kind string }
		Ignored  []struct {
			Tag, Kind string
			Reason    string `json:"ignored_because"`
		}
	}
	dbtest.FetchJSON(t, m.admin+"/api/controls", &ans)
	t.Logf("/api/controls: %+v", ans)
	if len(ans.Controls) != 1 || ans.Controls[0].Tag != "search" {
		t.Errorf("controls in force: %+v, want search's drain alone", ans.Controls)
	}
	if len(ans.Ignored) != 2 || !strings.Contains(ans.Ignored[0].Reason, `"throttle"`) || !strings.Contains(ans.Ignored[1].Reason, "class") {
		t.Errorf("ignored: %+v, want checkout's throttle and report_x's class, with why", ans.Ignored)
	}
	if !serves(db, "checkout") {
		t.Error("a statement of checkout was not served: an ignored row applied")
	}
	if v, ok := m.metric(t, "holdfast_fleet_controls_ignored"); !ok || v != 2 {
		t.Errorf("holdfast_fleet_controls_ignored = %v (%v), want 2", v, ok)
	}
	out, err := guarded(t, dbtest.Command(t, "./cmd/holdfastctl"), "-addr", m.admin, "controls").CombinedOutput()
	if err != nil {
		t.Fatalf("holdfastctl controls: %v\n%s", err, out)
	}
	inForce, ignored, ok := strings.Cut(string(out), "IGNORED")
	if !ok || strings.Contains(inForce, "throttle") || !strings.Contains(ignored, "throttle") || !strings.Contains(ignored, "report_x") {
		t.Errorf("holdfastctl controls:\n%s", out)
	}
}
