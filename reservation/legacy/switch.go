package legacy

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/reservation"
)

// The authority switch.
//
// Its state lives in the backend database, table holdfast_authority (schema
// version 4): one row per version, the highest in force. Config only seeds
// it (version 1, when the table is empty). Every instance reads it at start
// and then every Config.SwitchPollInterval, so a change made through
// any instance (holdfastctl authority, PUT /api/authority) is in force on
// the whole fleet within one interval, and each instance exports the
// version it runs (holdfast_authority_switch_version): when every instance
// shows the same version, the fleet has flipped.
//
// A shop's reserves are decided by holdfast when the authority is
// "holdfast", or when the shop is listed in Shops, or when its bucket
// (Bucket: CRC32 of its decimal id, mod 100) is below Percent; otherwise by
// the legacy Redis counter. Raising Percent only adds shops.

// State is one version of the switch.
type State struct {
	Version   int64     `json:"version"` // 0: not read from the table yet (config's seed)
	Authority string    `json:"authority"`
	Shops     []int64   `json:"shops"` // on holdfast, with authority redis
	Percent   int       `json:"percent"`
	ChangedAt time.Time `json:"changed_at"`
	ChangedBy string    `json:"changed_by"`
	Reason    string    `json:"reason"`
}

// Bucket is shop's rollout bucket, 0..99: CRC32 (IEEE) of its decimal id,
// mod 100, which SQL computes alike (CRC32(shop_id) % 100).
func Bucket(shop int64) int {
	return int(crc32.ChecksumIEEE([]byte(strconv.FormatInt(shop, 10))) % 100)
}

// For is the authority that decides shop's reserves.
func (s State) For(shop int64) reservation.Authority {
	if s.Authority == "holdfast" || Bucket(shop) < s.Percent || slices.Contains(s.Shops, shop) {
		return reservation.AuthorityHoldfast
	}
	return reservation.AuthorityRedis
}

// AllHoldfast reports whether holdfast decides every shop.
func (s State) AllHoldfast() bool { return s.Authority == "holdfast" || s.Percent >= 100 }

// ErrInvalid is wrapped by the error of a switch state that makes no
// sense.
var ErrInvalid = errors.New("legacy: invalid authority switch")

func (s State) validate() error {
	switch {
	case s.Authority != "redis" && s.Authority != "holdfast":
		return fmt.Errorf("%w: authority must be redis or holdfast, got %q", ErrInvalid, s.Authority)
	case s.Percent < 0 || s.Percent > 100:
		return fmt.Errorf("%w: percent must be between 0 and 100, got %d", ErrInvalid, s.Percent)
	case s.Authority == "holdfast" && (len(s.Shops) > 0 || s.Percent > 0):
		return fmt.Errorf("%w: with authority holdfast every shop is on holdfast; shops and percent go with authority redis", ErrInvalid)
	}
	for _, sh := range s.Shops {
		if sh < 1 {
			return fmt.Errorf("%w: shop ids must be positive, got %d", ErrInvalid, sh)
		}
	}
	return nil
}

func (s State) String() string {
	out := fmt.Sprintf("version %d: authority %s", s.Version, s.Authority)
	if s.Authority == "redis" {
		out += fmt.Sprintf(", on holdfast: %d%% of shops", s.Percent)
		if len(s.Shops) > 0 {
			out += " and shops " + joinShops(s.Shops)
		}
	}
	return out
}

func joinShops(shops []int64) string {
	parts := make([]string, len(shops))
	for i, s := range shops {
		parts[i] = strconv.FormatInt(s, 10)
	}
	return strings.Join(parts, ",")
}

func parseShops(s string) ([]int64, error) {
	var out []int64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("legacy: bad shop id %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// ErrStale refuses a switch that would put shops back on Redis while its
// counters are known to be stale: run holdfast resync-redis first, or force.
var ErrStale = errors.New("legacy: the Redis counters are stale (a write to Redis failed); run `holdfast resync-redis` before Redis decides again, or force the switch")

// RedisState is the fleet-wide staleness of the Redis counters.
type RedisState struct {
	Stale       bool      `json:"stale"`
	StaleSince  time.Time `json:"stale_since,omitzero"`
	StaleReason string    `json:"stale_reason,omitempty"`
	ResyncedAt  time.Time `json:"resynced_at,omitzero"`
}

// TagAuthority is the borrow tag of the switch's reads and writes.
const TagAuthority = "holdfast:authority"

// Switch reads, polls and changes the authority switch. New starts nothing;
// Run polls until its context ends. Current may be called from any
// goroutine at any time.
type Switch struct {
	conns reservation.Conns
	seed  State
	every time.Duration
	log   *slog.Logger

	cur        atomic.Pointer[State]
	redis      atomic.Pointer[RedisState]
	polls      atomic.Uint64
	pollErrors atomic.Uint64
	loaded     atomic.Bool

	staleMu      sync.Mutex // guards staleWriting
	staleWriting bool
}

// NewSwitch returns a switch on conns' database seeded (for an empty
// table) with seed, polled every `every`.
func NewSwitch(conns reservation.Conns, seed State, every time.Duration, log *slog.Logger) (*Switch, error) {
	seed.Version = 0
	if err := seed.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	s := &Switch{conns: conns, seed: seed, every: every, log: log}
	s.cur.Store(&seed)
	s.redis.Store(&RedisState{})
	return s, nil
}

// Current is the state in force in this instance: the last one read, or
// the seed before the first read.
func (s *Switch) Current() State { return *s.cur.Load() }

// Redis is the staleness last read.
func (s *Switch) Redis() RedisState { return *s.redis.Load() }

// Interval is the poll interval.
func (s *Switch) Interval() time.Duration { return s.every }

// Run polls the table every interval until ctx ends.
func (s *Switch) Run(ctx context.Context) {
	lifecycle.Every(ctx, s.every, func(ctx context.Context) {
		if err := s.Poll(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("legacy: reading the authority switch failed; keeping the state in force", "err", err, "version", s.Current().Version)
		}
	})
}

// Poll reads the table once (seeding it when empty) and puts what it read
// in force.
func (s *Switch) Poll(ctx context.Context) error {
	s.polls.Add(1)
	st, rs, err := s.read(ctx)
	if err != nil {
		s.pollErrors.Add(1)
		return err
	}
	if st == nil {
		if err := s.insert(ctx, s.seed, true); err != nil {
			s.pollErrors.Add(1)
			return err
		}
		if st, rs, err = s.read(ctx); err != nil || st == nil {
			s.pollErrors.Add(1)
			return fmt.Errorf("legacy: reading the switch after seeding it: %v", err)
		}
	}
	s.redis.Store(rs)
	s.apply(*st)
	s.loaded.Store(true)
	return nil
}

func (s *Switch) apply(st State) {
	old := s.cur.Load()
	if old.Version == st.Version && s.loaded.Load() {
		return
	}
	s.cur.Store(&st)
	s.log.Info("legacy: authority switch in force", "version", st.Version, "authority", st.Authority,
		"shops", joinShops(st.Shops), "percent", st.Percent, "changed_by", st.ChangedBy, "reason", st.Reason)
}

const selectSwitch = "SELECT version, authority, shops, percent, changed_at, changed_by, reason FROM holdfast_authority ORDER BY version DESC LIMIT 1"

func (s *Switch) read(ctx context.Context) (*State, *RedisState, error) {
	c, err := s.conns.Borrow(ctx, TagAuthority)
	if err != nil {
		return nil, nil, err
	}
	rows, err := c.Query(ctx, selectSwitch)
	var srows [][][]byte
	if err == nil {
		srows, err = c.Query(ctx, "SELECT stale_since, stale_reason, resynced_at FROM holdfast_redis_state WHERE id = 1")
	}
	c.Release(err != nil && !isDB(err))
	if err != nil {
		return nil, nil, fmt.Errorf("legacy: read the authority switch: %w", err)
	}
	rs := &RedisState{}
	if len(srows) > 0 {
		r := srows[0]
		if r[0] != nil {
			rs.Stale, rs.StaleSince, rs.StaleReason = true, parseTime(r[0]), string(r[1])
		}
		if r[2] != nil {
			rs.ResyncedAt = parseTime(r[2])
		}
	}
	if len(rows) == 0 {
		return nil, rs, nil
	}
	r := rows[0]
	st := &State{Authority: string(r[1]), ChangedAt: parseTime(r[4]), ChangedBy: string(r[5]), Reason: string(r[6])}
	st.Version, _ = strconv.ParseInt(string(r[0]), 10, 64)
	st.Percent, _ = strconv.Atoi(string(r[3]))
	if st.Shops, err = parseShops(string(r[2])); err != nil {
		return nil, nil, err
	}
	return st, rs, nil
}

func isDB(err error) bool {
	var d reservation.DBError
	return errors.As(err, &d)
}

func parseTime(b []byte) time.Time {
	for _, layout := range []string{"2006-01-02 15:04:05.999999", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, string(b)); err == nil {
			return t
		}
	}
	return time.Time{}
}

// insert writes st as the next version (or as version 1 only if the table
// is empty, when seed is set).
func (s *Switch) insert(ctx context.Context, st State, seed bool) error {
	var q string
	if seed {
		q = "INSERT IGNORE INTO holdfast_authority (version, authority, shops, percent, changed_at, changed_by, reason) VALUES (1, ?, ?, ?, UTC_TIMESTAMP(6), ?, ?)"
	} else {
		q = "INSERT INTO holdfast_authority (version, authority, shops, percent, changed_at, changed_by, reason)" +
			" SELECT COALESCE(MAX(version), 0) + 1, ?, ?, ?, UTC_TIMESTAMP(6), ?, ? FROM holdfast_authority"
	}
	by := st.ChangedBy
	if seed {
		by = "config"
	}
	return execAuthority(ctx, s.conns, q, st.Authority, joinShops(st.Shops), int64(st.Percent), trim(by, 255), trim(st.Reason, 255))
}

// execAuthority runs q on a connection borrowed under TagAuthority.
func execAuthority(ctx context.Context, conns reservation.Conns, q string, args ...any) error {
	c, err := conns.Borrow(ctx, TagAuthority)
	if err != nil {
		return err
	}
	_, err = c.Exec(ctx, q, args...)
	c.Release(err != nil && !isDB(err))
	return err
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// Set makes next the switch's next version and puts it in force here at
// once (the other instances within a poll interval). It refuses, with
// ErrStale, to put any shop back on Redis while the Redis counters are
// stale, unless force.
func (s *Switch) Set(ctx context.Context, next State, force bool) (State, error) {
	if err := next.validate(); err != nil {
		return State{}, err
	}
	slices.Sort(next.Shops)
	next.Shops = slices.Compact(next.Shops)
	if !next.AllHoldfast() && !force {
		_, rs, err := s.read(ctx)
		if err != nil {
			return State{}, err
		}
		if rs.Stale {
			return State{}, fmt.Errorf("%w (stale since %s: %s)", ErrStale, rs.StaleSince.Format(time.RFC3339), rs.StaleReason)
		}
	}
	var err error
	for try := 0; try < 5; try++ {
		if err = s.insert(ctx, next, false); err == nil || !reservation.IsDBError(err, 1062) {
			break
		}
	}
	if err != nil {
		return State{}, fmt.Errorf("legacy: write the authority switch: %w", err)
	}
	if err := s.Poll(ctx); err != nil {
		return State{}, err
	}
	return s.Current(), nil
}

// MarkStale records, fleet-wide, that a write to Redis failed, unless this
// instance is recording it already or has read it as stale. It returns at
// once: the write runs in the background, bounded by timeout.
func (s *Switch) MarkStale(reason string, timeout time.Duration) {
	if s.Redis().Stale {
		return
	}
	s.staleMu.Lock()
	if s.staleWriting {
		s.staleMu.Unlock()
		return
	}
	s.staleWriting = true
	s.staleMu.Unlock()
	go func() {
		defer func() {
			s.staleMu.Lock()
			s.staleWriting = false
			s.staleMu.Unlock()
		}()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		if err := MarkStale(ctx, s.conns, reason); err != nil {
			s.log.Warn("legacy: recording that the Redis counters are stale failed", "err", err)
			return
		}
		rs := s.Redis()
		if !rs.Stale {
			rs.Stale, rs.StaleSince, rs.StaleReason = true, time.Now().UTC(), reason
			s.redis.Store(&rs)
		}
	}()
}

// MarkStale records in conns' database that the Redis counters are stale
// since now (kept if they already were).
func MarkStale(ctx context.Context, conns reservation.Conns, reason string) error {
	return execAuthority(ctx, conns, "INSERT INTO holdfast_redis_state (id, stale_since, stale_reason) VALUES (1, UTC_TIMESTAMP(6), ?)"+
		" ON DUPLICATE KEY UPDATE stale_reason = IF(stale_since IS NULL, VALUES(stale_reason), stale_reason),"+
		" stale_since = COALESCE(stale_since, VALUES(stale_since))", trim(reason, 255))
}

// clearStale records a resync that started at start (database time): the
// counters are no longer stale, unless a write failed after start.
func clearStale(ctx context.Context, conns reservation.Conns, start string) error {
	return execAuthority(ctx, conns, "INSERT INTO holdfast_redis_state (id, resynced_at) VALUES (1, UTC_TIMESTAMP(6))"+
		" ON DUPLICATE KEY UPDATE stale_reason = IF(stale_since < ?, NULL, stale_reason),"+
		" stale_since = IF(stale_since < ?, NULL, stale_since), resynced_at = VALUES(resynced_at)", start, start)
}

// ReadState reads the switch in force and the Redis staleness from conns'
// database, for tools (holdfast resync-redis). st is nil when the table is
// empty.
func ReadState(ctx context.Context, conns reservation.Conns) (*State, RedisState, error) {
	s := &Switch{conns: conns}
	st, rs, err := s.read(ctx)
	if err != nil {
		return nil, RedisState{}, err
	}
	return st, *rs, nil
}
