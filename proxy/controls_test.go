package proxy

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
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
