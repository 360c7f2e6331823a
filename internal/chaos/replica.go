package chaos

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// The replica scenario's checks: every routed read is answered, and truly
// (a client reads the reservation it just made; the stock read from a
// replica, however stale, is never more than was stocked nor below zero).
const checkRead = "read"

// startReplica starts a replica of the scenario's server under dir,
// before the scenario creates its database, and waits until it has
// applied everything so far. It starts at the server's position now, as a
// replica seeded from a backup would: the earlier scenarios' history
// (hundreds of thousands of transactions) is not replayed. What of that
// history the scenario needs, the backend account, it gets directly.
func (s *scenario) startReplica(ctx context.Context) error {
	dir := filepath.Join(s.dir, fmt.Sprintf("s%d-replica", s.n))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	r, err := dbtest.NewPrivate(dir, "--server-id=2", "--read-only=1")
	if err != nil {
		return err
	}
	s.replica = r
	rdb := r.Open("")
	defer rdb.Close()
	var pos string
	if err := s.root.QueryRowContext(ctx, "SELECT @@GLOBAL.gtid_binlog_pos").Scan(&pos); err != nil {
		return fmt.Errorf("chaos: the primary's position: %w", err)
	}
	for _, q := range []string{
		fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", backendUser, backendUser),
		fmt.Sprintf("SET GLOBAL gtid_slave_pos = '%s'", pos),
	} {
		if _, err := rdb.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("chaos: replica: %s: %w", q, err)
		}
	}
	if err := r.Follow(s.srv); err != nil {
		return err
	}
	return dbtest.CaughtUp(ctx, s.root, rdb, time.Minute)
}

// killReplica kills the replica with SIGKILL every `every` until ctx is
// done, and restarts it (replicating again) after each of downs in turn.
// It returns with the replica running.
func killReplica(ctx context.Context, r, primary *dbtest.Private, every time.Duration, downs []time.Duration, log *faultLog) {
	for i := 0; lifecycle.Sleep(ctx, every) == nil; i++ {
		r.Kill()
		time.Sleep(downs[i%len(downs)])
		if err := r.Restart(); err != nil {
			log.fail("fault", "the replica did not restart: %v", err)
			return
		}
		if err := r.Follow(primary); err != nil {
			log.fail("fault", "the replica did not replicate again: %v", err)
			return
		}
		log.add(true)
	}
}

// readStock reads the shop's stock through db under the catalog tag until
// ctx is done: every read must be answered, and the sum must lie between 0
// and what was stocked.
func readStock(ctx context.Context, db *sql.DB, tables string, stocked int64, reads *int64, mu *sync.Mutex, out *[]Violation) {
	for ctx.Err() == nil {
		var sum sql.NullInt64
		err := db.QueryRowContext(context.Background(), "/* conn_tag:catalog */ SELECT SUM(on_hand) FROM "+tables+".inventory_ledger WHERE shop_id = ?", shopID).Scan(&sum)
		mu.Lock()
		*reads++
		switch {
		case err != nil:
			*out = append(*out, Violation{checkRead, "a stock read was not answered: " + err.Error()})
		case sum.Int64 < 0 || sum.Int64 > stocked:
			*out = append(*out, Violation{checkRead, fmt.Sprintf("the stock read %d, outside 0..%d stocked", sum.Int64, stocked)})
		}
		mu.Unlock()
		time.Sleep(5 * time.Millisecond)
	}
}

// readOwn reads back the reservation the client just made, under the
// catalog tag (routed to the replica once it has applied the client's
// writes): it must be there.
func (c *client) readOwn(key string) {
	if c.conn == nil {
		return
	}
	var n int
	err := c.conn.QueryRowContext(context.Background(), "/* conn_tag:catalog */ SELECT COUNT(*) FROM "+c.tables+".reservations WHERE shop_id = ? AND idempotency_key = ?", shopID, key).Scan(&n)
	c.ownReads++
	switch {
	case err != nil:
		c.violations = append(c.violations, Violation{checkRead, fmt.Sprintf("client %d: reading back its reservation %s was not answered: %v", c.id, key, err)})
	case n != 1:
		c.violations = append(c.violations, Violation{checkRead, fmt.Sprintf("client %d: read-your-writes: its reservation %s, just answered, read back %d rows", c.id, key, n)})
	}
}

// replicaReads asks each instance how many reads it routed to the replica
// and how many of them fell back to the primary.
func replicaReads(ctx context.Context, hs []*holdfast) (routed, fellBack int64, err error) {
	for _, h := range hs {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.cfg.Admin+"/api/replicas", nil)
		if err != nil {
			return 0, 0, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0, err
		}
		var ans struct {
			Replicas []struct {
				Routed   int64 `json:"reads_routed"`
				FellBack int64 `json:"reads_fell_back"`
			} `json:"replicas"`
		}
		err = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		if err != nil {
			return 0, 0, err
		}
		for _, r := range ans.Replicas {
			routed += r.Routed
			fellBack += r.FellBack
		}
	}
	return routed, fellBack, nil
}
