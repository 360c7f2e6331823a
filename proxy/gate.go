package proxy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/internal/waitq"
)

// On-call controls per tag: a drained tag's new borrows fail at once; a
// limited tag may hold at most N backend connections, further borrowers
// queue (bounded by the acquire timeout). Both apply when a borrow starts;
// a connection already held (an open transaction) is not affected, except
// that a drain with a grace period kills its holders when the grace ends.

var (
	// Their texts end the messages built on them, which reach clients
	// behind one "holdfast: " (see borrow), so they carry no prefix.
	errTagDrained = errors.New("new work for this tag is refused until it is undrained")
	errTagLimit   = errors.New("no slot under the limit came free within pool.acquire_timeout")
)

type gate struct {
	drained   bool
	drainedAt time.Time
	reason    string
	killTimer *time.Timer
	limit     int // noLimit: none (0 admits no one: a fleet cap's empty grant)
	inUse     int // borrows entered under the limit, and pre
	// pre are the holds under way when the limit came into force that
	// entered no gate of the tag, counted in inUse: each gives its slot
	// back at its end (exitPre), if the limit's epoch (counting the
	// times a limit came into force) is still the same.
	pre    int
	epoch  uint64
	maxTxn time.Duration // the tag's max_transaction_time (0: the configured one)
	// of says what the limit is: this instance's own, or its share of a
	// fleet-wide cap; peak is the most borrows held and queued under the
	// limit at once since the fleet last asked (demand).
	of   limitOf
	peak int
	// waiters are borrowers queued under the limit, oldest first. A
	// hand-off is true when it comes with a counted slot (the borrower
	// must exit), false when the limit was lifted.
	waiters *waitq.Queue[struct{}, bool]
}

// gates holds the controls in force. The zero value is ready to use, for
// tags; shapes is set for the gates of statement shapes (shapes.go), which
// only changes what refusals say.
type gates struct {
	shapes       bool
	active       atomic.Int32 // number of tags with a control; 0 skips the lock
	maxTxnActive atomic.Int32 // number of tags with a max_transaction_time
	// stopped is the set of tags drained or limited now (nil: none),
	// replaced whole under mu when it changes: the lock-free test of
	// whether a borrow must go through enter (free).
	stopped atomic.Pointer[map[string]struct{}]

	mu     sync.Mutex // guards m and epochs
	m      map[string]*gate
	epochs uint64 // limits that came into force (gate.epoch)
}

// GateState is one tag's controls, for the admin API and metrics.
type GateState struct {
	Tag       string    `json:"tag"`
	Drained   bool      `json:"drained"`
	DrainedAt time.Time `json:"drained_at,omitzero"`
	Reason    string    `json:"reason,omitempty"`
	Limit     int       `json:"limit"`   // the limit in force on this instance (with Limited)
	Limited   bool      `json:"limited"` // a limit is in force (Limit 0 then admits no one)
	// Fleet: Limit is this instance's share now of a fleet-wide cap of
	// FleetLimit (else it is this instance's own).
	Fleet      bool `json:"fleet"`
	FleetLimit int  `json:"fleet_limit"`
	InUse      int  `json:"in_use"`
	// MaxTransactionTime is the tag's own max_transaction_time (0: none).
	MaxTransactionTime time.Duration `json:"-"`
}

// enter admits a borrow for tag, waiting for a slot under its limit until
// ctx ends. It reports whether the borrow was counted (and so must exit).
func (g *gates) enter(ctx context.Context, tag string) (bool, error) {
	if g.active.Load() == 0 {
		return false, nil
	}
	g.mu.Lock()
	gt := g.m[tag]
	switch {
	case gt == nil || (!gt.drained && gt.limit == noLimit):
		g.mu.Unlock()
		return false, nil
	case gt.drained:
		err := g.drainErr(tag, gt)
		g.mu.Unlock()
		return false, err
	case gt.inUse < gt.limit && gt.waiters.Len() == 0:
		gt.inUse++
		gt.peak = max(gt.peak, gt.inUse)
		g.mu.Unlock()
		return true, nil
	}
	w := &waitq.Waiter[struct{}, bool]{}
	if err := gt.waiters.Enqueue(w); err != nil {
		g.mu.Unlock()
		return false, err
	}
	gt.peak = max(gt.peak, gt.inUse+gt.waiters.Len())
	g.mu.Unlock()
	// A slot handed over as ctx ends goes back through the queue's
	// give-back (see getLocked), so it is neither lost nor doubled.
	counted, err := gt.waiters.Wait(ctx, w)
	if err != nil {
		g.mu.Lock()
		limitErr := g.limitErr(tag, gt)
		g.mu.Unlock()
		return false, limitErr
	}
	g.mu.Lock()
	drained, derr := gt.drained, g.drainErr(tag, gt)
	g.mu.Unlock()
	if drained {
		if counted {
			g.exit(tag)
		}
		return false, derr
	}
	return counted, nil
}

func (g *gates) drainErr(tag string, gt *gate) error {
	since := gt.drainedAt.UTC().Format(time.RFC3339)
	var msg string
	if g.shapes {
		msg = fmt.Sprintf("statement shape %s is blocked by on-call since %s", strings.TrimPrefix(tag, ShapePrefix), since)
	} else {
		msg = fmt.Sprintf("tag '%s' is drained by on-call since %s", tag, since)
	}
	if gt.reason != "" {
		msg += " (" + gt.reason + ")"
	}
	if g.shapes {
		return fmt.Errorf("%s: %w", msg, errShapeBlocked)
	}
	return fmt.Errorf("%s: %w", msg, errTagDrained)
}

// limitErr is the refusal of a borrow that waited out its time under
// gt's limit, saying what on-call set: a fleet-wide cap and this
// instance's share of it now, or this instance's own limit. gates.mu held.
func (g *gates) limitErr(tag string, gt *gate) error {
	n := max(gt.limit, 0)
	switch {
	case g.shapes && gt.of.fleet:
		return fmt.Errorf("statement shape %s is capped by on-call at %d running at once across the fleet, of which this instance may run %d now: %w",
			strings.TrimPrefix(tag, ShapePrefix), gt.of.cap, n, errShapeLimit)
	case g.shapes:
		return fmt.Errorf("statement shape %s is capped at %d running at once by on-call: %w", strings.TrimPrefix(tag, ShapePrefix), n, errShapeLimit)
	case gt.of.fleet:
		return fmt.Errorf("tag '%s' is capped by on-call at %d backend connections across the fleet, of which this instance may hold %d now: %w",
			tag, gt.of.cap, n, errTagLimit)
	}
	return fmt.Errorf("tag '%s' is limited to %d backend connections by on-call: %w", tag, n, errTagLimit)
}

// stopKillTimerLocked cancels the kill that a drain with a grace period
// scheduled, if any. The caller holds gates.mu.
func (gt *gate) stopKillTimerLocked() {
	if gt.killTimer != nil {
		gt.killTimer.Stop()
		gt.killTimer = nil
	}
}

// exit ends a counted borrow, handing the slot to the oldest waiter.
func (g *gates) exit(tag string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.m[tag]
	if gt == nil {
		return
	}
	g.exitLocked(tag, gt)
}

// exitPre ends a hold that was under way when tag's limit came into force
// at epoch (see gate.pre); once the limit is lifted, or set again, it
// counts nothing.
func (g *gates) exitPre(tag string, epoch uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.m[tag]
	if gt == nil || gt.pre == 0 || gt.epoch != epoch {
		return
	}
	gt.pre--
	g.exitLocked(tag, gt)
}

func (g *gates) exitLocked(tag string, gt *gate) {
	if (gt.limit == noLimit || gt.inUse <= gt.limit) && gt.waiters.HandOff(true) {
		return // the slot goes on to the oldest waiter
	}
	if gt.inUse > 0 {
		gt.inUse--
	}
	g.cleanupLocked(tag, gt)
}

func (g *gates) getLocked(tag string) *gate {
	if g.m == nil {
		g.m = map[string]*gate{}
	}
	gt := g.m[tag]
	if gt == nil {
		gt = &gate{limit: noLimit}
		gt.waiters = waitq.New[struct{}](func(counted bool) {
			if counted {
				g.exit(tag)
			}
		})
		g.m[tag] = gt
		g.active.Add(1)
	}
	return gt
}

// cleanupLocked forgets a tag with no control and nothing in flight.
func (g *gates) cleanupLocked(tag string, gt *gate) {
	if !gt.drained && gt.limit == noLimit && gt.maxTxn == 0 && gt.inUse == 0 && gt.waiters.Len() == 0 {
		delete(g.m, tag)
		g.active.Add(-1)
	}
}

// publishLocked replaces the set free reads, when it changed.
func (g *gates) publishLocked() {
	next := map[string]struct{}{}
	for tag, gt := range g.m {
		if gt.drained || gt.limit != noLimit {
			next[tag] = struct{}{}
		}
	}
	if len(next) == 0 {
		g.stopped.Store(nil)
		return
	}
	g.stopped.Store(&next)
}

// free reports whether tag's borrows pass the controls without entering
// them: it is neither drained nor limited (a max_transaction_time does
// not stop a borrow). Lock-free: it decides whether a borrow may skip
// enter, and a statement take a path that bypasses it (pipelining), so
// that a control on one tag leaves the others' paths as they are.
func (g *gates) free(tag string) bool {
	if g.active.Load() == 0 {
		return true
	}
	m := g.stopped.Load()
	if m == nil {
		return true
	}
	_, stopped := (*m)[tag]
	return !stopped
}

// drain refuses new borrows for tag. When grace > 0, kill runs after it
// unless the tag is undrained first.
func (g *gates) drain(tag, reason string, grace time.Duration, kill func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.getLocked(tag)
	if !gt.drained {
		gt.drained, gt.drainedAt = true, time.Now()
	}
	gt.reason = reason
	gt.stopKillTimerLocked()
	if grace > 0 && kill != nil {
		gt.killTimer = time.AfterFunc(grace, kill)
	}
	// Waiters under a limit are refused too (each with a counted slot,
	// which it exits at once).
	gt.inUse += gt.waiters.HandOffAll(true)
	g.publishLocked()
}

func (g *gates) undrain(tag string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.m[tag]
	if gt == nil {
		return
	}
	gt.drained, gt.reason = false, ""
	gt.stopKillTimerLocked()
	g.cleanupLocked(tag, gt)
	g.publishLocked()
}

// noLimit is a gate's limit when it has none.
const noLimit = -1

// setLimit caps tag at n connections (noLimit lifts the cap; 0 admits no
// one). held (nil: none) counts the holds of tag under way when the cap
// comes into force at an epoch, so that it counts borrows already in
// flight, and marks those that will give their slot back through exitPre
// (the others leave an earlier gate of the tag through exit): it runs
// under g.mu, so a hold ends either before it (not counted) or after
// (counted, given back once). Lowered under what is held, the limit admits
// no one until what is held has fallen under it.
func (g *gates) setLimit(tag string, n int, held func(epoch uint64) (held, marked int)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.getLocked(tag)
	if gt.limit == noLimit && n != noLimit {
		g.epochs++ // across the gates: a tag's gate may be forgotten and made again
		gt.epoch = g.epochs
		gt.inUse, gt.pre = 0, 0
		if held != nil {
			gt.inUse, gt.pre = held(gt.epoch)
		}
	}
	gt.limit = n
	if n == noLimit {
		gt.of = limitOf{}
		gt.inUse, gt.pre = 0, 0
		gt.waiters.HandOffAll(false)
	} else {
		for gt.inUse < gt.limit && gt.waiters.HandOff(true) {
			gt.inUse++
		}
	}
	g.cleanupLocked(tag, gt)
	g.publishLocked()
}

// limitOf says what a limit is: this instance's own (the zero value), or
// its share of a fleet-wide cap of cap.
type limitOf struct {
	fleet bool
	cap   int
}

// setLimitOf records what tag's limit is, for what refusals and the admin
// API say.
func (g *gates) setLimitOf(tag string, of limitOf) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt := g.m[tag]; gt != nil && gt.limit != noLimit {
		gt.of = of
	}
}

// current returns tag's controls in force (noLimit: no limit) and what its
// limit is.
func (g *gates) current(tag string) (drained bool, limit int, of limitOf, maxTxn time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt := g.m[tag]; gt != nil {
		return gt.drained, gt.limit, gt.of, gt.maxTxn
	}
	return false, noLimit, limitOf{}, 0
}

// demand returns what tag's borrows hold under its limit now, and the most
// they held and waited for at once since the last call with restart (or
// now, when more); restart begins a new window. Counted only while the tag
// has a gate.
func (g *gates) demand(tag string, restart bool) (held, want int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.m[tag]
	if gt == nil {
		return 0, 0
	}
	now := gt.inUse + gt.waiters.Len()
	want = max(gt.peak, now)
	if restart {
		gt.peak = now
	}
	return gt.inUse, want
}

func (g *gates) snapshot() []GateState {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]GateState, 0, len(g.m))
	for tag, gt := range g.m {
		if !gt.drained && gt.limit == noLimit && gt.maxTxn == 0 {
			continue
		}
		out = append(out, GateState{Tag: tag, Drained: gt.drained, DrainedAt: gt.drainedAt, Reason: gt.reason, Limit: max(gt.limit, 0), Limited: gt.limit != noLimit,
			Fleet: gt.of.fleet, FleetLimit: gt.of.cap, InUse: gt.inUse, MaxTransactionTime: gt.maxTxn})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}

// setMaxTxn sets tag's own max_transaction_time (0 lifts it).
func (g *gates) setMaxTxn(tag string, d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	gt := g.getLocked(tag)
	switch {
	case gt.maxTxn == 0 && d > 0:
		g.maxTxnActive.Add(1)
	case gt.maxTxn > 0 && d == 0:
		g.maxTxnActive.Add(-1)
	}
	gt.maxTxn = d
	g.cleanupLocked(tag, gt)
}

// maxTxn returns tag's own max_transaction_time (0: none).
func (g *gates) maxTxn(tag string) time.Duration {
	if g.maxTxnActive.Load() == 0 {
		return 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt := g.m[tag]; gt != nil {
		return gt.maxTxn
	}
	return 0
}

// waiting counts the borrowers queued under each tag's limit (read-only,
// for Server.Waiting); nil when none.
func (g *gates) waiting() map[string]int {
	if g.active.Load() == 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out map[string]int
	for tag, gt := range g.m {
		if n := gt.waiters.Len(); n > 0 {
			if out == nil {
				out = map[string]int{}
			}
			out[tag] = n
		}
	}
	return out
}
