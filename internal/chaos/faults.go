package chaos

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/lifecycle"
)

// faultLog counts what a fault injector did, and what went wrong with it
// (a server that would not come back is a violation).
type faultLog struct {
	mu       sync.Mutex // guards following
	done     int
	misses   int // attempts that found nothing to do or failed harmlessly
	failures []Violation
}

func (f *faultLog) add(ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ok {
		f.done++
	} else {
		f.misses++
	}
}

func (f *faultLog) fail(check, format string, a ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, Violation{check, fmt.Sprintf(format, a...)})
}

func (f *faultLog) counts() (done, misses int, failures []Violation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done, f.misses, append([]Violation(nil), f.failures...)
}

// tickCtx waits for the next tick on c or until ctx is done; it reports
// whether the tick came. A loop `for tickCtx(ctx, ticker.C)` runs once a
// tick, the first time one period after the ticker starts.
func tickCtx(ctx context.Context, c <-chan time.Time) bool {
	select {
	case <-ctx.Done():
		return false
	case <-c:
		return true
	}
}

// killBackends kills one of holdfast's backend connections every `every`
// until ctx is done: a thread of backendUser from the process list, one
// running a statement when there is one (half the time), else any.
func killBackends(ctx context.Context, root *sql.DB, every time.Duration, rng *rand.Rand, log *faultLog) {
	t := time.NewTicker(every)
	defer t.Stop()
	for tickCtx(ctx, t.C) {
		rows, err := root.QueryContext(ctx, "SELECT ID, COMMAND FROM information_schema.PROCESSLIST WHERE USER = ?", backendUser)
		if err != nil {
			log.add(false)
			continue
		}
		var all, busy []int64
		for rows.Next() {
			var id int64
			var cmd string
			if rows.Scan(&id, &cmd) == nil {
				all = append(all, id)
				if cmd == "Query" || cmd == "Execute" {
					busy = append(busy, id)
				}
			}
		}
		rows.Close()
		pick := all
		if len(busy) > 0 && rng.IntN(2) == 0 {
			pick = busy
		}
		if len(pick) == 0 {
			log.add(false)
			continue
		}
		_, err = root.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", pick[rng.IntN(len(pick))]))
		log.add(err == nil)
	}
}

// killMariaDB kills the private server with SIGKILL every `every` until
// ctx is done, and restarts it after downs[i] (in turn) each time. It
// returns with the server running.
func killMariaDB(ctx context.Context, p *dbtest.Private, every time.Duration, downs []time.Duration, log *faultLog) {
	for i := 0; lifecycle.Sleep(ctx, every) == nil; i++ {
		p.Kill()
		time.Sleep(downs[i%len(downs)])
		if err := p.Restart(); err != nil {
			log.fail("fault", "MariaDB did not restart: %v", err)
			return
		}
		log.add(true)
	}
}

// killHoldfast kills holdfast with SIGKILL every `every` until ctx is
// done, and restarts it after down each time. It returns with holdfast
// running.
func killHoldfast(ctx context.Context, h *holdfast, every, down time.Duration, log *faultLog) {
	for lifecycle.Sleep(ctx, every) == nil {
		h.kill9()
		time.Sleep(down)
		if err := h.start(context.Background()); err != nil {
			log.fail("fault", "holdfast did not restart: %v", err)
			return
		}
		log.add(true)
	}
}

// scrapeLoop reads every instance's recoveries once a second until ctx is
// done (a SIGKILL loses at most the last second of an incarnation's).
func scrapeLoop(ctx context.Context, hs []*holdfast) {
	for lifecycle.Sleep(ctx, time.Second) == nil {
		for _, h := range hs {
			_ = h.scrape(ctx)
		}
	}
}
