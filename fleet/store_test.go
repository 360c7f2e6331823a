package fleet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
)

// migrated is a fresh database at the schema's current version.
func migrated(t *testing.T) *Store {
	t.Helper()
	name := dbtest.NewDatabase(t)
	db := dbtest.Open(t, name, "parseTime=true")
	if _, err := reservation.Migrate(context.Background(), reservation.SQLConns(db)); err != nil {
		t.Fatal(err)
	}
	return NewStore(db)
}

// hour is a period of turns no test outlives: the round does not change
// under it.
const hour = time.Hour

// Instances renewing their grants of one cap concurrently, with wants
// going up and down, never hold grants adding up to more than the cap,
// never hold more than their grant, and each comes to its fair share once
// wants settle.
func TestGrantsNeverExceedTheCap(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const capN, ttl = 6, 5 * time.Second
	if err := st.SetControl(ctx, Control{Tag: "t", Kind: KindLimit, Value: capN, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		id := fmt.Sprint("inst", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			held, ceiling := 0, 0
			for round := 0; round < 40; round++ {
				want := (round*(i+1) + i) % 7
				held = min(held, want) // statements end
				sh, err := st.Grant(ctx, "t", id, want, max(held, ceiling), ttl, hour, 0)
				if err != nil {
					errs <- err
					return
				}
				ceiling = min(sh.Granted, sh.Fair)
				if held > sh.Granted && held > ceiling {
					errs <- fmt.Errorf("%s holds %d, over its grant %d", id, held, sh.Granted)
					return
				}
				held = max(held, min(want, ceiling)) // it admits up to its ceiling
				var sum int
				if err := st.db.QueryRowContext(ctx, "SELECT COALESCE(SUM(granted), 0) FROM holdfast_cap_grants WHERE tag = 't'").Scan(&sum); err != nil {
					errs <- err
					return
				}
				if sum > capN {
					errs <- fmt.Errorf("grants add up to %d, over the cap %d", sum, capN)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Settled: each wants everything and holds what it may; a few rounds
	// bring each to its share, 6 / 4 = 1.5: two get 2 and two get 1 in
	// this round (turns).
	var held, ceiling [4]int
	var last [4]Share
	for round := 0; round < 4; round++ {
		for i := range held {
			sh, err := st.Grant(ctx, "t", fmt.Sprint("inst", i), capN, max(held[i], ceiling[i]), ttl, hour, 0)
			if err != nil {
				t.Fatal(err)
			}
			ceiling[i] = min(sh.Granted, sh.Fair)
			held[i] = ceiling[i] // what it held above ended; it fills what it may
			last[i] = sh
		}
	}
	sum := 0
	for i, sh := range last {
		sum += sh.Granted
		if sh.Granted != sh.Fair || sh.Fair < 1 || sh.Fair > 2 {
			t.Errorf("instance %d: granted %d, fair share %d; want 1 or 2 and equal (%+v)", i, sh.Granted, sh.Fair, last)
		}
	}
	if sum != capN {
		t.Errorf("grants %+v add up to %d, want the whole cap %d", last, sum, capN)
	}
}

// An instance that holds a whole cap under sustained load (every slot it
// gives back taken at once by its own waiters) comes down to its share
// once others want the cap too: it stops admitting above its share at
// once, and its grant follows what it holds down. Before, the grant of
// an instance that kept its slots busy never shrank.
func TestGrantOfABusyInstanceShrinks(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const capN, ttl = 3, 5 * time.Second
	if err := st.SetControl(ctx, Control{Tag: "t", Kind: KindLimit, Value: capN, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	ids := []string{"a", "b", "c"}
	held := map[string]int{}
	ceiling := map[string]int{}
	renew := func(id string) Share {
		sh, err := st.Grant(ctx, "t", id, 8, max(held[id], ceiling[id]), ttl, hour, 0)
		if err != nil {
			t.Fatal(err)
		}
		ceiling[id] = min(sh.Granted, sh.Fair)
		if held[id] > sh.Granted {
			t.Fatalf("%s holds %d, over its grant %d", id, held[id], sh.Granted)
		}
		// Before the next renewal, what it held above its ceiling ended and
		// its waiters took every slot up to it.
		held[id] = ceiling[id]
		return sh
	}
	// a alone: it takes the whole cap and keeps it busy.
	if sh := renew("a"); sh.Granted != capN {
		t.Fatalf("alone, a got %d of %d", sh.Granted, capN)
	}
	for step := 1; step <= 3; step++ {
		for _, id := range ids {
			renew(id)
		}
		t.Logf("after %d rounds of renewals: held %v, ceilings %v", step, held, ceiling)
	}
	for _, id := range ids {
		if held[id] != 1 || ceiling[id] != 1 {
			t.Fatalf("after three rounds of renewals: held %v, ceilings %v; want 1 each", held, ceiling)
		}
	}
}

// A grant not renewed within the ttl goes back to the others.
func TestGrantOfAGoneInstanceReturns(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	if err := st.SetControl(ctx, Control{Tag: "t", Kind: KindLimit, Value: 4, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	if sh, err := st.Grant(ctx, "t", "gone", 4, 0, ttl, hour, 0); err != nil || sh.Granted != 4 {
		t.Fatalf("first instance granted %+v (%v), want all 4", sh, err)
	}
	sh, err := st.Grant(ctx, "t", "new", 4, 0, ttl, hour, 0)
	if err != nil || sh.Granted != 0 || sh.Fair != 2 || len(sh.Grants) != 2 {
		t.Fatalf("while the first holds all: %+v (%v), want nothing granted yet, a fair share of 2, two rows", sh, err)
	}
	time.Sleep(2 * ttl)
	if sh, err := st.Grant(ctx, "t", "new", 4, 0, ttl, hour, 0); err != nil || sh.Granted != 4 || len(sh.Grants) != 1 {
		t.Fatalf("after the first lapsed: %+v (%v), want all 4", sh, err)
	}
	if _, err := st.RemoveControl(ctx, "t", KindLimit); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Grant(ctx, "t", "new", 4, 0, ttl, hour, 0); !errors.Is(err, ErrNoCap) {
		t.Fatalf("after the cap was lifted: %v, want ErrNoCap", err)
	}
}

// One holder at a time; a lapsed lease is taken over.
func TestDutyLease(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	if ok, err := st.HoldDuty(ctx, "sweeper", "a", ttl); err != nil || !ok {
		t.Fatalf("a: %v %v", ok, err)
	}
	if ok, err := st.HoldDuty(ctx, "sweeper", "b", ttl); err != nil || ok {
		t.Fatalf("b took a live lease: %v %v", ok, err)
	}
	if ok, err := st.HoldDuty(ctx, "sweeper", "a", ttl); err != nil || !ok {
		t.Fatalf("a renewing: %v %v", ok, err)
	}
	time.Sleep(2 * ttl)
	if ok, err := st.HoldDuty(ctx, "sweeper", "b", ttl); err != nil || !ok {
		t.Fatalf("b after a's lease lapsed: %v %v", ok, err)
	}
	if ok, err := st.HoldDuty(ctx, "sweeper", "a", ttl); err != nil || ok {
		t.Fatalf("a took b's live lease back: %v %v", ok, err)
	}
}

// Controls: set, read with their expiry by the database's clock, removed.
func TestControlsStore(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	if err := st.SetControl(ctx, Control{Tag: "checkout", Kind: KindDrain, SetBy: "test", Reason: "incident"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := st.SetControl(ctx, Control{Tag: "report", Kind: KindLimit, Value: 3, SetBy: "test"}, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := st.SetControl(ctx, Control{Tag: "bad", Kind: "nope"}, 0); err == nil {
		t.Fatal("an unknown kind was written")
	}
	read, err := st.Controls(ctx)
	cs, now := read.Controls, read.Now
	if err != nil || len(cs) != 2 || now.IsZero() || len(read.Ignored) != 0 || read.Truncated {
		t.Fatalf("controls %+v at %v (%v), want 2", read, now, err)
	}
	if cs[1].Tag != "report" || cs[1].Expires.Sub(now) <= 0 || cs[1].Expires.Sub(now) > 300*time.Millisecond {
		t.Fatalf("report's expiry %v at %v", cs[1].Expires, now)
	}
	time.Sleep(400 * time.Millisecond)
	if read, err = st.Controls(ctx); err != nil || len(read.Controls) != 1 || read.Controls[0].Tag != "checkout" {
		t.Fatalf("after the limit expired: %+v (%v)", read, err)
	}
	if had, err := st.RemoveControl(ctx, "checkout", KindDrain); err != nil || !had {
		t.Fatalf("remove: %v %v", had, err)
	}
	if had, err := st.RemoveControl(ctx, "checkout", KindDrain); err != nil || had {
		t.Fatalf("remove again: %v %v", had, err)
	}
}

// Rows written to holdfast_controls by hand, or by a newer holdfast, are
// validated when read as the admin API validates a control it writes:
// those that fail are ignored (never applied, never listed as in force),
// logged once, counted, and shown with the reason. At most MaxControls
// rows are read, and a larger table is reported.
func TestControlsValidatedWhenRead(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	insert := func(tag, kind string, value int64) {
		t.Helper()
		if _, err := st.db.ExecContext(ctx, `INSERT INTO holdfast_controls (tag, kind, value, set_by, reason, set_at, expires_at)
VALUES (?, ?, ?, 'by-hand', 'test', NOW(6), NULL)`, tag, kind, value); err != nil {
			t.Fatal(err)
		}
	}
	insert("checkout", "throttle", 5)            // a kind this version does not know
	insert("report", "class", 7)                 // out of range
	insert("batch", "max_txn", 0)                // out of range
	insert("shape/XYZ", "drain", 0)              // not a shape
	insert("shape/0123456789abcdef", "class", 0) // a shape gets no class
	insert("search", "limit", 2)                 // valid
	read, err := st.Controls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(read.Controls) != 1 || read.Controls[0].Tag != "search" || len(read.Ignored) != 5 || read.Truncated {
		t.Fatalf("read %+v: want search's limit in force, 5 ignored", read)
	}
	for _, ig := range read.Ignored {
		if ig.Reason == "" || strings.HasPrefix(ig.Reason, "fleet:") {
			t.Errorf("ignored %+v: want the reason, without the package's prefix", ig)
		}
	}

	var logs bytes.Buffer
	app := &recordApplier{}
	f := New(Options{Store: st, Applier: app, Self: Member{ID: "a"}, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	for range 3 {
		if err := f.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range app.last() {
		if a.Tag != "search" {
			t.Errorf("applied %+v from an ignored row", a)
		}
	}
	s := f.Status()
	if len(s.Ignored) != 5 || len(s.Controls) != 1 {
		t.Errorf("status: %d ignored, %d in force; want 5 and 1", len(s.Ignored), len(s.Controls))
	}
	if n := strings.Count(logs.String(), "a control row is ignored"); n != 5 {
		t.Errorf("logged %d ignored rows in three polls, want each of the 5 once:\n%s", n, logs.String())
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(f))
	if v := gathered(t, reg, "holdfast_fleet_controls_ignored"); v != 5 {
		t.Errorf("holdfast_fleet_controls_ignored = %v, want 5", v)
	}

	// More rows than an instance reads: the first MaxControls are read,
	// and the read says it was cut.
	var b strings.Builder
	for i := 0; i < MaxControls; i++ {
		if b.Len() == 0 {
			b.WriteString("INSERT INTO holdfast_controls (tag, kind, value, set_by, reason, set_at) VALUES ")
		} else {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, "('t%05d', 'drain', 0, 'bulk', '', NOW(6))", i)
		if (i+1)%2000 == 0 {
			if _, err := st.db.ExecContext(ctx, b.String()); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	if read, err = st.Controls(ctx); err != nil || !read.Truncated || len(read.Controls)+len(read.Ignored) != MaxControls {
		t.Fatalf("with %d rows: %d read, truncated %v (%v)", MaxControls+6, len(read.Controls)+len(read.Ignored), read.Truncated, err)
	}
}

type recordApplier struct {
	mu      sync.Mutex // guards applied
	applied []Applied
}

func (r *recordApplier) ApplyFleetControls(cs []Applied) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = cs
}

func (r *recordApplier) last() []Applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

func (*recordApplier) Demand(string, bool) (int, int) { return 0, 0 }
func (*recordApplier) SetFleetSize(int)               {}

// gathered is the value of the one sample of gauge name that reg gathers.
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s not gathered", name)
	return 0
}

// Out of a time without writes (the renewer's own row as stale as the
// others': a switchover of the primary), a renewal takes no lapsed grant
// over but gives every stale row a fresh ttl; a renewer whose own row is
// fresh takes a lapsed grant over as before.
func TestGrantAfterATimeWithoutWrites(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	const ttl, poll = 400 * time.Millisecond, 100 * time.Millisecond
	if err := st.SetControl(ctx, Control{Tag: "t", Kind: KindLimit, Value: 4, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := st.Grant(ctx, "t", id, 4, 0, ttl, hour, poll); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(ttl + poll) // nobody renews: both rows lapse
	sh, err := st.Grant(ctx, "t", "a", 4, 0, ttl, hour, poll)
	if err != nil || len(sh.Grants) != 2 || sh.Granted > 4-sh.Grants[1].Granted {
		t.Fatalf("out of a time without writes: %+v (%v), want b's row kept and the cap kept", sh, err)
	}
	// b does not come back: a's renewals every poll, its own row fresh
	// now, take b's grant over once b's fresh ttl has passed.
	bumped := time.Now()
	for time.Since(bumped) < ttl+2*poll {
		time.Sleep(poll)
		if sh, err = st.Grant(ctx, "t", "a", 4, 0, ttl, hour, poll); err != nil {
			t.Fatal(err)
		}
		if time.Since(bumped) < ttl/2 && len(sh.Grants) != 2 {
			t.Fatalf("within b's fresh ttl: %+v, want b's row kept", sh)
		}
	}
	if len(sh.Grants) != 1 || sh.Granted != 4 {
		t.Fatalf("after b's fresh ttl: %+v, want b's grant back to a, all 4", sh)
	}
}
