package dbtest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
)

// StartReplicaSet starts a private primary (server_id 1) and n private
// replicas of it (server_id 2, 3, ...; read-only, log_slave_updates, so
// that any of them can be promoted), MariaDB GTID replication, and waits
// until every replica replicates. All are stopped at cleanup. args go to
// every server's command line. StartReplicaPair is the case n = 1.
func StartReplicaSet(t testing.TB, n int, args ...string) (primary *Private, replicas []*Private) {
	t.Helper()
	primary = StartPrivate(t, args...)
	for i := range n {
		r := StartPrivate(t, append([]string{"--server-id=" + strconv.Itoa(i+2), "--read-only=1", "--log-slave-updates=1"}, args...)...)
		if err := r.Follow(primary); err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, r)
	}
	return primary, replicas
}

// StopReplicating makes p replicate from no one (STOP SLAVE; RESET SLAVE
// ALL), leaving its read_only as it is.
func (p *Private) StopReplicating(ctx context.Context) error {
	db, err := p.open("")
	if err != nil {
		return err
	}
	defer db.Close()
	for _, q := range []string{"STOP SLAVE", "RESET SLAVE ALL"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("dbtest: %s: %s: %w", p.Addr, q, err)
		}
	}
	return nil
}

// ServerID is p's @@server_id.
func (p *Private) ServerID(ctx context.Context) (int, error) {
	db, err := p.open("")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var id int
	err = db.QueryRowContext(ctx, "SELECT @@server_id").Scan(&id)
	return id, err
}
