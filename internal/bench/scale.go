package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// ScaleOptions configures a connection-scale run: Conns client connections
// open at once, each running one statement every Interval for Duration.
type ScaleOptions struct {
	Endpoint Endpoint
	Database string
	Conns    int
	Interval time.Duration
	Duration time.Duration
	// Query returns the statement connection i runs at its k-th tick.
	Query func(i, k int) string
	// Started, when not nil, is called once every connection has tried to
	// log in, just before the statement phase; Finished right after the
	// statement phase, while the connections are still open.
	Started  func(opened int, took time.Duration)
	Finished func()
	// DialParallel caps concurrent logins while the connections open (so
	// the listen backlog is not overrun); zero means 64.
	DialParallel int
}

// ScaleResult is what a connection-scale run measured on the client side.
type ScaleResult struct {
	Opened      int           // connections that logged in
	ConnectErrs int           // connections that failed to log in
	ConnectTime time.Duration // until every connection had tried to log in
	Statements  int64         // statements answered without error
	Errors      int64         // statements answered with an error or a broken connection
	Late        int64         // statements sent more than Interval/10 after their slot
	P50, P99    time.Duration // statement latency, send to last byte of the reply
	Max         time.Duration
	Wall        time.Duration // of the statement phase
	CPU         time.Duration // this process's CPU over the statement phase (the load generator)
	FirstErr    string        // the first error seen, for the report
}

// RunScale opens every connection, then runs the statement phase. Connection
// i's ticks fall at offset i×Interval/Conns into each Interval, so the load
// is spread evenly rather than arriving at once. ctx cancels everything.
func RunScale(ctx context.Context, o ScaleOptions) (ScaleResult, error) {
	if o.Conns <= 0 || o.Interval <= 0 || o.Duration <= 0 || o.Query == nil {
		return ScaleResult{}, errors.New("bench: scale run needs Conns, Interval, Duration and Query")
	}
	par := o.DialParallel
	if par <= 0 {
		par = 64
	}
	var res ScaleResult
	var firstErr atomic.Pointer[string]
	noteErr := func(err error) {
		s := err.Error()
		firstErr.CompareAndSwap(nil, &s)
	}

	// Open every connection.
	clients := make([]*rawmysql.Conn, o.Conns)
	defer func() {
		for _, c := range clients {
			if c != nil {
				c.Close()
			}
		}
	}()
	start := time.Now()
	sem := make(chan struct{}, par)
	var wg sync.WaitGroup
	var failed atomic.Int64
	for i := range clients {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return res, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := o.Endpoint.Dial(ctx, o.Database)
			if err != nil {
				failed.Add(1)
				noteErr(err)
				return
			}
			clients[i] = c
		}()
	}
	wg.Wait()
	res.ConnectTime = time.Since(start)
	res.ConnectErrs = int(failed.Load())
	res.Opened = o.Conns - res.ConnectErrs

	// The statement phase: one goroutine per connection, sleeping between
	// its slots. Each keeps its own latencies; they are merged at the end.
	lats := make([][]time.Duration, o.Conns)
	var stmts, errs, late atomic.Int64
	if o.Started != nil {
		o.Started(res.Opened, res.ConnectTime)
	}
	cpu0 := SelfCPU()
	begin := time.Now().Add(100 * time.Millisecond)
	end := begin.Add(o.Duration)
	for i, c := range clients {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, int(o.Duration/o.Interval)+1)
			slot := begin.Add(time.Duration(int64(o.Interval) * int64(i) / int64(o.Conns)))
			for k := 0; slot.Before(end); k++ {
				if d := time.Until(slot); d > 0 {
					select {
					case <-time.After(d):
					case <-ctx.Done():
						lats[i] = lat
						return
					}
				}
				sent := time.Now()
				if sent.Sub(slot) > o.Interval/10 {
					late.Add(1)
				}
				_, err := c.Query(o.Query(i, k))
				if err != nil {
					errs.Add(1)
					noteErr(err)
					var se *mysqlwire.SQLError
					if !errors.As(err, &se) {
						c.NC.Close() // broken: stop using it
						break
					}
				} else {
					stmts.Add(1)
					lat = append(lat, time.Since(sent))
				}
				slot = slot.Add(o.Interval)
				// A connection that fell more than one interval behind skips
				// the slots it missed rather than bursting to catch up.
				if now := time.Now(); now.Sub(slot) > o.Interval {
					slot = slot.Add(now.Sub(slot).Truncate(o.Interval))
				}
			}
			lats[i] = lat
		}()
	}
	wg.Wait()
	res.Wall = time.Since(begin)
	res.CPU = SelfCPU() - cpu0
	if o.Finished != nil {
		o.Finished()
	}
	res.Statements, res.Errors, res.Late = stmts.Load(), errs.Load(), late.Load()
	if p := firstErr.Load(); p != nil {
		res.FirstErr = *p
	}
	all := slices.Concat(lats...)
	if len(all) > 0 {
		slices.Sort(all)
		res.P50 = percentile(all, 0.50)
		res.P99 = percentile(all, 0.99)
		res.Max = all[len(all)-1]
	}
	return res, ctx.Err()
}

// percentile returns the p-quantile (0..1) of sorted by nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// PointSelect returns a Query for ScaleOptions: a primary-key lookup on
// sysbench's first table, the id varying with connection and tick.
func PointSelect(tableSize int) func(i, k int) string {
	return func(i, k int) string {
		id := (i*7919+k*104729)%tableSize + 1
		return fmt.Sprintf("SELECT c FROM sbtest1 WHERE id=%d", id)
	}
}
