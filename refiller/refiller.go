// Package refiller owns keeping reservation unit pools topped up: the
// background refill of pools that fell under the watermark, and the inline
// refill a reserve runs when it finds its pool really short
// (reservation.Refiller). A refill is one READ COMMITTED transaction under the
// pool's inventory_ledger row lock — the per-pool mutex across every holdfast
// instance on the database, so several instances refill safely, and no
// GET_LOCK — that deletes the pool's expired reservations and inserts
//
//	min(cap - pool, on_hand - pool - live reserved)
//
// units, or deletes units when that is negative (on_hand fell under what the
// pool promises, after a forced claim or a manual change).
//
// It imports reservation for the schema, keys and transaction rules, and
// must not be imported by it; it borrows every connection from the injected
// reservation.Conns under the tag holdfast:refill, and touches no table but
// inventory_ledger (read, locked), reservation_units and reserved_quantities.
package refiller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
)

// Config configures a Refiller. Zero fields take the defaults given.
type Config struct {
	// PoolCap is the most units one pool holds. Zero means 1000. It must
	// equal the engine's reservation.Config.PoolCap.
	PoolCap int `yaml:"pool_cap"`
	// Watermark is the fraction of PoolCap under which the background loop
	// refills a pool. Zero means 0.3.
	Watermark float64 `yaml:"watermark"`
	// Interval is how often the background loop looks at the pools reserves
	// took units from, besides looking (at most every 5ms) whenever a
	// reserve notifies it. Zero means 100ms.
	Interval time.Duration `yaml:"interval"`
	// ScanInterval is how often it also scans every ledger row for pools
	// under the watermark that no reserve here touched (stock received,
	// other instances). Zero means 30s; negative disables the scan.
	ScanInterval time.Duration `yaml:"scan_interval"`
	// MaxTxRetries bounds retries after a deadlock or lock-wait timeout.
	// Zero means 5.
	MaxTxRetries int `yaml:"max_tx_retries"`
	// HotPools is how many pools the pool-depth metric reports (the most
	// reserved from). Zero means 20.
	HotPools int `yaml:"hot_pools"`
}

func (c *Config) fillDefaults() {
	if c.PoolCap == 0 {
		c.PoolCap = 1000
	}
	if c.Watermark == 0 {
		c.Watermark = 0.3
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.ScanInterval == 0 {
		c.ScanInterval = 30 * time.Second
	}
	if c.MaxTxRetries == 0 {
		c.MaxTxRetries = 5
	}
	if c.HotPools == 0 {
		c.HotPools = 20
	}
}

// Validate reports the first bad field, by its YAML name.
func (c Config) Validate() error {
	c.fillDefaults()
	switch {
	case c.PoolCap < 1 || c.PoolCap > 100000:
		return fmt.Errorf("refiller: config pool_cap: must be between 1 and 100000, got %d", c.PoolCap)
	case c.Watermark <= 0 || c.Watermark > 1:
		return fmt.Errorf("refiller: config watermark: must be in (0, 1], got %v", c.Watermark)
	case c.Interval < 0:
		return fmt.Errorf("refiller: config interval: must not be negative, got %v", c.Interval)
	case c.MaxTxRetries < 0:
		return fmt.Errorf("refiller: config max_tx_retries: must not be negative, got %d", c.MaxTxRetries)
	case c.HotPools < 1 || c.HotPools > 1000:
		return fmt.Errorf("refiller: config hot_pools: must be between 1 and 1000, got %d", c.HotPools)
	}
	return nil
}

// Refiller refills unit pools. New starts nothing; Start runs the background
// loop; Close stops it. RefillNow and Notify may be called from any
// goroutine at any time, before Start too.
type Refiller struct {
	cfg   Config
	conns reservation.Conns
	tx    reservation.TxRunner
	log   *slog.Logger
	m     metrics

	wake chan struct{} // buffered 1: Notify nudges the loop

	mu       sync.Mutex // guards following
	inflight map[reservation.PoolKey]*flight
	dirty    map[reservation.PoolKey]struct{}
	hot      map[reservation.PoolKey]*hotPool
	started  bool
	closed   bool
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// flight is one refill transaction that concurrent RefillNow calls share.
type flight struct {
	done chan struct{}
	err  error
}

// hotPool is what the depth metric knows of one pool.
type hotPool struct {
	touches uint64
	depth   int64
	seen    bool // depth was read at least once
}

// New builds a refiller over conns. logger nil means slog.Default().
func New(conns reservation.Conns, cfg Config, logger *slog.Logger) (*Refiller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.fillDefaults()
	if conns == nil {
		return nil, errors.New("refiller: conns is required")
	}
	if logger == nil {
		logger = slog.Default()
	}
	r := &Refiller{
		cfg:      cfg,
		conns:    conns,
		log:      logger,
		wake:     make(chan struct{}, 1),
		inflight: map[reservation.PoolKey]*flight{},
		dirty:    map[reservation.PoolKey]struct{}{},
		hot:      map[reservation.PoolKey]*hotPool{},
	}
	r.m.init()
	r.tx = reservation.TxRunner{Conns: conns, MaxRetries: cfg.MaxTxRetries, BackoffMin: time.Millisecond,
		BackoffMax: 20 * time.Millisecond, OnRetry: r.m.countRetry}
	return r, nil
}

// PoolCap reports the configured cap; the engine checks it matches its own.
func (r *Refiller) PoolCap() int { return r.cfg.PoolCap }

// Trigger says who asked for a refill; it labels the metrics.
type Trigger int

// Triggers.
const (
	Inline Trigger = iota
	Background
	Scan
)

var triggerNames = []string{"inline", "background", "scan"}

func (t Trigger) String() string { return triggerNames[t] }

// RefillNow refills key's pool now, for a reserve that found it short. A
// refill of key already running in this process is joined instead of
// started again (across processes the ledger row lock serialises them, and
// the later one finds the pool full). A caller whose ctx ends stops waiting;
// the refill itself completes.
func (r *Refiller) RefillNow(ctx context.Context, key reservation.PoolKey) error {
	return r.refillShared(ctx, key, Inline)
}

func (r *Refiller) refillShared(ctx context.Context, key reservation.PoolKey, t Trigger) error {
	r.mu.Lock()
	f := r.inflight[key]
	if f == nil {
		f = &flight{done: make(chan struct{})}
		r.inflight[key] = f
		r.mu.Unlock()
		go func() {
			// Detached from the first caller: the others wait for it too.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_, f.err = r.Refill(fctx, key, t)
			r.mu.Lock()
			delete(r.inflight, key)
			r.mu.Unlock()
			close(f.done)
		}()
	} else {
		r.mu.Unlock()
	}
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Notify marks key as reserved from, so the background loop checks its
// depth soon. It never blocks.
func (r *Refiller) Notify(key reservation.PoolKey) {
	r.mu.Lock()
	r.dirty[key] = struct{}{}
	r.touchLocked(key)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Result is what one refill transaction did.
type Result struct {
	Added, Removed int   // units inserted into, deleted from the pool
	Expired        int   // expired reserved lines deleted
	Pooled         int64 // pool depth after the refill
	NoLedger       bool  // the pool has no inventory_ledger row: nothing done
}

// Refill runs one refill transaction for key, as described in the package
// doc, and returns what it did. Lock order: inventory_ledger (FOR UPDATE),
// reservation_units (INSERT, or SKIP LOCKED select and DELETE when
// shrinking), reserved_quantities (DELETE of the expired lines it already
// excluded from the count, with the same timestamp).
func (r *Refiller) Refill(ctx context.Context, key reservation.PoolKey, t Trigger) (Result, error) {
	start := time.Now()
	var res Result
	where := key.WhereSQL()
	err := r.tx.Run(ctx, reservation.TagRefill, func(ctx context.Context, c reservation.Conn) error {
		res = Result{}
		led, err := c.Query(ctx, "SELECT on_hand FROM inventory_ledger WHERE "+where+" FOR UPDATE")
		if err != nil {
			return err
		}
		if len(led) == 0 {
			res.NoLedger = true
			return nil
		}
		onHand, err := strconv.ParseInt(string(led[0][0]), 10, 64)
		if err != nil {
			return fmt.Errorf("refiller: bad on_hand %q", led[0][0])
		}
		// One statement, so one read view: a reserve committing meanwhile
		// is counted either as pool rows or as reserved, never neither.
		st, err := c.Query(ctx, `SELECT UTC_TIMESTAMP(6),
 (SELECT COUNT(*) FROM reservation_units WHERE `+where+`),
 (SELECT COALESCE(MAX(id), 0) FROM reservation_units WHERE `+where+`),
 (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities WHERE `+where+` AND expires_at > UTC_TIMESTAMP(6)),
 (SELECT COUNT(*) FROM reserved_quantities WHERE `+where+` AND expires_at <= UTC_TIMESTAMP(6))`)
		if err != nil {
			return err
		}
		now := string(st[0][0])
		v, err := ints(st[0][1:])
		if err != nil {
			return err
		}
		pooled, maxID, live, expired := v[0], v[1], v[2], v[3]
		n := min(int64(r.cfg.PoolCap)-pooled, onHand-pooled-live)
		switch {
		case n > 0:
			var b strings.Builder
			b.Grow(int(n) * 48)
			b.WriteString("INSERT INTO reservation_units (shop_id, inventory_item_id, inventory_group_id, id) VALUES ")
			prefix := "(" + strconv.FormatInt(key.ShopID, 10) + "," + strconv.FormatInt(key.ItemID, 10) + "," + strconv.FormatInt(key.GroupID, 10) + ","
			for i := int64(1); i <= n; i++ {
				if i > 1 {
					b.WriteByte(',')
				}
				b.WriteString(prefix)
				b.WriteString(strconv.FormatInt(maxID+i, 10))
				b.WriteByte(')')
			}
			if _, err := c.Exec(ctx, b.String()); err != nil {
				return err
			}
			res.Added = int(n)
		case n < 0:
			// The pool promises more than the ledger holds (or the cap
			// shrank): take back units nobody holds, newest first.
			rows, err := c.Query(ctx, "SELECT id FROM reservation_units FORCE INDEX (PRIMARY) WHERE "+where+
				" ORDER BY id DESC LIMIT "+strconv.FormatInt(min(-n, pooled), 10)+" FOR UPDATE SKIP LOCKED")
			if err != nil {
				return err
			}
			if len(rows) > 0 {
				ids := make([]int64, len(rows))
				for i, r := range rows {
					if ids[i], err = strconv.ParseInt(string(r[0]), 10, 64); err != nil {
						return fmt.Errorf("refiller: bad unit id %q", r[0])
					}
				}
				if res.Removed, err = reservation.DeleteUnits(ctx, c, key, ids); err != nil {
					return err
				}
			}
		}
		res.Pooled = pooled + int64(res.Added) - int64(res.Removed)
		if expired > 0 {
			if res.Expired, err = reservation.DeleteExpiredLines(ctx, c, key, now); err != nil {
				return err
			}
		}
		return nil
	})
	r.m.observe(t, res, err, time.Since(start))
	if err == nil {
		r.mu.Lock()
		if h := r.hot[key]; h != nil {
			h.depth, h.seen = res.Pooled, true
		}
		r.mu.Unlock()
	}
	return res, err
}

func ints(row [][]byte) ([]int64, error) {
	out := make([]int64, len(row))
	for i, b := range row {
		s := string(b)
		if j := strings.IndexByte(s, '.'); j >= 0 {
			s = s[:j] // SUM() is DECIMAL
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("refiller: bad integer column %q", b)
		}
		out[i] = v
	}
	return out, nil
}
