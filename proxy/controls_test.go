package proxy

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// A control applies to the tag a statement carries, also once accounting
// has folded that tag into "other" (attribution.max_tags reached): a drain
// of it refuses its statements, and its max_transaction_time applies.
func TestControlsKeyedByRealTag(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Attribution.MaxTags = 3 })
	db := p.open(t)
	for i := 0; i < 6; i++ { // fills every slot; the later tags fold
		mustExec(t, db, fmt.Sprintf("/* conn_tag:filler%d */ SELECT 1", i))
	}
	mustExec(t, db, "/* conn_tag:checkout */ SELECT 1")
	if tag := p.srv.Recorder().Tag([]byte("checkout")).Name(); tag != "other" {
		t.Fatalf("setup: checkout is counted as %q, want it folded into other", tag)
	}
	p.srv.DrainTag("checkout", "incident", 0)
	_, err := db.Exec("/* conn_tag:checkout */ SELECT 1")
	if mysqlErrNo(err) != codeTagDrained {
		t.Fatalf("a statement of the drained (folded) tag: %v, want 9001", err)
	}
	mustExec(t, db, "/* conn_tag:filler5 */ SELECT 1") // another folded tag is served
	p.srv.UndrainTag("checkout")
	mustExec(t, db, "/* conn_tag:checkout */ SELECT 1")

	// The folded tag's own max_transaction_time ends its transaction
	// (sessions.max_transaction_time is off: only the tag's can).
	p.srv.SetMaxTransactionTime("checkout", 200*time.Millisecond)
	c := p.raw(t, rawmysql.Options{})
	c.mustQuery("BEGIN")
	c.mustQuery("/* conn_tag:checkout */ SELECT 1")
	expectTimeoutErr(t, c, codeTxnTooLong, "max_transaction_time (200ms")
}

// Time queued behind a tag's connection limit is that tag's wait.
func TestCapWaitIsWait(t *testing.T) {
	p := startProxy(t)
	p.srv.LimitTag("capped", 1)
	holder := p.conn(t)
	ctx := context.Background()
	if _, err := holder.ExecContext(ctx, "BEGIN"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "/* conn_tag:capped */ SELECT 1"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	db := p.open(t)
	go func() {
		_, err := db.Exec("/* conn_tag:capped */ SELECT 1")
		done <- err
	}()
	waitFor(t, "the second borrow to queue behind the limit", func() bool { return p.srv.Waiting().ByTag["capped"] == 1 })
	time.Sleep(500 * time.Millisecond)
	if _, err := holder.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, s := range p.srv.Recorder().Snapshot() {
		if s.Tag == "capped" {
			if s.WaitSeconds < 0.4 {
				t.Fatalf("capped waited %.3fs in all, want the ~0.5s the second borrow queued behind the limit", s.WaitSeconds)
			}
			return
		}
	}
	t.Fatal("no accounting for tag capped")
}

// With attribution.disabled, a drain still applies to the tag a statement
// carries (not only to its connection's).
func TestDrainWithAttributionDisabled(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Attribution.Disabled = true })
	db := p.open(t)
	p.srv.DrainTag("checkout", "incident", 0)
	if _, err := db.Exec("/* conn_tag:checkout */ SELECT 1"); mysqlErrNo(err) != codeTagDrained {
		t.Fatalf("a statement of the drained tag: %v, want 9001", err)
	}
	mustExec(t, db, "/* conn_tag:other_flow */ SELECT 1")
	mustExec(t, db, "SELECT 1")
}

// A fleet-wide cap's share on this instance: a wait that runs out says
// the cap on-call set, this instance's share of it now and that the wait
// timed out; a share lowered under what the tag holds admits no one until
// what is held has fallen under it (a slot given back is not handed on);
// and the demand the fleet reads is the most held and queued at once
// since it last asked.
func TestFleetCapShare(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.AcquireTimeout = 300 * time.Millisecond })
	share := func(n int) {
		p.srv.ApplyFleetControls([]fleet.Applied{{Tag: "capx", Limited: true, Limit: n, FleetLimit: 3}})
	}
	share(2)
	ctx := context.Background()
	holders := make([]*sql.Conn, 2)
	for i := range holders {
		holders[i] = p.conn(t)
		for _, q := range []string{"BEGIN", "/* conn_tag:capx */ SELECT 1"} {
			if _, err := holders[i].ExecContext(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
	}
	db := p.open(t)
	_, err := db.Exec("/* conn_tag:capx */ SELECT 2")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != codeTagLimit ||
		!strings.Contains(me.Message, "tag 'capx' is capped by on-call at 3 backend connections across the fleet, of which this instance may hold 2 now: no slot under the limit came free within pool.acquire_timeout") {
		t.Fatalf("a wait out of time under the share: %v", err)
	}
	if held, want := p.srv.Demand("capx", true); held != 2 || want != 3 {
		t.Fatalf("demand: held %d, want %d; want 2 held, 3 at most at once", held, want)
	}
	if held, want := p.srv.Demand("capx", false); held != 2 || want != 2 {
		t.Fatalf("demand in a new window: held %d, want %d; want 2 and 2", held, want)
	}

	// The share falls to 1 while 2 are held: the first slot given back
	// is not handed to the waiter, the second is.
	share(1)
	waiter := make(chan error, 1)
	slow := p.open(t)
	go func() {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := slow.ExecContext(ctx, "/* conn_tag:capx */ SELECT 3")
		waiter <- err
	}()
	waitFor(t, "a borrow to queue under the share", func() bool { return p.srv.Waiting().ByTag["capx"] == 1 })
	if _, err := holders[0].ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := p.srv.Waiting().ByTag["capx"]; n != 1 {
		t.Fatalf("a slot given back above the share went to the waiter (%d waiting)", n)
	}
	if held, _ := p.srv.Demand("capx", false); held != 1 {
		t.Fatalf("held %d after one of two ended, want 1", held)
	}
	if _, err := holders[1].ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	if err := <-waiter; err != nil {
		t.Fatalf("the waiter, once what was held fell under the share: %v", err)
	}
}
