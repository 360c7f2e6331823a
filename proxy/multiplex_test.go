package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// peakWatcher samples the number of backend connections, from holdfast's
// stats and from MariaDB's process list, until stopped.
type peakWatcher struct {
	proxyPeak, serverPeak atomic.Int64
	stop                  chan struct{}
	done                  chan struct{}
}

func watchPeaks(t *testing.T, p *testProxy) *peakWatcher {
	w := &peakWatcher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if n := int64(p.srv.Stats().Pool.Open); n > w.proxyPeak.Load() {
				w.proxyPeak.Store(n)
			}
			var n int64
			if err := dbtest.Root(t).QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = ?", p.user).Scan(&n); err == nil && n > w.serverPeak.Load() {
				w.serverPeak.Store(n)
			}
			select {
			case <-w.stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *peakWatcher) finish() (proxyPeak, serverPeak int64) {
	close(w.stop)
	<-w.done
	return w.proxyPeak.Load(), w.serverPeak.Load()
}

// TestMultiplexing runs 200 concurrent clients through at most 8 backend
// connections and checks that no client ever sees another's session state
// or transaction.
func TestMultiplexing(t *testing.T) {
	const clients, maxBackends, txns = 200, 8, 6
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, maxBackends, maxBackends
		c.Pool.AcquireTimeout = 60 * time.Second
		ownAccount(t, c) // the topology check's connection is not the pool's
	})
	mustExec(t, p.direct(t), "CREATE TABLE t (client INT, seq INT, PRIMARY KEY (client, seq))")
	db := p.open(t)
	db.SetMaxOpenConns(clients)
	db.SetMaxIdleConns(clients)
	conns := make([]*sql.Conn, clients)
	for i := range conns {
		c, err := db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns[i] = c
	}
	threadsBefore := globalStatus(t, "Threads_connected")
	w := watchPeaks(t, p)
	modes := []string{"ANSI_QUOTES", "STRICT_TRANS_TABLES,NO_ZERO_DATE", "PIPES_AS_CONCAT", ""}

	t.Run("restored state and transactions", func(t *testing.T) {
		concurrently(t, clients, func(i int) error {
			return restoredStateClient(conns[i], i, txns, modes[i%len(modes)])
		})
	})

	t.Run("pinned state", func(t *testing.T) {
		// User variables and temporary tables pin a session to its backend
		// connection until it disconnects; the rest queue for one.
		concurrently(t, clients, func(i int) error { return pinnedClient(p, i) })
	})

	proxyPeak, serverPeak := w.finish()
	t.Logf("peak backend connections: holdfast %d, MariaDB process list %d; Threads_connected %d before, %d after",
		proxyPeak, serverPeak, threadsBefore, globalStatus(t, "Threads_connected"))
	if proxyPeak > maxBackends || serverPeak > maxBackends {
		t.Fatalf("%d clients used %d backend connections (holdfast) / %d (MariaDB), want at most %d", clients, proxyPeak, serverPeak, maxBackends)
	}
	if proxyPeak == 0 || serverPeak == 0 {
		t.Fatal("no backend connections observed: the watcher is broken")
	}
	st := p.srv.Stats()
	if st.Pins["user_variable"] != clients {
		t.Fatalf("pins %v, want %d user_variable", st.Pins, clients)
	}
	// Nothing of the pinned sessions survives on the pooled connections.
	for i := 0; i < 2*maxBackends; i++ {
		c := p.conn(t)
		if got := queryString(t, c, "SELECT CONCAT(IFNULL(@mine, 'none'), '/', (SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_TYPE = 'TEMPORARY'))"); got != "none/0" {
			t.Fatalf("fresh client sees leftover state %q", got)
		}
		c.Close()
	}
}

func restoredStateClient(c *sql.Conn, i, txns int, mode string) error {
	ctx := context.Background()
	cs := "utf8mb4"
	if i%2 == 1 {
		cs = "latin1"
	}
	// Whole and half hours only: MariaDB 10.11 confuses some odd offsets
	// with each other (SET time_zone='+05:43' then reads back '+07:59'
	// once '+07:59' was used, even without holdfast).
	tz := fmt.Sprintf("%+03d:%02d", i%24-11, 30*(i/24%2))
	for _, q := range []string{"SET NAMES " + cs, "SET time_zone = '" + tz + "'", "SET sql_mode = '" + mode + "'"} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	want := fmt.Sprintf("%s|%s|%s", cs, tz, mode)
	committed := 0
	for k := 0; k < txns; k++ {
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // no-op after Commit/Rollback; frees the backend on an early return
		if _, err := tx.Exec("INSERT INTO t VALUES (?, ?)", i, k); err != nil {
			return err
		}
		var own int
		var state string
		if err := tx.QueryRow("SELECT COUNT(*), CONCAT_WS('|', @@character_set_client, @@time_zone, @@sql_mode) FROM t WHERE client = ?", i).Scan(&own, &state); err != nil {
			return err
		}
		if own != committed+1 {
			return fmt.Errorf("txn %d sees %d own rows, want %d (its uncommitted row plus %d committed)", k, own, committed+1, committed)
		}
		if state != want {
			return fmt.Errorf("txn %d sees session state %q, want %q", k, state, want)
		}
		var total int
		if err := tx.QueryRow("SELECT COUNT(*) FROM t").Scan(&total); err != nil {
			return err
		}
		if k%2 == 1 {
			err = tx.Rollback()
		} else {
			err = tx.Commit()
			committed++
		}
		if err != nil {
			return err
		}
	}
	var n int
	if err := c.QueryRowContext(ctx, "SELECT COUNT(*) FROM t WHERE client = ?", i).Scan(&n); err != nil {
		return err
	}
	if n != committed {
		return fmt.Errorf("%d committed rows, want %d", n, committed)
	}
	return nil
}

func pinnedClient(p *testProxy, i int) error {
	db, err := sql.Open("mysql", p.dsn("app", "app"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, q := range []string{
		fmt.Sprintf("SET @mine = %d", i),
		"CREATE TEMPORARY TABLE tmp (v INT)",
		fmt.Sprintf("INSERT INTO tmp VALUES (%d)", i),
		"BEGIN",
	} {
		if _, err := c.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	var v, tv int
	if err := c.QueryRowContext(ctx, "SELECT @mine, (SELECT SUM(v) FROM tmp)").Scan(&v, &tv); err != nil {
		return err
	}
	if _, err := c.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	if v != i || tv != i {
		return fmt.Errorf("sees @mine=%d and tmp=%d, want %d", v, tv, i)
	}
	return nil
}
