package legacy

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/holdfast-db/holdfast/reservation"
)

// Store is the legacy Redis counter: its key layout (Config) and the
// operations on it, each one atomic script (scripts.go). Safe for
// concurrent use. Every method's error is a Redis failure (wrapped
// *StoreError); answers about stock or state come back as values.
type Store struct {
	c   *redis.Client
	cfg Config
	now func() time.Time
}

// NewStore returns a Store for cfg (defaults filled in by the caller, see
// Config.WithDefaults). It connects lazily.
func NewStore(cfg Config, now func() time.Time) *Store {
	quietOnce.Do(func() { redis.SetLogger(quiet{}) })
	if now == nil {
		now = time.Now
	}
	c := redis.NewClient(&redis.Options{
		Addr: cfg.Address, Password: cfg.Password, DB: cfg.DB,
		DialTimeout: cfg.Timeout, ReadTimeout: cfg.Timeout, WriteTimeout: cfg.Timeout,
		PoolTimeout: cfg.Timeout, MaxRetries: -1, // a retry is the caller's decision: it knows what is idempotent
		PoolSize:              cfg.PoolSize,
		DialerRetries:         1, // a Redis that refuses connections costs a call one attempt
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	})
	return &Store{c: c, cfg: cfg, now: now}
}

// quiet drops go-redis's own log lines (dial failures, once per attempt):
// the router counts and logs every failure itself, rate-limited.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

var quietOnce sync.Once

// Close closes the connections.
func (s *Store) Close() error { return s.c.Close() }

// Client is the Redis client, for tests and tools.
func (s *Store) Client() *redis.Client { return s.c }

// StoreError is a failed Redis command. Sent says whether the command may
// have reached Redis (and so may have been applied): false only when no
// connection could be made.
type StoreError struct {
	Op   string
	Sent bool
	Err  error
}

func (e *StoreError) Error() string {
	return "legacy: redis " + e.Op + ": " + e.Err.Error()
}

func (e *StoreError) Unwrap() error { return e.Err }

func (s *Store) fail(op string, err error) error {
	sent := true
	var oe *net.OpError
	if (errors.As(err, &oe) && oe.Op == "dial") || poolBusy(err) || errors.Is(err, redis.ErrClosed) {
		sent = false
	}
	return &StoreError{Op: op, Sent: sent, Err: err}
}

// poolBusy reports whether err is a command that was never sent because
// every connection of the pool (Config.PoolSize) stayed in use for
// the whole timeout.
func poolBusy(err error) bool { return errors.Is(err, redis.ErrPoolTimeout) }

func sub(tpl string, pairs ...string) string {
	return strings.NewReplacer(pairs...).Replace(tpl)
}

// CounterKey is the counter of one pool.
func (s *Store) CounterKey(k reservation.PoolKey) string {
	return sub(s.cfg.CounterKey, "{shop}", itoa(k.ShopID), "{item}", itoa(k.ItemID), "{location}", itoa(k.GroupID))
}

func (s *Store) heldKey(k reservation.PoolKey) string {
	return sub(s.cfg.HeldKey, "{shop}", itoa(k.ShopID), "{item}", itoa(k.ItemID), "{location}", itoa(k.GroupID))
}

// RecordKey is the record of one reservation.
func (s *Store) RecordKey(token string) string { return sub(s.cfg.ReservationKey, "{token}", token) }

func (s *Store) idemKey(shop int64, key string) string {
	return sub(s.cfg.IdempotencyKey, "{shop}", itoa(shop), "{key}", key)
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

func ms(t time.Time) int64 { return t.UnixMilli() }

func (s *Store) head() []any {
	return []any{s.cfg.CounterKey, s.cfg.HeldKey, s.cfg.ReservationKey, s.cfg.ExpiryKey, ms(s.now())}
}

func (s *Store) retentionMS() int64 { return s.cfg.RecordRetention.Milliseconds() }

func encodeLines(ls []reservation.Line) string {
	var b strings.Builder
	for i, l := range ls {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d:%d:%d", l.Item, l.Group, l.Qty)
	}
	return b.String()
}

func decodeLines(s string) ([]reservation.Line, error) {
	if s == "" {
		return nil, nil
	}
	var out []reservation.Line
	for _, part := range strings.Split(s, ",") {
		f := strings.Split(part, ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("legacy: bad lines %q", s)
		}
		var v [3]int64
		for i := range f {
			n, err := strconv.ParseInt(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("legacy: bad lines %q", s)
			}
			v[i] = n
		}
		out = append(out, reservation.Line{Item: v[0], Group: v[1], Qty: v[2]})
	}
	return out, nil
}

// Decision is the legacy counter's answer to a reserve.
type Decision struct {
	Kind      string // ok, replay, conflict, insufficient
	Token     string // ok, replay, conflict
	Lines     []reservation.Line
	ExpiresAt time.Time
	State     string // replay: active, claimed, released, expired, resynced
	Line      int    // insufficient: the 1-based line
	Seen      string // insufficient: "have@location,..."
}

func reserveArgs(req *reservation.ReserveRequest) []any {
	var a []any
	a = append(a, len(req.Lines))
	for _, l := range req.Lines {
		a = append(a, l.Item, l.Qty, len(l.Locations))
		for _, g := range l.Locations {
			a = append(a, g)
		}
	}
	return a
}

// Reserve decides req as the legacy system did, under token (the
// reservation's if it is made): see reserveScript.
func (s *Store) Reserve(ctx context.Context, req *reservation.ReserveRequest, token string) (Decision, error) {
	return s.decide(ctx, "reserve", req, token)
}

// Check answers what Reserve would, changing nothing.
func (s *Store) Check(ctx context.Context, req *reservation.ReserveRequest) (Decision, error) {
	return s.decide(ctx, "check", req, "")
}

func (s *Store) decide(ctx context.Context, mode string, req *reservation.ReserveRequest, token string) (Decision, error) {
	args := append(s.head(), mode, req.Shop, token, hex.EncodeToString(req.Hash[:]), req.Key,
		req.TTL.Milliseconds(), s.retentionMS())
	args = append(args, reserveArgs(req)...)
	rk := "-"
	if token != "" {
		rk = s.RecordKey(token)
	}
	raw, err := reserveScript.Run(ctx, s.c, []string{s.idemKey(req.Shop, req.Key), rk}, args...).Slice()
	if err != nil {
		return Decision{}, s.fail(mode, err)
	}
	v := strs(raw)
	d := Decision{Kind: v[0]}
	switch d.Kind {
	case "ok":
		if len(v) >= 4 {
			d.Token = v[1]
			d.Lines, err = decodeLines(v[2])
			d.ExpiresAt = msTime(v[3])
		}
	case "replay":
		d.Token, d.State, d.ExpiresAt = v[1], v[4], msTime(v[3])
		d.Lines, err = decodeLines(v[2])
	case "conflict":
		d.Token = v[1]
	case "insufficient":
		d.Line, _ = strconv.Atoi(v[1])
		d.Seen = v[2]
	}
	return d, err
}

// strs renders a script's reply (strings and integers) as strings.
func strs(v []any) []string {
	out := make([]string, len(v))
	for i, x := range v {
		out[i] = fmt.Sprint(x)
	}
	return out
}

func msTime(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.UnixMilli(n).UTC()
}

// Mirror writes a reservation the engine made (dual write). It answers
// "ok" or "insufficient" (what the legacy counter would have answered),
// or "exists" when the token was recorded already.
func (s *Store) Mirror(ctx context.Context, token string, req *reservation.ReserveRequest, lines []reservation.Line, exp time.Time) (string, error) {
	args := append(s.head(), req.Shop, token, hex.EncodeToString(req.Hash[:]), req.Key, ms(exp), s.retentionMS(), encodeLines(lines))
	raw, err := mirrorScript.Run(ctx, s.c, []string{s.idemKey(req.Shop, req.Key), s.RecordKey(token)}, args...).Slice()
	if err != nil {
		return "", s.fail("mirror", err)
	}
	return strs(raw)[0], nil
}

// Record is a reservation as Redis recorded it.
type Record struct {
	Shop      int64
	Key       string
	Lines     []reservation.Line
	ExpiresAt time.Time
	State     string
	Authority string
}

// Get reads token's record; nil when there is none.
func (s *Store) Get(ctx context.Context, token string) (*Record, error) {
	v, err := s.c.HMGet(ctx, s.RecordKey(token), "shop_id", "idempotency_key", "lines", "expires_at", "state", "authority").Result()
	if err != nil {
		return nil, s.fail("get", err)
	}
	str := func(i int) string {
		x, _ := v[i].(string)
		return x
	}
	if str(2) == "" {
		return nil, nil
	}
	r := &Record{Key: str(1), ExpiresAt: msTime(str(3)), State: str(4), Authority: str(5)}
	r.Shop, _ = strconv.ParseInt(str(0), 10, 64)
	if r.State == "" {
		r.State = "active"
	}
	if r.Lines, err = decodeLines(str(2)); err != nil {
		return nil, err
	}
	return r, nil
}

// Claim ends token's reservation after its claim deducted the ledger;
// shop and lines are the engine's, used when Redis has no record. It
// returns the record's state before: see claimScript.
func (s *Store) Claim(ctx context.Context, token string, shop int64, lines []reservation.Line) (string, error) {
	args := append(s.head(), token, shop, encodeLines(lines), s.retentionMS())
	raw, err := claimScript.Run(ctx, s.c, []string{s.RecordKey(token)}, args...).Slice()
	if err != nil {
		return "", s.fail("claim", err)
	}
	return strs(raw)[0], nil
}

// Release gives token's units back: see releaseScript.
func (s *Store) Release(ctx context.Context, token string) (outcome string, qty int64, err error) {
	args := append(s.head(), token, s.retentionMS())
	v, err := releaseScript.Run(ctx, s.c, []string{s.RecordKey(token)}, args...).Slice()
	if err != nil {
		return "", 0, s.fail("release", err)
	}
	outcome, _ = v[0].(string)
	qty, _ = v[1].(int64)
	return outcome, qty, nil
}

// Extend sets token's expiry to now + ttl while it is live (the legacy
// extend), answering "ok" and the new expiry, or its state.
func (s *Store) Extend(ctx context.Context, token string, ttl time.Duration) (string, time.Time, error) {
	return s.extend(ctx, token, "ttl", ttl.Milliseconds())
}

// SetExpiry sets token's expiry to exp (the dual write of the engine's
// extend).
func (s *Store) SetExpiry(ctx context.Context, token string, exp time.Time) (string, error) {
	out, _, err := s.extend(ctx, token, "set", ms(exp))
	return out, err
}

func (s *Store) extend(ctx context.Context, token, mode string, v int64) (string, time.Time, error) {
	args := append(s.head(), token, mode, v, s.retentionMS())
	raw, err := extendScript.Run(ctx, s.c, []string{s.RecordKey(token)}, args...).Slice()
	if err != nil {
		return "", time.Time{}, s.fail("extend", err)
	}
	r := strs(raw)
	if r[0] == "ok" {
		return "ok", msTime(r[1]), nil
	}
	return r[0], time.Time{}, nil
}

// AddStock changes a pool's counter by delta (receive, set_on_hand,
// adjust: on_hand changed by delta, and so did what is available).
func (s *Store) AddStock(ctx context.Context, k reservation.PoolKey, delta int64) error {
	if err := s.c.IncrBy(ctx, s.CounterKey(k), delta).Err(); err != nil {
		return s.fail("stock", err)
	}
	return nil
}

// Counters reads the counters of keys; a missing counter is absent from
// the map.
func (s *Store) Counters(ctx context.Context, keys []reservation.PoolKey) (map[reservation.PoolKey]int64, error) {
	out := make(map[reservation.PoolKey]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = s.CounterKey(k)
	}
	v, err := s.c.MGet(ctx, names...).Result()
	if err != nil {
		return nil, s.fail("counters", err)
	}
	for i, x := range v {
		if str, ok := x.(string); ok {
			n, err := strconv.ParseInt(str, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("legacy: counter %s holds %q, not an integer", names[i], str)
			}
			out[keys[i]] = n
		}
	}
	return out, nil
}

// Sweep expires up to limit reservations whose expiry has passed, giving
// their units back; it returns how many it expired and how many due
// entries it looked at.
func (s *Store) Sweep(ctx context.Context, limit int) (expired, looked int, err error) {
	v, err := sweepScript.Run(ctx, s.c, nil, append(s.head(), limit)...).Int64Slice()
	if err != nil {
		return 0, 0, s.fail("sweep", err)
	}
	return int(v[0]), int(v[1]), nil
}

// ResyncResult is what one pool's resync did.
type ResyncResult struct {
	Key       reservation.PoolKey
	HadOld    bool
	Old, New  int64
	Created   int // records of live reservations Redis did not have
	Resynced  int // records Redis held that the engine does not have live
	Available int64
}

// heldMembers lists the tokens Redis holds in k's pool.
func (s *Store) heldMembers(ctx context.Context, k reservation.PoolKey) ([]string, error) {
	m, err := s.c.SMembers(ctx, s.heldKey(k)).Result()
	if err != nil {
		return nil, s.fail("resync", err)
	}
	return m, nil
}

// resyncPool rewrites k's counter: see resyncScript.
func (s *Store) resyncPool(ctx context.Context, k reservation.PoolKey, onHand int64, live []LiveLine, ended map[string]string) (ResyncResult, error) {
	args := append(s.head(), k.ShopID, k.ItemID, k.GroupID, onHand, s.retentionMS(), len(live))
	for _, l := range live {
		args = append(args, reservation.FormatToken(l.ReservationID), l.Qty, ms(l.ExpiresAt))
	}
	args = append(args, len(ended))
	for t, how := range ended {
		args = append(args, t, how)
	}
	v, err := resyncScript.Run(ctx, s.c, []string{s.CounterKey(k), s.heldKey(k)}, args...).Int64Slice()
	if err != nil {
		return ResyncResult{}, s.fail("resync", err)
	}
	return ResyncResult{Key: k, HadOld: v[0] == 1, Old: v[1], New: v[2], Created: int(v[3]), Resynced: int(v[4])}, nil
}

// Ping checks that Redis answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return s.fail("ping", err)
	}
	return nil
}
