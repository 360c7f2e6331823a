package reservation

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

// The fake batch runner of the combiner's tests (combiner_races_test.go),
// and their helpers: no database.

// fakeRunner is a batchRunner that hands out units from an endless pool
// and records what it did, so that every reserve's answer can be checked
// against it.
type fakeRunner struct {
	t *testing.T
	// batch, when set, sets the outcome of each reserve of a batch
	// instead of giving every one its units; it runs on the leader's
	// goroutine and may block.
	batch func(b []*pending, s *session)
	// openErr, when set, makes openSession fail with its error.
	openErr func() error
	// maxSessions bounds the sessions open at once; 0 means 2.
	maxSessions int

	mu      sync.Mutex            // guards following
	batches [][]string            // the keys of each batch's reserves, in batch order
	on      []*session            // the session each batch ran on
	in      map[*reserveReq]int   // batches each reserve was in
	units   map[*reserveReq]int64 // units handed to each reserve
	handed  int64                 // units handed out
	open    map[*session]bool     // open sessions: true while a batch runs on it
	opened  int
	closed  int
}

func newFakeRunner(t *testing.T) *fakeRunner {
	return &fakeRunner{t: t, in: map[*reserveReq]int{}, units: map[*reserveReq]int64{},
		open: map[*session]bool{}}
}

func (f *fakeRunner) openSession(context.Context) (*session, error) {
	if f.openErr != nil {
		if err := f.openErr(); err != nil {
			return nil, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.open) == max(f.maxSessions, 2) {
		return nil, nil
	}
	s := &session{}
	f.open[s] = false
	f.opened++
	return s, nil
}

func (f *fakeRunner) closeSession(s *session) {
	if s == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	inUse, ok := f.open[s]
	if !ok {
		return // closed already (runBatch closes a broken one)
	}
	if inUse {
		f.t.Errorf("a session was closed while a batch ran on it")
	}
	delete(f.open, s)
	f.closed++
}

func (f *fakeRunner) runBatch(ctx context.Context, b []*pending, s *session, ps *poolState) {
	pool := b[0].pools[0]
	keys := make([]string, len(b))
	f.mu.Lock()
	for i, p := range b {
		keys[i] = p.req.key
		if f.in[p.req]++; f.in[p.req] > 1 {
			f.t.Errorf("reserve %s is in a second batch", p.req.key)
		}
		if p.pools[0] != pool {
			f.t.Errorf("a batch of pool %v holds a reserve of pool %v", pool, p.pools[0])
		}
	}
	f.batches = append(f.batches, keys)
	f.on = append(f.on, s)
	if s != nil {
		switch inUse, ok := f.open[s]; {
		case !ok:
			f.t.Errorf("a batch ran on a closed session")
		case inUse:
			f.t.Errorf("two batches ran on one session at once")
		}
		f.open[s] = true
	}
	f.mu.Unlock()

	if f.batch != nil {
		f.batch(b, s)
	} else {
		for _, p := range b {
			p.out = outcome{res: &reservation{id: uint64(len(p.req.key))}}
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if s != nil {
		f.open[s] = false
		if s.broken { // as runBatch does: a broken session is released at once
			delete(f.open, s)
			f.closed++
		}
	}
	for _, p := range b {
		if p.out.res != nil {
			f.units[p.req] += p.req.lines[0].qty
			f.handed += p.req.lines[0].qty
		}
	}
}

// batchKeys returns the keys of every batch run so far.
func (f *fakeRunner) batchKeys() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.batches)
}

func (f *fakeRunner) sessions() (opened, closed int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.opened, f.closed
}

// newFakeCombiners returns combiners running batches on f, with cfg's zero
// fields defaulted and no stall escapes unless stall is set.
func newFakeCombiners(f *fakeRunner, cfg Config, stall time.Duration) *combiners {
	if cfg.CallTimeout == 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	cfg = cfg.WithDefaults()
	cs := &combiners{}
	cs.init(f, &cfg, &metrics{})
	cs.stallAfter = stall
	if stall == 0 {
		cs.stallAfter = time.Hour
	}
	return cs
}

var fakePool = PoolKey{ShopID: 1, ItemID: 2, GroupID: 3}

func fakeReq(key string, qty int64) *reserveReq {
	return &reserveReq{shop: 1, key: key, lines: []reqLine{{item: fakePool.ItemID, qty: qty, locations: []int64{fakePool.GroupID}}}}
}

// call is one submit running on its own goroutine.
type call struct {
	req    *reserveReq
	cancel context.CancelFunc
	done   chan outcome
}

func startCall(cs *combiners, pool PoolKey, key string, front bool) *call {
	ctx, cancel := context.WithCancel(context.Background())
	c := &call{req: fakeReq(key, 1), cancel: cancel, done: make(chan outcome, 1)}
	go func() { c.done <- cs.submit(ctx, pool, c.req, front) }()
	return c
}

// answer waits for c's outcome.
func (c *call) answer(t *testing.T) outcome {
	t.Helper()
	select {
	case out := <-c.done:
		return out
	case <-time.After(10 * time.Second):
		t.Fatalf("reserve %s was never answered", c.req.key)
		return outcome{}
	}
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// gate makes a fake's batches block until released, one release per batch
// (ungated batches pass once closed).
type gate struct {
	started chan []string // the keys of each batch as it starts
	release chan struct{}
}

func newGate() *gate { return &gate{started: make(chan []string, 64), release: make(chan struct{})} }

func (g *gate) batch(b []*pending, _ *session) {
	keys := make([]string, len(b))
	for i, p := range b {
		keys[i] = p.req.key
	}
	g.started <- keys
	<-g.release
	for _, p := range b {
		p.out = outcome{res: &reservation{}}
	}
}

func (g *gate) waitStarted(t *testing.T) []string {
	t.Helper()
	select {
	case keys := <-g.started:
		return keys
	case <-time.After(10 * time.Second):
		t.Fatal("no batch started")
		return nil
	}
}

func isCancelled(out outcome) bool {
	var unknown *commitUnknownError
	return errors.Is(out.err, context.Canceled) && !errors.As(out.err, &unknown)
}

func isUnknown(out outcome) bool {
	var unknown *commitUnknownError
	return errors.As(out.err, &unknown)
}

func idle(cs *combiners) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.byPool) == 0
}

// settle waits for every combiner to be removed and every session closed
// (the last leader closes its session after its answer).
func settle(t *testing.T, cs *combiners, f *fakeRunner) {
	t.Helper()
	eventually(t, "every combiner to be removed", func() bool { return idle(cs) })
	eventually(t, "every session to be closed", func() bool { o, c := f.sessions(); return o == c })
}
