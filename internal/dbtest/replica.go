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
