package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
)

func TestMatchTag(t *testing.T) {
	for _, tc := range []struct {
		pattern, tag string
		want         bool
	}{
		{"checkout_*", "checkout_completion", true},
		{"checkout_*", "checkout_", true},
		{"checkout_*", "cart", false},
		{"*_report", "daily_report", true},
		{"*", "anything", true},
		{"a*b*c", "aXXbYYc", true},
		{"a*b*c", "aXXcYYb", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
	} {
		if got := matchTag(tc.pattern, tc.tag); got != tc.want {
			t.Errorf("matchTag(%q, %q) = %v, want %v", tc.pattern, tc.tag, got, tc.want)
		}
	}
}

// overloadProxy is a proxy of four connections, one of them reserved from
// background work, with checkout_* critical and report_* background.
func overloadProxy(t *testing.T, depth int, wait time.Duration) *testProxy {
	return startProxy(t, func(c *config.Config) {
		c.Pool.Max = 4
		c.Pool.PipelineDepth = depth
		c.Overload.Reserve = 1
		c.Overload.BackgroundWait = wait
		c.Overload.CriticalWait = 5 * time.Second // normal's handicap: wide margins for the order below
		c.Overload.Classes = map[string][]string{"critical": {"checkout_*"}, "background": {"report_*"}}
	})
}

// sleepers runs n clients of one SLEEP each under tag; done receives each
// one's error (nil on success).
func sleepers(t *testing.T, db *sql.DB, tag string, n int, secs float64, done chan<- error) {
	for range n {
		go func() {
			_, err := db.Exec(fmt.Sprintf("/* conn_tag:%s */ SELECT SLEEP(%g)", tag, secs))
			done <- err
		}()
	}
}

func holdersOf(p *testProxy, tag string) int {
	n := 0
	for _, h := range p.srv.Holders() {
		if h.Tag == tag {
			n++
		}
	}
	return n
}

// With the pool saturated, background never holds the reserved
// connection, and a critical borrower queued after a normal one is served
// first; with or without pipelining.
func TestOverloadAdmitsByClass(t *testing.T) {
	for _, depth := range []int{0, 16} {
		t.Run(fmt.Sprintf("pipeline_depth=%d", depth), func(t *testing.T) {
			p := overloadProxy(t, depth, 20*time.Second)
			db := p.open(t)
			db.SetMaxOpenConns(64)
			bg := make(chan error, 8)
			sleepers(t, db, "report_daily", 6, 2, bg)
			waitFor(t, "background to take its connections", func() bool { return holdersOf(p, "report_daily") >= 3 })
			// The fourth is never background's: a normal statement gets it.
			n1 := make(chan error, 1)
			sleepers(t, db, "cart", 1, 1, n1)
			waitFor(t, "the normal sleeper to hold the fourth", func() bool { return holdersOf(p, "cart") == 1 })
			if n := holdersOf(p, "report_daily"); n != 3 {
				t.Fatalf("background holds %d connections, want 3 (pool.max 4, reserve 1)", n)
			}
			var mu sync.Mutex
			var order []string
			run := func(tag, q string) chan error {
				ch := make(chan error, 1)
				go func() {
					_, err := db.Exec("/* conn_tag:" + tag + " */ " + q)
					mu.Lock()
					order = append(order, tag)
					mu.Unlock()
					ch <- err
				}()
				return ch
			}
			n2 := run("cart_late", "SELECT SLEEP(0.3)")
			waitFor(t, "the normal borrower to queue", func() bool { w := p.srv.Waiting(); return w.Pool+w.Pipeline >= 1 })
			time.Sleep(20 * time.Millisecond)
			c := run("checkout_pay", "SELECT 1")
			for _, ch := range []chan error{n1, n2, c} {
				if err := <-ch; err != nil {
					t.Fatal(err)
				}
			}
			mu.Lock()
			got := fmt.Sprint(order)
			mu.Unlock()
			if got != "[checkout_pay cart_late]" {
				t.Fatalf("finished in the order %s; want the critical statement first, though it came after the normal one", got)
			}
			for range 6 {
				if err := <-bg; err != nil {
					t.Fatal(err)
				}
			}
			st := p.srv.ClassStats()
			if st[classCritical].Admitted == 0 || st[classBackground].Admitted < 6 {
				t.Fatalf("class stats %+v", st)
			}
		})
	}
}

// A background borrower past overload.background_wait gets 9006 with
// SQLSTATE 40001, and a transaction it began is gone.
func TestOverloadShedsBackground(t *testing.T) {
	p := overloadProxy(t, 16, 300*time.Millisecond)
	db := p.open(t)
	db.SetMaxOpenConns(64)
	bg := make(chan error, 3)
	sleepers(t, db, "report_daily", 3, 3, bg)
	waitFor(t, "background to take its three connections", func() bool { return holdersOf(p, "report_daily") == 3 })

	c := p.conn(t)
	ctx := context.Background()
	mustExec(t, c, "/* conn_tag:report_daily */ BEGIN")
	_, err := c.ExecContext(ctx, "/* conn_tag:report_daily */ SELECT 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9006 || string(me.SQLState[:]) != "40001" {
		t.Fatalf("got %v, want error 9006 (40001)", err)
	}
	t.Logf("shed: %v", me)
	// The deferred BEGIN is gone with it: the client is in no transaction.
	if v := queryString(t, c, "/* conn_tag:cart */ SELECT @@in_transaction"); v != "0" {
		t.Fatalf("@@in_transaction after the shed = %s, want 0", v)
	}
	// An autocommit statement is shed the same way.
	if _, err := c.ExecContext(ctx, "/* conn_tag:report_daily */ SELECT 2"); !errors.As(err, &me) || me.Number != 9006 {
		t.Fatalf("got %v, want error 9006", err)
	}
	// Critical and normal work still get the reserved connection.
	if v := queryString(t, c, "/* conn_tag:checkout_pay */ SELECT 42"); v != "42" {
		t.Fatalf("critical got %s", v)
	}
	st := p.srv.ClassStats()
	if st[classBackground].Shed != 2 {
		t.Fatalf("shed count %d, want 2", st[classBackground].Shed)
	}
	var shed uint64
	for _, ti := range p.srv.Tags() {
		if ti.Tag == "report_daily" {
			shed = ti.Shed
		}
	}
	if shed != 2 {
		t.Fatalf("report_daily's rejected{shed} = %d, want 2", shed)
	}
	for range 3 {
		if err := <-bg; err != nil {
			t.Fatal(err)
		}
	}
}
