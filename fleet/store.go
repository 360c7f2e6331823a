package fleet

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Store reads and writes the fleet's tables on a database/sql pool of its
// own. Its methods are safe for concurrent use. Every time it stores is
// the database's (NOW(6)), never the host's.
type Store struct {
	db *sql.DB
	// oldMembers is when (Unix nanoseconds) holdfast_members was last
	// found without the columns of schema version 6 (0: never, or found
	// with them since): until membersRecheck after it, the heartbeat and
	// the members' read use the columns of version 5 alone.
	oldMembers atomic.Int64
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

// MaxControls is how many control rows an instance reads at most: the
// rows after the first MaxControls (by tag and kind) are not read, and
// Status says so (Truncated).
const MaxControls = 10000

// Ignored is a control row an instance does not apply, and why: Validate's
// error (an unknown kind, say, written by a newer holdfast, or a row
// written by hand).
type Ignored struct {
	Control
	Reason string `json:"ignored_because"`
}

// ControlsRead is one read of the controls in force (unexpired by the
// database's clock).
type ControlsRead struct {
	Controls []Control // valid: to be applied
	Ignored  []Ignored // invalid: not applied
	// Truncated: there were more than MaxControls rows; those after the
	// first MaxControls were not read.
	Truncated bool
	// Now is the database's time of the read (zero when there were no
	// rows: it serves only to place expiries on this host's clock).
	Now time.Time
}

// Controls reads the controls in force, each validated as the admin API
// validates a control it writes (Control.Validate): a row that fails is
// returned among the ignored, never among the controls.
func (s *Store) Controls(ctx context.Context) (ControlsRead, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT tag, kind, value, set_by, reason, set_at, expires_at, NOW(6)
FROM holdfast_controls WHERE expires_at IS NULL OR expires_at > NOW(6) ORDER BY tag, kind LIMIT ?`, MaxControls+1)
	if err != nil {
		return ControlsRead{}, missing(err)
	}
	defer rows.Close()
	var out ControlsRead
	n := 0
	for rows.Next() {
		if n++; n > MaxControls {
			out.Truncated = true
			break
		}
		var c Control
		var kind string
		var exp sql.NullTime
		if err := rows.Scan(&c.Tag, &kind, &c.Value, &c.SetBy, &c.Reason, &c.SetAt, &exp, &out.Now); err != nil {
			return ControlsRead{}, err
		}
		c.Kind = Kind(kind)
		if exp.Valid {
			c.Expires = exp.Time
		}
		if err := c.Validate(); err != nil {
			out.Ignored = append(out.Ignored, Ignored{Control: c, Reason: strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")})
			continue
		}
		out.Controls = append(out.Controls, c)
	}
	if err := rows.Err(); err != nil {
		return ControlsRead{}, err
	}
	return out, nil
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
	_, err := s.execControl(ctx, q, args...)
	return missing(err)
}

// RemoveControl lifts tag's control of kind; it reports whether there was
// one in force.
func (s *Store) RemoveControl(ctx context.Context, tag string, kind Kind) (bool, error) {
	res, err := s.execControl(ctx, `DELETE FROM holdfast_controls WHERE tag = ? AND kind = ?`, tag, string(kind))
	if err != nil {
		return false, missing(err)
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// execControl runs a control's write on a connection of its own, which is
// closed rather than used again when the server refused the write as
// read-only (ReadOnly): that server is no longer the primary, and the
// next try dials the backend's address again, which a switchover moves
// to the new one.
func (s *Store) execControl(ctx context.Context, q string, args ...any) (sql.Result, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	res, err := conn.ExecContext(ctx, q, args...)
	if ReadOnly(err) {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return res, err
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
	// SchemaMin and SchemaMax are the schema versions the instance runs
	// against (reservation.SchemaMin and SchemaVersion of its build), and
	// Kinds the kinds of control it applies (KnownKinds of its build).
	// 0 and nil: not recorded, by an instance of a version before schema
	// version 6 (or any instance while the database is older than that).
	SchemaMin int    `json:"schema_min,omitempty"`
	SchemaMax int    `json:"schema_max,omitempty"`
	Kinds     []Kind `json:"control_kinds"`
}

// Recorded reports whether m recorded its schema range and control kinds
// (a version from schema version 6 on, on a database migrated to it).
func (m Member) Recorded() bool { return m.Kinds != nil }

// membersRecheck is how long the heartbeat keeps to the members' columns
// of schema version 5 after it found the table without those of version
// 6, before it tries them again (`holdfast migrate` may have run).
const membersRecheck = time.Minute

// errNumBadField is ER_BAD_FIELD_ERROR: a column the statement names is
// not in the table (holdfast_members before schema version 6).
const errNumBadField = 1054

// oldMembersTable reports whether holdfast_members is taken to lack the
// columns of schema version 6 now.
func (s *Store) oldMembersTable() bool {
	at := s.oldMembers.Load()
	return at != 0 && time.Since(time.Unix(0, at)) < membersRecheck
}

// noteOldMembers reports whether err says holdfast_members lacks a column
// of schema version 6, and remembers it when it does.
func (s *Store) noteOldMembers(err error) bool {
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != errNumBadField {
		return false
	}
	s.oldMembers.Store(time.Now().UnixNano())
	return true
}

// MembersRecorded reports whether the instances' heartbeats record their
// schema range and control kinds: false while the database is at a
// schema version before 6 (`holdfast migrate` adds the columns).
func (s *Store) MembersRecorded() bool { return !s.oldMembersTable() }

// Heartbeat records m as alive now (the database's time); its start time
// is stored on the first beat. The statement names its columns, as every
// version's does, so that instances of versions before and after a step
// that adds columns to holdfast_members share the table; before schema
// version 6 it records no schema range nor control kinds.
func (s *Store) Heartbeat(ctx context.Context, m Member) error {
	if !s.oldMembersTable() {
		_, err := s.db.ExecContext(ctx, `INSERT INTO holdfast_members (instance_id, address, version, pool_max, stmt_budget, started_at, last_seen,
  schema_min, schema_max, control_kinds)
VALUES (?, ?, ?, ?, ?, NOW(6), NOW(6), ?, ?, ?)
ON DUPLICATE KEY UPDATE address = VALUES(address), version = VALUES(version), pool_max = VALUES(pool_max),
  stmt_budget = VALUES(stmt_budget), last_seen = VALUES(last_seen),
  schema_min = VALUES(schema_min), schema_max = VALUES(schema_max), control_kinds = VALUES(control_kinds)`,
			m.ID, m.Address, m.Version, m.PoolMax, m.StmtBudget, m.SchemaMin, m.SchemaMax, kindsText(m.Kinds))
		if !s.noteOldMembers(err) {
			if err == nil {
				s.oldMembers.Store(0)
			}
			return missing(err)
		}
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO holdfast_members (instance_id, address, version, pool_max, stmt_budget, started_at, last_seen)
VALUES (?, ?, ?, ?, ?, NOW(6), NOW(6))
ON DUPLICATE KEY UPDATE address = VALUES(address), version = VALUES(version), pool_max = VALUES(pool_max),
  stmt_budget = VALUES(stmt_budget), last_seen = VALUES(last_seen)`,
		m.ID, m.Address, m.Version, m.PoolMax, m.StmtBudget)
	return missing(err)
}

// kindsText is kinds as control_kinds holds them: comma-separated.
func kindsText(kinds []Kind) string {
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = string(k)
	}
	return strings.Join(parts, ",")
}

// parseKinds reads control_kinds; NULL is nil (not recorded).
func parseKinds(s sql.NullString) []Kind {
	if !s.Valid {
		return nil
	}
	out := []Kind{}
	for _, k := range strings.Split(s.String, ",") {
		if k != "" {
			out = append(out, Kind(k))
		}
	}
	return out
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
	// Forgetting is a write, which a read-only server (a primary being
	// switched over) refuses: then the instances are read all the same.
	if _, err := s.db.ExecContext(ctx, `DELETE FROM holdfast_members WHERE last_seen < NOW(6) - INTERVAL ? MICROSECOND`,
		(10 * ttl).Microseconds()); err != nil && !ReadOnly(err) {
		return nil, missing(err)
	}
	recorded := !s.oldMembersTable()
	q := `SELECT instance_id, address, version, pool_max, stmt_budget, started_at, last_seen, schema_min, schema_max, control_kinds
FROM holdfast_members WHERE last_seen >= NOW(6) - INTERVAL ? MICROSECOND ORDER BY instance_id`
	if !recorded {
		q = `SELECT instance_id, address, version, pool_max, stmt_budget, started_at, last_seen, NULL, NULL, NULL
FROM holdfast_members WHERE last_seen >= NOW(6) - INTERVAL ? MICROSECOND ORDER BY instance_id`
	}
	rows, err := s.db.QueryContext(ctx, q, ttl.Microseconds())
	if recorded && s.noteOldMembers(err) {
		return s.Members(ctx, ttl)
	}
	if err != nil {
		return nil, missing(err)
	}
	defer rows.Close()
	var out []Member
	for rows.Next() {
		var m Member
		var lo, hi sql.NullInt64
		var kinds sql.NullString
		if err := rows.Scan(&m.ID, &m.Address, &m.Version, &m.PoolMax, &m.StmtBudget, &m.StartedAt, &m.LastSeen, &lo, &hi, &kinds); err != nil {
			return nil, err
		}
		m.SchemaMin, m.SchemaMax, m.Kinds = int(lo.Int64), int(hi.Int64), parseKinds(kinds)
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

// Grant is one instance's row of a fleet-wide cap (holdfast_cap_grants).
type Grant struct {
	Instance string `json:"instance_id"`
	// Granted is the slots it may hold; Wanted its demand when it last
	// renewed (held plus queued under the cap, the most at once since its
	// renewal before); Share its fair share in the round of the read
	// (Shares).
	Granted int `json:"granted"`
	Wanted  int `json:"wanted"`
	Share   int `json:"share"`
}

// Share is an instance's part of a fleet-wide cap after a renewal (Grant).
type Share struct {
	// Cap is the cap, as its control's row says now.
	Cap int
	// Granted is the instance's grant now; Fair its fair share this round
	// (Shares). It admits at most min(Granted, Fair): above its fair share
	// it stops admitting at once, and its grant comes down to the share as
	// what it holds falls, at its following renewals.
	Granted, Fair int
	// Next is its fair share in the next round, which begins RoundLeft
	// after the renewal (by the database's clock): where the two differ,
	// the instance renews again as the round turns.
	Next      int
	RoundLeft time.Duration
	// Grants are the cap's live rows after the renewal, by instance.
	Grants []Grant
}

// Grant renews instance's grant of tag's fleet-wide cap. want is its
// demand; used the most it may hold while the renewal runs (what it holds,
// or its admission ceiling when that is higher: it must not admit above
// the grant it had). In one transaction, which locks the cap's control row
// (a row lock as a mutex: no gap locks, no deadlocks between instances),
// it drops the rows of instances not renewed within ttl, computes every
// live instance's fair share (Shares, in the round of the database's clock
// for rounds of period), and sets instance's grant: down to max(share,
// used) when above its share, up to its share when below, but only into
// slots no live row holds. So the grants of a cap's live rows never add up
// to more than the cap. ErrNoCap: the cap was lifted (or has expired).
//
// poll is the instances' poll interval (0: none is assumed). When
// instance's own row has not been renewed for ttl − 2 × poll (and ttl is
// at least 4 × poll), it could not write either: the database took no
// writes (the primary was switched over, or failed over). The other rows
// not renewed meanwhile are then not taken over but given a fresh ttl
// (their renewed_at moved to now): their instances may have kept
// admitting under their grants through the switch (Fleet, caps.go), and
// renew them at their next poll; a gone instance's lapses a ttl later.
func (s *Store) Grant(ctx context.Context, tag, instance string, want, used int, ttl, period, poll time.Duration) (Share, error) {
	tx, err := s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return Share{}, err
	}
	defer func() { _ = tx.Rollback() }()
	var capN, nowMicros int64
	var ownAge sql.NullInt64 // microseconds since instance's row was renewed; NULL: no row
	switch err := tx.QueryRowContext(ctx, `SELECT value, TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)),
  (SELECT TIMESTAMPDIFF(MICROSECOND, renewed_at, NOW(6)) FROM holdfast_cap_grants WHERE tag = ? AND instance_id = ?)
FROM holdfast_controls WHERE tag = ? AND kind = 'limit' AND (expires_at IS NULL OR expires_at > NOW(6)) FOR UPDATE`,
		tag, instance, tag).Scan(&capN, &nowMicros, &ownAge); {
	case errors.Is(err, sql.ErrNoRows):
		return Share{}, ErrNoCap
	case err != nil:
		return Share{}, missing(err)
	}
	capN = min(max(capN, 0), math.MaxInt32)
	if outage := ttl - 2*poll; poll > 0 && ttl >= 4*poll && ownAge.Valid && ownAge.Int64 >= outage.Microseconds() {
		// Out of a time without writes: nobody's grant is taken over.
		if _, err := tx.ExecContext(ctx, `UPDATE holdfast_cap_grants SET renewed_at = NOW(6)
WHERE tag = ? AND instance_id <> ? AND renewed_at < NOW(6) - INTERVAL ? MICROSECOND`, tag, instance, outage.Microseconds()); err != nil {
			return Share{}, missing(err)
		}
	} else if _, err := tx.ExecContext(ctx, `DELETE FROM holdfast_cap_grants WHERE tag = ? AND renewed_at < NOW(6) - INTERVAL ? MICROSECOND`,
		tag, ttl.Microseconds()); err != nil {
		return Share{}, missing(err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT instance_id, granted, wanted FROM holdfast_cap_grants WHERE tag = ? ORDER BY instance_id FOR UPDATE`, tag)
	if err != nil {
		return Share{}, missing(err)
	}
	var gs []Grant // by instance
	self := -1
	for rows.Next() {
		var g Grant
		if err := rows.Scan(&g.Instance, &g.Granted, &g.Wanted); err != nil {
			rows.Close()
			return Share{}, err
		}
		if g.Instance == instance {
			self = len(gs)
		}
		gs = append(gs, g)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Share{}, err
	}
	round, left := Round(nowMicros, period)
	sh, self := renewal(int(capN), round, gs, self, instance, want, used)
	sh.RoundLeft = left
	g := sh.Granted
	if _, err := tx.ExecContext(ctx, `INSERT INTO holdfast_cap_grants (tag, instance_id, granted, wanted, renewed_at)
VALUES (?, ?, ?, ?, NOW(6))
ON DUPLICATE KEY UPDATE granted = VALUES(granted), wanted = VALUES(wanted), renewed_at = VALUES(renewed_at)`,
		tag, instance, g, sh.Grants[self].Wanted); err != nil {
		return Share{}, err
	}
	if err := tx.Commit(); err != nil {
		return Share{}, err
	}
	return sh, nil
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

// ReadOnly reports whether err is a server's refusal to write because it
// is read-only (1290 --read-only, 1836 super_read_only): the primary is
// being switched over, or the address leads to a replica.
func ReadOnly(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && (me.Number == 1290 || me.Number == 1836)
}
