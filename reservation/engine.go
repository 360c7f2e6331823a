package reservation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// PoolKey names one item at one location: the unit pool, the ledger row and
// the reserved lines that belong together.
type PoolKey struct {
	ShopID, ItemID, GroupID int64
}

func (k PoolKey) String() string {
	return strconv.FormatInt(k.ShopID, 10) + "/" + strconv.FormatInt(k.ItemID, 10) + "/" + strconv.FormatInt(k.GroupID, 10)
}

// ledgerLess orders keys as inventory_ledger's primary key does. Every path
// that locks several ledger rows locks them in this order (one statement,
// which InnoDB walks in key order).
func ledgerLess(a, b PoolKey) bool {
	if a.ShopID != b.ShopID {
		return a.ShopID < b.ShopID
	}
	if a.ItemID != b.ItemID {
		return a.ItemID < b.ItemID
	}
	return a.GroupID < b.GroupID
}

// groupLess orders keys by ascending inventory_group_id, the order in which
// a reserve takes units from several locations.
func groupLess(a, b PoolKey) bool {
	if a.ShopID != b.ShopID {
		return a.ShopID < b.ShopID
	}
	if a.GroupID != b.GroupID {
		return a.GroupID < b.GroupID
	}
	return a.ItemID < b.ItemID
}

// WhereSQL is the equality predicate selecting key's rows in any engine
// table (all of them name the columns alike). Only integers are written, so
// the result is safe to splice into SQL.
func (k PoolKey) WhereSQL() string {
	return "shop_id = " + strconv.FormatInt(k.ShopID, 10) +
		" AND inventory_item_id = " + strconv.FormatInt(k.ItemID, 10) +
		" AND inventory_group_id = " + strconv.FormatInt(k.GroupID, 10)
}

// Refiller tops up unit pools. Package refiller implements it; the engine
// uses it as the inline fallback when a reserve finds a pool really short.
type Refiller interface {
	// RefillNow refills key's pool in its own transaction and returns when
	// that transaction has ended. Concurrent calls for one key may share one
	// transaction.
	RefillNow(ctx context.Context, key PoolKey) error
	// Notify tells the refiller that taken units were just taken from
	// key's pool (0: the pool or its ledger changed otherwise, e.g. units
	// were given back), so its background loop looks at that pool soon,
	// and can learn how fast the pool drains. It must not block.
	Notify(key PoolKey, taken int)
}

// Options are the engine's collaborators.
type Options struct {
	// Conns lends primary connections; required.
	Conns Conns
	// ReplicaConns, when non-nil, is where the reconciler reads. Nil means
	// the reconciler reads the primary through Conns.
	ReplicaConns Conns
	// Refiller is the inline refill fallback; required.
	Refiller Refiller
	// Logger receives alerts (forced claims, reconciler findings). Nil
	// means slog.Default().
	Logger *slog.Logger
	// Duties says whether this instance runs the sweeper
	// (lifecycle.DutySweeper) and the reconciler (DutyReconciler) now;
	// nil runs both.
	Duties lifecycle.Duties
	// Hold is how long a call may be held through a switchover of the
	// primary (hold.go): from its start, its deadline (call_timeout)
	// moves out to Hold once it meets a read-only refusal, a lost
	// connection or a held borrow failure. Zero means DefaultHold;
	// negative, no holding beyond call_timeout.
	Hold time.Duration
	// Switching, when non-nil, reports whether there is no usable primary
	// now (a switchover or failover under way, a split brain): a borrow
	// that fails meanwhile is held, and a call whose deadline comes
	// meanwhile is held. It must not block. The proxy gives its topology
	// check's view; nil: a borrow failure is held only when it is not the
	// database's (or the Conns') coded answer.
	Switching func() bool
}

// Engine answers CALL holdfast.* and runs the sweeper and the reconciler.
// New starts nothing; Start starts the background loops; Close stops them.
// Call may be used from any goroutine, before Start too (the loops are
// maintenance, not a precondition), until Close.
type Engine struct {
	cfg       Config
	conns     Conns
	replica   Conns
	refiller  Refiller
	log       *slog.Logger
	duties    lifecycle.Duties
	tx        TxRunner
	m         metrics
	hold      time.Duration // Options.Hold, defaulted; 0: none
	switching func() bool   // Options.Switching
	iso       isoVar        // the isolation variable's name, learned once
	sessions  chan struct{} // one token per session that may be open

	// comb holds one combiner per pool with single-line reserves queued;
	// see combiner.go.
	comb combiners

	recon reconcilerState // owned by the reconciler goroutine; published via m

	// loops runs the sweeper and the reconciler from Start to Close; Call
	// checks loops.Closed without a lock.
	loops lifecycle.Loops

	// oneTripOff is set once the database refused a one-round-trip batch
	// (batchOneTrip): every batch then takes two.
	oneTripOff atomic.Bool

	// hookLocked, when set (tests only), runs inside a reserve transaction
	// right after the units were locked, on the transaction's connection.
	hookLocked func(ctx context.Context, c Conn)
}

// New validates cfg and builds an engine. It starts nothing and does no I/O.
func New(cfg Config, opts Options) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if opts.Conns == nil {
		return nil, errors.New("reservation: Options.Conns is required")
	}
	if opts.Refiller == nil {
		return nil, errors.New("reservation: Options.Refiller is required (inline refill is the reserve fallback)")
	}
	if c, ok := opts.Refiller.(interface{ PoolCap() int }); ok && c.PoolCap() != cfg.PoolCap {
		return nil, fmt.Errorf("reservation: config pool_cap %d differs from the refiller's %d", cfg.PoolCap, c.PoolCap())
	}
	conns := markConns{opts.Conns} // tells lost connections from the database's answers
	e := &Engine{
		cfg:       cfg,
		conns:     conns,
		replica:   opts.ReplicaConns,
		refiller:  opts.Refiller,
		log:       opts.Logger,
		duties:    opts.Duties,
		hold:      opts.Hold,
		switching: opts.Switching,
	}
	switch {
	case e.hold == 0:
		e.hold = DefaultHold
	case e.hold < 0:
		e.hold = 0
	}
	if e.replica == nil {
		e.replica = conns
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	e.m.init()
	e.comb.init(e, &e.cfg, &e.m)
	e.sessions = make(chan struct{}, cfg.MaxSessions)
	e.tx = TxRunner{
		Conns:      conns,
		MaxRetries: cfg.MaxTxRetries,
		BackoffMin: cfg.BackoffMin,
		BackoffMax: cfg.BackoffMax,
		OnRetry:    e.m.countRetry,
	}
	return e, nil
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Start starts the sweeper and the reconciler. They stop when ctx is
// cancelled or Close is called. Start may be called once.
func (e *Engine) Start(ctx context.Context) error {
	switch err := e.loops.Start(ctx, e.runSweeper, e.runReconciler); {
	case errors.Is(err, lifecycle.ErrClosed):
		return ErrClosed
	case err != nil:
		return errors.New("reservation: engine already started")
	}
	return nil
}

// Close stops the background loops and waits for them. Calls made after
// Close fail with ErrClosed. Close is idempotent.
func (e *Engine) Close() error {
	e.loops.Close()
	return nil
}
