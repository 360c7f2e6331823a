package fleet

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// demandApplier wants want slots of every capped tag and holds one, and
// keeps what it was told to put in force.
type demandApplier struct {
	want    int
	mu      sync.Mutex // guards applied
	applied map[string]Applied
}

func (d *demandApplier) ApplyFleetControls(cs []Applied) {
	m := make(map[string]Applied, len(cs))
	for _, a := range cs {
		m[a.Tag] = a
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = m
}

func (d *demandApplier) Demand(string, bool) (int, int) { return 1, d.want }
func (d *demandApplier) SetFleetSize(int)               {}

func (d *demandApplier) get(tag string) (Applied, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	a, ok := d.applied[tag]
	return a, ok
}

func (d *demandApplier) has(tag string, k Kind) bool {
	a, ok := d.get(tag)
	return ok && slices.ContainsFunc(a.Controls, func(c Control) bool { return c.Kind == k })
}

// A planned switchover of the primary under two instances: a drain and a
// cap set before it hold on both throughout and after; a failed
// heartbeat fails no poll; the cap's grants, for a tag both want more of
// than the cap, never fall to 0 on either nor add up to more than the cap;
// the duty has at most one runner at any time and one after; and a
// control set after the switch through one instance applies on the other.
func TestFleetAcrossPlannedSwitchover(t *testing.T) {
	pair := restest.StartPair(t)
	if _, err := reservation.Migrate(t.Context(), reservation.SQLConns(pair.Open(t, 2))); err != nil {
		t.Fatal(err)
	}
	const (
		poll = 100 * time.Millisecond
		ttl  = time.Second
		capN = 4
	)
	parseTime := func(c *mysql.Config) { c.ParseTime = true }
	var fs []*Fleet
	var aps []*demandApplier
	for _, id := range []string{"a", "b"} {
		ap := &demandApplier{want: capN}
		f := New(Options{Store: NewStore(pair.Open(t, MaxConns, parseTime)), Applier: ap, Self: Member{ID: id},
			Poll: poll, TTL: ttl, Duties: []string{"sweeper"}, Log: restest.Logger(t.Output())})
		if err := f.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs, aps = append(fs, f), append(aps, ap)
	}
	ctx := t.Context()
	if err := fs[0].Set(ctx, Control{Tag: "drained", Kind: KindDrain, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	if err := fs[0].Set(ctx, Control{Tag: "capped", Kind: KindLimit, Value: capN, SetBy: "test"}, 0); err != nil {
		t.Fatal(err)
	}
	limits := func() (sum, least int) {
		least = capN
		for _, ap := range aps {
			a, _ := ap.get("capped")
			sum += a.Limit
			least = min(least, a.Limit)
		}
		return sum, least
	}
	holders := func() int {
		n := 0
		for _, f := range fs {
			if f.Holds("sweeper") {
				n++
			}
		}
		return n
	}
	dbtest.Eventually(t, "the drain, the cap's grants and the duty in force", func() bool {
		_, least := limits()
		return aps[0].has("drained", KindDrain) && aps[1].has("drained", KindDrain) && least > 0 && holders() == 1
	})

	// Watch the grants, the drain and the duty through the switch.
	stop := make(chan struct{})
	var samples, zero, over, twoRunners, undrained atomic.Int64
	var wg sync.WaitGroup
	var last [2]int
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			samples.Add(1)
			sum, least := limits()
			if cur := [2]int{}; true {
				a0, _ := aps[0].get("capped")
				a1, _ := aps[1].get("capped")
				cur = [2]int{a0.Limit, a1.Limit}
				if cur != last {
					t.Logf("limits %v", cur)
					last = cur
				}
			}
			if least == 0 {
				zero.Add(1)
			}
			if sum > capN {
				over.Add(1)
			}
			if holders() > 1 {
				twoRunners.Add(1)
			}
			if !aps[0].has("drained", KindDrain) || !aps[1].has("drained", KindDrain) {
				undrained.Add(1)
			}
		}
	})
	switched := make(chan error, 1)
	go func() {
		_, err := pair.SwitchoverAfter(ctx, 1500*time.Millisecond)
		switched <- err
	}()
	// While the old primary is read-only: the heartbeat fails, the poll
	// does not.
	dbtest.Eventually(t, "a heartbeat refused", func() bool { return fs[0].Status().HeartbeatError != "" })
	if err := fs[0].Poll(ctx); err != nil {
		t.Errorf("a poll while the primary is read-only: %v", err)
	}
	if st := fs[0].Status(); st.Stale {
		t.Errorf("the controls are stale while the primary is read-only: %s", st.Error)
	}
	// A control written while the primary is read-only (on-call lifting
	// a pause right after the flip, before holdfast saw the new primary)
	// is held and written on the new one, not refused with 1290.
	during := make(chan error, 1)
	go func() { during <- fs[1].Set(ctx, Control{Tag: "during", Kind: KindDrain, SetBy: "test"}, 0) }()
	if err := <-switched; err != nil {
		t.Fatal(err)
	}
	if err := <-during; err != nil {
		t.Errorf("a control set while the primary was read-only: %v", err)
	}
	dbtest.Eventually(t, "heartbeats recorded on the new primary", func() bool {
		return fs[0].Status().HeartbeatError == "" && fs[1].Status().HeartbeatError == ""
	})
	if err := fs[1].Set(ctx, Control{Tag: "late", Kind: KindDrain, SetBy: "test"}, 0); err != nil {
		t.Fatalf("a control set after the switch: %v", err)
	}
	dbtest.Eventually(t, "the controls set during and after the switch in force on the other instance", func() bool {
		return aps[0].has("late", KindDrain) && aps[0].has("during", KindDrain)
	})
	time.Sleep(2 * ttl) // grants renewed on the new primary, and any lapse past
	close(stop)
	wg.Wait()
	if n := holders(); n != 1 {
		t.Errorf("%d instances run the duty after the switch, want 1", n)
	}
	t.Logf("%d samples: grants at 0 %d, over the cap %d, two runners %d, drain not in force %d", samples.Load(), zero.Load(), over.Load(),
		twoRunners.Load(), undrained.Load())
	if zero.Load() > 0 || over.Load() > 0 || twoRunners.Load() > 0 || undrained.Load() > 0 {
		t.Error("the fleet's controls did not hold through the switch")
	}
	for i, f := range fs {
		if st := f.Status(); st.Stale || st.HeartbeatFailures == 0 {
			t.Errorf("instance %d: stale %v (%s), heartbeat failures %d", i, st.Stale, st.Error, st.HeartbeatFailures)
		}
	}
}
