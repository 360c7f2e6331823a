package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// With failover.transaction_replay, transactions open on the former
// primary go on on the new one: one whose write the read-only primary
// refused (refused), one whose COMMIT it refused (commit), one that was
// idle through the switch after a statement answered with an error
// (idle), one that ran prepared statements (prepared) are replayed there, their earlier statements' answers
// checked, and then commit there, each write once. A transaction whose
// earlier read answers differently on the new primary (differs) is rolled
// back with 9010, as is one that ran a statement that is not recorded
// (savepoint). With replay off every one of them gets 9010
// (TestReadOnlyAnswerNotRetried, TestSwitchoverEndsSessionsOnFormerPrimary).
func TestTransactionReplayedAcrossSwitchover(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) {
		c.Failover.TransactionReplay = true
		// Checks only when a 1290 or the test asks (NoteReadOnly): the
		// statements below meet the read-only primary before holdfast
		// knows.
		c.Routing.CheckInterval = time.Hour
		c.Pool.Max = 8
	})
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	ctx := t.Context()
	mustExec(t, p.open(t), "INSERT INTO t VALUES (100, 7)")
	names := []string{"refused", "commit", "idle", "differs", "prepared", "savepoint"}
	c := map[string]*sql.Conn{}
	for _, n := range names {
		c[n] = p.conn(t)
		mustExecConn(t, c[n], "BEGIN")
	}
	readW := func(conn *sql.Conn, id int) (int, error) {
		var w int
		err := conn.QueryRowContext(ctx, "SELECT w FROM t WHERE id = ?", id).Scan(&w)
		return w, err
	}
	// go-sql-driver sends a statement with arguments as a prepared one;
	// the others are typed.
	mustExecConn(t, c["refused"], "INSERT INTO t VALUES (1, 1)")
	mustExecConn(t, c["refused"], "SELECT w FROM t WHERE id = 1")
	mustExecConn(t, c["commit"], "INSERT INTO t VALUES (6, 1)")
	mustExecConn(t, c["idle"], "INSERT INTO t VALUES (3, 1)")
	mustExecConn(t, c["idle"], "UPDATE t SET w = w + 10 WHERE id = 3")
	// An error answer is part of the record: the replay must meet it too.
	if _, err := c["idle"].ExecContext(ctx, "INSERT INTO t VALUES (100, 1)"); mysqlErrNo(err) != 1062 {
		t.Fatalf("idle: a duplicate key: %v; want 1062", err)
	}
	mustExecConn(t, c["differs"], "SELECT w FROM t WHERE id = 100")
	if _, err := c["prepared"].ExecContext(ctx, "INSERT INTO t VALUES (?, ?)", 5, 1); err != nil {
		t.Fatal(err)
	}
	if w, err := readW(c["prepared"], 5); err != nil || w != 1 {
		t.Fatalf("prepared: a prepared read: %d, %v", w, err)
	}
	mustExecConn(t, c["savepoint"], "INSERT INTO t VALUES (8, 1)")
	mustExecConn(t, c["savepoint"], "SAVEPOINT a")

	if err := p.primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	done := map[string]chan error{"refused": make(chan error, 1), "commit": make(chan error, 1)}
	go func() {
		_, err := c["refused"].ExecContext(ctx, "INSERT INTO t VALUES (2, 1)")
		done["refused"] <- err
	}()
	waitFor(t, "the refused insert held", func() bool { return p.srv.FailoverStats().HeldNow == 1 })
	go func() {
		_, err := c["commit"].ExecContext(ctx, "COMMIT")
		done["commit"] <- err
	}()
	waitFor(t, "the refused COMMIT held", func() bool { return p.srv.FailoverStats().HeldNow == 2 })
	p.finishSwitchover(t)
	// The row the differs transaction read changes on the new primary
	// before that transaction goes on.
	ndb := p.replica.Open("sw")
	defer ndb.Close()
	mustExec(t, ndb, "UPDATE t SET w = 8 WHERE id = 100")

	for _, n := range []string{"refused", "commit"} {
		if err := <-done[n]; err != nil {
			t.Fatalf("%s: the statement the former primary refused: %v; want success after the replay", n, err)
		}
	}
	if _, err := c["idle"].ExecContext(ctx, "INSERT INTO t VALUES (4, 1)"); err != nil {
		t.Fatalf("idle: the first statement after the switch: %v; want success after the replay", err)
	}
	_, err := readW(c["differs"], 100)
	if code, state := codeOf(err); code != codePrimarySwitching || state != statePrimarySwitching || !strings.Contains(err.Error(), "answered differently") {
		t.Fatalf("differs: a transaction whose read answers differently on the new primary: %v; want 9010 saying so", err)
	}
	if _, err := c["prepared"].ExecContext(ctx, "INSERT INTO t VALUES (?, ?)", 7, 1); err != nil {
		t.Fatalf("prepared: the first statement after the switch: %v; want success after the replay", err)
	}
	_, err = c["savepoint"].ExecContext(ctx, "INSERT INTO t VALUES (9, 1)")
	if code, _ := codeOf(err); code != codePrimarySwitching {
		t.Fatalf("savepoint: a transaction that ran a statement not recorded: %v; want 9010", err)
	}
	for n, want := range map[string]int{"refused": 1, "idle": 1, "prepared": 1, "commit": 0, "differs": 0, "savepoint": 0} {
		var inTxn int
		if err := c[n].QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTxn); err != nil || inTxn != want {
			t.Fatalf("%s: @@in_transaction %d, %v; want %d", n, inTxn, err, want)
		}
	}
	if w, err := readW(c["idle"], 3); err != nil || w != 11 {
		t.Fatalf("idle: its update read back in the replayed transaction: %d, %v; want 11", w, err)
	}
	for _, n := range []string{"refused", "idle", "prepared"} {
		mustExecConn(t, c[n], "COMMIT")
	}
	want := map[int64]int{100: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 1, 6: 1, 7: 1}
	if have := rowsOn(t, p.replica); !maps.Equal(have, want) {
		t.Fatalf("rows on the new primary: %v; want %v (the replayed transactions'), once each", have, want)
	}
	if w, err := readW(c["differs"], 3); err != nil || w != 11 {
		t.Fatalf("row 3 on the new primary: w %d, %v; want 11 (the update made once)", w, err)
	}
	fo := p.srv.FailoverStats()
	if fo.TxnsReplayed != 4 || fo.TxnReplaysFailed != 1 || fo.HeldNow != 0 {
		t.Fatalf("failover counts: %+v; want 4 transactions replayed, 1 replay failed", fo)
	}
}

// mustExecConn runs q on conn.
func mustExecConn(t *testing.T, conn *sql.Conn, q string) {
	t.Helper()
	if _, err := conn.ExecContext(context.Background(), q); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// With failover.transaction_replay, a planned switchover under a write
// load costs the transaction writers nothing either: every transaction
// open at the flip is replayed on the new primary and commits there, each
// of its rows once (TestSwitchoverHoldsStatements is the same load
// without replay, where they get 9010). One more transaction is surely
// open across the switch: it began before and commits after.
func TestSwitchoverReplaysTransactions(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) { c.Failover.TransactionReplay = true })
	long := p.conn(t)
	auto, txns, steps, _ := switchUnderLoad(t, p, func() {
		mustExecConn(t, long, "BEGIN")
		if _, err := long.ExecContext(t.Context(), "INSERT INTO t VALUES (?, 1)", -1); err != nil {
			t.Fatal(err)
		}
	}, func() {
		if _, err := long.ExecContext(t.Context(), "INSERT INTO t VALUES (?, 1)", -2); err != nil {
			t.Errorf("the transaction open across the switch, after it: %v", err)
		}
		if _, err := long.ExecContext(t.Context(), "COMMIT"); err != nil {
			t.Errorf("the transaction open across the switch, its COMMIT: %v", err)
		}
	})
	if have := rowsOn(t, p.replica); have[-1] != 1 || have[-2] != 1 {
		t.Errorf("the rows of the transaction open across the switch on the new primary: %d and %d times; want once each", have[-1], have[-2])
	}
	for _, a := range auto {
		if a.err != nil {
			t.Errorf("autocommit insert %d failed: %v", a.id, a.err)
		}
	}
	for _, x := range txns {
		if x.err != nil {
			t.Errorf("a transaction from %v to %v failed: %v", x.start, x.end, x.err)
		}
	}
	checkNoneLost(t, p, auto, txns)
	fo := p.srv.FailoverStats()
	if fo.TxnsReplayed == 0 || fo.TxnReplaysFailed != 0 || fo.Refused != 0 || fo.HeldNow != 0 {
		t.Errorf("failover counts: %+v; want transactions replayed, none failed, no 9010", fo)
	}
	t.Logf("%d autocommit inserts, %d transactions (%d replayed), switch %v; held %d, retried %d, refused %d",
		len(auto), len(txns), fo.TxnsReplayed, steps.Moved.Sub(steps.Start).Round(time.Millisecond), fo.Held, fo.Retried, fo.Refused)
}

// A transaction to be replayed whose new primary does not come within
// failover.hold ends as one without replay: 9010, rolled back, and the
// session's next statements run outside a transaction (no statement of
// the client's runs in a transaction it was told is gone, or outside one
// it believes open).
func TestTransactionReplayHoldRunsOut(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) {
		c.Failover.TransactionReplay = true
		c.Failover.Hold = 300 * time.Millisecond
		c.Routing.CheckInterval = time.Hour
	})
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	ctx := t.Context()
	txn := p.conn(t)
	mustExecConn(t, txn, "BEGIN")
	mustExecConn(t, txn, "INSERT INTO t VALUES (1, 1)")
	if err := p.primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	_, err := txn.ExecContext(ctx, "INSERT INTO t VALUES (2, 1)")
	if code, state := codeOf(err); code != codePrimarySwitching || state != statePrimarySwitching || !strings.Contains(err.Error(), "could not be replayed") {
		t.Fatalf("a transaction's statement with no new primary within failover.hold: %v; want 9010 saying it was not replayed", err)
	}
	if err := p.primary.SetReadOnly(ctx, false); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the primary known again", func() bool {
		p.srv.NoteReadOnly()
		return p.srv.Topology().State == "primary"
	})
	var inTxn int
	if err := txn.QueryRowContext(ctx, "SELECT @@in_transaction").Scan(&inTxn); err != nil || inTxn != 0 {
		t.Fatalf("@@in_transaction after the 9010: %d %v; want 0", inTxn, err)
	}
	mustExecConn(t, txn, "INSERT INTO t VALUES (3, 1)")
	if have := rowsOn(t, p.primary); have[1] != 0 || have[2] != 0 || have[3] != 1 {
		t.Fatalf("rows: %v; want only 3 (the rolled-back transaction's none)", have)
	}
	if fo := p.srv.FailoverStats(); fo.TxnReplaysFailed != 1 || fo.Refused != 1 || fo.TxnsReplayed != 0 {
		t.Fatalf("failover counts: %+v; want one replay failed, one 9010", fo)
	}
}

// A replay that did not take place leaves no record behind: after its
// 9010, a transaction the session opens without a BEGIN (autocommit off)
// is not recorded, so a switch that meets it answers 9010 instead of
// replaying the rolled-back transaction's statements with it.
func TestFailedReplayLeavesNoRecord(t *testing.T) {
	p := startSwitchoverProxy(t, func(c *config.Config, _, _ *dbtest.Private) {
		c.Failover.TransactionReplay = true
		c.Failover.Hold = time.Second
		c.Routing.CheckInterval = time.Hour
	})
	waitFor(t, "the primary known", func() bool { return p.srv.Topology().State == "primary" })
	ctx := t.Context()
	mustExec(t, p.open(t), "INSERT INTO t VALUES (3, 0)")
	txn := p.conn(t)
	mustExecConn(t, txn, "SET autocommit = 0")
	mustExecConn(t, txn, "BEGIN")
	mustExecConn(t, txn, "INSERT INTO t VALUES (1, 1)")
	if err := p.primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.ExecContext(ctx, "INSERT INTO t VALUES (2, 1)"); !strings.Contains(fmt.Sprint(err), "could not be replayed") {
		t.Fatalf("a transaction's statement with no new primary within failover.hold: %v; want 9010 saying it was not replayed", err)
	}
	writable := func() {
		if err := p.primary.SetReadOnly(ctx, false); err != nil {
			t.Error(err)
		}
		waitFor(t, "the primary known again", func() bool {
			p.srv.NoteReadOnly()
			return p.srv.Topology().State == "primary"
		})
	}
	writable()
	mustExecConn(t, txn, "UPDATE t SET w = w + 10 WHERE id = 3")
	if err := p.primary.SetReadOnly(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The primary turns writable again once the statement is answered, or
	// held for a replay: not before holdfast confirmed the 1290 (a server
	// writable again by then makes it the client's as it is).
	back := make(chan struct{})
	var answered atomic.Bool
	go func() {
		defer close(back)
		waitFor(t, "the statement answered or held", func() bool { return answered.Load() || p.srv.FailoverStats().HeldNow == 1 })
		writable()
	}()
	_, err := txn.ExecContext(ctx, "UPDATE t SET w = w + 10 WHERE id = 3")
	answered.Store(true)
	<-back
	if code, _ := codeOf(err); code != codePrimarySwitching {
		t.Fatalf("the implicit transaction's statement the read-only primary refused: %v; want 9010 (it has no record to replay)", err)
	}
	mustExecConn(t, txn, "COMMIT")
	mustExecConn(t, txn, "SET autocommit = 1")
	db := p.primary.Open("sw")
	defer db.Close()
	var w int
	if err := db.QueryRow("SELECT w FROM t WHERE id = 3").Scan(&w); err != nil || w != 0 {
		t.Fatalf("row 3: w %d, %v; want 0 (both updates rolled back)", w, err)
	}
	if have := rowsOn(t, p.primary); have[1] != 0 || have[2] != 0 {
		t.Fatalf("rows: %v; want none of the rolled-back transaction's", have)
	}
}
