package legacy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
	"github.com/holdfast-db/holdfast/reservation"
)

// Options are a Router's collaborators.
type Options struct {
	Engine *reservation.Engine // required
	Store  *Store              // required
	Switch *Switch             // required
	// Config is reservation.redis with defaults filled in
	// (Config.WithDefaults).
	Config Config
	// Logger receives disagreements, Redis failures, drift alerts; nil
	// means slog.Default().
	Logger *slog.Logger
	// Now is the clock of the Redis side's expiries; nil means time.Now.
	Now func() time.Time
	// Duties says whether this instance runs the Redis sweeper
	// (lifecycle.DutyRedisSweeper) and the drift check (DutyRedisDrift)
	// now; nil runs both.
	Duties lifecycle.Duties
}

// Router answers CALL holdfast.* with the engine and the legacy Redis
// counter side by side (see the package doc). It satisfies the proxy's
// Procedures interface. New starts nothing; Start starts the switch poll,
// the Redis sweeper and the drift check; Close stops them. Call may be used
// from any goroutine, before Start too.
type Router struct {
	eng  *reservation.Engine
	st   *Store
	sw   *Switch
	cfg  Config
	log  *slog.Logger
	now  func() time.Time
	duty lifecycle.Duties
	m    metrics
	cmp  comparisons
	fail rateLog // Redis failures
	hot  hotPools

	drift driftState // owned by the drift loop (or a DriftOnce caller)

	loops lifecycle.Loops // the switch poll, the sweeper, the drift check
}

// New builds a router. It does no I/O.
func New(o Options) (*Router, error) {
	if o.Engine == nil || o.Store == nil || o.Switch == nil {
		return nil, errors.New("legacy: Options.Engine, Store and Switch are required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	r := &Router{eng: o.Engine, st: o.Store, sw: o.Switch, cfg: o.Config, log: o.Logger, now: o.Now, duty: o.Duties}
	r.cmp = comparisons{log: o.Logger, now: o.Now}
	r.m.init()
	r.hot.max = 64
	return r, nil
}

// Switch is the authority switch the router follows.
func (r *Router) Switch() *Switch { return r.sw }

// Store is the Redis side.
func (r *Router) Store() *Store { return r.st }

// Start reads the switch once (a failure is logged: the seed stays in force
// until a poll succeeds) and starts the background loops, which stop when
// ctx ends or Close is called. Start may be called once.
func (r *Router) Start(ctx context.Context) error {
	loops := []func(context.Context){r.sw.Run, r.runSweeper}
	if r.cfg.DriftInterval > 0 {
		loops = append(loops, r.runDrift)
	}
	if err := r.loops.StartAfter(ctx, r.firstPoll, loops...); err != nil {
		return errors.New("legacy: router already started or closed")
	}
	return nil
}

func (r *Router) firstPoll(ctx context.Context) {
	if err := r.sw.Poll(ctx); err != nil {
		r.log.Warn("legacy: reading the authority switch failed; the configured authority is in force until it can be read",
			"err", err, "authority", r.sw.Current().Authority)
	}
}

// Close stops the background loops and waits for them. Idempotent. It
// does not close the Store.
func (r *Router) Close() error {
	r.loops.Close()
	return nil
}

// Call answers CALL holdfast.<name> as the engine's Call does, routing by
// authority: see the package doc. Its errors are the engine's, and, for a
// Redis that decides and cannot be reached, 2003 (nothing was done) or
// 9108 (the script may have run; repeating the CALL is safe).
func (r *Router) Call(ctx context.Context, name string, args []any) ([]string, [][]any, error) {
	ctx, cancel := context.WithTimeout(ctx, r.eng.Config().CallTimeout)
	defer cancel()
	cols, rows, err := r.call(ctx, name, args)
	return cols, rows, reservation.Interrupted(ctx, name, err)
}

func (r *Router) call(ctx context.Context, name string, args []any) ([]string, [][]any, error) {
	switch name {
	case "reserve":
		return r.reserve(ctx, args)
	case "claim":
		return r.claim(ctx, args)
	case "release":
		return r.release(ctx, args)
	case "extend":
		return r.extend(ctx, args)
	case "receive", "set_on_hand", "adjust":
		return r.stock(ctx, name, args)
	}
	return r.eng.Call(ctx, name, args)
}

// write returns a context for a dual write: the caller's answer is known,
// so the write is made even when the call's deadline is near, bounded by
// twice the Redis timeout.
func (r *Router) write(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*r.cfg.Timeout)
}

// redisFailed counts and logs (rate-limited) a failed Redis command; stale
// says the counters may now miss a change, which is recorded fleet-wide.
func (r *Router) redisFailed(op string, err error, stale bool, attrs ...any) {
	r.m.redisErrors.inc(op)
	if stale {
		r.sw.MarkStale(reservation.RedactTokens(op+": "+err.Error()), 5*time.Second)
	}
	if ok, n := r.fail.due(r.now()); ok {
		r.log.Warn("legacy: redis command failed", append([]any{"op", op, "err", reservation.RedactTokens(err.Error()), "stale", stale, "not_logged_since_last", n}, attrs...)...)
	}
}

// legacyUnreachable is the answer of a call whose decider, Redis, failed:
// 9107 when every connection to it stayed busy, 2003 when the command
// cannot have reached it otherwise, 9108 when it may have run.
func (r *Router) legacyUnreachable(proc string, err error) error {
	if poolBusy(err) {
		return &reservation.Error{Code: reservation.CodeBusy, State: "HY000",
			Msg: fmt.Sprintf("holdfast.%s: all %d connections to the legacy counter (Redis), which decides this call, stayed busy for %v "+
				"(reservation.redis.pool_size, timeout); nothing was done, retry", proc, r.cfg.PoolSize, r.cfg.Timeout)}
	}
	var se *StoreError
	if errors.As(err, &se) && !se.Sent {
		return &reservation.Error{Code: reservation.CodeUnavailable, State: "HY000",
			Msg: "holdfast." + proc + ": the legacy counter (Redis), which decides this call, could not be reached; nothing was done, retry"}
	}
	return &reservation.Error{Code: reservation.CodeOutcomeUnknown, State: "08S01",
		Msg: "holdfast." + proc + ": outcome unknown: the legacy counter (Redis), which decides this call, did not answer; " +
			"the call may or may not have taken effect. Repeating the same CALL is safe: it answers what was done, or does it"}
}

func (r *Router) reserve(ctx context.Context, args []any) ([]string, [][]any, error) {
	req, err := r.eng.ParseReserve(args)
	if err != nil {
		return r.eng.Call(ctx, "reserve", args) // the engine answers, and counts, bad arguments
	}
	auth := r.sw.Current().For(req.Shop)
	r.m.decided.inc(auth.String())
	if auth == reservation.AuthorityHoldfast {
		return r.reserveHoldfast(ctx, args, req)
	}
	return r.reserveRedis(ctx, args, req)
}

// reserved is a reserve's answer, read back from its rows.
type reserved struct {
	token    string
	exp      time.Time
	lines    []reservation.Line
	state    string
	replayed bool
}

func readReserved(rows [][]any) reserved {
	var out reserved
	for _, row := range rows {
		out.token, _ = row[0].(string)
		out.exp, _ = row[1].(time.Time)
		item, _ := row[3].(int64)
		group, _ := row[4].(int64)
		qty, _ := row[5].(int64)
		out.lines = append(out.lines, reservation.Line{Item: item, Group: group, Qty: qty})
		out.state, _ = row[6].(string)
		rep, _ := row[7].(int64)
		out.replayed = rep == 1
	}
	return out
}

func reserveRows(token string, exp time.Time, lines []reservation.Line, state string, replayed bool) [][]any {
	rep := int64(0)
	if replayed {
		rep = 1
	}
	out := make([][]any, len(lines))
	for i, l := range lines {
		out[i] = []any{token, exp, int64(i + 1), l.Item, l.Group, l.Qty, state, rep}
	}
	return out
}

func firstPool(req *reservation.ReserveRequest, lines []reservation.Line) []any {
	if len(lines) > 0 {
		return []any{"shop_id", req.Shop, "inventory_item_id", lines[0].Item, "inventory_group_id", lines[0].Group}
	}
	if len(req.Lines) > 0 {
		return []any{"shop_id", req.Shop, "inventory_item_id", req.Lines[0].Item, "inventory_group_id", req.Lines[0].Locations[0]}
	}
	return []any{"shop_id", req.Shop}
}

// reserveRedis: the legacy counter decides; the engine runs the same
// reserve in shadow, under the same key and token, its lines pinned to the
// locations Redis chose (so that both sides hold the same units). The
// caller gets Redis's answer; nothing of the shadow's can fail it.
func (r *Router) reserveRedis(ctx context.Context, args []any, req *reservation.ReserveRequest) ([]string, [][]any, error) {
	id := NewReservationID(reservation.AuthorityRedis)
	tok := reservation.FormatToken(id)
	t0 := time.Now()
	d, err := r.st.Reserve(ctx, req, tok)
	r.m.observe("reserve", "redis", time.Since(t0))
	if err != nil {
		r.redisFailed("reserve", err, false, firstPool(req, nil)...)
		return nil, nil, r.legacyUnreachable("reserve", err)
	}
	switch d.Kind {
	case "conflict":
		r.cmp.add("reserve", "conflict", "skipped")
		return nil, nil, &reservation.Error{Code: reservation.CodeIdempotencyConflict, State: "45000",
			Msg: fmt.Sprintf("holdfast.reserve: idempotency key '%s' of shop %d was used by a different request (reservation %s); use a new key for a new request",
				strings.ReplaceAll(req.Key, "'", "''"), req.Shop, d.Token)}
	case "insufficient":
		opts := reservation.CallOptions{ReservationID: id, Authority: reservation.AuthorityRedis}
		t1 := time.Now()
		_, rows, eerr := r.eng.CallWith(ctx, "reserve", args, opts)
		r.m.observe("reserve", "holdfast", time.Since(t1))
		r.cmp.add("reserve", "insufficient", engineClass(eerr), append(firstPool(req, nil), "seen", d.Seen)...)
		if eerr == nil {
			if got := readReserved(rows); got.token == tok && !got.replayed {
				// The shadow holds units the caller was told it has not:
				// give them back.
				wctx, cancel := r.write(ctx)
				_, _, rerr := r.eng.Call(wctx, "release", []any{tok})
				cancel()
				if rerr != nil {
					r.log.Warn("legacy: releasing a shadow reservation that Redis refused failed; it expires", "token_ref", reservation.TokenRef(tok), "err", reservation.RedactTokens(rerr.Error()))
				}
			}
		}
		line := req.Lines[d.Line-1]
		return nil, nil, &reservation.Error{Code: reservation.CodeInsufficientStock, State: "45000",
			Msg: fmt.Sprintf("holdfast.reserve: insufficient stock for line %d (item %d, qty %d): available %s (legacy counter)",
				d.Line, line.Item, line.Qty, strings.ReplaceAll(d.Seen, "@", " at location "))}
	}
	// ok or replay
	r.hot.add(req.Shop, d.Lines)
	rid, _ := reservation.ParseToken(d.Token)
	state, replayed := "active", d.Kind == "replay"
	if replayed {
		state = d.State
	}
	if state == "active" {
		locs := make([]int64, len(d.Lines))
		for i, l := range d.Lines {
			locs[i] = l.Group
		}
		opts := reservation.CallOptions{ReservationID: rid, Authority: reservation.AuthorityRedis, Locations: locs}
		t1 := time.Now()
		_, rows, eerr := r.eng.CallWith(ctx, "reserve", args, opts)
		r.m.observe("reserve", "holdfast", time.Since(t1))
		hc := engineClass(eerr)
		if eerr == nil && readReserved(rows).token != d.Token {
			hc = "other_reservation"
		}
		r.cmp.add("reserve", "ok", hc, append(firstPool(req, d.Lines), "token_ref", reservation.TokenRef(d.Token))...)
	}
	return reservation.ReserveColumns, reserveRows(d.Token, d.ExpiresAt, d.Lines, state, replayed), nil
}

// reserveHoldfast: the engine decides; a reservation it made is written to
// Redis after it (dual write), so the counters keep the full picture. A
// Redis failure is counted, logged and marks the counters stale; it never
// fails the caller.
func (r *Router) reserveHoldfast(ctx context.Context, args []any, req *reservation.ReserveRequest) ([]string, [][]any, error) {
	id := NewReservationID(reservation.AuthorityHoldfast)
	t0 := time.Now()
	cols, rows, err := r.eng.CallWith(ctx, "reserve", args, reservation.CallOptions{ReservationID: id, Authority: reservation.AuthorityHoldfast})
	r.m.observe("reserve", "holdfast", time.Since(t0))
	switch {
	case err == nil:
		got := readReserved(rows)
		r.hot.add(req.Shop, got.lines)
		if got.state != "active" {
			return cols, rows, nil
		}
		wctx, cancel := r.write(ctx)
		t1 := time.Now()
		would, merr := r.st.Mirror(wctx, got.token, req, got.lines, got.exp)
		cancel()
		r.m.observe("reserve", "redis", time.Since(t1))
		switch {
		case merr != nil:
			r.redisFailed("mirror", merr, true, append(firstPool(req, got.lines), "token_ref", reservation.TokenRef(got.token))...)
			r.cmp.add("reserve", "error", "ok")
		case would != "exists":
			r.cmp.add("reserve", would, "ok", append(firstPool(req, got.lines), "token_ref", reservation.TokenRef(got.token))...)
		}
		return cols, rows, nil
	case errors.Is(err, reservation.ErrInsufficientStock):
		t1 := time.Now()
		d, cerr := r.st.Check(ctx, req)
		r.m.observe("reserve", "redis", time.Since(t1))
		if cerr != nil {
			r.redisFailed("check", cerr, false)
			r.cmp.add("reserve", "error", "insufficient")
		} else {
			r.cmp.add("reserve", d.Kind, "insufficient", append(firstPool(req, nil), "redis_seen", d.Seen)...)
		}
	}
	return cols, rows, err
}

func claimClass(outcome string) string {
	switch outcome {
	case "claimed":
		return "ok"
	case "late", "forced":
		return "late"
	}
	return outcome
}

func redisClaimClass(prior string) string {
	switch prior {
	case "active":
		return "ok"
	case "expired", "released":
		return "late"
	case "claimed":
		return "duplicate"
	case "absent":
		return "unknown_token"
	}
	return prior
}

// claim: the ledger in MySQL is deducted in both modes (as in the Redis
// era, a claim meant "deduct the ledger, then clean up Redis"). For a
// reservation the legacy counter decided whose shadow the engine does not
// have, the engine deducts the lines Redis recorded. Then Redis is told.
func (r *Router) claim(ctx context.Context, args []any) ([]string, [][]any, error) {
	tok, err := reservation.TokenArg("claim", args)
	if err != nil {
		return r.eng.Call(ctx, "claim", args)
	}
	auth, _ := TokenAuthority(tok)
	var rec *Record
	var recErr error
	if auth == reservation.AuthorityRedis {
		t0 := time.Now()
		rec, recErr = r.st.Get(ctx, tok)
		r.m.observe("claim", "redis", time.Since(t0))
		if recErr != nil {
			r.redisFailed("get", recErr, false, "token_ref", reservation.TokenRef(tok))
		}
	}
	var ch *reservation.Change
	opts := reservation.CallOptions{Changed: func(c reservation.Change) { ch = &c }}
	if rec != nil && rec.State != "claimed" && rec.State != "resynced" {
		opts.Legacy = &reservation.LegacyReservation{Shop: rec.Shop, Key: rec.Key, Lines: rec.Lines, ExpiresAt: rec.ExpiresAt}
	}
	t1 := time.Now()
	cols, rows, err := r.eng.CallWith(ctx, "claim", args, opts)
	r.m.observe("claim", "holdfast", time.Since(t1))
	if err != nil && recErr != nil && errors.Is(err, reservation.ErrUnknownToken) {
		// Only Redis may know this reservation, and it did not answer.
		return nil, nil, r.legacyUnreachable("claim", &StoreError{Op: "get", Err: recErr})
	}
	hc := engineClass(err)
	if err == nil && len(rows) > 0 {
		o, _ := rows[0][1].(string)
		hc = claimClass(o)
	}
	attrs := []any{"token_ref", reservation.TokenRef(tok)}
	if ch != nil {
		if len(ch.Lines) > 0 {
			attrs = append(attrs, "shop_id", ch.Shop, "inventory_item_id", ch.Lines[0].Item, "inventory_group_id", ch.Lines[0].Group)
		}
		wctx, cancel := r.write(ctx)
		t2 := time.Now()
		prior, cerr := r.st.Claim(wctx, tok, ch.Shop, ch.Lines)
		cancel()
		r.m.observe("claim", "redis", time.Since(t2))
		if cerr != nil {
			r.redisFailed("claim", cerr, true, attrs...)
			r.cmp.add("claim", "error", hc)
		} else {
			r.cmp.add("claim", redisClaimClass(prior), hc, attrs...)
		}
	} else if rec != nil {
		r.cmp.add("claim", redisClaimClass(rec.State), hc, attrs...)
	}
	return cols, rows, err
}

func releaseClass(rows [][]any, err error) string {
	if err != nil {
		return engineClass(err)
	}
	o, _ := rows[0][1].(string)
	return o
}

// release: for a reservation the legacy counter decided, Redis answers
// (when it has it) and the engine's shadow is released too; otherwise the
// engine answers and Redis is told. A Redis failure never fails a
// release: a reservation Redis did not hear released is given back by its
// expiry there.
func (r *Router) release(ctx context.Context, args []any) ([]string, [][]any, error) {
	tok, err := reservation.TokenArg("release", args)
	if err != nil {
		return r.eng.Call(ctx, "release", args)
	}
	told := false // Redis has been told already
	if auth, _ := TokenAuthority(tok); auth == reservation.AuthorityRedis {
		t0 := time.Now()
		out, qty, rerr := r.st.Release(ctx, tok)
		r.m.observe("release", "redis", time.Since(t0))
		switch {
		case rerr != nil:
			r.redisFailed("release", rerr, false, "token_ref", reservation.TokenRef(tok))
		case out == "absent" || out == "resynced":
			told = true // it has nothing of this reservation to give back
		default:
			t1 := time.Now()
			_, erows, eerr := r.eng.Call(ctx, "release", args)
			r.m.observe("release", "holdfast", time.Since(t1))
			r.cmp.add("release", out, releaseClass(erows, eerr), "token_ref", reservation.TokenRef(tok))
			return reservation.ReleaseColumns, [][]any{{tok, out, qty}}, nil
		}
	}
	t1 := time.Now()
	cols, rows, err := r.eng.Call(ctx, "release", args)
	r.m.observe("release", "holdfast", time.Since(t1))
	if err == nil && !told {
		if o := releaseClass(rows, nil); o == "released" || o == "expired" {
			wctx, cancel := r.write(ctx)
			t2 := time.Now()
			out, _, merr := r.st.Release(wctx, tok)
			cancel()
			r.m.observe("release", "redis", time.Since(t2))
			if merr != nil {
				r.redisFailed("release", merr, true, "token_ref", reservation.TokenRef(tok))
			} else if out != "absent" {
				r.cmp.add("release", out, o, "token_ref", reservation.TokenRef(tok))
			}
		}
	}
	return cols, rows, err
}

func extendClass(out string) string {
	if out == "absent" {
		return "unknown_token"
	}
	return out
}

// extend: for a reservation the legacy counter decided, Redis decides (a
// Redis that cannot be reached fails the extend: nothing was done) and the
// shadow is extended too; otherwise the engine decides and Redis is told.
func (r *Router) extend(ctx context.Context, args []any) ([]string, [][]any, error) {
	tok, ttl, err := r.eng.ParseExtend(args)
	if err != nil {
		return r.eng.Call(ctx, "extend", args)
	}
	if auth, _ := TokenAuthority(tok); auth == reservation.AuthorityRedis {
		t0 := time.Now()
		out, exp, rerr := r.st.Extend(ctx, tok, ttl)
		r.m.observe("extend", "redis", time.Since(t0))
		if rerr != nil {
			r.redisFailed("extend", rerr, false, "token_ref", reservation.TokenRef(tok))
			return nil, nil, r.legacyUnreachable("extend", rerr)
		}
		if out != "absent" && out != "resynced" {
			t1 := time.Now()
			_, _, eerr := r.eng.Call(ctx, "extend", args)
			r.m.observe("extend", "holdfast", time.Since(t1))
			r.cmp.add("extend", extendClass(out), engineClass(eerr), "token_ref", reservation.TokenRef(tok))
			if out == "ok" {
				return reservation.ExtendColumns, [][]any{{tok, exp}}, nil
			}
			return nil, nil, &reservation.Error{Code: reservation.CodeExpired, State: "45000",
				Msg: fmt.Sprintf("holdfast.extend: reservation %s is %s, not active (legacy counter)", tok, out)}
		}
	}
	t1 := time.Now()
	cols, rows, err := r.eng.Call(ctx, "extend", args)
	r.m.observe("extend", "holdfast", time.Since(t1))
	if err == nil {
		exp, _ := rows[0][1].(time.Time)
		wctx, cancel := r.write(ctx)
		t2 := time.Now()
		out, merr := r.st.SetExpiry(wctx, tok, exp)
		cancel()
		r.m.observe("extend", "redis", time.Since(t2))
		if merr != nil {
			r.redisFailed("extend", merr, true, "token_ref", reservation.TokenRef(tok))
		} else if out != "absent" {
			r.cmp.add("extend", extendClass(out), "ok", "token_ref", reservation.TokenRef(tok))
		}
	}
	return cols, rows, err
}

// stock: the engine changes on_hand; the counter moves by the same amount.
// A stock call whose outcome is unknown (9108) leaves the counters stale.
func (r *Router) stock(ctx context.Context, name string, args []any) ([]string, [][]any, error) {
	var ch *reservation.Change
	cols, rows, err := r.eng.CallWith(ctx, name, args, reservation.CallOptions{Changed: func(c reservation.Change) { ch = &c }})
	switch {
	case ch != nil && ch.OnHandDelta != 0:
		wctx, cancel := r.write(ctx)
		if serr := r.st.AddStock(wctx, ch.Pool, ch.OnHandDelta); serr != nil {
			r.redisFailed("stock", serr, true, "pool", ch.Pool.String(), "delta", ch.OnHandDelta)
		}
		cancel()
	case errors.Is(err, reservation.ErrOutcomeUnknown):
		r.sw.MarkStale("holdfast."+name+": outcome unknown, the counter was not changed", 5*time.Second)
	}
	return cols, rows, err
}
