package fleet

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Store reads and writes the fleet's tables on a database/sql pool of its
// own. Its methods are safe for concurrent use. Every time it stores is
// the database's (NOW(6)), never the host's.
type Store struct {
	db *sql.DB
}

// NewStore is a Store on db (which the caller owns and closes).
func NewStore(db *sql.DB) *Store { return &Store{db: db} }

// ErrNoCap is Grant's error for a tag no longer capped.
var ErrNoCap = errors.New("fleet: the tag has no fleet-wide limit")

// ErrNoSchema is wrapped by the errors of a database without the fleet's
// tables: `holdfast migrate` has not brought it to schema version 5.
var ErrNoSchema = errors.New("fleet: the fleet's tables are missing: run `holdfast migrate` (schema version 5)")

// missing turns MySQL's "table doesn't exist" into ErrNoSchema.
func missing(err error) error {
	var me *mysql.MySQLError
	if errors.As(err, &me) && me.Number == 1146 {
		return fmt.Errorf("%w (%s)", ErrNoSchema, me.Message)
	}
	return err
}

// MaxConns is how many connections a Store's database handle should keep
// at most, outside the proxy's pool: the poll, and a control written
// through the admin API beside it.
const MaxConns = 2

// Controls returns the controls in force (unexpired by the database's
// clock) and the database's time of the read (zero when there are none:
// it serves only to place their expiries on this host's clock).
func (s *Store) Controls(ctx context.Context) ([]Control, time.Time, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tag, kind, value, set_by, reason, set_at, expires_at, NOW(6)
FROM holdfast_controls WHERE expires_at IS NULL OR expires_at > NOW(6) ORDER BY tag, kind`)
	if err != nil {
		return nil, time.Time{}, missing(err)
	}
	defer rows.Close()
	var out []Control
	var now time.Time
	for rows.Next() {
		var c Control
		var kind string
		var exp sql.NullTime
		if err := rows.Scan(&c.Tag, &kind, &c.Value, &c.SetBy, &c.Reason, &c.SetAt, &exp, &now); err != nil {
			return nil, time.Time{}, err
		}
		c.Kind = Kind(kind)
		if exp.Valid {
			c.Expires = exp.Time
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, err
	}
	return out, now, nil
}

// SetControl writes c (replacing the tag's control of the same kind),
// stamped with the database's time; expires (> 0) lifts it that long
// after, by the database's clock.
func (s *Store) SetControl(ctx context.Context, c Control, expires time.Duration) error {
	if err := c.Validate(); err != nil {
		return err
	}
	var exp any // NULL: never
	q := `INSERT INTO holdfast_controls (tag, kind, value, set_by, reason, set_at, expires_at)
VALUES (?, ?, ?, ?, ?, NOW(6), NULL)
ON DUPLICATE KEY UPDATE value = VALUES(value), set_by = VALUES(set_by), reason = VALUES(reason),
  set_at = VALUES(set_at), expires_at = VALUES(expires_at)`
	args := []any{c.Tag, string(c.Kind), c.Value, c.SetBy, c.Reason}
	if expires > 0 {
		q = `INSERT INTO holdfast_controls (tag, kind, value, set_by, reason, set_at, expires_at)
VALUES (?, ?, ?, ?, ?, NOW(6), NOW(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE value = VALUES(value), set_by = VALUES(set_by), reason = VALUES(reason),
  set_at = VALUES(set_at), expires_at = VALUES(expires_at)`
		exp = expires.Microseconds()
		args = append(args, exp)
	}
	_, err := s.db.ExecContext(ctx, q, args...)
	return missing(err)
}

// RemoveControl lifts tag's control of kind; it reports whether there was
// one in force.
func (s *Store) RemoveControl(ctx context.Context, tag string, kind Kind) (bool, error) {
	res, err := s.db.ExecContext(ctx, `DELETE FROM holdfast_controls WHERE tag = ? AND kind = ?`, tag, string(kind))
	if err != nil {
		return false, missing(err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// Member is one holdfast instance of the fleet.
type Member struct {
	ID      string `json:"instance_id"`
	Address string `json:"address"`
	Version string `json:"version"`
	PoolMax int    `json:"pool_max"`
	// StmtBudget is how many prepared statements the instance keeps on
	// its backend connections at most (0: not known yet).
	StmtBudget int       `json:"stmt_budget"`
	StartedAt  time.Time `json:"started_at"`
	LastSeen   time.Time `json:"last_seen"`
}

// Heartbeat records m as alive now (the database's time); its start time
// is stored on the first beat.
func (s *Store) Heartbeat(ctx context.Context, m Member) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO holdfast_members (instance_id, address, version, pool_max, stmt_budget, started_at, last_seen)
VALUES (?, ?, ?, ?, ?, NOW(6), NOW(6))
ON DUPLICATE KEY UPDATE address = VALUES(address), version = VALUES(version), pool_max = VALUES(pool_max),
  stmt_budget = VALUES(stmt_budget), last_seen = VALUES(last_seen)`,
		m.ID, m.Address, m.Version, m.PoolMax, m.StmtBudget)
	return missing(err)
}

// Leave removes m's row (a clean shutdown).
func (s *Store) Leave(ctx context.Context, id string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM holdfast_members WHERE instance_id = ?`, id)
	if err == nil {
		_, err = s.db.ExecContext(ctx, `DELETE FROM holdfast_cap_grants WHERE instance_id = ?`, id)
	}
	return missing(err)
}

// Members returns the instances seen within ttl (the database's clock),
// and forgets those not seen for ten times as long.
func (s *Store) Members(ctx context.Context, ttl time.Duration) ([]Member, error) {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM holdfast_members WHERE last_seen < NOW(6) - INTERVAL ? MICROSECOND`,
		(10 * ttl).Microseconds()); err != nil {
		return nil, missing(err)
	}
	rows, err := s.db.QueryContext(ctx, `SELECT instance_id, address, version, pool_max, stmt_budget, started_at, last_seen
FROM holdfast_members WHERE last_seen >= NOW(6) - INTERVAL ? MICROSECOND ORDER BY instance_id`, ttl.Microseconds())
	if err != nil {
		return nil, missing(err)
	}
	defer rows.Close()
	var out []Member
	for rows.Next() {
		var m Member
		if err := rows.Scan(&m.ID, &m.Address, &m.Version, &m.PoolMax, &m.StmtBudget, &m.StartedAt, &m.LastSeen); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// ServerLimits are the backend server's connection and prepared
// statement limits, which the fleet's pools and statement caches share.
type ServerLimits struct {
	MaxConnections       int `json:"max_connections"`
	MaxPreparedStmtCount int `json:"max_prepared_stmt_count"`
}

// Limits reads the server's limits.
func (s *Store) Limits(ctx context.Context) (ServerLimits, error) {
	var l ServerLimits
	err := s.db.QueryRowContext(ctx, "SELECT @@GLOBAL.max_connections, @@GLOBAL.max_prepared_stmt_count").
		Scan(&l.MaxConnections, &l.MaxPreparedStmtCount)
	return l, err
}

// Grant renews instance's grant of tag's fleet-wide cap and returns it.
// In one transaction, which locks the tag's grant rows, it drops the rows
// of instances not renewed within ttl, and sets instance's grant: towards
// its fair share of cap among the live instances by what each wants, never
// below used (the connections it holds now: the caller stops admitting
// borrows above min(its grant, used) first when its grant may shrink), and
// growing only into slots no live instance holds. So the grants of a tag's
// live rows never add up to more than cap.
func (s *Store) Grant(ctx context.Context, tag, instance string, cap, want, used int, ttl time.Duration) (int, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	// The tag's limit row serializes the changes of its grants (a row lock
	// as a mutex: no gap locks, no deadlocks between instances). No row:
	// the cap was lifted meanwhile.
	var one int
	switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM holdfast_controls WHERE tag = ? AND kind = 'limit' FOR UPDATE`, tag).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, ErrNoCap
	case err != nil:
		return 0, missing(err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM holdfast_cap_grants WHERE tag = ? AND renewed_at < NOW(6) - INTERVAL ? MICROSECOND`,
		tag, ttl.Microseconds()); err != nil {
		return 0, missing(err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT instance_id, granted, wanted FROM holdfast_cap_grants WHERE tag = ? FOR UPDATE`, tag)
	if err != nil {
		return 0, missing(err)
	}
	var others []demand
	grantedOthers, mine := 0, 0
	for rows.Next() {
		var d demand
		if err := rows.Scan(&d.id, &d.granted, &d.wanted); err != nil {
			rows.Close()
			return 0, err
		}
		if d.id == instance {
			mine = d.granted
			continue
		}
		grantedOthers += d.granted
		others = append(others, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	fair := fairShare(cap, instance, want, others)
	target := max(used, min(want, fair))
	g := mine
	switch {
	case target > mine:
		g = min(target, max(mine, cap-grantedOthers))
	case target < mine:
		g = max(target, used)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO holdfast_cap_grants (tag, instance_id, granted, wanted, renewed_at)
VALUES (?, ?, ?, ?, NOW(6))
ON DUPLICATE KEY UPDATE granted = VALUES(granted), wanted = VALUES(wanted), renewed_at = VALUES(renewed_at)`,
		tag, instance, g, want); err != nil {
		return 0, err
	}
	if err := tx.Commit(); err != nil {
		return 0, err
	}
	return g, nil
}

// ReleaseGrants drops instance's grants of tags no longer capped.
func (s *Store) ReleaseGrants(ctx context.Context, instance string, keep []string) error {
	rows, err := s.db.QueryContext(ctx, `SELECT tag FROM holdfast_cap_grants WHERE instance_id = ?`, instance)
	if err != nil {
		return missing(err)
	}
	var drop []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return err
		}
		if !slices.Contains(keep, t) {
			drop = append(drop, t)
		}
	}
	rows.Close()
	for _, t := range drop {
		if _, err := s.db.ExecContext(ctx, `DELETE FROM holdfast_cap_grants WHERE tag = ? AND instance_id = ?`, t, instance); err != nil {
			return err
		}
	}
	return rows.Err()
}

// demand is one instance's row of a tag's grants.
type demand struct {
	id              string
	granted, wanted int
}

// fairShare is the share of cap an instance wanting want gets beside
// others: cap divided by water-filling, so that an instance wanting less
// than an even split gets what it wants and the rest is split evenly among
// the others, the remainder going to the lowest ids. It is a target: the
// grant grows towards it only into free slots.
func fairShare(cap int, id string, want int, others []demand) int {
	type w struct {
		id   string
		want int
	}
	all := []w{{id, want}}
	for _, o := range others {
		all = append(all, w{o.id, o.wanted})
	}
	slices.SortFunc(all, func(a, b w) int {
		if a.want != b.want {
			return a.want - b.want
		}
		if a.id < b.id {
			return -1
		}
		return 1
	})
	left := cap
	share := map[string]int{}
	for i, x := range all {
		even := left / (len(all) - i)
		if x.want <= even {
			share[x.id] = x.want
			left -= x.want
			continue
		}
		// Everyone from here wants more than an even split: split evenly,
		// the remainder to the lowest ids.
		rest := all[i:]
		slices.SortFunc(rest, func(a, b w) int {
			if a.id < b.id {
				return -1
			}
			return 1
		})
		n := len(rest)
		for j, y := range rest {
			share[y.id] = left / n
			if j < left%n {
				share[y.id]++
			}
		}
		break
	}
	return share[id]
}

// Duty leases.

// HoldDuty takes or renews the lease on duty for holder, for ttl (the
// database's clock), and reports whether holder holds it now: a lease is
// taken over only once it has expired.
func (s *Store) HoldDuty(ctx context.Context, duty, holder string, ttl time.Duration) (bool, error) {
	// One statement: insert the lease, or take it when it is ours or has
	// expired; another holder's live lease stays as it is.
	_, err := s.db.ExecContext(ctx, `INSERT INTO holdfast_duties (duty, holder, expires_at)
VALUES (?, ?, NOW(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE
  holder = IF(holder = VALUES(holder) OR expires_at < NOW(6), VALUES(holder), holder),
  expires_at = IF(holder = VALUES(holder), VALUES(expires_at), expires_at)`,
		duty, holder, ttl.Microseconds())
	if err != nil {
		return false, missing(err)
	}
	var h string
	if err := s.db.QueryRowContext(ctx, `SELECT holder FROM holdfast_duties WHERE duty = ?`, duty).Scan(&h); err != nil {
		return false, err
	}
	return h == holder, nil
}

// ReleaseDuty gives up holder's lease on duty (a clean shutdown).
func (s *Store) ReleaseDuty(ctx context.Context, duty, holder string) error {
	_, err := s.db.ExecContext(ctx, `DELETE FROM holdfast_duties WHERE duty = ? AND holder = ?`, duty, holder)
	return missing(err)
}
