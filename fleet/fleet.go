package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// Defaults. A control reaches every instance within one Poll (and the
// instance that wrote it at once); an instance not seen for TTL is
// taken for gone: its cap grants go back to the others and its duties
// are taken over.
const (
	DefaultPoll = time.Second
	DefaultTTL  = 5 * time.Second
)

// Options configures a Fleet.
type Options struct {
	Store   *Store
	Applier Applier
	// Self is this instance (its ID must be unique in the fleet).
	Self Member
	// Poll is how often the tables are read and this instance's heartbeat
	// and grants renewed (0: DefaultPoll); TTL how long a heartbeat, a
	// grant or a duty lease lasts (0: DefaultTTL; at least 2 × Poll).
	Poll, TTL time.Duration
	// Duties are the fleet duties this instance may run (Holds).
	Duties []string
	// StmtBudget, when not nil, is this instance's prepared-statement
	// budget now (Member.StmtBudget; it changes with the fleet's size).
	StmtBudget func() int
	// ConnReserve is how many of the server's max_connections the fleet's
	// pools should leave to everyone else (administrators, replication,
	// monitoring); StmtShare the share of its max_prepared_stmt_count
	// they may use together. Over either, the fleet is over-committed
	// (Status, a log line).
	ConnReserve int
	StmtShare   float64
	Log         *slog.Logger
	// SwitchHold bounds how long past its deadline a cap's grant is kept
	// while the database refuses its renewal as read-only (a switchover
	// of the primary: caps.go, keepThrough). 0: DefaultSwitchHold.
	SwitchHold time.Duration
}

// Fleet keeps this instance in step with the fleet's tables. New starts
// nothing; Start polls until Close. Its methods are safe for concurrent
// use.
type Fleet struct {
	o     Options
	loops lifecycle.Loops
	// grants is o.Store, and now time.Now, but for tests of the caps'
	// sharing with no database and a clock of their own.
	grants grantStore
	now    func() time.Time

	pollMu sync.Mutex // serializes Poll (the loop's and Set's and Remove's)

	// read is closed once the controls are known (read, or the tables
	// missing) and applied: see Read.
	read     chan struct{}
	readOnce sync.Once

	mu sync.Mutex // guards the fields below
	// known: the controls have been read at least once (or the tables
	// are missing, so there are none); controls and their local
	// deadlines (zero: none) are the last read.
	known     bool
	noSchema  bool
	controls  []Control
	deadlines []time.Time
	// ignored are the rows of the last read that are not applied, and
	// truncated says it did not read them all (MaxControls); ignoredSeen
	// the keys of the ignored rows logged already.
	ignored     []Ignored
	truncated   bool
	ignoredSeen map[string]bool
	lastRead    time.Time // local time of the last good read
	lastErr     error
	errLogged   bool
	members     []Member
	caps        map[string]capState  // by tag
	duties      map[string]time.Time // duties held: local deadline of the lease
	applied     []Applied
	polls       uint64
	failures    uint64
	hbErr       error // the last heartbeat's failure; nil: it was recorded
	hbFailures  uint64
	limits      ServerLimits
	sizing      Sizing
}

// Sizing is the fleet's use of the server's limits, from the last read.
type Sizing struct {
	// PoolMax is Σ pool.max of the live instances, against
	// MaxConnections − reserve (PoolMaxLimit).
	PoolMax      int  `json:"pool_max_sum"`
	PoolMaxLimit int  `json:"pool_max_limit"`
	ConnsOver    bool `json:"connections_overcommitted"`
	// StmtBudget is Σ of the live instances' prepared-statement budgets,
	// against prepared_statement_share × max_prepared_stmt_count.
	StmtBudget      int  `json:"stmt_budget_sum"`
	StmtBudgetLimit int  `json:"stmt_budget_limit"`
	StmtsOver       bool `json:"statements_overcommitted"`
}

// New returns a Fleet; see Options.
func New(o Options) *Fleet {
	if o.Poll <= 0 {
		o.Poll = DefaultPoll
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	o.TTL = max(o.TTL, 2*o.Poll)
	if o.Self.Kinds == nil {
		o.Self.Kinds = KnownKinds()
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Fleet{o: o, grants: o.Store, now: time.Now, caps: map[string]capState{}, duties: map[string]time.Time{},
		read: make(chan struct{})}
}

// Start reads the tables, trying again for up to Options.TTL while the
// read fails, so that an instance starts with the fleet's controls in
// force; then it polls every Options.Poll until ctx ends or Close, and
// moves its grants of fleet-wide caps between polls (caps.go). An
// instance that could not read them in that time starts without them
// (with its configuration's controls) and applies them at its first good
// read; Status says so meanwhile.
func (f *Fleet) Start(ctx context.Context) error {
	first := func(ctx context.Context) {
		deadline := time.Now().Add(f.o.TTL)
		for f.Poll(ctx) != nil && time.Now().Before(deadline) {
			if lifecycle.Sleep(ctx, 200*time.Millisecond) != nil {
				return
			}
		}
	}
	return f.loops.StartAfter(ctx, first, func(ctx context.Context) {
		t := time.NewTicker(f.o.Poll)
		defer t.Stop()
		s := time.NewTicker(max(f.o.Poll/settleEvery, time.Millisecond))
		defer s.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				_ = f.Poll(ctx)
			case <-s.C:
				f.settle(ctx)
			}
		}
	})
}

// Close stops polling and removes this instance's heartbeat and grants,
// and gives up its duties, so that the others need not wait for them to
// lapse. Idempotent.
func (f *Fleet) Close() error {
	if !f.loops.Close() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	f.mu.Lock()
	duties := make([]string, 0, len(f.duties))
	for d := range f.duties {
		duties = append(duties, d)
	}
	f.duties = map[string]time.Time{}
	f.mu.Unlock()
	for _, d := range duties {
		_ = f.o.Store.ReleaseDuty(ctx, d, f.o.Self.ID)
	}
	return f.o.Store.Leave(ctx, f.o.Self.ID)
}

// Poll runs one round: this instance's heartbeat, the controls read and
// applied, its grants of fleet-wide caps renewed. An instance that cannot
// read the controls keeps the last it read (their expiries counted on its
// own clock meanwhile) and says so (Status). A heartbeat that fails (the
// database refusing writes during a switchover of the primary) fails no
// poll: Status says so, and the error is the controls' read's alone.
func (f *Fleet) Poll(ctx context.Context) error {
	f.pollMu.Lock()
	defer f.pollMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, f.o.Poll+f.o.TTL/2)
	defer cancel()
	st := f.o.Store
	self := f.o.Self
	if f.o.StmtBudget != nil {
		self.StmtBudget = f.o.StmtBudget()
	}
	// The heartbeat is a write: while the primary is switched over (a
	// read-only server refuses it) it fails, and the controls are read
	// all the same (a read-only server still answers reads), so the
	// poll goes on without it.
	hbErr := st.Heartbeat(ctx, self)
	read, err := st.Controls(ctx)
	var members []Member
	if err == nil {
		members, err = st.Members(ctx, f.o.TTL)
	}
	var limits ServerLimits
	if err == nil {
		limits, err = st.Limits(ctx)
	}
	now := f.now()
	f.mu.Lock()
	f.polls++
	f.noteHeartbeatLocked(hbErr)
	switch {
	case err == nil:
		if !f.known || f.lastErr != nil {
			f.o.Log.Info("fleet: controls read", "controls", len(read.Controls), "ignored", len(read.Ignored), "instances", len(members))
		}
		f.known, f.noSchema, f.lastErr, f.errLogged, f.lastRead = true, false, nil, false, now
		f.members = members
		f.limits = limits
		f.sizeLocked()
		f.noteIgnoredLocked(read)
		f.controls = read.Controls
		f.deadlines = make([]time.Time, len(read.Controls))
		for i, c := range read.Controls {
			if !c.Expires.IsZero() {
				f.deadlines[i] = now.Add(c.Expires.Sub(read.Now))
			}
		}
	case errors.Is(err, ErrNoSchema):
		// No tables, so no fleet controls: config and local ones only.
		if !f.noSchema {
			f.o.Log.Warn("fleet: the fleet's tables are missing; on-call controls apply to this instance only until `holdfast migrate` (schema version 5) has run", "err", err)
		}
		f.known, f.noSchema, f.lastErr, f.controls, f.deadlines = true, true, err, nil, nil
		f.ignored, f.truncated = nil, false
	default:
		f.failures++
		f.lastErr = err
		if !f.errLogged {
			f.errLogged = true
			f.o.Log.Warn("fleet: cannot read the controls; keeping the last read in force", "err", err,
				"known", f.known, "controls", len(f.controls), "last_read", f.lastRead)
		}
	}
	size, known := len(f.members), f.known
	f.mu.Unlock()
	if size > 0 {
		f.o.Applier.SetFleetSize(size)
	}
	f.apply(ctx, now)
	if known {
		f.readOnce.Do(func() { close(f.read) })
	}
	f.holdDuties(ctx, now)
	if err != nil && !errors.Is(err, ErrNoSchema) {
		return err
	}
	return nil
}

// noteHeartbeatLocked records the heartbeat's outcome (err: it failed),
// and logs the first failure of a streak and its end.
func (f *Fleet) noteHeartbeatLocked(err error) {
	switch {
	case err == nil || errors.Is(err, ErrNoSchema):
		if f.hbErr != nil {
			f.o.Log.Info("fleet: this instance's heartbeat is recorded again")
		}
		f.hbErr = nil
	default:
		f.hbFailures++
		if f.hbErr == nil {
			f.o.Log.Warn("fleet: cannot record this instance's heartbeat (the controls are still read and applied)", "err", err)
		}
		f.hbErr = err
	}
}

// sizeLocked sums the live instances' pool.max and statement budgets
// against the server's limits, and warns when either is over-committed
// (once each time it becomes so).
func (f *Fleet) sizeLocked() {
	var z Sizing
	for _, m := range f.members {
		z.PoolMax += m.PoolMax
		z.StmtBudget += m.StmtBudget
	}
	z.PoolMaxLimit = max(0, f.limits.MaxConnections-f.o.ConnReserve)
	z.ConnsOver = z.PoolMax > z.PoolMaxLimit
	// Each instance rounds its budget down; a little slack for that.
	z.StmtBudgetLimit = int(float64(f.limits.MaxPreparedStmtCount) * f.o.StmtShare)
	z.StmtsOver = f.o.StmtShare > 0 && z.StmtBudget > z.StmtBudgetLimit+len(f.members)
	if z.ConnsOver && !f.sizing.ConnsOver {
		f.o.Log.Warn("fleet: the instances' pools together may open more connections than the server allows; lower pool.max or raise max_connections",
			"instances", len(f.members), "sum_pool_max", z.PoolMax, "max_connections", f.limits.MaxConnections, "reserve", f.o.ConnReserve)
	}
	if z.StmtsOver && !f.sizing.StmtsOver {
		f.o.Log.Warn("fleet: the instances' statement caches together may keep more prepared statements than their share of the server's; set backend.instances to 0 (derived from the fleet) or to the number of instances",
			"instances", len(f.members), "sum_budget", z.StmtBudget, "share_limit", z.StmtBudgetLimit)
	}
	f.sizing = z
}

// holdDuties takes or renews this instance's leases on its duties. A lease
// it holds counts as held only until TTL − Poll after its last renewal (on
// its own clock), so that it stops before another instance may take it
// over.
func (f *Fleet) holdDuties(ctx context.Context, now time.Time) {
	for _, d := range f.o.Duties {
		mine, err := f.o.Store.HoldDuty(ctx, d, f.o.Self.ID, f.o.TTL)
		f.mu.Lock()
		_, had := f.duties[d]
		switch {
		case err == nil && mine:
			f.duties[d] = now.Add(f.o.TTL - f.o.Poll)
			if !had {
				f.o.Log.Info("fleet: this instance runs a fleet duty", "duty", d)
			}
		case err == nil && had:
			delete(f.duties, d)
			f.o.Log.Info("fleet: another instance runs a fleet duty now", "duty", d)
		}
		f.mu.Unlock()
	}
}

// Holds reports whether this instance should run duty now: it holds the
// duty's lease (or, with the fleet's tables missing, there is no fleet to
// share it with, and every instance runs its duties as before).
func (f *Fleet) Holds(duty string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.noSchema {
		return true
	}
	d, ok := f.duties[duty]
	return ok && time.Now().Before(d)
}

// inForceLocked returns the controls not expired at now (local clock).
func (f *Fleet) inForceLocked(now time.Time) []Control {
	var out []Control
	for i, c := range f.controls {
		if d := f.deadlines[i]; !d.IsZero() && !now.Before(d) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// apply merges the controls in force by tag, renews this instance's
// grants of fleet-wide caps, and tells the Applier.
func (f *Fleet) apply(ctx context.Context, now time.Time) {
	f.mu.Lock()
	cs := f.inForceLocked(now)
	caps := maps.Clone(f.caps)
	f.mu.Unlock()

	byTag := map[string]*Applied{}
	var capped []string
	get := func(tag string) *Applied {
		a := byTag[tag]
		if a == nil {
			a = &Applied{Tag: tag}
			byTag[tag] = a
		}
		return a
	}
	for _, c := range cs {
		a := get(c.Tag)
		a.Controls = append(a.Controls, c)
		if c.Kind == KindLimit { // a fleet-wide cap: this instance's grant of it
			a.Limited, a.FleetLimit = true, int(c.Value)
			capped = append(capped, c.Tag)
		}
	}
	for _, tag := range capped {
		a := byTag[tag]
		c, ok := f.renew(ctx, tag, caps[tag], now, true)
		if !ok {
			a.Limited = false // lifted since the read
			delete(caps, tag)
			continue
		}
		if c.renewed.IsZero() {
			c.share.Cap = a.FleetLimit
		} else {
			a.FleetLimit = c.share.Cap // as the row locked by the renewal says
		}
		caps[tag] = c
		a.Limit = c.ceiling
	}
	applied := sorted(byTag)
	f.o.Applier.ApplyFleetControls(applied)
	// A cap lifted since the last poll: give its grant back at once (an
	// unrenewed grant would lapse after the ttl anyway).
	lifted := false
	for t := range caps {
		if !slices.Contains(capped, t) {
			lifted = true
			delete(caps, t)
		}
	}
	if lifted {
		if err := f.grants.ReleaseGrants(ctx, f.o.Self.ID, capped); err != nil && !errors.Is(err, ErrNoSchema) {
			f.o.Log.Debug("fleet: releasing cap grants failed", "err", err)
		}
	}
	f.mu.Lock()
	f.caps, f.applied = caps, applied
	f.mu.Unlock()
}

// noteIgnoredLocked keeps read's ignored rows for Status, and logs each
// the first time it is seen (again after it was gone), and a truncated
// read the first time.
func (f *Fleet) noteIgnoredLocked(read ControlsRead) {
	seen := make(map[string]bool, len(read.Ignored))
	for _, ig := range read.Ignored {
		key := fmt.Sprintf("%s\x00%s\x00%d\x00%s", ig.Tag, ig.Kind, ig.Value, ig.SetAt)
		seen[key] = true
		if !f.ignoredSeen[key] {
			f.o.Log.Warn("fleet: a control row is ignored (not applied)", "tag", ig.Tag, "kind", ig.Kind, "value", ig.Value,
				"set_by", ig.SetBy, "set_at", ig.SetAt, "reason", ig.Reason)
		}
	}
	if read.Truncated && !f.truncated {
		f.o.Log.Warn("fleet: more control rows than an instance reads; the rest are not applied", "read", MaxControls)
	}
	f.ignoredSeen, f.ignored, f.truncated = seen, read.Ignored, read.Truncated
}

func sorted(m map[string]*Applied) []Applied {
	out := make([]Applied, 0, len(m))
	for _, a := range m {
		out = append(out, *a)
	}
	slices.SortFunc(out, func(a, b Applied) int {
		if a.Tag < b.Tag {
			return -1
		}
		if a.Tag > b.Tag {
			return 1
		}
		return 0
	})
	return out
}

// Set writes a control for the whole fleet and puts it in force on this
// instance before it returns; the others apply it within one poll.
// expires > 0 lifts it that long after (the database's clock). The write
// is bounded like a poll. Its error is the write's alone: once written,
// the control is the fleet's, and a failed poll here (logged, and shown
// as stale) only delays it on this instance to the next poll.
func (f *Fleet) Set(ctx context.Context, c Control, expires time.Duration) error {
	err := f.writeHeld(ctx, func(wctx context.Context) error { return f.o.Store.SetControl(wctx, c, expires) })
	if err != nil {
		return err
	}
	f.pollAfterWrite(ctx)
	return nil
}

// Remove lifts tag's control of kind for the whole fleet, and on this
// instance before it returns; it reports whether one was in force. The
// write is bounded and its error reported as Set's.
func (f *Fleet) Remove(ctx context.Context, tag string, kind Kind) (bool, error) {
	var ok bool
	err := f.writeHeld(ctx, func(wctx context.Context) (err error) {
		ok, err = f.o.Store.RemoveControl(wctx, tag, kind)
		return err
	})
	if err != nil {
		return false, err
	}
	f.pollAfterWrite(ctx)
	return ok, nil
}

// writeHeld runs write, a control's write, each try bounded. A try the
// database refused as read-only (ReadOnly: the primary is being switched
// over, and nothing was written) or that could not connect at all (the
// primary down, a replica not promoted yet) is tried again, on a new
// connection, until the switch hold (Options.SwitchHold) has passed since
// the first or ctx ends: on-call's lift of a pause right after the flip
// must not fail because holdfast has not seen the new primary yet. Other
// errors, whose write may have reached the table, are returned at once.
func (f *Fleet) writeHeld(ctx context.Context, write func(context.Context) error) error {
	hold := f.o.SwitchHold
	if hold <= 0 {
		hold = DefaultSwitchHold
	}
	deadline := time.Now().Add(hold)
	wait := 20 * time.Millisecond
	for {
		wctx, cancel := context.WithTimeout(ctx, f.o.Poll+f.o.TTL/2)
		err := write(wctx)
		cancel()
		if err == nil || !(ReadOnly(err) || dialFailed(err)) || time.Now().Add(wait).After(deadline) {
			return err
		}
		f.o.Log.Debug("fleet: a control's write found no writable primary; trying again", "err", err)
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// dialFailed reports whether err is a failure to connect: nothing was
// sent.
func dialFailed(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// pollAfterWrite applies a change just written, whether or not the
// writer is still waiting.
func (f *Fleet) pollAfterWrite(ctx context.Context) {
	if err := f.Poll(context.WithoutCancel(ctx)); err != nil {
		f.o.Log.Warn("fleet: a control was written, but reading the controls back failed; it applies here at the next poll", "err", err)
	}
}

// Read is closed once this instance knows the fleet's controls and has
// applied them (the first good read, or the fleet's tables found
// missing: then there are none); it stays closed. Until then a drain in
// force for the fleet may not be in force here: holdfast serve holds
// client logins and reports itself unready meanwhile.
func (f *Fleet) Read() <-chan struct{} { return f.read }

// Status is what this instance knows of the fleet.
type Status struct {
	Instance string `json:"instance_id"`
	// Known: the controls have been read at least once (or the tables are
	// missing). Stale: the last read failed; the controls in force are
	// the last read.
	Known    bool      `json:"known"`
	Stale    bool      `json:"stale"`
	NoSchema bool      `json:"no_schema"`
	LastRead time.Time `json:"last_read,omitzero"`
	Error    string    `json:"error,omitempty"`
	Controls []Control `json:"controls"`
	// Ignored are the control rows this instance does not apply (invalid,
	// or of a kind it does not know), and why; Truncated: it read only
	// the first MaxControls rows.
	Ignored   []Ignored    `json:"ignored"`
	Truncated bool         `json:"truncated"`
	Applied   []Applied    `json:"applied"`
	Caps      []CapShares  `json:"caps"` // the fleet-wide caps' splits
	Members   []Member     `json:"members"`
	Limits    ServerLimits `json:"server_limits"`
	Sizing    Sizing       `json:"sizing"`
	Duties    []string     `json:"duties"` // the fleet duties this instance runs now
	Polls     uint64       `json:"polls"`
	Failures  uint64       `json:"failures"`
	// HeartbeatError is why the last heartbeat could not be recorded
	// (empty: it was), HeartbeatFailures how many have failed since
	// start. A failed heartbeat fails no poll: the controls are read
	// and applied all the same.
	HeartbeatError    string  `json:"heartbeat_error,omitempty"`
	HeartbeatFailures uint64  `json:"heartbeat_failures"`
	PollSeconds       float64 `json:"poll_seconds"`
	// Tables is the schema holding holdfast's tables, and TablesLegacy
	// reports that it is backend.database, not fleet.database (an install
	// made before that setting, not moved yet). Set by the caller of
	// Status that knows ("" and false: not known).
	Tables       string `json:"tables_schema,omitempty"`
	TablesLegacy bool   `json:"tables_legacy,omitempty"`
	// NotEverywhere are the controls in force that some live instances
	// cannot apply (of a kind they do not know: a mixed fleet).
	// MembersUnrecorded: the database is at a schema version before 6,
	// so no instance records its schema range or control kinds yet.
	NotEverywhere     []Unapplied `json:"not_everywhere"`
	MembersUnrecorded bool        `json:"members_unrecorded,omitempty"`
}

// Status returns what this instance knows of the fleet now.
func (f *Fleet) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := Status{Instance: f.o.Self.ID, Known: f.known, NoSchema: f.noSchema, LastRead: f.lastRead,
		Controls: f.inForceLocked(time.Now()), Ignored: slices.Clone(f.ignored), Truncated: f.truncated,
		Applied: slices.Clone(f.applied), Caps: f.capSharesLocked(), Members: slices.Clone(f.members),
		Limits: f.limits, Sizing: f.sizing,
		Polls: f.polls, Failures: f.failures, PollSeconds: f.o.Poll.Seconds()}
	st.HeartbeatFailures = f.hbFailures
	if f.hbErr != nil {
		st.HeartbeatError = f.hbErr.Error()
	}
	if f.lastErr != nil {
		st.Error = f.lastErr.Error()
		st.Stale = !f.noSchema
	}
	st.NotEverywhere = notEverywhere(st.Controls, st.Ignored, st.Members)
	st.MembersUnrecorded = f.o.Store != nil && !f.o.Store.MembersRecorded()
	now := time.Now()
	for d, until := range f.duties {
		if now.Before(until) {
			st.Duties = append(st.Duties, d)
		}
	}
	if f.noSchema {
		st.Duties = slices.Clone(f.o.Duties) // Holds: no fleet to share them with
	}
	slices.Sort(st.Duties)
	return st
}
