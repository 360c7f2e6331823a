package proxy

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// A KILL QUERY stops only the statement of the session it targets, never
// a statement of another client that the backend connection serves next
// (one backend connection for everyone here, so it serves all of them in
// turn, and pipelines their SELECTs). The kill is delayed by a few
// milliseconds after holdfast read the target's backend thread, which
// widens the window in which the target's statement can finish and the
// connection move on.
func TestKillReachesOnlyItsTarget(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
	p.srv.killDelay = 3 * time.Millisecond
	target := p.raw(t, rawmysql.Options{})
	tid := target.value("SELECT CONNECTION_ID()")
	killer := p.raw(t, rawmysql.Options{})
	bystanders := []*rawConn{p.raw(t, rawmysql.Options{}), p.raw(t, rawmysql.Options{}), p.raw(t, rawmysql.Options{})}
	statements := []string{"SELECT SLEEP(0.001)", "DO SLEEP(0.001)", "SELECT 1 FROM DUAL WHERE SLEEP(0.001) = 0"}

	var stop atomic.Bool
	var wg sync.WaitGroup
	var kills, targetHit, bystanderRuns atomic.Int64
	var bystanderHit atomic.Int64
	fail := make(chan error, 8)
	loop := func(f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				if err := f(); err != nil {
					fail <- err
					return
				}
			}
		}()
	}
	n := 0
	loop(func() error {
		// Short statements, which the delayed kill misses and whose
		// connection moves on meanwhile, and long ones, which it hits.
		n++
		q := "SELECT SLEEP(0.002)"
		if n%4 == 0 {
			q = "SELECT SLEEP(0.03)"
		}
		_, err := target.Results(q)
		if errCode(err) == 1317 {
			targetHit.Add(1)
			return nil
		}
		return err
	})
	loop(func() error {
		kills.Add(1)
		_, err := killer.Results("KILL QUERY " + tid)
		return err
	})
	for i, b := range bystanders {
		b, q := b, statements[i]
		loop(func() error {
			_, err := b.Results(q)
			bystanderRuns.Add(1)
			if errCode(err) == 1317 {
				bystanderHit.Add(1)
				return nil
			}
			return err
		})
	}
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && len(fail) == 0 {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	close(fail)
	for err := range fail {
		t.Error(err)
	}
	t.Logf("%d kills sent, %d of the target's statements interrupted; %d bystander statements, %d of them interrupted",
		kills.Load(), targetHit.Load(), bystanderRuns.Load(), bystanderHit.Load())
	if n := bystanderHit.Load(); n != 0 {
		t.Errorf("%d statements of other clients were interrupted by a KILL QUERY aimed at client %s", n, tid)
	}
	if targetHit.Load() == 0 {
		t.Error("no kill reached its target: the test showed nothing")
	}
}
