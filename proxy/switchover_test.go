package proxy

import (
	"database/sql"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// switchoverProxy is holdfast in front of a private primary and replica
// (GTID replication), reached through a relay that stands in for the VIP
// or name an HA tool moves; holdfast's backend account is an ordinary one
// (no SUPER: read_only refuses its writes with 1290), its own account
// may read replication status (SLAVE MONITOR).
type switchoverProxy struct {
	*testProxy
	primary, replica *dbtest.Private
	vip              *netrelay.Relay
}

func startSwitchoverProxy(t *testing.T, mutate ...func(c *config.Config, primary, replica *dbtest.Private)) *switchoverProxy {
	t.Helper()
	primary, replica := dbtest.StartReplicaPair(t)
	pdb := primary.Open("")
	defer pdb.Close()
	for _, q := range []string{
		"CREATE DATABASE sw", "CREATE TABLE sw.t (id BIGINT PRIMARY KEY, w INT)",
		"CREATE USER app IDENTIFIED BY 'app'", "GRANT SELECT, INSERT, UPDATE, DELETE ON sw.* TO app",
		"CREATE USER hf IDENTIFIED BY 'hf'", "GRANT SLAVE MONITOR, CONNECTION ADMIN ON *.* TO hf",
	} {
		if _, err := pdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	vip := dbtest.StartRelay(t, primary.Addr, 0)
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", ""
	cfg.Backend.Address = vip.Addr().String()
	cfg.Backend.User, cfg.Backend.Password, cfg.Backend.Database = "app", "app", "sw"
	cfg.Fleet.User, cfg.Fleet.Password = "hf", "hf"
	cfg.Users = []config.User{{Name: "app", Password: "app"}}
	cfg.Routing.CheckInterval = 50 * time.Millisecond
	cfg.Pool.Min, cfg.Pool.Max = 0, 4
	// Longer than the switchover: a borrower that finds only the former
	// primary behind the address waits for it to move.
	cfg.Pool.AcquireTimeout = 30 * time.Second
	for _, m := range mutate {
		m(&cfg, primary, replica)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &switchoverProxy{testProxy: &testProxy{srv: srv, addr: ln.Addr().String(), db: "sw", user: "app", cfg: cfg},
		primary: primary, replica: replica, vip: vip}
}

// ownAccount gives holdfast an account of its own (fleet.user), so that
// its own connections (the topology check's, kills') are not counted as
// the backend account's.
func ownAccount(t testing.TB, c *config.Config) {
	u := dbtest.NewUser(t, c.Backend.Database)
	c.Fleet.User, c.Fleet.Password = u, u
}

// answer is one statement's outcome as a writer saw it.
type answer struct {
	id         int64
	start, end time.Time
	code       uint16 // 0: success; 2013 and the like: the driver's
	err        error
}

// writers runs n clients inserting rows through holdfast, autocommit,
// until stop is closed, and returns every answer.
func writers(t *testing.T, db *sql.DB, n int, stop <-chan struct{}, next *atomic.Int64) func() []answer {
	var mu sync.Mutex
	var out []answer
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := answer{id: next.Add(1), start: time.Now()}
				_, a.err = db.Exec("INSERT INTO t VALUES (?, ?)", a.id, w)
				a.end = time.Now()
				var me *mysql.MySQLError
				if errors.As(a.err, &me) {
					a.code = me.Number
				} else if a.err != nil {
					a.code = 2013
				}
				mu.Lock()
				out = append(out, a)
				mu.Unlock()
				if a.err != nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return func() []answer {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// A planned switchover under a write load, done as an HA tool does it:
// the primary turns read-only, its replica catches up and is promoted, the
// old primary replicates from it, the VIP moves. holdfast retires the old
// primary at once (before the VIP moves): its connections close, idle ones
// at once, and none is lent again, so no statement that starts after that
// is answered 1290 by it; once the new primary is known every write
// succeeds, and every acknowledged write is on the new primary.
// (Statements in flight at the flip may still fail until the statement
// path holds and retries them.)
func TestSwitchoverRetiresFormerPrimary(t *testing.T) {
	p := startSwitchoverProxy(t)
	db := p.open(t)
	db.SetMaxOpenConns(8)
	waitFor(t, "the primary known through the VIP", func() bool {
		tp := p.srv.Topology()
		return tp.State == "primary" && slices.Equal(tp.PrimaryAddresses, []string{p.vip.Addr().String()})
	})
	former := p.srv.Topology().Primary
	// What holdfast learns of the primary is learned again from the new
	// one: a statement limit of its own tells which it learned.
	rdb := p.replica.Open("")
	defer rdb.Close()
	if _, err := rdb.Exec("SET GLOBAL max_prepared_stmt_count = 4321"); err != nil {
		t.Fatal(err)
	}
	if n := p.srv.primary.maxPrepared.Load(); n == 4321 {
		t.Fatal("the limit was learned from the replica before the switchover")
	}
	var next atomic.Int64
	stop := make(chan struct{})
	collect := writers(t, db, 6, stop, &next)
	waitFor(t, "writes through holdfast", func() bool { return next.Load() > 50 })

	// The retirement as the test sees it: the first poll that finds it.
	var retiredAt, switchedAt atomic.Pointer[time.Time]
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for retiredAt.Load() == nil || switchedAt.Load() == nil {
			tp := p.srv.Topology()
			now := time.Now()
			if retiredAt.Load() == nil && slices.Contains(tp.Retired, former) {
				retiredAt.Store(&now)
			}
			if switchedAt.Load() == nil && tp.State == "primary" && tp.Primary != former {
				switchedAt.Store(&now)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	steps, err := dbtest.Switchover(t.Context(), p.primary, p.replica, func() { p.vip.Retarget(p.replica.Addr) })
	if err != nil {
		close(stop)
		t.Fatal(err)
	}
	waitFor(t, "the new primary known", func() bool { return switchedAt.Load() != nil })
	end := *switchedAt.Load()
	time.Sleep(500 * time.Millisecond) // writes after the switch
	close(stop)
	answers := collect()
	<-watchDone

	if retiredAt.Load() == nil || !retiredAt.Load().Before(steps.Moved) {
		t.Fatalf("the former primary retired at %v, the VIP moved at %v: it must be retired once it is read-only, before the VIP moves", retiredAt.Load(), steps.Moved)
	}
	retired := *retiredAt.Load()
	okAfter := 0
	for _, a := range answers {
		if a.code == codeReadOnly && a.start.After(retired) {
			t.Errorf("insert %d began %v after the former primary was retired and was answered 1290: %v", a.id, a.start.Sub(retired), a.err)
		}
		if a.start.After(end) {
			if a.err != nil {
				t.Errorf("insert %d began after the new primary was known and failed: %v", a.id, a.err)
			} else {
				okAfter++
			}
		}
	}
	if okAfter == 0 {
		t.Fatal("no write succeeded after the switchover")
	}
	tp := p.srv.Topology()
	if tp.PrimaryChanges != 1 || !slices.Equal(tp.PrimaryAddresses, []string{p.vip.Addr().String()}) || !slices.Contains(tp.Retired, former) {
		t.Fatalf("topology after the switchover: %+v", tp)
	}
	waitFor(t, "the new primary's statement limit learned", func() bool { return p.srv.primary.maxPrepared.Load() == 4321 })
	// Nothing of the application's account is left on the former primary:
	// idle connections closed at once, busy ones on release.
	odb := p.primary.Open("")
	defer odb.Close()
	waitFor(t, "no connection of holdfast's pool left on the former primary", func() bool {
		var n int
		return odb.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = 'app'").Scan(&n) == nil && n == 0
	})
	// Every acknowledged write is on the new primary.
	ndb := p.replica.Open("sw")
	defer ndb.Close()
	have := map[int64]bool{}
	rows, err := ndb.Query("SELECT id FROM t")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	lost, codes := 0, map[uint16]int{}
	for _, a := range answers {
		codes[a.code]++
		if a.err == nil && !have[a.id] {
			lost++
		}
	}
	if lost > 0 {
		t.Fatalf("%d acknowledged writes are not on the new primary", lost)
	}
	t.Logf("%d inserts, answers by code %v; switch %v (read-only to VIP moved), retired %v after read-only, new primary known %v after the VIP moved; %d retired connections, %d retired dials",
		len(answers), codes, steps.Moved.Sub(steps.Start).Round(time.Millisecond), retired.Sub(steps.ReadOnly).Round(time.Millisecond),
		end.Sub(steps.Moved).Round(time.Millisecond), tp.RetiredConnections, tp.RetiredDials)
}

// A KILL QUERY for a statement still running on the former primary after
// the VIP moved reaches it there: the VIP now leads to the new primary,
// whose thread of that id must not be killed, so holdfast dials the
// address its topology check reached the former primary at (here
// backend.replicas lists both servers).
func TestKillReachesFormerPrimaryAfterSwitchover(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, primary, replica *dbtest.Private) {
		c.Backend.Replicas = []config.Replica{{Address: primary.Addr}, {Address: replica.Addr}}
	})
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	db := p.open(t)
	sleeper, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer sleeper.Close()
	var id int64
	if err := sleeper.QueryRowContext(t.Context(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := sleeper.ExecContext(t.Context(), "/* holdfast:primary */ SELECT SLEEP(30)")
		done <- err
	}()
	odb := p.primary.Open("")
	defer odb.Close()
	waitFor(t, "the sleep running on the primary", func() bool {
		var n int
		return odb.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%SLEEP(30)%' AND INFO NOT LIKE '%PROCESSLIST%'").Scan(&n) == nil && n == 1
	})
	if _, err := dbtest.Switchover(t.Context(), p.primary, p.replica, func() { p.vip.Retarget(p.replica.Addr) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new primary known", func() bool { return p.srv.Topology().PrimaryChanges == 1 })
	if _, err := db.ExecContext(t.Context(), fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Logf("the sleep ended after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(15 * time.Second):
		t.Fatal("the KILL QUERY did not reach the statement on the former primary")
	}
}
