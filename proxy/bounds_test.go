package proxy

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// expectTimeoutErr reads the unsolicited error a session ended by a bound
// is sent (sequence 0, whatever the client expects) and then the close.
func expectTimeoutErr(t *testing.T, c *rawConn, code uint16, mention string) {
	t.Helper()
	c.LenientSeq = true
	c.Guard = 15 * time.Second // hang guard
	p, err := c.ReadPacket()
	if err != nil {
		t.Fatalf("no error packet before the close: %v", err)
	}
	e, err := rawmysql.DecodeErr(p)
	if err != nil || e.Code != code || !strings.Contains(e.Msg, mention) {
		t.Fatalf("got %v (%v), want ERR %d mentioning %q", e, err, code, mention)
	}
	if rest, err := c.WaitClosed(); err != nil || len(rest) != 0 {
		t.Fatalf("after the error: % x, %v; want the connection closed", rest, err)
	}
}

// A client idle inside a transaction past sessions.idle_in_transaction_
// timeout is rolled back, told so (4031) and disconnected; its backend
// connection serves the next client.
func TestIdleInTransactionTimeout(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Sessions.IdleInTransactionTimeout = 300 * time.Millisecond
	})
	mustExec(t, p.direct(t), "CREATE TABLE it (a INT)")
	c := p.raw(t, rawmysql.Options{})
	c.mustQuery("BEGIN")
	c.mustQuery("/* conn_tag:idler */ INSERT INTO it VALUES (1)")
	// Waiting for the one backend connection the idle client holds.
	other := p.raw(t, rawmysql.Options{})
	done := make(chan error, 1)
	go func() {
		_, err := other.Results("SELECT COUNT(*) FROM it")
		done <- err
	}()
	expectTimeoutErr(t, c, 4031, "sessions.idle_in_transaction_timeout")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the waiting client: %v", err)
		}
	case <-time.After(15 * time.Second): // hang guard
		t.Fatal("the waiting client was never served")
	}
	if n := queryString(t, p.direct(t), "SELECT COUNT(*) FROM it"); n != "0" {
		t.Fatalf("%s rows: the idle transaction was committed, not rolled back", n)
	}
	// A client that is merely idle (no transaction) stays.
	idle := p.raw(t, rawmysql.Options{})
	idle.mustQuery("SELECT 1")
	time.Sleep(600 * time.Millisecond)
	if v := idle.value("SELECT 'still here'"); v != "still here" {
		t.Fatal(v)
	}
	if n := metric(scrape(t, p.admin(t).URL), "holdfast_tag_timeouts_total", map[string]string{"tag": "idler", "reason": "idle_in_transaction"}); n != 1 {
		t.Errorf("holdfast_tag_timeouts_total{tag=idler,reason=idle_in_transaction} = %v, want 1", n)
	}
}

// TestMaxTransactionTimeAlwaysApplies: the bound holds for the first
// statement of a transaction (the one its deferred BEGIN rides with) and
// with per-tag accounting turned off.
func TestMaxTransactionTimeAlwaysApplies(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noAttr    bool
		statement bool // a statement before the long one
	}{
		{"first statement", false, false},
		{"attribution disabled", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startProxy(t, func(c *config.Config) {
				c.Sessions.MaxTransactionTime = 300 * time.Millisecond
				c.Attribution.Disabled = tc.noAttr
			})
			c := p.raw(t, rawmysql.Options{})
			c.mustQuery("BEGIN")
			if tc.statement {
				c.mustQuery("SELECT 1")
			}
			rs, err := c.Results("SELECT SLEEP(20)")
			if err != nil && errCode(err) != 1317 || err == nil && rs[0].Cell(0, 0) != "1" {
				t.Fatalf("the long statement: %v %v, want it interrupted", rs, err)
			}
			expectTimeoutErr(t, c, 9005, "max_transaction_time")
		})
	}
}

// A transaction that holds its backend connection past max_transaction_
// time (configured, or set for its tag by on-call) has its statement
// interrupted and is rolled back; the client is told (9005) and
// disconnected.
func TestMaxTransactionTime(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Sessions.MaxTransactionTime = 500 * time.Millisecond })
	mustExec(t, p.direct(t), "CREATE TABLE mt (a INT)")
	c := p.raw(t, rawmysql.Options{})
	c.mustQuery("BEGIN")
	c.mustQuery("INSERT INTO mt VALUES (1)")
	start := time.Now()
	rs, err := c.Results("SELECT SLEEP(20)")
	// Interrupted: MariaDB's SLEEP answers 1 when killed (or 1317).
	if err != nil && errCode(err) != 1317 || err == nil && rs[0].Cell(0, 0) != "1" {
		t.Fatalf("the long statement: %v %v, want it interrupted", rs, err)
	}
	if time.Since(start) > 15*time.Second { // hang guard
		t.Fatal("the statement ran on")
	}
	expectTimeoutErr(t, c, 9005, "max_transaction_time")
	if n := queryString(t, p.direct(t), "SELECT COUNT(*) FROM mt"); n != "0" {
		t.Fatalf("%s rows: the transaction was not rolled back", n)
	}

	// Per tag, at run time, with nothing configured.
	q := startProxy(t)
	q.srv.SetMaxTransactionTime("checkout", 300*time.Millisecond)
	if gs := q.srv.Gates(); len(gs) != 1 || gs[0].MaxTransactionTime != 300*time.Millisecond {
		t.Fatalf("gates %+v", gs)
	}
	ck, other := q.raw(t, rawmysql.Options{}), q.raw(t, rawmysql.Options{})
	ck.mustQuery("/* conn_tag:checkout */ BEGIN")
	ck.mustQuery("/* conn_tag:checkout */ SELECT 1")
	other.mustQuery("/* conn_tag:search */ BEGIN")
	other.mustQuery("/* conn_tag:search */ SELECT 1")
	expectTimeoutErr(t, ck, 9005, "tag 'checkout'")
	if v := other.value("SELECT @@in_transaction"); v != "1" {
		t.Fatal("another tag's transaction ended too")
	}
	q.srv.SetMaxTransactionTime("checkout", 0)
	if gs := q.srv.Gates(); len(gs) != 0 {
		t.Fatalf("gates after lifting: %+v", gs)
	}

	// Per tag, in the configuration (tags.max_transaction_time).
	r := startProxy(t, func(c *config.Config) {
		c.Tags.MaxTransactionTime = map[string]time.Duration{"batch": 300 * time.Millisecond}
	})
	b, o := r.raw(t, rawmysql.Options{}), r.raw(t, rawmysql.Options{})
	b.mustQuery("/* conn_tag:batch */ BEGIN")
	b.mustQuery("/* conn_tag:batch */ SELECT 1")
	o.mustQuery("/* conn_tag:search */ BEGIN")
	o.mustQuery("/* conn_tag:search */ SELECT 1")
	expectTimeoutErr(t, b, 9005, "tag 'batch'")
	if v := o.value("SELECT @@in_transaction"); v != "1" {
		t.Fatal("another tag's transaction ended too")
	}
}

// A client that stops reading a large answer is disconnected after
// sessions.client_write_timeout; its statement is interrupted, and the
// clients waiting behind it on the one backend connection (a pipelined
// SELECT, a transaction) are served.
func TestClientWriteTimeout(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Sessions.ClientWriteTimeout = 500 * time.Millisecond
	})
	stuck := p.raw(t, rawmysql.Options{})
	// About 200 MB: far more than the sockets' buffers hold.
	if err := stuck.Command(append([]byte{rawmysql.ComQuery}, "SELECT REPEAT('x', 10000) FROM seq_1_to_20000"...)); err != nil {
		t.Fatal(err)
	}
	// It never reads. Behind it:
	waitRunning(t, p, "SELECT REPEAT('x', 10000) FROM seq_1_to_20000")
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, q := range []string{"SELECT 'pipelined'", "BEGIN; SELECT 'in a transaction'; COMMIT"} {
		c := p.raw(t, rawmysql.Options{Caps: rawmysql.CapMultiStatements})
		wg.Add(1)
		go func(q string) {
			defer wg.Done()
			_, err := c.Results(q)
			errs <- err
		}(q)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a client behind the one that stopped reading: %v", err)
		}
	}
	// The stuck client was disconnected: once its buffers are read, the
	// connection ends before the 200 MB would have.
	stuck.Guard = 30 * time.Second
	got, err := stuck.WaitClosed()
	if err != nil {
		t.Fatalf("the client that stopped reading was never disconnected: %v", err)
	}
	if len(got) > 100<<20 {
		t.Fatalf("the client got %d bytes: the statement was not interrupted", len(got))
	}
	var n int
	if err := dbtest.Root(t).QueryRowContext(context.Background(),
		"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT REPEAT%'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the statement still runs on the backend (%d, %v)", n, err)
	}
}

// holdfast's own exchanges on a backend connection (here the restore of
// session variables before a statement) are bounded by
// backend.exchange_timeout: a backend that stops answering gives the
// client an error, not a hang.
func TestExchangeTimeout(t *testing.T) {
	relay := dbtest.StartRelay(t, dbtest.Config(t).Addr, 0)
	p := startProxy(t, func(c *config.Config) {
		c.Backend.Address = relay.Addr().String()
		c.Backend.ExchangeTimeout = 300 * time.Millisecond
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
	})
	a, b := p.raw(t, rawmysql.Options{}), p.raw(t, rawmysql.Options{})
	a.mustQuery("SET time_zone = '+01:00'")
	relay.Stall() // the backend seems to hang: nothing forwarded, nothing closed
	defer relay.Resume()
	// b's first statement needs time_zone restored on the one connection.
	_, err := b.Results("SELECT @@time_zone")
	if errCode(err) != 2013 {
		t.Fatalf("statement whose restore the backend never answers: %v, want 2013", err)
	}
}

// Every close of a backend connection is counted, whatever closed it, so
// that dials - dial errors - closes = connections open.
func TestPoolClosesAllCounted(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 2, 2 })
	a, b := p.raw(t, rawmysql.Options{}), p.raw(t, rawmysql.Options{})
	for _, c := range []*rawConn{a, b} {
		c.mustQuery("BEGIN")
		c.mustQuery("SELECT 1")
	}
	a.mustQuery("COMMIT")
	b.mustQuery("COMMIT") // two idle connections
	// A lower max closes an idle one: shrink.
	cfg := p.cfg
	cfg.Pool.Max, cfg.Pool.MaxIdle = 1, 1
	if err := p.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	// Only a connection of the other variant is idle: swap.
	p.raw(t, rawmysql.Options{Caps: rawmysql.CapFoundRows}).mustQuery("SELECT 1")
	// A backend connection killed under a pinned client: broken.
	pinned := p.raw(t, rawmysql.Options{})
	pinned.mustQuery("SET @pin = 1")
	killBackend(t, rawThread(pinned))
	_, _ = pinned.Results("SELECT 1")
	st := p.srv.Stats().Pool
	t.Logf("pool: %+v", st)
	for _, r := range []pool.CloseReason{pool.CloseShrink, pool.CloseSwap, pool.CloseBroken} {
		if st.Closed[r] == 0 {
			t.Errorf("no close counted as %s", r)
		}
	}
	if got, want := int(st.Dials-st.DialErrors-st.ClosedTotal()), st.Open+st.Dialing; got != want {
		t.Fatalf("dials %d - dial errors %d - closes %d = %d, but %d connections are open (closes by reason %v)",
			st.Dials, st.DialErrors, st.ClosedTotal(), got, want, st.Closed)
	}
}

// A transaction that ends with its client (killed by a drain's grace,
// say) while idle counts its last idle stretch as idle in transaction.
func TestIdleCountedWhenHoldEndsInTransaction(t *testing.T) {
	p := startProxy(t)
	c := p.raw(t, rawmysql.Options{})
	c.mustQuery("/* conn_tag:lingerer */ BEGIN")
	c.mustQuery("/* conn_tag:lingerer */ SELECT 1")
	time.Sleep(300 * time.Millisecond)
	p.srv.DrainTag("lingerer", "test", 50*time.Millisecond)
	if _, err := c.WaitClosed(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, ts := range p.srv.Recorder().Snapshot() {
			if ts.Tag == "lingerer" && ts.Borrows > 0 && ts.HoldSeconds > 0 {
				if ts.IdleInTxnSeconds < 0.3 {
					t.Fatalf("idle in transaction %.3fs of a %.3fs hold, want the 0.3 s the client sat idle", ts.IdleInTxnSeconds, ts.HoldSeconds)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the hold was never recorded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
