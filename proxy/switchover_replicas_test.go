package proxy

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// setProxy is holdfast in front of a private primary and two replicas
// (GTID replication), the primary reached through a relay standing in
// for the VIP an HA tool moves, every server listed in backend.replicas
// (a former primary is a replica candidate too), tag "r" routed by the
// replica policy (read-your-writes). Each server holds, in sw.who, one row
// of its own server_id written outside the binary log: a routed read of
// it tells which server served it.
type setProxy struct {
	*testProxy
	servers []*dbtest.Private // server_id 1 (the primary at start), 2, 3
	roots   []*sql.DB         // root on each, database sw
	vip     *netrelay.Relay
}

// whoRead is a routed read of sw.who and what it returned.
const whoRead = "/* conn_tag:r */ SELECT id FROM who"

// startSetProxy starts the servers and holdfast. slaveMonitor says whether
// holdfast's own account (the topology checks') may read whom a server
// replicates from.
func startSetProxy(t *testing.T, slaveMonitor bool, mutate ...func(c *config.Config)) *setProxy {
	t.Helper()
	primary, replicas := dbtest.StartReplicaSet(t, 2)
	servers := append([]*dbtest.Private{primary}, replicas...)
	grant := "GRANT CONNECTION ADMIN ON *.* TO hf"
	if slaveMonitor {
		grant = "GRANT SLAVE MONITOR, CONNECTION ADMIN ON *.* TO hf"
	}
	pdb := primary.Open("")
	for _, q := range []string{
		"CREATE DATABASE sw", "CREATE TABLE sw.t (id BIGINT PRIMARY KEY, w INT)", "CREATE TABLE sw.who (id INT)",
		"CREATE USER app IDENTIFIED BY 'app'", "GRANT SELECT, INSERT, UPDATE, DELETE ON sw.* TO app",
		"CREATE USER hf IDENTIFIED BY 'hf'", grant,
	} {
		if _, err := pdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	pdb.Close()
	p := &setProxy{servers: servers}
	for i, s := range servers {
		db := s.Open("sw")
		t.Cleanup(func() { db.Close() })
		p.roots = append(p.roots, db)
		if i > 0 {
			caughtUp(t, p.roots[0], db)
		}
		c, err := db.Conn(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(t.Context(), "SET sql_log_bin = 0"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.ExecContext(t.Context(), "INSERT INTO who VALUES (@@server_id)"); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}
	p.vip = dbtest.StartRelay(t, primary.Addr, 0)
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", ""
	cfg.Backend.Address = p.vip.Addr().String()
	cfg.Backend.User, cfg.Backend.Password, cfg.Backend.Database = "app", "app", "sw"
	for _, s := range servers {
		cfg.Backend.Replicas = append(cfg.Backend.Replicas, config.Replica{Address: s.Addr})
	}
	cfg.Fleet.User, cfg.Fleet.Password = "hf", "hf"
	cfg.Users = []config.User{{Name: "app", Password: "app"}}
	cfg.Routing.CheckInterval = 50 * time.Millisecond
	cfg.Routing.MaxReplicaLag = 30 * time.Second // a stale replica stays in service: only its source keeps it out
	cfg.Routing.Tags = map[string]string{"r": "replica"}
	cfg.Pool.Min, cfg.Pool.Max = 0, 8
	cfg.Pool.AcquireTimeout = 5 * time.Second
	for _, m := range mutate {
		m(&cfg)
	}
	p.testProxy = serveProxy(t, cfg, testLogger(t))
	p.db, p.user = "sw", "app"
	srv := p.srv
	waitFor(t, "the primary known", func() bool { return srv.Topology().State == "primary" })
	return p
}

// replica returns the state of the replica at addr.
func (p *setProxy) replica(t *testing.T, addr string) ReplicaState {
	t.Helper()
	for _, r := range p.srv.Replicas() {
		if r.Address == addr {
			return r
		}
	}
	t.Fatalf("no replica %s", addr)
	return ReplicaState{}
}

// up reports whether the replica of server i (0-based) is in service.
func (p *setProxy) up(t *testing.T, i int) bool { return p.replica(t, p.servers[i].Addr).Up }

// read is one routed read: which server_id served it.
type read struct {
	server     int
	start, end time.Time
	err        error
}

// readers runs n clients doing routed reads of sw.who until stop is
// closed, and returns every read.
func readers(t *testing.T, db *sql.DB, n int, stop <-chan struct{}) func() []read {
	var mu sync.Mutex
	var out []read
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := read{start: time.Now()}
				r.err = db.QueryRow(whoRead).Scan(&r.server)
				r.end = time.Now()
				mu.Lock()
				out = append(out, r)
				mu.Unlock()
				if r.err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return func() []read {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return out
	}
}

// rywCheck is one write and the routed read of it that followed, on one
// client connection.
type rywCheck struct {
	at       time.Time // when the write began
	id       int64
	server   int // who served the read
	seen     int // rows of id the read saw
	writeErr error
	readErr  error
}

// writeThenRead inserts row id through c (on the primary) and reads it
// back by a routed read on the same connection.
func writeThenRead(ctx context.Context, c *sql.Conn, id int64) rywCheck {
	k := rywCheck{at: time.Now(), id: id}
	if _, k.writeErr = c.ExecContext(ctx, "INSERT INTO t VALUES (?, 0)", id); k.writeErr != nil {
		return k
	}
	k.readErr = c.QueryRowContext(ctx, fmt.Sprintf("/* conn_tag:r */ SELECT w.id, (SELECT COUNT(*) FROM t WHERE t.id = %d) FROM who w", id)).Scan(&k.server, &k.seen)
	return k
}

// Reads during and after a planned switchover (server 1 to server 2; the
// HA tool leaves server 3 replicating from server 1, which itself
// replicates from server 2 without passing its writes on): once holdfast
// has seen the new primary, no read is served by server 3, which does not
// replicate from it; the former primary serves reads again once it
// replicates from the new one; server 3 does once it is pointed at the new
// primary. Read-your-writes holds throughout: a session's read after its
// write sees it, before, across and after the switch, also when the
// former primary, in service, has stopped applying (its positions are
// compared with the new primary's GTIDs).
func TestSwitchoverReplicaReadsFollowPrimary(t *testing.T) {
	p := startSetProxy(t, true)
	waitFor(t, "servers 2 and 3 in service", func() bool { return p.up(t, 1) && p.up(t, 2) && !p.up(t, 0) })
	db := p.open(t)
	db.SetMaxOpenConns(16)
	stop := make(chan struct{})
	collect := readers(t, db, 3, stop)

	// A session that writes and reads its writes back, in a loop.
	var mu sync.Mutex
	var checks []rywCheck
	var next atomic.Int64
	rywStop, rywDone := make(chan struct{}), make(chan struct{})
	sess := p.conn(t)
	go func() {
		defer close(rywDone)
		for {
			select {
			case <-rywStop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			k := writeThenRead(ctx, sess, next.Add(1))
			cancel()
			mu.Lock()
			checks = append(checks, k)
			mu.Unlock()
			if k.writeErr != nil || k.readErr != nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}()
	waitFor(t, "writes and reads before the switch", func() bool { return next.Load() > 20 })

	// The moment holdfast has seen that server 1 is no longer the primary
	// and taken server 3 out (no primary, then server 2 the primary):
	// every read that starts later must not reach server 3 until it is
	// pointed at server 2. aOut is the last moment server 1 was seen out
	// of service after that: reads that start before it must not reach
	// server 1 either (it is back only once it replicates from server 2).
	var c3Out, aOut atomic.Pointer[time.Time]
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			tp := p.srv.Topology()
			up := map[string]bool{}
			for _, r := range p.srv.Replicas() {
				up[r.Address] = r.Up
			}
			now := time.Now()
			if c3Out.Load() == nil && (tp.State != "primary" || tp.PrimaryChanges == 1) && !up[p.servers[2].Addr] {
				c3Out.Store(&now)
			}
			if c3Out.Load() != nil {
				if up[p.servers[0].Addr] {
					return
				}
				aOut.Store(&now)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	steps, err := dbtest.Switchover(t.Context(), p.servers[0], p.servers[1], func() { p.vip.Retarget(p.servers[1].Addr) })
	if err != nil {
		close(stop)
		t.Fatal(err)
	}
	waitFor(t, "server 3 out of service under the new primary", func() bool { return c3Out.Load() != nil })
	out := *c3Out.Load()
	waitFor(t, "the former primary in service", func() bool { return p.up(t, 0) })
	<-watchDone
	if aOut.Load() == nil { // server 1 was back by the first poll that saw the switch
		aOut.Store(&out)
	}
	if p.srv.Topology().PrimaryChanges != 1 {
		t.Fatalf("topology after the switchover: %+v", p.srv.Topology())
	}
	time.Sleep(300 * time.Millisecond)
	if r := p.replica(t, p.servers[2].Addr); r.Up {
		t.Fatalf("server 3, still replicating from the former primary, is in service: %+v", r)
	} else {
		t.Logf("server 3 out of service: %s", r.Reason)
	}
	repointed := time.Now()
	if err := p.servers[2].Follow(p.servers[1]); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "server 3 in service once it replicates from the new primary", func() bool { return p.up(t, 2) })
	inAgain := time.Now()
	time.Sleep(300 * time.Millisecond)

	// The former primary stops applying: still in service (within the
	// lag bound), it lacks every write the session makes from now on.
	if _, err := p.roots[0].Exec("STOP SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	stalled := time.Now()
	time.Sleep(500 * time.Millisecond)
	close(rywStop)
	<-rywDone
	close(stop)
	reads := collect()
	if !p.up(t, 0) {
		t.Logf("the former primary left service after its SQL thread stopped: %s", p.replica(t, p.servers[0].Addr).Reason)
	}

	byServer := func(from, to time.Time) map[int]int {
		m := map[int]int{}
		for _, r := range reads {
			if r.err == nil && !r.start.Before(from) && r.start.Before(to) {
				m[r.server]++
			}
		}
		return m
	}
	for _, r := range reads {
		if r.err == nil && r.server == 3 && r.start.After(out) && r.start.Before(repointed) {
			t.Errorf("a read that began %v after holdfast saw the switch was served by server 3, which replicates from the former primary", r.start.Sub(out))
		}
		if a := aOut.Load(); a != nil && r.err == nil && r.server == 1 && r.start.After(out) && r.start.Before(*a) {
			t.Errorf("a read that began %v after holdfast saw the switch was served by the former primary before it replicated from the new one", r.start.Sub(out))
		}
	}
	before, during, between, after := byServer(time.Time{}, steps.Start), byServer(out, *aOut.Load()), byServer(*aOut.Load(), repointed), byServer(inAgain, stalled)
	if between[1] == 0 {
		t.Errorf("the former primary, replicating from the new one, served no read after the switch: %v", between)
	}
	if after[3] == 0 {
		t.Errorf("server 3, replicating from the new primary, served no read: %v", after)
	}
	errs := 0
	for _, r := range reads {
		if r.err != nil {
			errs++
			if r.start.After(out) {
				t.Errorf("a read that began after the switch failed: %v", r.err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	ok, failed := 0, 0
	for _, k := range checks {
		if k.writeErr != nil || k.readErr != nil {
			failed++
			continue
		}
		ok++
		if k.seen != 1 {
			t.Errorf("write %d then read by the same session: the read, served by server %d, saw %d rows", k.id, k.server, k.seen)
		}
	}
	stalledBy := map[int]int{}
	for _, k := range checks {
		if k.writeErr == nil && k.readErr == nil && k.at.After(stalled) {
			stalledBy[k.server]++
		}
	}
	if stalledBy[1] > 0 {
		t.Errorf("%d reads of the session's own writes were served by the former primary after it stopped applying", stalledBy[1])
	}
	if len(stalledBy) == 0 {
		t.Error("no write was read back after the former primary stopped applying")
	}
	if ok == 0 {
		t.Fatal("no write was read back")
	}
	t.Logf("reads by server: before the switch %v, from when holdfast saw it to the former primary's return %v (over %v), then %v, after server 3 was repointed %v; %d reads failed (during the switch); read-your-writes: %d checked, %d failed writes or reads (during the switch), reads of its writes by server after the former primary stopped applying %v",
		before, during, aOut.Load().Sub(out).Round(time.Millisecond), between, after, errs, ok, failed, stalledBy)
}

// A replica whose IO thread is connecting to another server than the
// primary gets no reads, though it still shows the primary's server_id
// (MariaDB keeps the last source's Master_Server_Id until it connects):
// here server 3 is pointed at an address where nothing listens.
func TestReplicaConnectingElsewhereGetsNoReads(t *testing.T) {
	p := startSetProxy(t, true)
	waitFor(t, "servers 2 and 3 in service", func() bool { return p.up(t, 1) && p.up(t, 2) })
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().(*net.TCPAddr)
	dead.Close()
	for _, q := range []string{"STOP SLAVE", "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=" + strconv.Itoa(deadAddr.Port), "START SLAVE"} {
		if _, err := p.roots[2].Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "server 3 connecting to nowhere", func() bool {
		io, _, _, err := dbtest.SlaveThreads(p.roots[2])
		return err == nil && io == "Connecting"
	})
	n := p.srv.Topology().Checks
	waitFor(t, "two checks", func() bool { return p.srv.Topology().Checks >= n+2 })
	if r := p.replica(t, p.servers[2].Addr); r.Up {
		t.Fatalf("server 3, connecting to %v, is in service", deadAddr)
	} else {
		t.Logf("server 3: %s", r.Reason)
	}
	db := p.open(t)
	for range 40 {
		var id int
		if err := db.QueryRow(whoRead).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id == 3 {
			t.Fatal("a read was served by server 3, which replicates from an address that is not the primary's")
		}
	}
}

// Without SLAVE MONITOR holdfast cannot tell whom a server replicates
// from, so no replica gets reads: after a planned switchover that leaves
// server 3 replicating from the former primary, no read is served by it
// (nor by any other replica), and the reason says which grant is missing.
func TestReplicaReadsNeedReplicationStatus(t *testing.T) {
	p := startSetProxy(t, false)
	waitFor(t, "the replicas checked", func() bool { return p.replica(t, p.servers[2].Addr).Reason != "not checked yet" })
	if _, err := dbtest.Switchover(t.Context(), p.servers[0], p.servers[1], func() { p.vip.Retarget(p.servers[1].Addr) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new primary known", func() bool {
		tp := p.srv.Topology()
		return tp.State == "primary" && tp.PrimaryChanges == 1
	})
	// Two more checks: the replicas' states follow the new primary.
	n := p.srv.Topology().Checks
	waitFor(t, "two checks", func() bool { return p.srv.Topology().Checks >= n+2 })
	for i := range 3 {
		if r := p.replica(t, p.servers[i].Addr); r.Up {
			t.Errorf("server %d is in service though whom it replicates from cannot be read: %+v", i+1, r)
		}
	}
	t.Logf("server 3: %s", p.replica(t, p.servers[2].Addr).Reason)
	db := p.open(t)
	for range 40 {
		var id int
		if err := db.QueryRow(whoRead).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if id != 2 {
			t.Fatalf("a read was served by server %d; want every read on the primary, server 2", id)
		}
	}
}

// gatherTopology reads the topology's metrics (as holdfast's /metrics
// serves them: cmd/holdfast registers TopologyCollector).
func gatherTopology(t *testing.T, srv *Server) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(srv.TopologyCollector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// A split brain (two writable servers that replicate from no one):
// holdfast writes to neither, statements fail (or wait) and nothing is
// written on either server; /api/topology says split_brain for both and
// holdfast_failover_split_brain is 1. When one turns read-only, writes go
// to the other again.
func TestSplitBrainWritesNowhere(t *testing.T) {
	p := startSetProxy(t, true, func(c *config.Config) {
		c.Pool.AcquireTimeout = time.Second
		c.Failover.Hold = 500 * time.Millisecond // held past it: 9010
	})
	db := p.open(t)
	if _, err := db.Exec("INSERT INTO t VALUES (1, 0)"); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, p.roots[0], p.roots[1])
	// Server 2 is promoted while server 1 stays writable.
	if err := p.servers[1].Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the split brain seen", func() bool { return p.srv.Topology().State == "split_brain" })
	count := func(i int) int {
		var n int
		if err := p.roots[i].QueryRow("SELECT COUNT(*) FROM t").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	c1, c2 := count(0), count(1)
	var errs int
	for i := range 5 {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		_, err := db.ExecContext(ctx, "INSERT INTO t VALUES (?, 0)", 100+i)
		cancel()
		if err != nil {
			var me *mysql.MySQLError
			if !errors.As(err, &me) || me.Number != 9010 {
				t.Errorf("a write during the split brain: %v; want 9010, the primary is switching", err)
			}
			errs++
		}
	}
	if errs != 5 {
		t.Errorf("%d of 5 writes during the split brain succeeded", 5-errs)
	}
	if a, b := count(0), count(1); a != c1 || b != c2 {
		t.Errorf("rows during the split brain: server 1 %d → %d, server 2 %d → %d; want no change", c1, a, c2, b)
	}
	adm := p.admin(t)
	resp, err := http.Get(adm.URL + "/api/topology")
	if err != nil {
		t.Fatal(err)
	}
	var tp Topology
	err = json.NewDecoder(resp.Body).Decode(&tp)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, s := range tp.Servers {
		roles[s.Address] = s.Role
	}
	if tp.State != "split_brain" || roles[p.servers[0].Addr] != "split_brain" || roles[p.servers[1].Addr] != "split_brain" || tp.SplitBrains != 1 {
		t.Errorf("/api/topology: state %s, roles %v, split brains %d; want split_brain for servers 1 and 2", tp.State, roles, tp.SplitBrains)
	}
	mf := gatherTopology(t, p.srv)
	if v := metric(mf, "holdfast_failover_split_brain", nil); v != 1 {
		t.Errorf("holdfast_failover_split_brain %v, want 1", v)
	}
	if v := metric(mf, "holdfast_backend_role", map[string]string{"address": p.servers[1].Addr, "role": "split_brain"}); v != 1 {
		t.Errorf("holdfast_backend_role{role=split_brain} of server 2: %v, want 1", v)
	}
	for i := range 3 {
		if p.up(t, i) {
			t.Errorf("server %d is in service for reads during the split brain", i+1)
		}
	}
	// Server 1 turns read-only: server 2 is the primary; writes go there.
	if err := p.servers[0].SetReadOnly(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	p.vip.Retarget(p.servers[1].Addr)
	waitFor(t, "server 2 the primary", func() bool { return p.srv.Topology().State == "primary" })
	waitFor(t, "a write accepted again", func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		_, err := db.ExecContext(ctx, "INSERT INTO t VALUES (200, 0)")
		return err == nil
	})
	if a, b := count(0), count(1); a != c1 || b != c2+1 {
		t.Errorf("rows after the split brain: server 1 %d → %d, server 2 %d → %d; want the write on server 2 only", c1, a, c2, b)
	}
	if v := metric(gatherTopology(t, p.srv), "holdfast_failover_split_brain", nil); v != 0 {
		t.Errorf("holdfast_failover_split_brain %v after it ended, want 0", v)
	}
}

// One server listed at two addresses (its own, and another that leads to
// it, as an address the backend name resolves to may) gets reads as one
// replica: the second record says it is the same server.
func TestReplicaSameServerTwice(t *testing.T) {
	var alias string
	p := startSetProxy(t, true, func(c *config.Config) {
		_, port, _ := net.SplitHostPort(c.Backend.Replicas[2].Address)
		alias = net.JoinHostPort("localhost", port)
		c.Backend.Replicas = append(c.Backend.Replicas, config.Replica{Address: alias})
	})
	waitFor(t, "server 3 checked at both addresses", func() bool {
		a, b := p.replica(t, p.servers[2].Addr), p.replica(t, alias)
		return a.Reason != "not checked yet" && b.Reason != "not checked yet" && (a.Up || b.Up)
	})
	a, b := p.replica(t, p.servers[2].Addr), p.replica(t, alias)
	if a.Up == b.Up {
		t.Fatalf("server 3 at %s: %+v; at %s: %+v; want one of them in service", p.servers[2].Addr, a, alias, b)
	}
	t.Logf("%s: in service %v %s; %s: in service %v %s", a.Address, a.Up, a.Reason, b.Address, b.Up, b.Reason)
}

// The primary killed, server 2 promoted a moment later, server 3 left
// connecting to the dead one (it still shows its server_id): from the
// check that finds server 2 the primary, no read is served by server 3,
// until the HA tool points it at server 2; then it gets reads again.
func TestReplicaReadsAfterPrimaryKilled(t *testing.T) {
	p := startSetProxy(t, true, func(c *config.Config) {
		c.Pool.AcquireTimeout = time.Second
		c.Failover.Hold = 500 * time.Millisecond // held past it: 9010
	})
	waitFor(t, "servers 2 and 3 in service", func() bool { return p.up(t, 1) && p.up(t, 2) })
	db := p.open(t)
	db.SetMaxOpenConns(8)
	stop := make(chan struct{})
	collect := readers(t, db, 3, stop)
	time.Sleep(100 * time.Millisecond)
	p.servers[0].Kill()
	waitFor(t, "no primary", func() bool { return p.srv.Topology().State == "no_primary" })
	if err := p.servers[1].Promote(t.Context()); err != nil {
		close(stop)
		t.Fatal(err)
	}
	p.vip.Retarget(p.servers[1].Addr)
	var out time.Time
	waitFor(t, "server 2 the primary, server 3 out", func() bool {
		tp := p.srv.Topology()
		out = time.Now()
		return tp.State == "primary" && tp.PrimaryChanges == 1 && !p.up(t, 2)
	})
	time.Sleep(300 * time.Millisecond)
	t.Logf("server 3: %s", p.replica(t, p.servers[2].Addr).Reason)
	repointed := time.Now()
	if err := p.servers[2].Follow(p.servers[1]); err != nil {
		close(stop)
		t.Fatal(err)
	}
	waitFor(t, "server 3 in service again", func() bool { return p.up(t, 2) })
	inAgain := time.Now()
	time.Sleep(300 * time.Millisecond)
	close(stop)
	by := map[string]int{}
	for _, r := range collect() {
		switch {
		case r.err != nil:
			by["failed"]++
			if r.start.After(out) {
				t.Errorf("a read that began after the new primary was known failed: %v", r.err)
			}
		case r.start.After(out) && r.start.Before(repointed):
			by["while 3 was out: "+strconv.Itoa(r.server)]++
			if r.server != 2 {
				t.Errorf("a read that began %v after server 2 was known the primary was served by server %d", r.start.Sub(out), r.server)
			}
		case r.start.After(inAgain):
			by["after 3 was repointed: "+strconv.Itoa(r.server)]++
		}
	}
	if by["after 3 was repointed: 3"] == 0 {
		t.Errorf("server 3 served no read after it was pointed at the new primary: %v", by)
	}
	t.Logf("reads: %v", by)
}
