package proxy

import (
	"database/sql"
	"errors"
	"fmt"
	"maps"
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
	tp := serveProxy(t, cfg, testLogger(t))
	tp.db, tp.user = "sw", "app"
	return &switchoverProxy{testProxy: tp,
		primary: primary, replica: replica, vip: vip}
}

// finishSwitchover does the rest of a switchover whose primary the test
// made read-only itself: the replica catches up and is promoted, the
// former primary follows it, the VIP moves, and holdfast is asked to check
// (its routing.check_interval may be long) until it knows the new primary.
func (p *switchoverProxy) finishSwitchover(t *testing.T) {
	t.Helper()
	odb, ndb := p.primary.Open(""), p.replica.Open("")
	defer odb.Close()
	defer ndb.Close()
	if err := dbtest.CaughtUp(t.Context(), odb, ndb, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.replica.Promote(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := p.primary.FollowDemoted(p.replica); err != nil {
		t.Fatal(err)
	}
	p.vip.Retarget(p.replica.Addr)
	waitFor(t, "the new primary known", func() bool {
		p.srv.NoteReadOnly()
		return p.srv.Topology().PrimaryChanges == 1
	})
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
// succeeds, and every acknowledged write is on the new primary (see
// TestSwitchoverHoldsStatements for what the statements in flight at the
// flip see).
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

// codeOf is the MySQL error number and SQLSTATE of err (0 and "" when
// it is not a server's error).
func codeOf(err error) (uint16, string) {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number, string(me.SQLState[:])
	}
	return 0, ""
}

// txnAnswer is one short transaction's outcome as a writer saw it.
type txnAnswer struct {
	ids        [2]int64
	start, end time.Time
	committed  bool
	err        error
}

// txnWriters runs n clients each running short transactions of two
// inserts through holdfast until stop is closed, and returns every
// transaction's outcome.
func txnWriters(db *sql.DB, n int, stop <-chan struct{}, next *atomic.Int64) func() []txnAnswer {
	var mu sync.Mutex
	var out []txnAnswer
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
				a := txnAnswer{ids: [2]int64{next.Add(1), next.Add(1)}, start: time.Now()}
				tx, err := db.Begin()
				if err == nil {
					for _, id := range a.ids {
						if _, err = tx.Exec("INSERT INTO t VALUES (?, ?)", id, 100+w); err != nil {
							break
						}
						time.Sleep(time.Millisecond) // a transaction that spans the flip now and then
					}
					if err == nil {
						err = tx.Commit()
						a.committed = err == nil
					} else {
						_ = tx.Rollback()
					}
				}
				a.err, a.end = err, time.Now()
				mu.Lock()
				out = append(out, a)
				mu.Unlock()
			}
		}()
	}
	return func() []txnAnswer {
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(out)
	}
}

// rowsOn reads the ids in sw.t on server p.
func rowsOn(t *testing.T, p *dbtest.Private) map[int64]int {
	t.Helper()
	db := p.Open("sw")
	defer db.Close()
	rows, err := db.Query("SELECT id FROM t")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	have := map[int64]int{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return have
}

// switchUnderLoad runs autocommit and transaction writers through p, does
// a planned switchover (before, when not nil, runs first and after once
// the new primary is known), and returns what the writers saw, when the
// switch began, and when holdfast knew the new primary.
func switchUnderLoad(t *testing.T, p *switchoverProxy, before, after func()) (auto []answer, txns []txnAnswer, steps dbtest.SwitchoverSteps, known time.Time) {
	db := p.open(t)
	db.SetMaxOpenConns(12)
	waitFor(t, "the primary known through the VIP", func() bool { return p.srv.Topology().State == "primary" })
	former := p.srv.Topology().Primary
	var next atomic.Int64
	stop := make(chan struct{})
	collect := writers(t, db, 4, stop, &next)
	collectTxn := txnWriters(db, 2, stop, &next)
	waitFor(t, "writes through holdfast", func() bool { return next.Load() > 100 })
	if before != nil {
		before()
	}
	steps, err := dbtest.Switchover(t.Context(), p.primary, p.replica, func() { p.vip.Retarget(p.replica.Addr) })
	if err != nil {
		close(stop)
		t.Fatal(err)
	}
	waitFor(t, "the new primary known", func() bool {
		tp := p.srv.Topology()
		return tp.State == "primary" && tp.Primary != former
	})
	known = time.Now()
	if after != nil {
		after()
	}
	time.Sleep(300 * time.Millisecond) // writes after the switch
	close(stop)
	return collect(), collectTxn(), steps, known
}

// checkNoneLost fails the test when an acknowledged write is not on the
// new primary exactly once, or a rolled-back transaction's is.
func checkNoneLost(t *testing.T, p *switchoverProxy, auto []answer, txns []txnAnswer) {
	t.Helper()
	have := rowsOn(t, p.replica)
	for _, a := range auto {
		if a.err == nil && have[a.id] != 1 {
			t.Errorf("acknowledged insert %d is on the new primary %d times", a.id, have[a.id])
		}
	}
	for _, x := range txns {
		for _, id := range x.ids {
			switch {
			case x.committed && have[id] != 1:
				t.Errorf("committed insert %d is on the new primary %d times", id, have[id])
			case !x.committed && have[id] != 0:
				t.Errorf("insert %d of a transaction answered %v is on the new primary", id, x.err)
			}
		}
	}
}

// Held, not failed: a planned switchover under a write load costs the
// clients latency: no autocommit statement fails (one answered 1290 by the
// former primary runs again on the new one; one that starts while there
// is no primary waits for it), no 1290 reaches a client, only
// transactions open at the flip end, with 9010 (SQLSTATE 40001), and no
// acknowledged write is lost.
func TestSwitchoverHoldsStatements(t *testing.T) {
	p := startSwitchoverProxy(t)
	auto, txns, steps, known := switchUnderLoad(t, p, nil, nil)
	codes := map[uint16]int{}
	var worst time.Duration
	for _, a := range auto {
		codes[a.code]++
		worst = max(worst, a.end.Sub(a.start))
		if a.err != nil {
			t.Errorf("autocommit insert %d failed: %v", a.id, a.err)
		}
	}
	rolledBack := 0
	for _, x := range txns {
		if x.err == nil {
			continue
		}
		code, state := codeOf(x.err)
		switch {
		case code != codePrimarySwitching || state != statePrimarySwitching:
			t.Errorf("a transaction failed with %v; want only 9010 (%s)", x.err, statePrimarySwitching)
		case !x.start.Before(known) || !x.end.After(steps.Start):
			t.Errorf("a transaction from %v to %v got 9010; the switch ran from %v, the new primary was known at %v",
				x.start, x.end, steps.Start, known)
		default:
			rolledBack++
		}
	}
	checkNoneLost(t, p, auto, txns)
	fo := p.srv.FailoverStats()
	if fo.HeldNow != 0 {
		t.Errorf("%d statements still held", fo.HeldNow)
	}
	t.Logf("%d autocommit inserts (by code %v, the slowest %v), %d transactions (%d rolled back with 9010); switch %v (read-only to VIP moved), new primary known %v after read-only; held %d (%.3fs in all), retried %d, refused %d",
		len(auto), codes, worst.Round(time.Millisecond), len(txns), rolledBack, steps.Moved.Sub(steps.Start).Round(time.Millisecond),
		known.Sub(steps.Start).Round(time.Millisecond), fo.Held, fo.HeldSeconds, fo.Retried, fo.Refused)
}

// With a pause on every tag set before the flip (once no backend
// connection is in use: open transactions finished) and lifted once the
// new primary is known, a planned switchover costs no error at all.
func TestSwitchoverPaused(t *testing.T) {
	p := startSwitchoverProxy(t)
	auto, txns, steps, _ := switchUnderLoad(t, p, func() {
		if err := p.srv.SetControl("pause", "*", 0, "switchover", "test"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "no backend connection in use", func() bool { return p.srv.pool.Stats().InUse == 0 })
	}, func() {
		if err := p.srv.LiftControl("pause", "*"); err != nil {
			t.Fatal(err)
		}
	})
	for _, a := range auto {
		if a.err != nil {
			t.Errorf("autocommit insert %d failed: %v", a.id, a.err)
		}
	}
	for _, x := range txns {
		if x.err != nil {
			t.Errorf("a transaction failed: %v", x.err)
		}
	}
	checkNoneLost(t, p, auto, txns)
	fo := p.srv.FailoverStats()
	if fo.PauseWaits == 0 {
		t.Error("no statement waited on the pause")
	}
	t.Logf("%d autocommit inserts, %d transactions, switch %v; held %d (%d by the pause), retried %d, refused %d",
		len(auto), len(txns), steps.Moved.Sub(steps.Start).Round(time.Millisecond), fo.Held, fo.PauseWaits, fo.Retried, fo.Refused)
}

// No primary for longer than failover.hold: a statement is answered 9010
// with SQLSTATE 40001 (nothing ran), not 1290, and runs again once there
// is a primary.
func TestHoldBoundAnswers9010(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) { c.Failover.Hold = 300 * time.Millisecond })
	db := p.open(t)
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	mustExec(t, db, "INSERT INTO t VALUES (1, 1)")
	if err := p.primary.SetReadOnly(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no primary", func() bool { return p.srv.Topology().State == "no_primary" })
	_, err := db.Exec("INSERT INTO t VALUES (2, 1)")
	if code, state := codeOf(err); code != codePrimarySwitching || state != statePrimarySwitching {
		t.Fatalf("insert with no primary past failover.hold: %v; want 9010 (%s)", err, statePrimarySwitching)
	}
	if err := p.primary.SetReadOnly(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the primary known again", func() bool { return p.srv.Topology().State == "primary" })
	mustExec(t, db, "INSERT INTO t VALUES (3, 1)")
	if have := rowsOn(t, p.primary); have[2] != 0 || have[3] != 1 {
		t.Fatalf("rows after: %v", have)
	}
	if fo := p.srv.FailoverStats(); fo.Refused != 1 || fo.Held < 1 {
		t.Fatalf("failover counts: %+v", fo)
	}
}

// An autocommit insert answered 1290 by a primary that has just turned
// read-only (before holdfast's check saw it) ran nowhere: holdfast runs
// it once more on the new primary, and the client sees success; the row
// is there once.
func TestReadOnlyAnswerRetried(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) {
		// Checks only when a 1290 or the test asks (NoteReadOnly): the
		// insert meets the read-only primary before holdfast knows.
		c.Routing.CheckInterval = time.Hour
	})
	db := p.open(t)
	db.SetMaxOpenConns(1)
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	mustExec(t, db, "INSERT INTO t VALUES (1, 1)")
	if err := p.primary.SetReadOnly(t.Context(), true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.Exec("INSERT INTO t VALUES (2, 1)")
		done <- err
	}()
	waitFor(t, "the insert answered 1290 and held", func() bool { return p.srv.FailoverStats().HeldNow == 1 })
	// The rest of the switchover; the check that finds the new primary
	// is asked for.
	p.finishSwitchover(t)
	if err := <-done; err != nil {
		t.Fatalf("the insert refused by the former primary: %v; want success", err)
	}
	if have := rowsOn(t, p.replica); have[1] != 1 || have[2] != 1 {
		t.Fatalf("rows on the new primary: %v; want 1 and 2 once each", have)
	}
	if fo := p.srv.FailoverStats(); fo.Retried != 1 || fo.Refused != 0 {
		t.Fatalf("failover counts: %+v; want one retry", fo)
	}
}

// A transaction that had done nothing but begin on a primary that then
// turned read-only starts again on the new primary, and goes on there:
// its first statement, refused 1290 with the deferred BEGIN it carried
// (text), or after a prepare that carried the BEGIN (prepared), is sent
// again with the BEGIN, once; one whose connection the switch retired
// before its first statement (restarted) begins again on a new borrow;
// one that prepares while the address still leads to the former primary
// waits for the new one. A transaction that had run a statement before
// is still rolled back with 9010 (TestReadOnlyAnswerNotRetried).
func TestTransactionBegunOnReadOnlyReplayed(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) {
		c.Routing.CheckInterval = time.Hour
		// Connections open before the switch: the text insert below
		// finds one idle, and reaches the former primary without a dial.
		c.Pool.Min = c.Pool.Max
	})
	waitFor(t, "the primary known and the pool filled", func() bool {
		return p.srv.Topology().State == "primary" && p.srv.pool.Stats().Idle == 4
	})
	ctx := t.Context()
	const insert = "INSERT INTO t VALUES (?, ?)"
	names := []string{"text", "prepared", "restarted", "prepared late"}
	conns := make([]*sql.Conn, len(names))
	stmts := make([]*sql.Stmt, len(names))
	for i := range conns {
		conns[i] = p.conn(t)
		if _, err := conns[i].ExecContext(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= 2; i++ { // their BEGIN goes out with the prepare
		var err error
		if stmts[i], err = conns[i].PrepareContext(ctx, insert); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, len(names))
	run := func(i int, f func() error) {
		go func() {
			if err := f(); err != nil {
				done <- fmt.Errorf("%s: %w", names[i], err)
				return
			}
			done <- nil
		}()
	}
	// Both reach the read-only primary before holdfast checks it (only a
	// 1290 has it check here).
	run(0, func() error { _, err := conns[0].ExecContext(ctx, "INSERT INTO t VALUES (1, 1)"); return err })
	run(1, func() error { _, err := stmts[1].ExecContext(ctx, 2, 1); return err })
	waitFor(t, "the two first inserts held", func() bool { return p.srv.FailoverStats().HeldNow == 2 })
	run(2, func() error { _, err := stmts[2].ExecContext(ctx, 3, 1); return err })
	waitFor(t, "the restarted transaction held", func() bool { return p.srv.FailoverStats().HeldNow == 3 })
	retiredDials := p.srv.pool.Stats().RetiredDials
	run(3, func() error {
		var err error
		if stmts[3], err = conns[3].PrepareContext(ctx, insert); err != nil {
			return err
		}
		_, err = stmts[3].ExecContext(ctx, 4, 1)
		return err
	})
	waitFor(t, "the late prepare's dial to reach the former primary", func() bool { return p.srv.pool.Stats().RetiredDials > retiredDials })
	p.finishSwitchover(t)
	for range names {
		if err := <-done; err != nil {
			t.Fatalf("a transaction's first insert across the switch: %v; want success", err)
		}
	}
	for i, c := range conns {
		var inTxn int
		if err := c.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTxn); err != nil || inTxn != 1 {
			t.Fatalf("%s transaction after its first insert: @@in_transaction %d, %v; want 1", names[i], inTxn, err)
		}
		if _, err := c.ExecContext(ctx, "INSERT INTO t VALUES (?, 2)", 11+i); err != nil {
			t.Fatal(err)
		}
	}
	// Both rows of each transaction or none: the first is rolled back.
	if _, err := conns[0].ExecContext(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns[1:] {
		if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int64]int{2: 1, 12: 1, 3: 1, 13: 1, 4: 1, 14: 1}
	if have := rowsOn(t, p.replica); !maps.Equal(have, want) {
		t.Fatalf("rows on the new primary: %v; want %v (the committed transactions), once each", have, want)
	}
	if fo := p.srv.FailoverStats(); fo.Retried < 1 || fo.Refused != 0 {
		t.Fatalf("failover counts: %+v; want retries, no 9010", fo)
	}
}

// A session pinned to a connection on the former primary (a user lock)
// gets 9010 at its next statement and is closed, its state being gone; a
// session whose transaction was open there gets 9010 and goes on outside a
// transaction.
func TestSwitchoverEndsSessionsOnFormerPrimary(t *testing.T) {
	p := startSwitchoverProxy(t)
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	pinned, txn := p.conn(t), p.conn(t)
	ctx := t.Context()
	var got int
	if err := pinned.QueryRowContext(ctx, "SELECT GET_LOCK('hf_switch', 0)").Scan(&got); err != nil || got != 1 {
		t.Fatalf("GET_LOCK: %v %d", err, got)
	}
	if _, err := txn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if err := txn.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&got); err != nil {
		t.Fatal(err)
	}
	if _, err := dbtest.Switchover(ctx, p.primary, p.replica, func() { p.vip.Retarget(p.replica.Addr) }); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the new primary known", func() bool { return p.srv.Topology().PrimaryChanges == 1 })

	_, err := pinned.ExecContext(ctx, "DO 1")
	if code, state := codeOf(err); code != codePrimarySwitching || state != statePrimarySwitching {
		t.Fatalf("pinned session's statement after the switch: %v; want 9010", err)
	}
	if _, err := pinned.ExecContext(ctx, "DO 1"); err == nil {
		t.Fatal("the pinned session is still open after its 9010")
	}

	_, err = txn.ExecContext(ctx, "INSERT INTO t VALUES (7, 7)")
	if code, _ := codeOf(err); code != codePrimarySwitching {
		t.Fatalf("statement of a transaction open on the former primary: %v; want 9010", err)
	}
	if _, err := txn.ExecContext(ctx, "INSERT INTO t VALUES (8, 8)"); err != nil {
		t.Fatalf("the session after its transaction's 9010: %v", err)
	}
	var inTxn int
	if err := txn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTxn); err != nil || inTxn != 0 {
		t.Fatalf("@@in_transaction after: %d %v", inTxn, err)
	}
	if have := rowsOn(t, p.replica); have[7] != 0 || have[8] != 1 {
		t.Fatalf("rows on the new primary: %v", have)
	}
}

// A 1290 from a primary that has just turned read-only, for what holdfast
// does not run again (a text of several statements, a transaction's
// statement), reaches the client as 9010: nothing of it ran, and the
// transaction is rolled back, the session going on outside one.
func TestReadOnlyAnswerNotRetried(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) { c.Routing.CheckInterval = time.Hour })
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	multi, txn := p.conn(t, "multiStatements=true"), p.conn(t)
	ctx := t.Context()
	if _, err := txn.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.ExecContext(ctx, "INSERT INTO t VALUES (1, 1)"); err != nil {
		t.Fatal(err)
	}
	if err := p.primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	_, err := multi.ExecContext(ctx, "INSERT INTO t VALUES (10, 1); INSERT INTO t VALUES (11, 1)")
	if code, state := codeOf(err); code != codePrimarySwitching || state != statePrimarySwitching {
		t.Fatalf("a text of two inserts refused by the read-only primary: %v; want 9010", err)
	}
	_, err = txn.ExecContext(ctx, "INSERT INTO t VALUES (2, 1)")
	if code, state := codeOf(err); code != codePrimarySwitching || state != statePrimarySwitching {
		t.Fatalf("a transaction's statement refused by the read-only primary: %v; want 9010", err)
	}
	var inTxn int
	if err := p.primary.SetReadOnly(ctx, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the primary known again", func() bool {
		p.srv.NoteReadOnly()
		return p.srv.Topology().State == "primary"
	})
	if err := txn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTxn); err != nil || inTxn != 0 {
		t.Fatalf("@@in_transaction after the 9010: %d %v", inTxn, err)
	}
	have := rowsOn(t, p.primary)
	for _, id := range []int64{1, 2, 10, 11} {
		if have[id] != 0 {
			t.Errorf("row %d is there: %v", id, have)
		}
	}
}

// A held statement is a running one: KILL QUERY ends it at once with 1317,
// nothing having run, and the session goes on.
func TestHeldStatementKilled(t *testing.T) {
	p := startSwitchoverProxy(t)
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	c, killer := p.conn(t), p.open(t)
	ctx := t.Context()
	var id int64
	if err := c.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	if err := p.primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no primary", func() bool { return p.srv.Topology().State == "no_primary" })
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecContext(ctx, "INSERT INTO t VALUES (1, 1)")
		done <- err
	}()
	waitFor(t, "the insert held", func() bool { return p.srv.FailoverStats().HeldNow == 1 })
	if _, err := killer.ExecContext(ctx, fmt.Sprintf("KILL QUERY %d", id)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if code, _ := codeOf(err); code != codeQueryInterrupted {
			t.Fatalf("the killed held insert: %v; want 1317", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("KILL QUERY did not end the held insert")
	}
	if err := p.primary.SetReadOnly(ctx, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the primary known again", func() bool { return p.srv.Topology().State == "primary" })
	if _, err := c.ExecContext(ctx, "INSERT INTO t VALUES (2, 1)"); err != nil {
		t.Fatal(err)
	}
	if have := rowsOn(t, p.primary); have[1] != 0 || have[2] != 1 {
		t.Fatalf("rows: %v", have)
	}
}
