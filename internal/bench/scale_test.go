package bench

import (
	"context"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
)

func TestRunScale(t *testing.T) {
	addr, db, user := dbtest.NewAccount(t)
	const conns = 40
	var started, finished bool
	res, err := RunScale(context.Background(), ScaleOptions{
		Endpoint: Endpoint{Addr: addr, User: user, Password: user},
		Database: db,
		Conns:    conns,
		Interval: 200 * time.Millisecond,
		Duration: time.Second,
		Query:    func(i, k int) string { return "SELECT 1" },
		Started:  func(opened int, _ time.Duration) { started = opened == conns },
		Finished: func() { finished = true },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if !started || !finished {
		t.Fatalf("hooks: started %v finished %v", started, finished)
	}
	if res.Opened != conns || res.ConnectErrs != 0 || res.Errors != 0 {
		t.Fatalf("result %+v", res)
	}
	// Five slots per connection in one second; allow for a loaded machine
	// skipping some.
	if res.Statements < 3*conns || res.Statements > 5*conns {
		t.Fatalf("%d statements from %d connections at 5/s for 1s", res.Statements, conns)
	}
	if res.P50 <= 0 || res.P99 < res.P50 || res.Max < res.P99 {
		t.Fatalf("latencies %+v", res)
	}
}

func TestRunScaleCountsErrors(t *testing.T) {
	addr, db, user := dbtest.NewAccount(t)
	res, err := RunScale(context.Background(), ScaleOptions{
		Endpoint: Endpoint{Addr: addr, User: user, Password: user},
		Database: db,
		Conns:    3,
		Interval: 100 * time.Millisecond,
		Duration: 300 * time.Millisecond,
		Query:    func(i, k int) string { return "SELECT * FROM missing" },
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Statements != 0 || res.Errors < 6 || res.FirstErr == "" {
		t.Fatalf("result %+v: want only errors, counted", res)
	}
	res, _ = RunScale(context.Background(), ScaleOptions{
		Endpoint: Endpoint{Addr: addr, User: user, Password: "wrong"},
		Database: db, Conns: 2, Interval: time.Second, Duration: 10 * time.Millisecond,
		Query: PointSelect(100),
	})
	if res.Opened != 0 || res.ConnectErrs != 2 {
		t.Fatalf("result %+v: want two failed logins", res)
	}
}

func TestPointSelect(t *testing.T) {
	q := PointSelect(10000)
	seen := map[string]bool{}
	for i := range 100 {
		seen[q(i, 0)] = true
	}
	if len(seen) < 90 || q(0, 0) != "SELECT c FROM sbtest1 WHERE id=1" {
		t.Fatalf("%d distinct statements; first %q", len(seen), q(0, 0))
	}
}
