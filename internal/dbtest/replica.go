package dbtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"testing"
	"time"
)

// StartReplicaPair starts a private primary and a private replica of it
// (MariaDB GTID replication, MASTER_USE_GTID=slave_pos), each on its own
// port and data directory, and waits until the replica replicates. Both
// are stopped at cleanup; the machine's own server is left alone. args go
// to both servers' command lines.
func StartReplicaPair(t testing.TB, args ...string) (primary, replica *Private) {
	t.Helper()
	primary = StartPrivate(t, args...)
	replica = StartPrivate(t, append([]string{"--server-id=2", "--read-only=1", "--log-slave-updates=1"}, args...)...)
	if err := replica.Follow(primary); err != nil {
		t.Fatal(err)
	}
	return primary, replica
}

// Follow makes p replicate from primary (GTID replication, from the
// position p has applied) and waits up to 30 s until both of its threads
// run.
func (p *Private) Follow(primary *Private) error {
	host, port, _ := net.SplitHostPort(primary.Addr)
	db, err := p.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{
		"STOP SLAVE",
		fmt.Sprintf("CHANGE MASTER TO MASTER_HOST='%s', MASTER_PORT=%s, MASTER_USER='root', MASTER_PASSWORD='', MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1", host, port),
		"START SLAVE",
	} {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("dbtest: replica %s: %s: %w", p.Addr, q, err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		io, sqlRunning, lastErr, err := SlaveThreads(db)
		if err == nil && io == "Yes" && sqlRunning == "Yes" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("dbtest: replica %s does not replicate from %s: io %q sql %q %s %v", p.Addr, primary.Addr, io, sqlRunning, lastErr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SlaveThreads reads SHOW SLAVE STATUS on db: whether the IO and SQL
// threads run ("Yes"), and the last error of either ("" when none, and all
// empty when db replicates from no one).
func SlaveThreads(db *sql.DB) (io, sqlRunning, lastErr string, err error) {
	rows, err := db.Query("SHOW SLAVE STATUS")
	if err != nil {
		return "", "", "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", "", "", err
	}
	if !rows.Next() {
		return "", "", "", rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", "", "", err
	}
	for i, c := range cols {
		switch c {
		case "Slave_IO_Running":
			io = vals[i].String
		case "Slave_SQL_Running":
			sqlRunning = vals[i].String
		case "Last_IO_Error", "Last_SQL_Error":
			if vals[i].String != "" {
				lastErr += vals[i].String + " "
			}
		}
	}
	return io, sqlRunning, lastErr, rows.Err()
}

// CaughtUp waits, up to d, until replica has applied everything primary
// had when it was called (MASTER_GTID_WAIT on its gtid_binlog_pos).
func CaughtUp(ctx context.Context, primary, replica *sql.DB, d time.Duration) error {
	var pos string
	if err := primary.QueryRowContext(ctx, "SELECT @@gtid_binlog_pos").Scan(&pos); err != nil {
		return fmt.Errorf("dbtest: the primary's position: %w", err)
	}
	var waited int
	if err := replica.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", pos, d.Seconds()).Scan(&waited); err != nil || waited != 0 {
		return fmt.Errorf("dbtest: the replica did not reach %s within %v (%d): %v", pos, d, waited, err)
	}
	return nil
}

// GlobalStatus reads one of the server's global status counters (with
// SHOW, so reading Com_select counts no SELECT).
func GlobalStatus(ctx context.Context, db *sql.DB, name string) (int64, error) {
	var n string
	var v int64
	err := db.QueryRowContext(ctx, "SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&n, &v)
	return v, err
}

// ComSelect reads db's server's Com_select (by SHOW, which counts no
// SELECT), failing the test on an error.
func ComSelect(t testing.TB, db *sql.DB) int {
	t.Helper()
	n, err := GlobalStatus(context.Background(), db, "Com_select")
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// SetReadOnly sets p's read_only (as an HA tool demotes a primary first:
// accounts without SUPER or READ ONLY ADMIN then get 1290 for writes).
func (p *Private) SetReadOnly(ctx context.Context, on bool) error {
	db, err := p.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	v := "0"
	if on {
		v = "1"
	}
	if _, err := db.ExecContext(ctx, "SET GLOBAL read_only = "+v); err != nil {
		return fmt.Errorf("dbtest: %s: read_only=%s: %w", p.Addr, v, err)
	}
	return nil
}

// Promote makes p, a replica, a primary, as an HA tool does: it stops
// replicating, forgets its source, and takes writes (STOP SLAVE; RESET
// SLAVE ALL; SET GLOBAL read_only=0).
func (p *Private) Promote(ctx context.Context) error {
	db, err := p.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("dbtest: promote %s: %s: %w", p.Addr, q, err)
		}
	}
	return nil
}

// FollowDemoted makes p, a former primary, replicate from primary (its
// promoted replica) from where p's own binary log ends: its gtid_slave_pos
// becomes its gtid_binlog_pos, then Follow (MASTER_USE_GTID=slave_pos).
func (p *Private) FollowDemoted(primary *Private) error {
	db, err := p.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{"STOP SLAVE", "SET GLOBAL gtid_slave_pos = @@global.gtid_binlog_pos"} {
		if _, err := db.Exec(q); err != nil {
			return fmt.Errorf("dbtest: demote %s: %s: %w", p.Addr, q, err)
		}
	}
	return p.Follow(primary)
}

// SwitchoverSteps are when each step of Switchover ended.
type SwitchoverSteps struct {
	Start, ReadOnly, CaughtUp, Promoted, Repointed, Moved time.Time
}

// Switchover moves the primary from old to its replica next as an HA tool
// does a planned switchover (MaxScale's switchover, orchestrator's
// graceful-master-takeover): old read-only; wait until next has applied
// everything old has (GTID, up to 30 s); promote next (Promote); old
// replicates from next (FollowDemoted); then move (nil: nothing), which
// moves the name or VIP clients reach the primary at.
func Switchover(ctx context.Context, old, next *Private, move func()) (SwitchoverSteps, error) {
	st := SwitchoverSteps{Start: time.Now()}
	if err := old.SetReadOnly(ctx, true); err != nil {
		return st, err
	}
	st.ReadOnly = time.Now()
	odb, err := old.open("")
	if err != nil {
		return st, err
	}
	defer odb.Close()
	ndb, err := next.open("")
	if err != nil {
		return st, err
	}
	defer ndb.Close()
	if err := CaughtUp(ctx, odb, ndb, 30*time.Second); err != nil {
		return st, err
	}
	st.CaughtUp = time.Now()
	if err := next.Promote(ctx); err != nil {
		return st, err
	}
	st.Promoted = time.Now()
	if err := old.FollowDemoted(next); err != nil {
		return st, err
	}
	st.Repointed = time.Now()
	if move != nil {
		move()
	}
	st.Moved = time.Now()
	return st, nil
}

// PromoteApplied makes p, a replica whose primary is gone (killed, or cut
// off), the primary as a careful HA tool does (orchestrator's and MHA's
// "apply the relay logs first"): it makes sure the SQL thread runs, stops
// the IO thread, so that what the replica received is fixed, waits up to
// wait until the SQL thread has applied everything the IO thread received
// (MASTER_GTID_WAIT on Gtid_IO_Pos), then promotes it (Promote). Without
// that wait, RESET SLAVE ALL throws away the relay log and every
// transaction in it: writes the old primary acknowledged, which the
// replica held, are lost. It returns the GTID position received (the
// empty string when the replica never received anything). Who calls it:
// the switchover bench and the chaos harness, after a kill -9.
func (p *Private) PromoteApplied(ctx context.Context, wait time.Duration) (received string, err error) {
	db, err := p.open("")
	if err != nil {
		return "", err
	}
	defer db.Close()
	// The SQL thread first: with both threads stopped, MariaDB (GTID
	// replication) forgets the relay log and what the IO thread received.
	conn, err := db.Conn(ctx)
	if err != nil {
		return "", fmt.Errorf("dbtest: promote %s: %w", p.Addr, err)
	}
	defer conn.Close()
	for _, q := range []string{"START SLAVE SQL_THREAD", "STOP SLAVE IO_THREAD"} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return "", fmt.Errorf("dbtest: promote %s: %s: %w", p.Addr, q, err)
		}
	}
	received, err = slaveStatusField(ctx, conn, "Gtid_IO_Pos")
	if err != nil {
		return "", fmt.Errorf("dbtest: promote %s: %w", p.Addr, err)
	}
	if received != "" {
		var waited int
		if err := conn.QueryRowContext(ctx, "SELECT MASTER_GTID_WAIT(?, ?)", received, wait.Seconds()).Scan(&waited); err != nil || waited != 0 {
			_, _, lastErr, _ := SlaveThreads(db)
			return received, fmt.Errorf("dbtest: promote %s: the relay log (up to %s) was not applied within %v (%d): %v %s", p.Addr, received, wait, waited, err, lastErr)
		}
	}
	return received, p.Promote(ctx)
}

// slaveStatusField reads one column of SHOW SLAVE STATUS on conn ("" when
// the server replicates from no one).
func slaveStatusField(ctx context.Context, conn *sql.Conn, name string) (string, error) {
	rows, err := conn.QueryContext(ctx, "SHOW SLAVE STATUS")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return "", err
	}
	if !rows.Next() {
		return "", rows.Err()
	}
	vals := make([]sql.NullString, len(cols))
	ptrs := make([]any, len(cols))
	for i := range vals {
		ptrs[i] = &vals[i]
	}
	if err := rows.Scan(ptrs...); err != nil {
		return "", err
	}
	for i, c := range cols {
		if c == name {
			return vals[i].String, rows.Err()
		}
	}
	return "", fmt.Errorf("SHOW SLAVE STATUS has no column %s", name)
}

// SemiSyncArgs are the server arguments of lossless semi-synchronous
// replication (MariaDB's built-in semi-sync, wait point AFTER_SYNC), for
// both servers of a pair whose roles may swap: a primary commits, and
// answers the client, only once a replica has received the transaction,
// so that a primary killed with SIGKILL takes no acknowledged write with
// it (PromoteApplied keeps what the replica received). A primary with no
// semi-sync replica connected (a promoted one whose old primary is dead)
// does not wait (rpl_semi_sync_master_wait_no_slave=OFF). Without these,
// asynchronous replication loses the acknowledged writes that had not yet
// reached the replica when the primary died: the harnesses of issue 45
// (bench-switchover, chaos's failover) use them, as an HA setup that
// promises no lost write does.
var SemiSyncArgs = []string{"--rpl-semi-sync-master-enabled=ON", "--rpl-semi-sync-slave-enabled=ON",
	"--rpl-semi-sync-master-wait-point=AFTER_SYNC", "--rpl-semi-sync-master-wait-no-slave=OFF"}
