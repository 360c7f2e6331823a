package reservation

import (
	"context"
	"fmt"
	"strconv"
)

// Table names. The engine writes them without a schema prefix, so they live
// in the database the backend connection uses by default: holdfast opens
// its own connections in the schema that holds them (see location.go).
const (
	TableLedger       = "inventory_ledger"
	TableUnits        = "reservation_units"
	TableReserved     = "reserved_quantities"
	TableReservations = "reservations"
	TableCounters     = "pool_counters"
	TableReturns      = "reservation_returns"
	TableMigrations   = "holdfast_schema_migrations"
	TableAuthority    = "holdfast_authority"
	TableRedisState   = "holdfast_redis_state"
	// The fleet's tables (package fleet, migration 5).
	TableControls = "holdfast_controls"
	TableMembers  = "holdfast_members"
	TableGrants   = "holdfast_cap_grants"
	TableDuties   = "holdfast_duties"
)

// Migration is one versioned schema step. Statements must be idempotent
// (CREATE TABLE IF NOT EXISTS and the like): two holdfast instances may
// migrate at once, and DDL commits implicitly, so no lock can cover a step.
// MySQL 8 has no ADD COLUMN IF NOT EXISTS: an ALTER TABLE that adds columns
// is idempotent because Migrate takes its "duplicate column" error (1060) as
// done, so such an ALTER must add all of a step's columns at once.
type Migration struct {
	Version    int
	Name       string
	Statements []string
}

// Migrations lists every schema version in order. Append only; never edit a
// released step. All SQL is valid on MySQL 8 and MariaDB 10.6+.
var Migrations = []Migration{{
	Version: 1,
	Name:    "reservation engine tables",
	Statements: []string{
		// The source of truth. on_hand only ever drops at claim (and by
		// set_on_hand/adjust); pooling and reserving borrow from it.
		`CREATE TABLE IF NOT EXISTS inventory_ledger (
  shop_id BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  on_hand BIGINT NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)
) ENGINE=InnoDB`,
		// One row per reservable unit. The filter columns are the clustered
		// key, so taking a unit locks exactly one index record.
		`CREATE TABLE IF NOT EXISTS reservation_units (
  shop_id BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  id BIGINT NOT NULL,
  PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id, id)
) ENGINE=InnoDB`,
		// One row per line of each held reservation; deleted at claim,
		// release and expiry. rq_pool serves the refill's and the
		// reconciler's per-pool sums and the refill's expired-row delete;
		// rq_expires serves the sweeper.
		`CREATE TABLE IF NOT EXISTS reserved_quantities (
  reservation_id BIGINT UNSIGNED NOT NULL,
  line_no SMALLINT UNSIGNED NOT NULL,
  shop_id BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  quantity INT NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (reservation_id, line_no),
  KEY rq_pool (shop_id, inventory_item_id, inventory_group_id, expires_at),
  KEY rq_expires (expires_at)
) ENGINE=InnoDB`,
		// One row per reservation, kept for the retention window after it
		// ends: the idempotency record (UNIQUE(shop_id, idempotency_key)
		// plus the request hash that tells a replay from a conflict), the
		// line items as reserved, and the claim log (state, claimed_at,
		// claim_kind) that makes claim idempotent. state: 0 active,
		// 1 claimed, 2 released. An active reservation whose expires_at
		// has passed is expired.
		`CREATE TABLE IF NOT EXISTS reservations (
  reservation_id BIGINT UNSIGNED NOT NULL,
  shop_id BIGINT NOT NULL,
  idempotency_key VARBINARY(255) NOT NULL,
  request_hash BINARY(32) NOT NULL,
  state TINYINT NOT NULL,
  line_count SMALLINT UNSIGNED NOT NULL,
  line_items BLOB NOT NULL,
  created_at DATETIME(6) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  finished_at DATETIME(6) NULL,
  claim_kind VARCHAR(16) NULL,
  PRIMARY KEY (reservation_id),
  UNIQUE KEY reservations_idempotency (shop_id, idempotency_key),
  KEY reservations_expires (expires_at)
) ENGINE=InnoDB`,
	},
}, {
	Version: 2,
	Name:    "pool counters and returns: refill without summing reservations",
	Statements: []string{
		// Per pool, the units issued out of on_hand: pool rows + quantity
		// of every reserved line present + pending returns. Written only
		// under the pool's inventory_ledger row lock (refill, claim, the
		// stock procedures), so a refill reads on_hand - issued instead of
		// summing every live reservation. A missing row means "unknown": the
		// next transaction that locks the ledger row recounts it from the
		// tables (so rows are created lazily, existing pools need no data
		// migration, and deleting a row forces a recount). next_unit_id
		// keeps unit ids increasing, never reusing the id of a deleted unit.
		`CREATE TABLE IF NOT EXISTS pool_counters (
  shop_id BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  issued BIGINT NOT NULL,
  next_unit_id BIGINT NOT NULL,
  PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id)
) ENGINE=InnoDB`,
		// Reserved lines deleted without the ledger row lock (release, the
		// sweeper) leave one row here in the same transaction; the next
		// refill of the pool deletes them and takes their quantity off
		// pool_counters.issued. Keyed by pool, so a refill reads a key
		// prefix.
		`CREATE TABLE IF NOT EXISTS reservation_returns (
  shop_id BIGINT NOT NULL,
  inventory_item_id BIGINT NOT NULL,
  inventory_group_id BIGINT NOT NULL,
  reservation_id BIGINT UNSIGNED NOT NULL,
  line_no SMALLINT UNSIGNED NOT NULL,
  quantity INT NOT NULL,
  PRIMARY KEY (shop_id, inventory_item_id, inventory_group_id, reservation_id, line_no)
) ENGINE=InnoDB`,
	},
}, {
	Version: 3,
	Name:    "reservations record the call that claimed, released or extended them",
	Statements: []string{
		// The id of the CALL that made each change, written in the change's
		// own transaction, so that a call whose connection was lost during
		// COMMIT can tell, on a fresh connection, that it did the change
		// itself and answer what it did: "claimed" rather than
		// "duplicate", "released" with the quantity it gave back
		// (released_quantity; 0 means the reservation had expired), the
		// expiry it set. NULL: no call recorded (rows of older versions).
		// A reserve needs none: its reservation_id is the call's. Nullable
		// columns added last: instant on MariaDB 10.4+ and MySQL 8.0.12+.
		`ALTER TABLE reservations
  ADD COLUMN claimed_by BIGINT UNSIGNED NULL,
  ADD COLUMN released_by BIGINT UNSIGNED NULL,
  ADD COLUMN released_quantity INT NULL,
  ADD COLUMN extended_by BIGINT UNSIGNED NULL`,
	},
}, {
	Version: 4,
	Name:    "migration from a Redis counter: each reservation's authority, the authority switch, Redis staleness",
	Statements: []string{
		// Who decided the reservation (Authority): NULL no legacy store,
		// 1 the engine (the legacy store written after it), 2 the legacy
		// Redis counter (the engine in shadow). A reservation is finished
		// by the authority it was made under. Nullable, added last:
		// instant on MariaDB 10.4+ and MySQL 8.0.12+.
		`ALTER TABLE reservations ADD COLUMN authority TINYINT NULL`,
		// The authority switch (package reservation/legacy): one row per
		// version, the highest is in force. Every holdfast instance polls
		// it; holdfastctl authority and the admin API insert the next
		// version. shops: comma-separated shop ids on holdfast; percent:
		// shops whose CRC32(shop_id) % 100 is below it are on holdfast.
		`CREATE TABLE IF NOT EXISTS holdfast_authority (
  version BIGINT NOT NULL,
  authority VARCHAR(16) NOT NULL,
  shops TEXT NOT NULL,
  percent INT NOT NULL,
  changed_at DATETIME(6) NOT NULL,
  changed_by VARCHAR(255) NOT NULL,
  reason VARCHAR(255) NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB`,
		// Row id 1: since when the Redis counters are known to be stale (a
		// write to Redis failed; NULL: not stale), why, and the last
		// resync-redis, which clears it.
		`CREATE TABLE IF NOT EXISTS holdfast_redis_state (
  id TINYINT NOT NULL,
  stale_since DATETIME(6) NULL,
  stale_reason VARCHAR(255) NULL,
  resynced_at DATETIME(6) NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB`,
	},
}, {
	Version: 5,
	Name:    "the fleet: on-call controls, membership, fleet-wide cap grants, duty leases",
	Statements: []string{
		// On-call controls every instance applies (package fleet): one row
		// per tag and kind. kind drain: value is the grace in milliseconds
		// (0: none); limit: the fleet-wide connection cap; max_txn: the
		// tag's max_transaction_time in milliseconds; class (tag may be a
		// pattern with *): 0 critical, 1 normal, 2 background. expires_at (the
		// database's clock; NULL: never) lifts it.
		`CREATE TABLE IF NOT EXISTS holdfast_controls (
  tag VARCHAR(64) NOT NULL,
  kind VARCHAR(16) NOT NULL,
  value BIGINT NOT NULL,
  set_by VARCHAR(255) NOT NULL,
  reason VARCHAR(255) NOT NULL,
  set_at DATETIME(6) NOT NULL,
  expires_at DATETIME(6) NULL,
  PRIMARY KEY (tag, kind)
) ENGINE=InnoDB`,
		// One row per live holdfast instance, renewed by its heartbeat.
		`CREATE TABLE IF NOT EXISTS holdfast_members (
  instance_id VARCHAR(64) NOT NULL,
  address VARCHAR(255) NOT NULL,
  version VARCHAR(64) NOT NULL,
  pool_max INT NOT NULL,
  stmt_budget INT NOT NULL,
  started_at DATETIME(6) NOT NULL,
  last_seen DATETIME(6) NOT NULL,
  PRIMARY KEY (instance_id)
) ENGINE=InnoDB`,
		// A fleet-wide cap's slots, granted to instances: the grants of a
		// tag's live rows never add up to more than its cap (each
		// instance changes its own row inside a transaction that locks
		// them all). wanted is what the instance would use (held and
		// waiting).
		`CREATE TABLE IF NOT EXISTS holdfast_cap_grants (
  tag VARCHAR(64) NOT NULL,
  instance_id VARCHAR(64) NOT NULL,
  granted INT NOT NULL,
  wanted INT NOT NULL,
  renewed_at DATETIME(6) NOT NULL,
  PRIMARY KEY (tag, instance_id)
) ENGINE=InnoDB`,
		// Fleet duties (the sweeper, the reconciler, ...) run on one
		// instance at a time: the holder of the duty's unexpired lease.
		`CREATE TABLE IF NOT EXISTS holdfast_duties (
  duty VARCHAR(64) NOT NULL,
  holder VARCHAR(64) NOT NULL,
  expires_at DATETIME(6) NOT NULL,
  PRIMARY KEY (duty)
) ENGINE=InnoDB`,
	},
}, {
	Version: 6,
	Name:    "fleet members record the schema versions and control kinds they understand",
	Statements: []string{
		// Each instance's heartbeat records the schema versions it runs
		// against (schema_min to schema_max: SchemaMin and SchemaVersion
		// of its build) and the kinds of control it applies
		// (control_kinds, comma-separated), so that an instance can show
		// which instances of a mixed fleet cannot apply a control. NULL:
		// an instance of a version before this step, whose heartbeat
		// names only the columns of version 5 (so these must stay
		// nullable). Nullable columns added last: instant on MariaDB
		// 10.4+ and MySQL 8.0.12+.
		`ALTER TABLE holdfast_members
  ADD COLUMN schema_min INT NULL,
  ADD COLUMN schema_max INT NULL,
  ADD COLUMN control_kinds VARCHAR(1024) NULL`,
	},
}}

// errNumDupColumn is ER_DUP_FIELDNAME: an ALTER TABLE ... ADD COLUMN whose
// column exists. Migrate takes it as the step already applied (by another
// instance migrating at the same time: one ALTER adds all its columns or
// none).
const errNumDupColumn = 1060

// SchemaVersion is the version Migrate brings the database to: the
// newest this version of holdfast knows.
func SchemaVersion() int { return Migrations[len(Migrations)-1].Version }

// SchemaMin is the oldest schema version this version of holdfast runs
// against, the schema of the release before it: below SchemaVersion,
// what the later steps add stays off until `holdfast migrate` (the
// fleet's members record no schema range nor control kinds before version
// 6, say). It is also a promise the other way: an instance of a version
// whose newest schema is SchemaMin or later runs against this version's
// schema, since every step after SchemaMin only adds. So two versions of
// holdfast may share a database when each one's newest schema is at least
// the other's SchemaMin: a version and the one before it. `holdfast
// migrate` refuses to apply a step while a live instance's newest schema
// is below SchemaMin (see README.md, "Upgrading a fleet"). Raised to the
// released version's SchemaVersion at each release.
const SchemaMin = 5

// SchemaUnrecorded is the newest schema version known to an instance
// whose heartbeat records none: every version before the step that added
// the record (6) knew 5 at most.
const SchemaUnrecorded = 5

// Migrate brings the schema to SchemaVersion through conns, borrowing one
// connection under TagMigrate, and records each applied version in
// holdfast_schema_migrations. It is idempotent and safe to run from several
// instances at once. It returns the versions it applied.
func Migrate(ctx context.Context, conns Conns) (applied []int, err error) {
	c, err := conns.Borrow(ctx, TagMigrate)
	if err != nil {
		return nil, fmt.Errorf("reservation: migrate: borrow: %w", err)
	}
	broken := false
	defer func() { c.Release(broken) }()
	// Read first: a schema that is up to date needs no DDL, so an account
	// without CREATE there (holdfast's own, on tables not moved yet) can
	// run it.
	rows, err := c.Query(ctx, `SELECT version FROM `+TableMigrations)
	if IsMissingTable(err) {
		if _, err := c.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+TableMigrations+` (
  version INT NOT NULL,
  name VARCHAR(255) NOT NULL,
  applied_at DATETIME(6) NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB`); err != nil {
			broken = !isDB(err)
			return nil, fmt.Errorf("reservation: migrate: %w", err)
		}
		rows, err = nil, nil
	}
	if err != nil {
		broken = !isDB(err)
		return nil, fmt.Errorf("reservation: migrate: %w", err)
	}
	have := map[int]bool{}
	for _, r := range rows {
		v, _ := strconv.Atoi(string(r[0]))
		have[v] = true
	}
	for _, m := range Migrations {
		if have[m.Version] {
			continue
		}
		for i, stmt := range m.Statements {
			if _, err := c.Exec(ctx, stmt); err != nil {
				if IsDBError(err, errNumDupColumn) {
					continue // another instance added the columns
				}
				broken = !isDB(err)
				return applied, fmt.Errorf("reservation: migrate: version %d (%s) statement %d: %w", m.Version, m.Name, i+1, err)
			}
		}
		if _, err := c.Exec(ctx, `INSERT IGNORE INTO `+TableMigrations+` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
			m.Version, m.Name); err != nil {
			broken = !isDB(err)
			return applied, fmt.Errorf("reservation: migrate: record version %d: %w", m.Version, err)
		}
		applied = append(applied, m.Version)
	}
	return applied, nil
}

func isDB(err error) bool {
	_, ok := dbErrorNumber(err)
	return ok
}
