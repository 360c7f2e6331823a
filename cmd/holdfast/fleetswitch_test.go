package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// The fleet's controls across a move of the primary, with holdfast
// processes as they run in production: two private MariaDB servers (GTID
// replication, lossless semi-sync, binary logging), a relay standing in
// for the VIP an HA tool moves, and three holdfast processes whose
// backend.address is the VIP, with an ordinary backend account (no SUPER:
// the read-only primary refuses its writes) and the fleet's own account
// `hf` (SLAVE MONITOR, CONNECTION ADMIN), as bench-switchover sets them up.
//
// The numbers: fleet.poll_interval 250 ms, fleet.ttl 1.5 s (at least four
// polls, so that a grant is kept while the database refuses writes);
// a cap of 3 on a tag whose statements each sleep 0.2 s on the server,
// 3 clients of it on every instance (9 wanting 3: each instance's share
// is 1, no turns); 2 clients on every instance running a drained tag's
// statements. Bounds are counted in each instance's own polls (GET
// /api/fleet's polls), not in seconds: a slow machine polls more slowly.

const (
	fswPoll   = 250 * time.Millisecond
	fswCap    = 3
	fswConfig = "fleet:\n  poll_interval: 250ms\n  ttl: 1500ms\npool:\n  max: 8\n  acquire_timeout: 8s\n"

	fswDrained = "fsw_drained" // drained through instance 0 before the switch
	fswCapped  = "fsw_capped"  // capped through instance 0 before the switch
	fswDuring  = "fsw_during"  // drained through instance 2 while the primary is read-only
	fswAfter   = "fsw_after"   // drained through instance 1 after the switch

	// fswCappedQ's SLEEP is bracketed by the server's clock (SYSDATE, the
	// time it is evaluated, unlike NOW), so that each statement says
	// when it ran on the server.
	fswCappedQ = "/* conn_tag:" + fswCapped + " */ SELECT SYSDATE(6), SLEEP(0.2), SYSDATE(6)"
)

// fswBoundPolls is docs/fleet.md's bound for the grants to be on their
// shares after a change (three poll intervals plus the longest hold under
// the cap: 0.2 s, under one poll), and one poll more for holdfast's
// topology check (routing.check_interval, 100 ms) to find the new
// primary: an instance with clients queued under the cap serves one of
// them at least this often, counted in its polls.
const fswBoundPolls = 3 + 1 + 1

// fswBackPolls bounds, in its polls, how long after the VIP moved an
// instance serves a capped statement again: fleet.ttl (6 polls) plus
// fswBoundPolls. After a kill every instance stopped using its grant
// (fleet.ttl − poll_interval after its last renewal) and, its heartbeat
// older than fleet.ttl, comes back to the others as a new instance:
// docs/fleet.md gives such an instance its share within the bound after
// its clients queue, and a gone one's share to the others within
// fleet.ttl plus the bound.
const fswBackPolls = 6 + fswBoundPolls

// fswRig is the servers, the VIP and the holdfast processes of one run.
type fswRig struct {
	x, y *dbtest.Private // x the primary at the start, y its replica
	vip  *netrelay.Relay
	ms   []*fleetMember
}

func startFleetSwitchRig(t *testing.T, n int) *fswRig {
	t.Helper()
	x := dbtest.StartPrivate(t, append([]string{"--log-slave-updates=1"}, dbtest.SemiSyncArgs...)...)
	y := dbtest.StartPrivate(t, append([]string{"--server-id=2", "--read-only=1", "--log-slave-updates=1"}, dbtest.SemiSyncArgs...)...)
	if err := y.Follow(x); err != nil {
		t.Fatal(err)
	}
	xdb := x.Open("")
	defer xdb.Close()
	for _, q := range []string{
		"CREATE DATABASE fsw",
		// An ordinary account: read_only refuses its writes.
		"CREATE USER app IDENTIFIED BY 'app'", "GRANT SELECT, INSERT, UPDATE, DELETE ON fsw.* TO app",
		// holdfast's own account, with what holdfast migrate -print-grants asks.
		"CREATE USER hf IDENTIFIED BY 'hf'", "GRANT ALL PRIVILEGES ON hf.* TO hf", "GRANT SLAVE MONITOR, CONNECTION ADMIN ON *.* TO hf",
	} {
		if _, err := xdb.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	vip, err := netrelay.Start("127.0.0.1:0", x.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vip.Close() })
	r := &fswRig{x: x, y: y, vip: vip}
	for i := range n {
		p := &process{addr: dbtest.FreeAddr(t), db: "fsw", config: filepath.Join(t.TempDir(), "holdfast.yaml")}
		p.Holdfast = dbtest.NewHoldfast(t, holdfastproc.Options{Bin: binary(t), Config: p.config, Listen: p.addr})
		admin := dbtest.FreeAddr(t)
		dbtest.WriteHoldfastConfig(t, p.config, holdfastproc.Config{Listen: p.addr, Users: appUser, Admin: admin,
			Backend: holdfastproc.Backend{Address: vip.Addr().String(), User: "app", Password: "app", Database: "fsw"},
			Fleet:   holdfastproc.Fleet{Database: "hf", User: "hf", Password: "hf"}, YAML: fswConfig})
		if i == 0 {
			p.migrate(t)
		}
		p.serve(t)
		r.ms = append(r.ms, &fleetMember{process: p, admin: "http://" + admin})
	}
	for i, m := range r.ms {
		db := m.client(t)
		within(t, 10*time.Second, fmt.Sprintf("instance %d serves through the VIP", i), func() bool { return serves(db, "warmup") })
	}
	return r
}

// connectionsOf counts user's connections to server p (-1: it cannot be
// asked).
func (r *fswRig) connectionsOf(user string, p *dbtest.Private) int {
	db := p.Open("")
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", user).Scan(&n); err != nil {
		return -1
	}
	return n
}

// fswStatus is what the test reads of GET /api/fleet.
type fswStatus struct {
	Status struct {
		Polls          uint64       `json:"polls"`
		HeartbeatError string       `json:"heartbeat_error"`
		Controls       []fswControl `json:"controls"`
	} `json:"status"`
}

type fswControl struct {
	Tag    string `json:"tag"`
	Kind   string `json:"kind"`
	Source string `json:"source"` // in /api/controls' here: config, local or fleet
}

func (s fswStatus) has(tag, kind string) bool {
	return slices.ContainsFunc(s.Status.Controls, func(c fswControl) bool { return c.Tag == tag && c.Kind == kind })
}

var fswHTTP = &http.Client{Timeout: 5 * time.Second}

// readFleetStatus reads m's GET /api/fleet; safe outside the test's goroutine.
func readFleetStatus(m *fleetMember) (fswStatus, error) {
	var s fswStatus
	resp, err := fswHTTP.Get(m.admin + "/api/fleet")
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("GET /api/fleet: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}

// pollClock samples every instance's poll count, so that a moment of the
// run can be told in that instance's polls.
type pollClock struct {
	mu      sync.Mutex // guards samples
	samples [][]pollSample
}

type pollSample struct {
	at    time.Time
	polls uint64
}

func watchPolls(ctx context.Context, ms []*fleetMember) (*pollClock, <-chan struct{}) {
	c := &pollClock{samples: make([][]pollSample, len(ms))}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			for ctx.Err() == nil {
				if s, err := readFleetStatus(m); err == nil {
					c.mu.Lock()
					c.samples[i] = append(c.samples[i], pollSample{time.Now(), s.Status.Polls})
					c.mu.Unlock()
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	return c, done
}

// at is instance i's poll count at t: its last sample at or before t
// (its first when none is).
func (c *pollClock) at(i int, t time.Time) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.samples[i]
	k, found := slices.BinarySearchFunc(s, t, func(e pollSample, t time.Time) int { return e.at.Compare(t) })
	switch {
	case found:
		return s[k].polls
	case k > 0:
		return s[k-1].polls
	case len(s) > 0:
		return s[0].polls
	}
	return 0
}

// fswRun is a capped statement served: through which instance, when its
// SLEEP ran on the server, and when the client had the answer.
type fswRun struct {
	inst       int
	start, end time.Time
	answered   time.Time
}

// fswLoad is what the clients of every instance got.
type fswLoad struct {
	mu   sync.Mutex // guards following
	runs []fswRun
	// Of the drained tag's statements, per instance: those served (and
	// when they were sent), refused with the drain's 9001, and anything
	// else.
	drainedServed [][]time.Time
	drainedSeen   [][]time.Time // when each 9001 came
	drainedMsg    []string      // the first 9001's message
	capRefused    []int         // the cap's 9002: a client waited out pool.acquire_timeout
	failed        []int         // any other error of either tag
	firstFailure  []string
}

func (l *fswLoad) fail(i int, err error) {
	l.failed[i]++
	if l.firstFailure[i] == "" {
		l.firstFailure[i] = err.Error()
	}
}

// runFleetSwitchLoad runs, until ctx ends, 2 clients of the drained tag
// and, from when capped is closed, 3 of the capped tag through every
// instance; done is closed once they have all stopped.
func runFleetSwitchLoad(ctx context.Context, t *testing.T, ms []*fleetMember, capped <-chan struct{}) (*fswLoad, <-chan struct{}) {
	n := len(ms)
	l := &fswLoad{drainedServed: make([][]time.Time, n), drainedSeen: make([][]time.Time, n), drainedMsg: make([]string, n),
		capRefused: make([]int, n), failed: make([]int, n), firstFailure: make([]string, n)}
	var wg sync.WaitGroup
	for i, m := range ms {
		db := m.client(t)
		db.SetMaxOpenConns(5)
		for range 3 {
			wg.Go(func() {
				select {
				case <-ctx.Done():
				case <-capped:
				}
				for ctx.Err() == nil {
					var s, e string
					var slept int
					err := db.QueryRowContext(ctx, fswCappedQ).Scan(&s, &slept, &e)
					if ctx.Err() != nil {
						return
					}
					answered := time.Now()
					l.mu.Lock()
					var me *mysql.MySQLError
					switch {
					case err == nil:
						start, err1 := time.ParseInLocation("2006-01-02 15:04:05.999999", s, time.Local)
						end, err2 := time.ParseInLocation("2006-01-02 15:04:05.999999", e, time.Local)
						if err := errors.Join(err1, err2); err != nil {
							l.fail(i, err)
							break
						}
						l.runs = append(l.runs, fswRun{inst: i, start: start, end: end, answered: answered})
					case errors.As(err, &me) && me.Number == 9002:
						l.capRefused[i]++
						l.fail(i, err)
					default:
						l.fail(i, err)
					}
					l.mu.Unlock()
				}
			})
		}
		for range 2 {
			wg.Go(func() {
				for ctx.Err() == nil {
					sent := time.Now()
					_, err := db.ExecContext(ctx, "/* conn_tag:"+fswDrained+" */ SELECT 1")
					if ctx.Err() != nil {
						return
					}
					l.mu.Lock()
					var me *mysql.MySQLError
					switch {
					case err == nil:
						l.drainedServed[i] = append(l.drainedServed[i], sent)
					case errors.As(err, &me) && me.Number == 9001:
						l.drainedSeen[i] = append(l.drainedSeen[i], time.Now())
						if l.drainedMsg[i] == "" {
							l.drainedMsg[i] = me.Message
						}
					default:
						l.fail(i, err)
					}
					l.mu.Unlock()
					select {
					case <-ctx.Done():
					case <-time.After(20 * time.Millisecond):
					}
				}
			})
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return l, done
}

// served is how many capped statements instance i had answered after t.
func (l *fswLoad) served(i int, t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.runs {
		if r.inst == i && r.answered.After(t) {
			n++
		}
	}
	return n
}

// peak is the most capped statements whose SLEEP ran at once on the
// servers, among those that ran from..until (by the servers' clock, which
// is this machine's: both servers run on it).
func (l *fswLoad) peak(from, until time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, r := range l.runs {
		if r.end.After(from) && r.start.Before(until) {
			es = append(es, edge{r.start, 1}, edge{r.end, -1})
		}
	}
	// An end before a start at the same moment: touching is not overlapping.
	slices.SortFunc(es, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d
	})
	cur, top := 0, 0
	for _, e := range es {
		cur += e.d
		top = max(top, cur)
	}
	return top
}

// firstAfter is when instance i first answered a capped statement after
// t (zero: never).
func (l *fswLoad) firstAfter(i int, t time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, r := range l.runs {
		if r.inst == i && r.answered.After(t) && (first.IsZero() || r.answered.Before(first)) {
			first = r.answered
		}
	}
	return first
}

// longestGap is, in instance i's polls, the longest time from..until in
// which instance i answered no capped statement.
func (l *fswLoad) longestGap(c *pollClock, i int, from, until time.Time) uint64 {
	l.mu.Lock()
	var ts []time.Time
	for _, r := range l.runs {
		if r.inst == i && r.answered.After(from) && r.answered.Before(until) {
			ts = append(ts, r.answered)
		}
	}
	l.mu.Unlock()
	slices.SortFunc(ts, time.Time.Compare)
	ts = append(append([]time.Time{from}, ts...), until)
	var top uint64
	for k := 1; k < len(ts); k++ {
		top = max(top, c.at(i, ts[k])-c.at(i, ts[k-1]))
	}
	return top
}

// Issue 45's acceptance, with holdfast processes: a drain and a cap set
// before a move of the primary still hold on every instance after it, and
// a control set after it through any instance applies fleet-wide.
//
// Under load on all three instances, a drain of one tag and a cap of 3 on
// another are set through instance 0; then the primary moves (planned: an
// HA tool's switchover, the VIP moved; kill: the primary killed with -9,
// the replica promoted 2 s later, the VIP moved). Throughout and after:
// no statement of the drained tag sent after the drain was in force on an
// instance is served there (each gets 9001 with the drain's reason); the
// database never runs more than 3 capped statements at once (their
// SLEEPs, by the servers' clock: docs/fleet.md's "the grants never add
// up to more than N"); no client waits out pool.acquire_timeout under the
// cap; every instance keeps serving its share, never left without a
// capped statement for longer than fswBoundPolls of its polls before the
// switch and after its first one on the new primary, which comes within
// fswBackPolls of the VIP's move. Every instance records its heartbeat on the new primary
// (its fleet connections followed the VIP). A drain set through instance
// 2 while the old primary is read-only and the VIP not yet moved
// (planned) is held until it can be written, not refused; it and one set
// through instance 1 after the move are in force on every instance, the
// latter read by the others within two of their polls (plus one for this
// test's sampling); GET /api/controls on every instance lists every
// control, in force there from the fleet.
//
// The capped tag's clients run before the cap is set, as on-call caps a
// tag under load: the statements running when it comes into force count
// under it, and give their slots back as they end.
func TestFleetControlsAcrossSwitchover(t *testing.T) {
	for _, kill := range []bool{false, true} {
		name := "planned"
		if kill {
			name = "kill"
		}
		t.Run(name, func(t *testing.T) { fleetAcrossSwitch(t, kill) })
	}
}

func fleetAcrossSwitch(t *testing.T, kill bool) {
	began := time.Now()
	r := startFleetSwitchRig(t, 3)
	ms := r.ms
	t.Logf("servers up, three holdfast processes serving through the VIP after %v", time.Since(began).Round(100*time.Millisecond))
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	clock, clocked := watchPolls(ctx, ms)
	capped := make(chan struct{})
	l, loaded := runFleetSwitchLoad(ctx, t, ms, capped)
	defer func() {
		if t.Failed() {
			l.mu.Lock()
			defer l.mu.Unlock()
			t.Logf("load: %d capped statements served; errors per instance %v, the first of each %q", len(l.runs), l.failed, l.firstFailure)
		}
	}()

	// Before the switch, through instance 0, with the capped tag's clients
	// running.
	close(capped)
	within(t, 10*time.Second, "every instance serves the tag to be capped", func() bool {
		for i := range ms {
			if l.served(i, time.Time{}) == 0 {
				return false
			}
		}
		return true
	})
	ans := ms[0].api(t, http.MethodPost, "/api/tags/"+fswDrained+"/drain?reason=INC-45-drain")
	if !strings.Contains(ans, `"scope": "fleet"`) {
		t.Fatalf("drain answered %s", ans)
	}
	ans = ms[0].api(t, http.MethodPut, fmt.Sprintf("/api/tags/%s/limit?max=%d&reason=INC-45-cap", fswCapped, fswCap))
	if !strings.Contains(ans, `"scope": "fleet"`) {
		t.Fatalf("limit answered %s", ans)
	}
	// inForce[i]: when the drain was seen in force on instance i; every
	// statement of the tag sent there after it must be refused.
	inForce := make([]time.Time, len(ms))
	for i, m := range ms {
		db := m.client(t)
		within(t, 10*time.Second, fmt.Sprintf("instance %d refuses the drained tag", i), func() bool { return refuses(db, fswDrained) })
		inForce[i] = time.Now()
	}
	settled := func(what string) time.Time {
		t.Helper()
		defer func() {
			if t.Failed() {
				for i, m := range ms {
					t.Logf("instance %d: %d capped statements served; GET /api/gates: %s", i, l.served(i, time.Time{}), getText(m.admin+"/api/gates"))
				}
			}
		}()
		within(t, 15*time.Second, what, func() bool {
			for _, m := range ms {
				g, ok := gateOf(t, m, fswCapped)
				if !ok || g.FleetLimit != fswCap || g.Limit < 1 || len(g.Grants) != len(ms) {
					return false
				}
				sum := 0
				for _, gr := range g.Grants {
					sum += gr.Granted
				}
				if sum > fswCap {
					t.Errorf("%s: grants %+v add up to more than the cap %d", what, g.Grants, fswCap)
				}
			}
			return true
		})
		return time.Now()
	}
	for i, m := range ms {
		within(t, 10*time.Second, fmt.Sprintf("instance %d applies the cap", i), func() bool {
			_, ok := gateOf(t, m, fswCapped)
			return ok
		})
	}
	// The statements begun before the cap (0.2 s each) have ended by then.
	uncappedEnded := time.Now().Add(time.Second)
	pre := settled("every instance admits some of the cap, with three grants")
	// Some load under both controls before the switch: every instance
	// serves capped statements (a few of its polls' worth).
	for i := range ms {
		within(t, 15*time.Second, fmt.Sprintf("instance %d serves 5 capped statements before the switch", i), func() bool { return l.served(i, pre) >= 5 })
	}

	// The switch.
	var start, moved time.Time
	during := make(chan string, 1)
	if !kill {
		var steps dbtest.SwitchoverSteps
		var err error
		steps, err = dbtest.Switchover(context.Background(), r.x, r.y, func() {
			// On-call drains a tag through instance 2 while the old
			// primary is read-only and the VIP still leads to it: the
			// write is refused 1290 until the VIP moves, and held
			// meanwhile (fleet's writeHeld), not answered with an error.
			go func() {
				b, err := fetchAdmin(http.MethodPost, ms[2].admin+"/api/tags/"+fswDuring+"/drain?reason=INC-45-during")
				if err != nil {
					during <- err.Error()
					return
				}
				during <- string(b)
			}()
			time.Sleep(2 * fswPoll) // the write meets the read-only primary
			r.vip.Retarget(r.y.Addr)
		})
		if err != nil {
			t.Fatal(err)
		}
		start, moved = steps.Start, steps.Moved
		t.Logf("switchover: read-only %v, caught up %v, promoted %v, old primary repointed %v, VIP moved %v after it began",
			steps.ReadOnly.Sub(start).Round(time.Millisecond), steps.CaughtUp.Sub(start).Round(time.Millisecond),
			steps.Promoted.Sub(start).Round(time.Millisecond), steps.Repointed.Sub(start).Round(time.Millisecond),
			moved.Sub(start).Round(time.Millisecond))
	} else {
		start = time.Now()
		r.x.Kill()
		time.Sleep(2 * time.Second) // the HA tool's time to decide
		received, err := r.y.PromoteApplied(context.Background(), 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		r.vip.Retarget(r.y.Addr)
		moved = time.Now()
		close(during)
		t.Logf("primary killed; replica promoted (received %s) and VIP moved %v later", received, moved.Sub(start).Round(time.Millisecond))
	}

	// After the switch: heartbeats recorded on the new primary (the
	// fleet's own connections followed it).
	for i, m := range ms {
		var last string
		defer func() {
			if t.Failed() && last != "" {
				t.Logf("instance %d: the last heartbeat's error: %s; the fleet account's connections: %d on the old primary, %d on the new",
					i, last, r.connectionsOf("hf", r.x), r.connectionsOf("hf", r.y))
			}
		}()
		within(t, 15*time.Second, fmt.Sprintf("instance %d records its heartbeat on the new primary", i), func() bool {
			s, err := readFleetStatus(m)
			if err == nil {
				last = s.Status.HeartbeatError
			}
			return err == nil && s.Status.HeartbeatError == ""
		})
	}
	// A control set through instance 1 after the switch: in force on the
	// others within two of their polls (the one under way when it was
	// written, and the next), plus one for this test's sampling.
	ans = ms[1].api(t, http.MethodPost, "/api/tags/"+fswAfter+"/drain?reason=INC-45-after")
	if !strings.Contains(ans, `"scope": "fleet"`) || !strings.Contains(ans, `"drained": true`) {
		t.Fatalf("drain after the switch answered %s", ans)
	}
	if !refuses(ms[1].client(t), fswAfter) {
		t.Error("instance 1 serves the tag drained through it after answering")
	}
	for _, i := range []int{0, 2} {
		s0, err := readFleetStatus(ms[i])
		if err != nil {
			t.Fatal(err)
		}
		var s fswStatus
		within(t, 15*time.Second, fmt.Sprintf("instance %d reads the drain set through instance 1", i), func() bool {
			s, err = readFleetStatus(ms[i])
			return err == nil && s.has(fswAfter, "drain")
		})
		polls := s.Status.Polls - s0.Status.Polls
		t.Logf("instance %d read the drain set through instance 1 after the switch %d of its polls after the answer", i, polls)
		if polls > 3 {
			t.Errorf("instance %d read the drain set through instance 1 %d polls after it was set, want at most 3", i, polls)
		}
		db := ms[i].client(t)
		within(t, 5*time.Second, fmt.Sprintf("instance %d refuses the tag drained through instance 1", i), func() bool { return refuses(db, fswAfter) })
	}
	if !kill {
		ans := <-during
		if !strings.Contains(ans, `"scope": "fleet"`) {
			t.Fatalf("the drain set while the primary was read-only answered %s", ans)
		}
		for i, m := range ms {
			db := m.client(t)
			within(t, 5*time.Second, fmt.Sprintf("instance %d refuses the tag drained during the switch", i), func() bool { return refuses(db, fswDuring) })
		}
	}
	post := settled("after the switch, every instance admits some of the cap, with three grants")
	t.Logf("grants settled on the new primary %d polls (instance 0's) after the VIP moved", clock.at(0, post)-clock.at(0, moved))
	for i := range ms {
		within(t, 15*time.Second, fmt.Sprintf("instance %d serves 8 capped statements after the switch", i), func() bool { return l.served(i, post) >= 8 })
	}
	end := time.Now()
	stop()
	<-loaded
	<-clocked

	// The drain held throughout, on every instance.
	for i := range ms {
		var late []time.Time
		for _, at := range l.drainedServed[i] {
			if at.After(inForce[i]) {
				late = append(late, at)
			}
		}
		refusedAfter := 0
		for _, at := range l.drainedSeen[i] {
			if at.After(moved) {
				refusedAfter++
			}
		}
		t.Logf("instance %d: drained tag: %d served before it was in force here, %d served after, %d refused after the move (%s)",
			i, len(l.drainedServed[i])-len(late), len(late), refusedAfter, l.drainedMsg[i])
		if len(late) > 0 {
			t.Errorf("instance %d served %d statements of the drained tag sent after the drain was in force there, the first %v after",
				i, len(late), late[0].Sub(inForce[i]).Round(time.Millisecond))
		}
		if refusedAfter == 0 {
			t.Errorf("instance %d: no statement of the drained tag was refused after the move", i)
		}
		if !strings.Contains(l.drainedMsg[i], "INC-45-drain") {
			t.Errorf("instance %d: the drain's refusal says %q, want its reason", i, l.drainedMsg[i])
		}
	}

	// The cap held throughout, fleet-wide, and no instance was starved.
	from := pre
	if from.Before(uncappedEnded) {
		from = uncappedEnded
	}
	whole := l.peak(from, end)
	before := l.peak(from, start)
	after := l.peak(moved, end)
	t.Logf("capped statements at once on the servers: at most %d before the switch, %d after, %d over the whole run (cap %d)", before, after, whole, fswCap)
	if whole > fswCap {
		t.Errorf("%d capped statements ran at once, over the fleet-wide cap %d", whole, fswCap)
	}
	if before < 2 || after < 2 {
		t.Errorf("the capped statements reached only %d at once before the switch and %d after, with 9 clients wanting them under a cap of %d", before, after, fswCap)
	}
	for i := range ms {
		// Before: from when the grants settled to the switch. After:
		// first, from when the VIP leads to the new primary to the first
		// capped statement (between the switch's start and the move there
		// is no primary, and holdfast holds statements whatever their
		// tag); then between statements, as before.
		gapBefore := l.longestGap(clock, i, pre, start)
		first := l.firstAfter(i, moved)
		if first.IsZero() {
			t.Errorf("instance %d served no capped statement after the switch", i)
			continue
		}
		back := clock.at(i, first) - clock.at(i, moved)
		gapAfter := l.longestGap(clock, i, first, end)
		l.mu.Lock()
		failed, refused, firstErr := l.failed[i], l.capRefused[i], l.firstFailure[i]
		l.mu.Unlock()
		t.Logf("instance %d: %d capped statements served before the switch, %d after the move; longest without one before: %d polls; "+
			"first after the move %d polls (%v) after it, then at most %d polls apart; %d 9002, %d errors in all %s",
			i, l.served(i, pre)-l.served(i, start), l.served(i, moved), gapBefore, back, first.Sub(moved).Round(time.Millisecond), gapAfter,
			refused, failed, firstErr)
		if gapBefore > fswBoundPolls || gapAfter > fswBoundPolls {
			t.Errorf("instance %d went %d polls before the switch and %d after it without serving a capped statement, want at most %d",
				i, gapBefore, gapAfter, fswBoundPolls)
		}
		if back > fswBackPolls {
			t.Errorf("instance %d served its first capped statement %d polls after the VIP moved, want at most %d", i, back, fswBackPolls)
		}
		if refused > 0 {
			t.Errorf("instance %d: %d clients waited out pool.acquire_timeout under the cap", i, refused)
		}
	}

	// Every instance lists the controls: those set before, during and
	// after the switch.
	want := []string{fswDrained + "/drain", fswCapped + "/limit", fswAfter + "/drain"}
	if !kill {
		want = append(want, fswDuring+"/drain")
	}
	for i, m := range ms {
		var cs struct{ Controls, Here []fswControl }
		dbtest.FetchJSON(t, m.admin+"/api/controls", &cs)
		for _, w := range want {
			tag, kind, _ := strings.Cut(w, "/")
			if !slices.ContainsFunc(cs.Controls, func(c fswControl) bool { return c.Tag == tag && c.Kind == kind }) {
				t.Errorf("instance %d: /api/controls lists no %s of %s among the fleet's controls: %+v", i, kind, tag, cs.Controls)
			}
			if !slices.ContainsFunc(cs.Here, func(c fswControl) bool {
				return c.Tag == tag && c.Kind == kind && c.Source == "fleet"
			}) {
				t.Errorf("instance %d: /api/controls lists no %s of %s in force here from the fleet: %+v", i, kind, tag, cs.Here)
			}
		}
	}
	t.Logf("run took %v", time.Since(began).Round(100*time.Millisecond))
}

// getText is the body of GET url, or why there is none (for a failure's
// log).
func getText(url string) string {
	resp, err := fswHTTP.Get(url)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return err.Error()
	}
	return strings.Join(strings.Fields(string(b)), " ")
}

// fetchAdmin is dbtest.Fetch returning its error, for a goroutine other
// than the test's.
func fetchAdmin(method, url string) ([]byte, error) {
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+holdfastproc.AdminToken)
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: %s %s", method, url, resp.Status, body)
	}
	return body, nil
}
