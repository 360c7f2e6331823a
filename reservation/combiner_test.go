package reservation_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/reservation"
	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestSecondBatchWaitsForEnough: beside a running batch of a busy pool
// (its recent batches carried 10 reserves), a second batch starts only
// once second_batch_min reserves wait, and takes them all; a batch that
// ends beside another leaves too few waiters to that one's leader instead
// of starting them beside it; beside a batch of a quiet pool a second
// starts at once.
func TestSecondBatchWaitsForEnough(t *testing.T) {
	v, f := faultEnv(t, envOpts{cfg: func(c *reservation.Config) {
		c.BatchesPerPool = 2
		c.SecondBatchMin = 4
	}})
	reservation.SetStallAfter(v.eng, time.Hour) // the pretend batch does not count as stalled
	v.receive(46, 1, 100)
	key := reservation.PoolKey{ShopID: shop, ItemID: 46, GroupID: 1}
	ctx := context.Background()
	const n = 7
	errs := make([]error, n)
	start := func(wg *sync.WaitGroup, i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = v.eng.Call(ctx, "reserve", []any{int64(shop), fmt.Sprintf("sb-%d", i), restest.LinesJSON(46, 1, 1), int64(600)})
		}()
	}
	batches := func() uint64 { return v.eng.Stats().Batches }

	end := reservation.HoldCombiner(v.eng, key, 10)
	var four, two sync.WaitGroup
	for i := range 3 {
		start(&four, i)
	}
	dbtest.Eventually(t, "three reserves to queue beside the running batch", func() bool { return reservation.Queued(v.eng, key) == 3 })
	if b := batches(); b != 0 {
		t.Fatalf("%d batches started with 3 reserves waiting beside a busy pool's batch; want none before 4 wait", b)
	}

	// The fourth makes four: one batch takes them all. It is held in its
	// locking read while two more queue behind it.
	hold := make(chan struct{})
	f.Add(&restest.FaultRule{Match: stmtReserveLock, Hold: hold})
	start(&four, 3)
	dbtest.Eventually(t, "one batch of the four", func() bool { return reservation.Queued(v.eng, key) == 0 && batches() == 1 })
	start(&two, 4)
	start(&two, 5)
	dbtest.Eventually(t, "two more to queue", func() bool { return reservation.Queued(v.eng, key) == 2 })
	close(hold)
	four.Wait()

	// The batch of four ended beside the pretend one, with two waiting:
	// too few to run beside it, so they wait for it. Nothing can start
	// them before end; a handed-on leader would start within microseconds.
	time.Sleep(200 * time.Millisecond)
	if b, q := batches(), reservation.Queued(v.eng, key); b != 1 || q != 2 {
		t.Fatalf("after the batch of four: %d batches, %d queued; want 1 and 2 (too few to start beside the running batch)", b, q)
	}
	end() // the running batch ends: its leader hands on to the two
	two.Wait()
	if b := batches(); b != 2 {
		t.Errorf("%d batches; want 2 (the two waiters in one)", b)
	}

	// A quiet pool (recent batches of 1): a reserve beside its running
	// batch starts its own at once.
	end = reservation.HoldCombiner(v.eng, key, 1)
	var one sync.WaitGroup
	start(&one, 6)
	dbtest.Eventually(t, "the quiet pool's reserve to run beside the running batch", func() bool { return batches() == 3 })
	end()
	one.Wait()

	for i, err := range errs {
		if err != nil {
			t.Errorf("reserve %d: %v", i, err)
		}
	}
	if _, _, reserved := v.pool(46, 1); reserved != n {
		t.Errorf("%d units reserved; want %d", reserved, n)
	}
	v.checkInvariant(46, 1)
}

// TestStalledBatchDoesNotHoldItsPool: reserves held back beside a busy
// pool's running batch (fewer than second_batch_min wait) do not wait for
// it once it has run longer than the stall bound: they start a batch of
// their own beside it and are answered while it is still stuck.
func TestStalledBatchDoesNotHoldItsPool(t *testing.T) {
	v, _ := faultEnv(t, envOpts{cfg: func(c *reservation.Config) {
		c.BatchesPerPool = 2
		c.SecondBatchMin = 32
		c.CallTimeout = 3 * time.Second
	}})
	reservation.SetStallAfter(v.eng, 50*time.Millisecond)
	v.receive(47, 1, 100)
	key := reservation.PoolKey{ShopID: shop, ItemID: 47, GroupID: 1}

	// A batch of a busy pool (recent batches of 40) that never ends, as on
	// a connection that stopped answering.
	end := reservation.HoldCombiner(v.eng, key, 40)
	const n = 3
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = v.eng.Call(context.Background(), "reserve", []any{int64(shop), fmt.Sprintf("st-%d", i), restest.LinesJSON(47, 1, 1), int64(600)})
		}()
	}
	wg.Wait() // the stuck batch is still "running": end has not been called
	for i, err := range errs {
		if err != nil {
			t.Errorf("reserve %d behind a stalled batch: %v", i, err)
		}
	}
	if s := v.eng.Stats(); s.StallEscapes == 0 || s.Batches == 0 {
		t.Errorf("%d stall escapes, %d batches; want at least one of each", s.StallEscapes, s.Batches)
	}
	end()
	if _, _, reserved := v.pool(47, 1); reserved != n {
		t.Errorf("%d units reserved; want %d", reserved, n)
	}
	v.checkInvariant(47, 1)
}
