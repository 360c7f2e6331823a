package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// TestPipelinedSelects: many clients' autocommit SELECTs share two backend
// connections, queued in order on them; every client gets its own answer.
func TestPipelinedSelects(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 2, 2
		c.Pool.PipelineDepth = 8
		ownAccount(t, c) // the topology check's connection is not the pool's
	})
	mustExec(t, p.direct(t), "CREATE TABLE kv (k INT PRIMARY KEY, v VARCHAR(20))")
	for i := 0; i < 64; i++ {
		mustExec(t, p.direct(t), "INSERT INTO kv VALUES (?, ?)", i, fmt.Sprint("value-", i))
	}
	w := watchPeaks(t, p)
	// Whether statements meet a busy connection and join its pipe depends
	// on timing (a loaded machine may run the clients nearly one at a
	// time): the load runs again, up to three rounds, until one did.
	for round := 0; round < 3 && p.srv.Stats().Pipelined == 0; round++ {
		pipelinedLoad(t, p)
	}
	proxyPeak, serverPeak := w.finish()
	st := p.srv.Stats()
	t.Logf("%d statements pipelined; peak backend connections %d (holdfast) / %d (MariaDB)", st.Pipelined, proxyPeak, serverPeak)
	if st.Pipelined == 0 {
		t.Fatal("nothing was pipelined with 16 clients on 2 connections")
	}
	if proxyPeak > 2 || serverPeak > 2 {
		t.Fatalf("%d / %d backend connections, want at most 2", proxyPeak, serverPeak)
	}
}

// pipelinedLoad runs 16 clients of 200 point SELECTs each through p,
// prepared and typed in turn, each checking its own answers.
func pipelinedLoad(t *testing.T, p *testProxy) {
	concurrently(t, 16, func(c int) error {
		db, err := sql.Open("mysql", p.dsn("app", "app"))
		if err != nil {
			return err
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		stmt, err := db.Prepare("SELECT v FROM kv WHERE k = ?")
		if err != nil {
			return err
		}
		defer stmt.Close()
		for i := 0; i < 200; i++ {
			k := (c*7 + i) % 64
			var v string
			if i%2 == 0 {
				err = stmt.QueryRow(k).Scan(&v) // binary protocol
			} else {
				err = db.QueryRow(fmt.Sprintf("SELECT v FROM kv WHERE k = %d", k)).Scan(&v) // text
			}
			if err != nil {
				return err
			}
			if v != fmt.Sprint("value-", k) {
				return fmt.Errorf("asked for %d and got %q", k, v)
			}
		}
		return nil
	})
}

// TestPipelineClientGone: a client that disconnects in the middle of a
// large result does not disturb the statements queued behind it on the
// same backend connection.
func TestPipelineClientGone(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Pool.PipelineDepth = 8
	})
	// Warm the one backend connection (state learned, not in a pipe), and
	// let statements queue behind a long-running one for this test.
	queryString(t, p.open(t), "SELECT 1")
	p.srv.slowHead.Store(int64(time.Hour))
	before := p.srv.Stats().Pipelined

	quitter, err := rawDial(p.addr, rawmysql.Options{User: "app", Password: "app", DB: p.db})
	if err != nil {
		t.Fatal(err)
	}
	// A result of about 64 MiB, so it is still streaming when we leave.
	if err := quitter.Command(append([]byte{0x03}, "SELECT REPEAT('x', 65536) FROM seq_1_to_1000"...)); err != nil {
		t.Fatal(err)
	}
	if _, err := quitter.ReadPacket(); err != nil { // the column count: it runs
		t.Fatal(err)
	}
	// Queue others behind it on the same connection, then leave.
	var wg sync.WaitGroup
	results := make(chan string, 4)
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c, err := rawDial(p.addr, rawmysql.Options{User: "app", Password: "app", DB: p.db})
			if err != nil {
				results <- err.Error()
				return
			}
			defer c.NC.Close()
			rs, err := c.Results(fmt.Sprintf("SELECT %d + 1000", i))
			if err != nil {
				results <- err.Error()
				return
			}
			results <- rs[0].Cell(0, 0)
		}(i)
	}
	time.Sleep(100 * time.Millisecond)
	quitter.NC.Close()
	wg.Wait()
	close(results)
	got := map[string]bool{}
	for r := range results {
		got[r] = true
	}
	for i := 0; i < 4; i++ {
		if !got[fmt.Sprint(1000+i)] {
			t.Fatalf("results %v, want 1000..1003", got)
		}
	}
	if n := p.srv.Stats().Pipelined - before; n < 4 {
		t.Fatalf("%d statements ran pipelined, want the 4 queued behind the big result", n)
	}
	// The backend connection survived and still answers.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var one int
	if err := p.open(t).QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("after the client left: %v", err)
	}
}

// TestPipelineDoesNotStarveTransactions: clients hammering pipelined
// SELECTs on every backend connection must not keep a transaction from
// getting one (pipes stop taking newcomers while borrowers wait).
func TestPipelineDoesNotStarveTransactions(t *testing.T) {
	// One connection, two places in its pipe, twelve clients whose SELECTs
	// each take 10 ms: a woken waiter joins long before the pipe's head is
	// done, so the pipe would never drain. No head counts as slow here, so
	// only the rule under test can make it drain.
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Pool.PipelineDepth = 2
		c.Pool.AcquireTimeout = 3 * time.Second
	})
	p.srv.slowHead.Store(int64(time.Hour))
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY, n INT)")
	mustExec(t, p.direct(t), "INSERT INTO t VALUES (1, 0)")
	// The connection starts idle, so the first SELECTs form a pipe (with
	// none idle and none open they would queue in the pool instead).
	queryString(t, p.open(t), "SELECT 1")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := 0; c < 12; c++ {
		clientLoop(p, stop, &wg, func(db *sql.DB) {
			var n int
			_ = db.QueryRow("SELECT SLEEP(0.01) FROM t WHERE id = 1").Scan(&n)
		})
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(200 * time.Millisecond) // the SELECTs fill the pipes
	db := p.open(t)
	for i := 0; i < 20; i++ {
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("UPDATE t SET n = n + 1 WHERE id = 1"); err != nil {
			t.Fatalf("transaction %d while SELECTs are pipelined: %v", i, err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if got := queryString(t, p.direct(t), "SELECT n FROM t"); got != "20" {
		t.Fatalf("n = %s", got)
	}
	if p.srv.Stats().Pipelined == 0 {
		t.Fatal("the SELECTs were not pipelined: the test shows nothing")
	}
}

// TestPipelineFullDialsWhenPoolHasRoom: a SELECT that finds the only pipe
// busy with a slow statement opens a connection of its own when the pool
// is under its max, instead of waiting for a place behind the slow one.
func TestPipelineFullDialsWhenPoolHasRoom(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 2, 2
		c.Pool.PipelineDepth = 8
		c.Pool.AcquireTimeout = 20 * time.Second
	})
	queryString(t, p.open(t), "SELECT 1") // one warm idle connection
	slow := p.execAsync(t, "SELECT SLEEP(5)")
	// Wait until the slow statement runs on the one connection (a pipe of
	// its own, head for longer than slowHead).
	deadline := time.Now().Add(10 * time.Second)
	for p.srv.Stats().Pool.InUse == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(2 * defaultSlowHead)
	if got := queryString(t, p.open(t), "SELECT 'quick'"); got != "quick" {
		t.Fatalf("got %q", got)
	}
	select {
	case err := <-slow:
		t.Fatalf("the quick SELECT waited for the slow one to finish (slow one: %v)", err)
	default:
	}
	if open := p.srv.Stats().Pool.Open; open != 2 {
		t.Fatalf("%d backend connections open, want 2 (the quick SELECT dialed its own)", open)
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// TestPipelineMisfitCountsOneAcquire: a pipelinable SELECT from a session
// whose state differs from the idle connection's borrows it (and restores
// its state) as one acquisition, not as a lend, a return and a second lend.
func TestPipelineMisfitCountsOneAcquire(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Pool.PipelineDepth = 8
	})
	other := p.open(t)
	other.SetMaxOpenConns(1)
	// The one connection goes idle with another session's time_zone.
	mustExec(t, other, "SET time_zone = '+05:00'")
	db := p.open(t)
	db.SetMaxOpenConns(1)
	want := queryString(t, p.direct(t), "SELECT @@time_zone")
	before := p.srv.Stats().Pool.Acquired
	if got := queryString(t, db, "SELECT @@time_zone"); got != want {
		t.Fatalf("time_zone %q, want %q", got, want)
	}
	if n := p.srv.Stats().Pool.Acquired - before; n != 1 {
		t.Fatalf("one SELECT counted %d acquisitions", n)
	}
	// The connection now has the session's state: the next SELECT is
	// pipelined on it, still one acquisition.
	before, piped := p.srv.Stats().Pool.Acquired, p.srv.Stats().Pipelined
	queryString(t, db, "SELECT 2")
	if n := p.srv.Stats().Pool.Acquired - before; n != 1 {
		t.Fatalf("a pipelined SELECT counted %d acquisitions", n)
	}
	if p.srv.Stats().Pipelined == piped {
		t.Fatal("the second SELECT was not pipelined: the test shows nothing")
	}
}

// TestPipeWaitersAllServedWhenPipesClose: SELECTs that queued for a pipe
// place while transactions wait in the pool (pipes take no newcomers then)
// are all served once the last pipe closes, not only as many as a pipe
// holds: the rest would otherwise wait for a wake-up no pipe is left to
// send, while the transactions keep the connection busy.
func TestPipeWaitersAllServedWhenPipesClose(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Pool.PipelineDepth = 2
		c.Pool.AcquireTimeout = 10 * time.Second
	})
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY, n INT)")
	mustExec(t, p.direct(t), "INSERT INTO t VALUES (1, 0), (2, 0)")
	queryString(t, p.open(t), "SELECT 1")
	slow := p.execAsync(t, "SELECT SLEEP(1)") // a pipe whose head is slow: SELECTs queue for a place
	time.Sleep(200 * time.Millisecond)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := 1; c <= 2; c++ { // transactions queue in the pool, and keep coming
		clientLoop(p, stop, &wg, func(db *sql.DB) {
			tx, err := db.Begin()
			if err != nil {
				return
			}
			if _, err := tx.Exec("UPDATE t SET n = n + 1 WHERE id = ?", c); err != nil {
				_ = tx.Rollback()
				return
			}
			time.Sleep(20 * time.Millisecond)
			_ = tx.Commit()
		})
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(100 * time.Millisecond)
	errc := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			var n int
			errc <- p.open(t).QueryRow("SELECT n FROM t WHERE id = 1").Scan(&n)
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errc; err != nil {
			t.Errorf("SELECT %d: %v", i, err)
		}
	}
	if err := <-slow; err != nil {
		t.Fatal(err)
	}
}

// TestPipeWaiterDialsWhenSlotFrees: a SELECT waiting for a place in a busy
// pipe (the pool at its max) opens a connection as soon as another one is
// closed (here: past its lifetime) rather than waiting for the pipe.
func TestPipeWaiterDialsWhenSlotFrees(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 2, 2
		c.Pool.PipelineDepth = 8
		c.Pool.AcquireTimeout = 6 * time.Second
		c.Pool.MaxLifetime = time.Second
		c.Pool.LifetimeJitter = 0
	})
	queryString(t, p.open(t), "SELECT 1")
	slow := p.execAsync(t, "SELECT SLEEP(10)") // one connection: a pipe with a slow head, for longer than the wait allows
	time.Sleep(300 * time.Millisecond)
	tdb := p.open(t)
	tdb.SetMaxOpenConns(1)
	tx, err := tdb.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec("DO 1"); err != nil { // the other connection: the pool is at its max
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		var n int
		done <- p.open(t).QueryRow("SELECT 7").Scan(&n)
	}()
	time.Sleep(1200 * time.Millisecond) // the transaction's connection outlives its lifetime
	if err := tx.Commit(); err != nil { // ...so it closes on return: room to dial
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting SELECT: %v", err)
	}
	select {
	case err := <-slow:
		t.Fatalf("the slow statement ended first (%v): the test shows nothing", err)
	default:
	}
}

// execAsync runs query on a client of its own, on a goroutine of its own;
// its error comes on the channel returned.
func (p *testProxy) execAsync(t testing.TB, query string) <-chan error {
	db := p.open(t)
	ch := make(chan error, 1)
	go func() {
		_, err := db.Exec(query)
		ch <- err
	}()
	return ch
}

// clientLoop runs fn over and over, on a client of its own with one
// connection, until stop is closed.
func clientLoop(p *testProxy, stop <-chan struct{}, wg *sync.WaitGroup, fn func(db *sql.DB)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		db, err := sql.Open("mysql", p.dsn("app", "app"))
		if err != nil {
			return
		}
		defer db.Close()
		db.SetMaxOpenConns(1)
		for {
			select {
			case <-stop:
				return
			default:
			}
			fn(db)
		}
	}()
}

// TestPipeRerunsStatementAKillHit: a KILL QUERY lands after its target
// has finished, on the statement queued behind it on the same pipe (one
// backend connection; the kill is held back by killDelay until the target
// is done). That statement's client never asked for a kill: holdfast runs
// it again on a connection of its own and answers with its result, not
// with error 1317.
func TestPipeRerunsStatementAKillHit(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Pool.PipelineDepth = 8
	})
	p.srv.slowHead.Store(int64(time.Hour))
	p.srv.killDelay = 500 * time.Millisecond
	target := p.raw(t, rawmysql.Options{})
	tid := target.value("SELECT CONNECTION_ID()")
	bystander := p.raw(t, rawmysql.Options{})
	killer := p.raw(t, rawmysql.Options{})
	// The backend connection's first statement takes the borrowing path
	// (holdfast learns the connection's state); later SELECTs pipeline.
	target.value("SELECT 'warm-up'")

	type answer struct {
		res []rawmysql.Result
		err error
	}
	targetDone, bystanderDone := make(chan answer, 1), make(chan answer, 1)
	go func() {
		res, err := target.Results("SELECT SLEEP(0.2), 'target'")
		targetDone <- answer{res, err}
	}()
	waitFor(t, "the target's statement on a pipe", func() bool { return pipeOpen(p) })
	go func() {
		// About a second of work, queued behind the target's statement;
		// the kill lands while it runs.
		res, err := bystander.Results("SELECT SUM(seq), 'bystander' FROM seq_1_to_30000000")
		bystanderDone <- answer{res, err}
	}()
	waitFor(t, "the bystander's statement queued on the pipe", func() bool { return pipeQueued(p) == 2 })
	if _, err := killer.Results("KILL QUERY " + tid); err != nil {
		t.Fatalf("KILL QUERY: %v", err)
	}
	ta := <-targetDone
	if ta.err != nil {
		t.Fatalf("the target's statement, finished before the kill landed: %v", ta.err)
	}
	ba := <-bystanderDone
	if ba.err != nil {
		t.Fatalf("the statement behind the target got %v (code %d): a kill meant for another client reached it", ba.err, errCode(ba.err))
	}
	if len(ba.res) != 1 || len(ba.res[0].Rows) != 1 || ba.res[0].Rows[0][1].String != "bystander" {
		t.Fatalf("the statement behind the target answered %+v", ba.res)
	}
	if n := p.srv.Stats().PipelineReruns; n != 1 {
		t.Fatalf("%d statements run again, want 1 (the kill did not hit the bystander: the test showed nothing)", n)
	}
}

// pipeOpen reports whether a pipe is open.
func pipeOpen(p *testProxy) bool {
	ps := p.srv.pipes
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return len(ps.open) > 0
}

// pipeQueued is how many statements the open pipes hold.
func pipeQueued(p *testProxy) int {
	ps := p.srv.pipes
	ps.mu.Lock()
	defer ps.mu.Unlock()
	n := 0
	for _, x := range ps.open {
		x.mu.Lock()
		n += len(x.queue)
		x.mu.Unlock()
	}
	return n
}

// A control on one tag leaves the other tags' SELECTs pipelined, and is
// not bypassed by pipelining: the drained tag's SELECTs are refused, the
// limited tag's never run on more connections than its limit.
func TestControlsLeavePipeliningToOthers(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 3, 3
		c.Pool.PipelineDepth = 8
	})
	p.srv.DrainTag("batch", "test", 0)
	p.srv.LimitTag("report", 1)
	db := p.open(t)
	db.SetMaxOpenConns(20)
	root := p.direct(t)
	stop := make(chan struct{})
	peak := make(chan int, 1)
	go func() {
		most := 0
		for {
			select {
			case <-stop:
				peak <- most
				return
			case <-time.After(2 * time.Millisecond):
			}
			var n int
			if err := root.QueryRow("SELECT COUNT(*) FROM information_schema.processlist WHERE info LIKE '%report-marker%' AND info NOT LIKE '%processlist%'").Scan(&n); err == nil {
				most = max(most, n)
			}
		}
	}()
	before := p.srv.Stats().Pipelined
	concurrently(t, 16, func(c int) error {
		for i := 0; i < 40; i++ {
			switch {
			case c < 10:
				var v int
				if err := db.QueryRow("/* conn_tag:fast */ SELECT ?", i).Scan(&v); err != nil || v != i {
					return fmt.Errorf("fast: %v %v", v, err)
				}
			case c < 14:
				if _, err := db.Exec("/* conn_tag:report */ SELECT SLEEP(0.01), 'report-marker'"); err != nil {
					return fmt.Errorf("report: %v", err)
				}
			default:
				_, err := db.Exec("/* conn_tag:batch */ SELECT 1")
				if err == nil || !strings.Contains(err.Error(), "9001") {
					return fmt.Errorf("batch, drained: got %v, want error 9001", err)
				}
			}
		}
		return nil
	})
	close(stop)
	most := <-peak
	pipelined := p.srv.Stats().Pipelined - before
	t.Logf("%d statements pipelined; report (limit 1) ran on at most %d connections at once", pipelined, most)
	if pipelined == 0 {
		t.Fatal("nothing was pipelined: a control on other tags turned pipelining off")
	}
	if most == 0 {
		t.Fatal("the process-list sampler never saw the limited tag's statements")
	}
	if most > 1 {
		t.Fatalf("the limited tag ran %d statements at once, limit 1", most)
	}
}
