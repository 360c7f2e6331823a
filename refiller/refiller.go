// Package refiller owns keeping reservation unit pools topped up: the
// background refill of pools that would soon run dry, and the inline refill
// a reserve runs when it finds its pool really short
// (reservation.Refiller). A refill is one READ COMMITTED transaction under the
// pool's inventory_ledger row lock — the per-pool mutex across every holdfast
// instance on the database, so several instances refill safely, and no
// GET_LOCK — that takes the pool's expired reservations and pending returns
// and inserts
//
//	min(cap - pool, on_hand - issued)
//
// units, where issued (pool + reserved + pending returns) is the pool's
// counter (reservation.LockPool), so a refill costs the same with ten
// reservations or ten million; or deletes units when on_hand - issued is
// negative (on_hand fell under what the pool promises, after a forced claim
// or a manual change).
//
// The background loop refills a pool when it is under Watermark of the cap,
// or would run dry within Lead at the rate reserves here have been taking
// from it, whichever comes first.
//
// It imports reservation for the schema, keys and transaction rules, and
// must not be imported by it; it borrows every connection from the injected
// reservation.Conns under the tag holdfast:refill, and touches no table but
// inventory_ledger (read, locked), pool_counters, reservation_units,
// reserved_quantities and reservation_returns.
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

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/reservation"
)

// Config configures a Refiller: reservation.refiller in holdfast's
// configuration, documented, defaulted and validated in package config
// (config.Refiller). Zero fields take the defaults given there; New fills
// them in (Config.WithDefaults).
type Config = config.Refiller

// Refiller refills unit pools. New starts nothing; Start runs the background
// loop; Close stops it. RefillNow and Notify may be called from any
// goroutine at any time, before Start too.
type Refiller struct {
	cfg   Config
	conns reservation.Conns
	tx    reservation.TxRunner
	log   *slog.Logger
	m     metrics
	duty  lifecycle.Duties // set before Start; asked before each scan

	wake  chan struct{}   // buffered 1: Notify nudges the loop
	loops lifecycle.Loops // the background loop, from Start to Close

	mu       sync.Mutex // guards following
	inflight map[reservation.PoolKey]*flight
	dirty    map[reservation.PoolKey]struct{}
	hot      map[reservation.PoolKey]*hotPool
}

// flight is one refill transaction that concurrent RefillNow calls share.
type flight struct {
	done chan struct{}
	err  error
}

// hotPool is what the loop and the depth metric know of one pool.
type hotPool struct {
	touches  uint64
	depth    int64     // last seen depth, less what reserves took since
	lookedAt time.Time // when depth was last read; zero: never

	// The take rate: units taken in the window that started at winStart,
	// folded into rate (units/s, smoothed) when the window closes.
	winStart time.Time
	winTaken int64
	rate     float64
	// The same over short windows, unsmoothed: a burst shows in them
	// within milliseconds (see rateAt).
	burstStart time.Time
	burstTaken int64
	burstRate  float64
}

// rateWindow is how long the take rate is counted before it is folded in.
const rateWindow = 100 * time.Millisecond

// observe records depth as read at at, unless a reading taken after at is
// already recorded: a look whose query ran before a refill's COMMIT must
// not overwrite the depth that refill left. mu held.
func (h *hotPool) observe(depth int64, at time.Time) {
	if h.lookedAt.After(at) {
		return
	}
	h.depth, h.lookedAt = depth, at
}

// take records n units taken from the pool at now.
func (h *hotPool) take(n int, now time.Time) {
	h.depth -= int64(n)
	if h.winStart.IsZero() {
		h.winStart, h.burstStart = now, now
	}
	if d := now.Sub(h.winStart); d >= rateWindow {
		cur := float64(h.winTaken) / d.Seconds()
		if d > 10*rateWindow || h.rate == 0 {
			h.rate = cur // the first window, or idle for long: start over
		} else {
			h.rate = 0.5*h.rate + 0.5*cur
		}
		h.winStart, h.winTaken = now, 0
	}
	h.winTaken += int64(n)
	if d := now.Sub(h.burstStart); d >= burstWindow {
		h.burstRate = float64(h.burstTaken) / d.Seconds()
		h.burstStart, h.burstTaken = now, 0
	}
	h.burstTaken += int64(n)
}

// rateAt is the take rate as of now: the smoothed rate, decaying when no
// take was reported for a while, or the rate of the last short window (or
// of the one counting, once it spans half a window) when that is higher,
// so that a burst, a sale opening, raises the refill threshold within
// milliseconds instead of after a window or two of smoothing.
func (h *hotPool) rateAt(now time.Time) float64 {
	r := h.rate
	if idle := now.Sub(h.winStart); idle > 2*rateWindow {
		r = h.rate * float64(2*rateWindow) / float64(idle)
	}
	d := now.Sub(h.burstStart)
	if d <= 2*burstWindow {
		r = max(r, h.burstRate)
	}
	if d >= burstWindow/2 {
		r = max(r, float64(h.burstTaken)/d.Seconds())
	}
	return r
}

// burstWindow is the span of the short windows rateAt looks at.
const burstWindow = 20 * time.Millisecond

// New builds a refiller over conns. logger nil means slog.Default().
func New(conns reservation.Conns, cfg Config, logger *slog.Logger) (*Refiller, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
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

// RunScanWhen makes the background pool scan run only while duties says
// this instance holds lifecycle.DutyPoolScan (the fleet runs it on one
// instance at a time); refills of the pools this instance reserves from
// run here regardless. Call it before Start.
func (r *Refiller) RunScanWhen(duties lifecycle.Duties) { r.duty = duties }

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

// Notify marks key as reserved from (taken units just now), so the
// background loop checks its depth soon. It never blocks.
func (r *Refiller) Notify(key reservation.PoolKey, taken int) {
	now := time.Now()
	r.mu.Lock()
	r.dirty[key] = struct{}{}
	r.touchLocked(key, taken, now)
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
	Returned       int64 // units given back by release/sweeper, taken off the counter
	Pooled         int64 // pool depth after the refill
	NoLedger       bool  // the pool has no inventory_ledger row: nothing done
}

// Refill runs one refill transaction for key, as described in the package
// doc, and returns what it did: reservation.LockPool (the ledger row and
// the pool's counter FOR UPDATE, the pool's depth, its pending returns and
// its expired lines, locked by primary key), then, when shrinking, a SKIP
// LOCKED select of free units, and one round trip that inserts or deletes
// units, deletes the expired lines and returns it took, writes the counter
// and commits. Lock order: inventory_ledger, pool_counters,
// reservation_units, reserved_quantities, reservation_returns.
func (r *Refiller) Refill(ctx context.Context, key reservation.PoolKey, t Trigger) (Result, error) {
	var total Result
	// A transaction takes a bounded batch of returns and expired lines;
	// when there were more, run again (a few times at most: the rest waits
	// for the next refill).
	for range 8 {
		res, more, err := r.refillOnce(ctx, key, t)
		total.Added += res.Added
		total.Removed += res.Removed
		total.Expired += res.Expired
		total.Returned += res.Returned
		total.Pooled, total.NoLedger = res.Pooled, res.NoLedger
		if err != nil || !more {
			return total, err
		}
	}
	return total, nil
}

func (r *Refiller) refillOnce(ctx context.Context, key reservation.PoolKey, t Trigger) (Result, bool, error) {
	start := time.Now()
	var res Result
	var more bool
	capN := int64(r.cfg.PoolCap)
	err := r.tx.Run(ctx, reservation.TagRefill, func(ctx context.Context, c reservation.Conn) error {
		res, more = Result{}, false
		p, err := reservation.LockPool(ctx, c, key)
		if err != nil {
			return err
		}
		if !p.Exists {
			res.NoLedger = true
			return nil
		}
		var add int64
		var remove []int64
		if room := p.Room(); room < 0 || p.Pooled > capN {
			// The pool promises more than the ledger holds (or the cap
			// shrank): take back units nobody holds, newest first.
			n := min(max(-room, p.Pooled-capN), p.Pooled)
			rows, err := c.Query(ctx, "SELECT id FROM reservation_units FORCE INDEX (PRIMARY) WHERE "+key.WhereSQL()+
				" ORDER BY id DESC LIMIT "+strconv.FormatInt(n, 10)+" FOR UPDATE SKIP LOCKED")
			if err != nil {
				return err
			}
			for _, row := range rows {
				id, err := strconv.ParseInt(string(row[0]), 10, 64)
				if err != nil {
					return fmt.Errorf("refiller: bad unit id %q", row[0])
				}
				remove = append(remove, id)
			}
		} else {
			add = min(capN-p.Pooled, room)
		}
		res.Expired, res.Returned, more = p.ExpiredLines, p.Returned, p.More
		q := p.Finish(add, remove, false, 0)
		res.Added, res.Removed, res.Pooled = int(add), len(remove), p.Pooled
		if q == "" {
			return nil
		}
		return reservation.CommitWith(ctx, c, q)
	})
	r.m.observe(t, res, err, time.Since(start))
	if err == nil {
		r.mu.Lock()
		if h := r.hot[key]; h != nil {
			h.observe(res.Pooled, time.Now()) // committed: every later look sees it
		}
		r.mu.Unlock()
	}
	return res, more, err
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
