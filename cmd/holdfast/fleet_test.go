package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// fleetOf starts n holdfast processes on one database, after `holdfast
// migrate`, each with an admin listener; fleet settings as shipped
// (poll_interval 1s, ttl 5s).
func fleetOf(t *testing.T, n int) []*fleetMember {
	t.Helper()
	return fleetWith(t, n, "")
}

// fleetWith is fleetOf with extra configuration appended to each
// instance's.
func fleetWith(t *testing.T, n int, extra string) []*fleetMember {
	t.Helper()
	db := dbtest.NewDatabase(t)
	var out []*fleetMember
	for i := 0; i < n; i++ {
		p := newProcessOn(t, db)
		admin := dbtest.FreeAddr(t)
		writeConfigAdmin(t, p.config, p.addr, db, appUser, admin, extra)
		if i == 0 {
			p.migrate(t)
		}
		p.serve(t)
		out = append(out, &fleetMember{process: p, admin: "http://" + admin})
	}
	return out
}

type fleetMember struct {
	*process
	admin string // the admin listener's URL
}

// client is a database/sql pool through m.
func (m *fleetMember) client(t *testing.T) *sql.DB { return m.open(t, "app", "app") }

// api sends an admin request to m and returns its answer (bounded; a
// status other than 200 fails t).
func (m *fleetMember) api(t *testing.T, method, path string) string {
	t.Helper()
	return string(dbtest.Fetch(t, method, m.admin+path))
}

// refuses reports whether a statement of tag through db is refused as
// drained (9001).
func refuses(db *sql.DB, tag string) bool {
	_, err := db.Exec("/* conn_tag:" + tag + " */ SELECT 1")
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == 9001
}

// serves reports whether a statement of tag through db succeeds (not
// merely "is not refused as drained": a broken instance serves nothing).
func serves(db *sql.DB, tag string) bool {
	_, err := db.Exec("/* conn_tag:" + tag + " */ SELECT 1")
	return err == nil
}

// within waits up to d for cond and reports how long it took; it fails the
// test when d passes.
func within(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Since(start)
}

// The fleet's controls: set through one instance, in force on all three
// within the documented bound (one poll_interval, plus the poll itself:
// 2 s with the shipped 1 s), still in force on an instance that
// restarts, and lifted everywhere when they expire.
func TestFleetControls(t *testing.T) {
	ms := fleetOf(t, 3)
	dbs := make([]*sql.DB, len(ms))
	for i, m := range ms {
		dbs[i] = m.client(t)
		if !serves(dbs[i], "checkout") {
			t.Fatal("not served before any drain")
		}
	}
	const bound = 2 * time.Second
	ans := ms[0].api(t, http.MethodPost, "/api/tags/checkout/drain?reason=incident-42&by=alice")
	if !strings.Contains(ans, `"scope": "fleet"`) || !strings.Contains(ans, `"drained": true`) {
		t.Fatalf("drain answered %s", ans)
	}
	if !refuses(dbs[0], "checkout") {
		t.Fatal("the instance the drain was set through still serves the tag after answering")
	}
	for i := 1; i < 3; i++ {
		took := within(t, bound, fmt.Sprintf("instance %d refuses the drained tag", i), func() bool { return refuses(dbs[i], "checkout") })
		t.Logf("instance %d refused checkout %v after the drain", i, took.Round(time.Millisecond))
	}
	if !serves(dbs[1], "other_flow") {
		t.Fatal("a tag nobody drained is not served")
	}
	if ans := ms[2].api(t, http.MethodGet, "/api/controls"); !strings.Contains(ans, `"reason": "incident-42"`) || !strings.Contains(ans, `"set_by": "harness/alice"`) {
		t.Fatalf("another instance lists the controls as %s", ans)
	}

	// A restarted instance comes up with the drain in force.
	ms[1].Kill()
	ms[1].serve(t)
	if !refuses(ms[1].client(t), "checkout") {
		t.Fatal("the restarted instance serves the drained tag")
	}

	// Lifted through another instance: served everywhere within the bound.
	ms[2].api(t, http.MethodDelete, "/api/tags/checkout/drain")
	for i := range ms {
		db := ms[i].client(t)
		within(t, bound, fmt.Sprintf("instance %d serves the undrained tag", i), func() bool { return serves(db, "checkout") })
	}

	// An expiring drain lifts itself on every instance.
	// Long enough that every instance applies it before it expires.
	ms[0].api(t, http.MethodPost, "/api/tags/report/drain?for=6s")
	for i := range ms {
		db := ms[i].client(t)
		within(t, bound, fmt.Sprintf("instance %d refuses the expiring drain", i), func() bool { return refuses(db, "report") })
	}
	for i := range ms {
		db := ms[i].client(t)
		within(t, 6*time.Second+bound, fmt.Sprintf("instance %d serves again once the drain expired", i), func() bool { return serves(db, "report") })
	}
}

// An overload class set through one instance, for a pattern, is in force
// on every instance within the bound, and lifts itself at its expiry.
func TestFleetClasses(t *testing.T) {
	ms := fleetOf(t, 2)
	const series = `holdfast_tag_class{class="background",tag="report_x"}`
	for _, m := range ms {
		if _, err := m.client(t).Exec("/* conn_tag:report_x */ SELECT 1"); err != nil {
			t.Fatal(err)
		}
		if _, ok := m.metric(t, series); ok {
			t.Fatal("report_x is background before any class was set")
		}
	}
	ans := ms[0].api(t, http.MethodPut, "/api/tags/report_*/class?class=background&for=6s&reason=nightly-export")
	if !strings.Contains(ans, `"scope": "fleet"`) || !strings.Contains(ans, `"class_here_now": "background"`) {
		t.Fatalf("class answered %s", ans)
	}
	for i, m := range ms {
		took := within(t, 2*time.Second, fmt.Sprintf("instance %d has report_x background", i), func() bool {
			_, ok := m.metric(t, series)
			return ok
		})
		t.Logf("instance %d: report_x background %v after the change", i, took.Round(time.Millisecond))
	}
	if ans := ms[1].api(t, http.MethodGet, "/api/controls"); !strings.Contains(ans, `"kind": "class"`) || !strings.Contains(ans, `"reason": "nightly-export"`) {
		t.Fatalf("the other instance lists the controls as %s", ans)
	}
	for i, m := range ms {
		within(t, 6*time.Second+2*time.Second, fmt.Sprintf("instance %d: the class expired", i), func() bool {
			_, ok := m.metric(t, series)
			return !ok
		})
	}
}

// A fleet-wide cap of N holds across three instances: never more than N
// of the tag's statements run at once on the database (sampled from its
// process list, one view of all instances), with the load spread evenly
// and with it on one instance only (which then gets close to N), and the
// share of an instance killed with -9 goes back to the others.
func TestFleetCap(t *testing.T) {
	ms := fleetOf(t, 3)
	const capN = 3
	ms[0].api(t, http.MethodPut, fmt.Sprintf("/api/tags/capped/limit?max=%d", capN))
	root := dbtest.Root(t)
	sample := func(stop <-chan struct{}, peak *atomic.Int64) {
		for {
			var n int64
			if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%conn_tag:capped%' AND INFO NOT LIKE '%PROCESSLIST%'").Scan(&n); err == nil && n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	load := func(on []*fleetMember, clients int, d time.Duration) (peak int64, done int64) {
		var pk, n atomic.Int64
		stop := make(chan struct{})
		sampled := make(chan struct{})
		go func() { sample(stop, &pk); close(sampled) }()
		var wg sync.WaitGroup
		deadline := time.Now().Add(d)
		for _, m := range on {
			db := m.client(t)
			db.SetMaxOpenConns(clients)
			for c := 0; c < clients; c++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(deadline) {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						_, err := db.ExecContext(ctx, "/* conn_tag:capped */ SELECT SLEEP(0.05)")
						cancel()
						if err == nil {
							n.Add(1)
						}
					}
				}()
			}
		}
		wg.Wait()
		close(stop)
		<-sampled
		return pk.Load(), n.Load()
	}
	// Every instance has the cap in force before the load starts.
	for i, m := range ms {
		within(t, 2*time.Second, fmt.Sprintf("instance %d applies the cap", i), func() bool {
			return strings.Contains(m.api(t, http.MethodGet, "/api/gates"), `"limited": true`)
		})
	}
	peak, done := load(ms, 4, 6*time.Second)
	t.Logf("load on all three: peak %d capped statements at once, %d done", peak, done)
	if peak > capN {
		t.Fatalf("%d capped statements ran at once across the fleet, over the cap %d", peak, capN)
	}
	if done == 0 {
		t.Fatal("no capped statement succeeded with the load on all three")
	}
	peak, done = load(ms[:1], 6, 6*time.Second)
	t.Logf("load on one instance: peak %d at once, %d done", peak, done)
	if peak > capN {
		t.Fatalf("%d capped statements ran at once, over the cap %d", peak, capN)
	}
	if peak < capN-1 {
		t.Fatalf("with the load on one instance it reached only %d of the cap %d", peak, capN)
	}
	// Kill -9 the instance that holds the grant: the others get it back.
	ms[0].Kill()
	peak, done = load(ms[1:2], 6, 10*time.Second)
	t.Logf("after kill -9 of the loaded instance, load on another: peak %d, %d done", peak, done)
	if peak > capN || peak < capN-1 {
		t.Fatalf("after the kill, peak %d, want the cap %d back within the ttl", peak, capN)
	}
}

// metric returns the value of the sample named series (name and labels as
// /metrics prints them) on m, and whether m exposes it.
func (m *fleetMember) metric(t *testing.T, series string) (float64, bool) {
	t.Helper()
	for _, line := range strings.Split(m.api(t, http.MethodGet, "/metrics"), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				t.Fatalf("%s: %q: %v", series, line, err)
			}
			return f, true
		}
	}
	return 0, false
}

// The fleet duties run on one instance at a time: of three instances,
// exactly one runs the sweeper and the reconciler (their cycle counters
// move on it alone), and when it is killed with -9 another takes them
// over within the lease time (fleet.ttl, plus one poll to notice).
func TestFleetDuties(t *testing.T) {
	ms := fleetWith(t, 3, "reservation:\n  sweep_interval: 100ms\n  reconcile_interval: 100ms\n")
	duties := []string{"sweeper", "reconciler"}
	cycles := map[string]string{"sweeper": "holdfast_reservation_sweep_cycles_total", "reconciler": "holdfast_reservation_reconcile_cycles_total"}
	// holders returns, per duty, the instances (indexes into ms, among
	// live) that say they hold it.
	holders := func(live []int) map[string][]int {
		out := map[string][]int{}
		for _, i := range live {
			for _, d := range duties {
				v, ok := ms[i].metric(t, `holdfast_fleet_duty_held{duty="`+d+`"}`)
				if !ok {
					t.Fatalf("instance %d does not expose holdfast_fleet_duty_held for %s", i, d)
				}
				if v == 1 {
					out[d] = append(out[d], i)
				}
			}
		}
		return out
	}
	// runsAlone checks over a window that duty's cycles move on holder and
	// on no other live instance.
	runsAlone := func(live []int, holder int, duty string) {
		t.Helper()
		before := map[int]float64{}
		for _, i := range live {
			before[i], _ = ms[i].metric(t, cycles[duty])
		}
		time.Sleep(1500 * time.Millisecond)
		for _, i := range live {
			after, _ := ms[i].metric(t, cycles[duty])
			moved := after - before[i]
			switch {
			case i == holder && moved == 0:
				t.Errorf("%s: the holder, instance %d, ran no cycle in 1.5 s", duty, i)
			case i != holder && moved != 0:
				t.Errorf("%s: instance %d does not hold the duty and ran %v cycles", duty, i, moved)
			}
			t.Logf("%s: instance %d ran %v cycles in 1.5 s", duty, i, moved)
		}
	}
	one := func(live []int) map[string]int {
		var got map[string][]int
		within(t, 3*time.Second, "each duty held by exactly one instance", func() bool {
			got = holders(live)
			for _, d := range duties {
				if len(got[d]) != 1 {
					return false
				}
			}
			return true
		})
		out := map[string]int{}
		for _, d := range duties {
			out[d] = got[d][0]
		}
		return out
	}

	all := []int{0, 1, 2}
	first := one(all)
	t.Logf("duty holders: %v", first)
	for _, d := range duties {
		runsAlone(all, first[d], d)
	}

	// kill -9 the sweeper's holder: its leases lapse after the ttl and
	// another instance takes each duty it held.
	dead := first["sweeper"]
	ms[dead].Kill()
	killed := time.Now()
	var live []int
	for _, i := range all {
		if i != dead {
			live = append(live, i)
		}
	}
	const bound = 5*time.Second + time.Second + time.Second // ttl + poll_interval + one poll's slack
	var next map[string]int
	within(t, bound, "another instance takes the duties over", func() bool {
		h := holders(live)
		for _, d := range duties {
			if len(h[d]) != 1 {
				return false
			}
		}
		next = map[string]int{"sweeper": h["sweeper"][0], "reconciler": h["reconciler"][0]}
		return true
	})
	t.Logf("after kill -9 of instance %d, duties taken over after %v: %v", dead, time.Since(killed).Round(time.Millisecond), next)
	for _, d := range duties {
		runsAlone(live, next[d], d)
	}
}

// A CALL holdfast.* is a statement of the tag it carries: a drain of the
// tag refuses it (and nothing is reserved), a cap counts it as one of the
// tag's connections while it runs, and the engine's backend time on it is
// counted under the tag (holdfast_tag_engine_seconds_total), a share of
// the holdfast:* tags' time.
func TestCallHonoursCallerTag(t *testing.T) {
	m := fleetWith(t, 1, "")[0]
	db := m.client(t)
	db.SetMaxOpenConns(4)
	if _, err := db.Exec("CALL holdfast.receive(1, 1001, 1, 100)"); err != nil {
		t.Fatal(err)
	}
	reserve := func(tag, key string) error {
		_, err := db.Exec(fmt.Sprintf(`/* conn_tag:%s */ CALL holdfast.reserve(1, '%s', '[{"item":1001,"qty":1,"locations":[1]}]', NULL)`, tag, key))
		return err
	}
	reserved := func(key string) bool {
		var n int
		// holdfast's tables are in fleet.database, not the client's.
		if err := db.QueryRow("SELECT COUNT(*) FROM `"+dbtest.TablesDB(m.db)+"`.reservations WHERE idempotency_key = ?", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	}

	m.api(t, http.MethodPost, "/api/tags/checkout/drain?reason=incident")
	err := reserve("checkout", "drained-1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9001 || !strings.Contains(me.Message, "nothing was done") {
		t.Fatalf("CALL of a drained tag: %v, want 9001, nothing done", err)
	}
	if reserved("drained-1") {
		t.Fatal("the drained tag's CALL reserved")
	}
	// The same as a prepared statement (the driver prepares a statement
	// with arguments): the tag in its text is each execute's.
	_, err = db.Exec(`/* conn_tag:checkout */ CALL holdfast.reserve(?, ?, ?, NULL)`, 1, "drained-2", `[{"item":1001,"qty":1,"locations":[1]}]`)
	if !errors.As(err, &me) || me.Number != 9001 {
		t.Fatalf("prepared CALL of a drained tag: %v, want 9001", err)
	}
	if reserved("drained-2") {
		t.Fatal("the drained tag's prepared CALL reserved")
	}
	if err := reserve("search", "other-1"); err != nil {
		t.Fatalf("CALL of another tag while checkout is drained: %v", err)
	}
	m.api(t, http.MethodDelete, "/api/tags/checkout/drain")

	// A cap of 1, its slot held by an open checkout transaction: the CALL
	// waits for it and gives up after pool.acquire_timeout.
	m.api(t, http.MethodPut, "/api/tags/checkout/limit?max=1")
	holder, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"BEGIN", "/* conn_tag:checkout */ SELECT 1"} {
		if _, err := holder.ExecContext(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
	err = reserve("checkout", "capped-1")
	if !errors.As(err, &me) || me.Number != 9002 {
		t.Fatalf("CALL under a full cap: %v, want 9002", err)
	}
	if reserved("capped-1") {
		t.Fatal("the CALL refused under the cap reserved")
	}
	if _, err := holder.ExecContext(context.Background(), "COMMIT"); err != nil {
		t.Fatal(err)
	}
	holder.Close()
	for i := range 20 {
		if err := reserve("checkout", fmt.Sprint("ok-", i)); err != nil {
			t.Fatalf("CALL under the cap with its slot free: %v", err)
		}
	}
	m.api(t, http.MethodDelete, "/api/tags/checkout/limit")

	// The engine's time on checkout's reserves is checkout's.
	engine, _ := m.metric(t, `holdfast_tag_engine_seconds_total{tag="checkout"}`)
	calls, _ := m.metric(t, `holdfast_tag_statements_total{tag="checkout"}`)
	var own float64
	for _, tag := range []string{"holdfast:reserve", "holdfast:refill", "holdfast:stock"} {
		v, _ := m.metric(t, `holdfast_tag_exec_seconds_total{tag="`+tag+`"}`)
		own += v
	}
	search, _ := m.metric(t, `holdfast_tag_engine_seconds_total{tag="search"}`)
	t.Logf("engine seconds for checkout %.6f, search %.6f; holdfast:* exec seconds %.6f; checkout statements %v", engine, search, own, calls)
	if engine <= 0 || search <= 0 {
		t.Fatalf("engine time for the callers' tags: checkout %v, search %v", engine, search)
	}
	if engine+search > own {
		t.Fatalf("callers' engine time %v exceeds the engine's own exec time %v", engine+search, own)
	}
	if calls < 21 {
		t.Fatalf("checkout's CALLs counted as %v statements, want at least 21 (the holder's SELECT and 20 reserves)", calls)
	}
}

// On-call finds a runaway statement's shape in one instance's holders
// view, blocks it through another for the whole fleet with an expiry, and
// caps it fleet-wide: every instance refuses its statements (9007) within
// the propagation bound while other statements pass, the block lifts itself
// at its expiry, and under a cap of 2 across three loaded instances the
// database never runs more than 2 of them at once.
func TestFleetShapes(t *testing.T) {
	ms := fleetOf(t, 3)
	const runaway = "/* conn_tag:report_x */ SELECT SLEEP(1.5), 'runaway'"
	slow := ms[1].client(t)
	done := make(chan error, 1)
	go func() { _, err := slow.Exec(runaway); done <- err }()
	var shape string
	within(t, 2*time.Second, "the runaway statement in instance 1's holders view", func() bool {
		var ans struct {
			Holders []struct{ Statement, Shape string }
		}
		dbtest.FetchJSON(t, ms[1].admin+"/api/holders", &ans)
		for _, h := range ans.Holders {
			if strings.Contains(h.Statement, "SLEEP(?)") {
				shape = h.Shape
			}
		}
		return shape != ""
	})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ans := ms[0].api(t, http.MethodPut, "/api/shapes/"+shape+"/block?for=6s&reason=runaway-report")
	if !strings.Contains(ans, `"scope": "fleet"`) || !strings.Contains(ans, `"blocked": true`) {
		t.Fatalf("block answered %s", ans)
	}
	blocked := func(db *sql.DB, q string) bool {
		_, err := db.Exec(q)
		var me *mysql.MySQLError
		return errors.As(err, &me) && me.Number == 9007 && strings.Contains(me.Message, "runaway-report")
	}
	for i, m := range ms {
		db := m.client(t)
		took := within(t, 2*time.Second, fmt.Sprintf("instance %d blocks the shape", i), func() bool {
			return blocked(db, "SELECT SLEEP(0), 'other literals'")
		})
		t.Logf("instance %d: shape blocked %v after the change", i, took.Round(time.Millisecond))
		if _, err := db.Exec("SELECT SLEEP(0)"); err != nil {
			t.Fatalf("instance %d: a statement of another shape: %v", i, err)
		}
	}
	for i, m := range ms {
		db := m.client(t)
		within(t, 6*time.Second+2*time.Second, fmt.Sprintf("instance %d: the block expired", i), func() bool {
			return !blocked(db, runaway)
		})
	}

	// A fleet-wide cap of 2 on another shape, load on all three.
	// DO, not SELECT: autocommit SELECTs may be pipelined, one after
	// another on one connection, which would keep the peak below the cap.
	const capped = "DO SLEEP(0.05) /* capped */"
	h := fmt.Sprintf("%016x", shapeHash(capped))
	ctlBin := dbtest.Command(t, "./cmd/holdfastctl")
	ctl := func(m *fleetMember, args ...string) string {
		t.Helper()
		out, err := holdfastctl(t, ctlBin, append([]string{"-addr", m.admin}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("holdfastctl %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := ctl(ms[2], "shape", "limit", h, "2", "-reason", "hot-query"); !strings.Contains(out, "capped shape "+h+" at 2") {
		t.Fatalf("holdfastctl shape limit said %q", out)
	}
	for i, m := range ms {
		within(t, 2*time.Second, fmt.Sprintf("instance %d applies the shape's cap", i), func() bool {
			return strings.Contains(ctl(m, "shapes"), "cap ")
		})
	}
	root := dbtest.Root(t)
	var peak, ok atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			var n int64
			if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'DO SLEEP(0.05) /* capped */'").Scan(&n); err == nil && n > peak.Load() {
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
	deadline := time.Now().Add(5 * time.Second)
	for _, m := range ms {
		db := m.client(t)
		for range 3 {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					if _, err := db.Exec(capped); err == nil {
						ok.Add(1)
					}
				}
			})
		}
	}
	wg.Wait()
	close(stop)
	<-sampled
	t.Logf("cap 2 on a shape, 9 clients on 3 instances: peak %d at once, %d done", peak.Load(), ok.Load())
	if peak.Load() > 2 {
		t.Fatalf("%d statements of the capped shape ran at once across the fleet, over the cap 2", peak.Load())
	}
	if peak.Load() < 2 || ok.Load() == 0 {
		t.Fatalf("the capped shape reached %d at once (%d done), want its cap, 2", peak.Load(), ok.Load())
	}
}

func shapeHash(q string) uint64 { return sqlscan.Scan([]byte(q)).Shape }

// A route set through one instance applies on every instance: two holdfast
// processes in front of a private primary and replica; `holdfastctl route
// report replica_stale_ok` through the first sends the other's reads of
// tag report to the replica (counted on its Com_select) within the
// propagation bound, and lifting it brings them back to the primary.
func TestFleetRoutes(t *testing.T) {
	primary, replica := dbtest.StartReplicaPair(t)
	pdb, rdb := primary.Open(""), replica.Open("")
	defer pdb.Close()
	defer rdb.Close()
	if _, err := pdb.Exec("CREATE DATABASE rt; CREATE TABLE rt.t (id INT PRIMARY KEY, v INT); INSERT INTO rt.t VALUES (1, 10)"); err != nil {
		t.Fatal(err)
	}
	var ms []*fleetMember
	for i := range 2 {
		ms = append(ms, startOnPair(t, primary.Addr, "rt", []string{replica.Addr}, "routing:\n  check_interval: 50ms\n", i == 0))
	}
	client := ms[1].client(t)
	onReplica := func() bool {
		before := dbtest.ComSelect(t, rdb)
		var v int
		if err := client.QueryRow("/* conn_tag:report */ SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != 10 {
			t.Fatalf("read: %d %v", v, err)
		}
		return dbtest.ComSelect(t, rdb) > before
	}
	if onReplica() {
		t.Fatal("a read of tag report went to the replica before any route was set")
	}
	ctlBin := dbtest.Command(t, "./cmd/holdfastctl")
	out, err := holdfastctl(t, ctlBin, "-addr", ms[0].admin, "route", "report", "replica_stale_ok", "-reason", "offload").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "report reads: replica_stale_ok") {
		t.Fatalf("holdfastctl route: %v\n%s", err, out)
	}
	took := within(t, 2*time.Second+time.Second, "instance 1 routes report to the replica", onReplica)
	t.Logf("route in force on the other instance %v after the change", took.Round(time.Millisecond))
	if out, err := holdfastctl(t, ctlBin, "-addr", ms[0].admin, "route", "report", "off").CombinedOutput(); err != nil {
		t.Fatalf("holdfastctl route off: %v\n%s", err, out)
	}
	within(t, 3*time.Second, "instance 1 routes report to the primary again", func() bool { return !onReplica() })
}
