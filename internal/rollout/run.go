package rollout

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/chaos"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// run is one rollout: its processes, its traffic and what it saw. It
// belongs to Run's goroutine, but for the traffic's goroutines, which
// share bal, t, sampler and the engine clients' journals (read after they
// end).
type run struct {
	o              *Options
	dir            string
	srv            *dbtest.Private
	root           *sql.DB // the private server, as root, no database
	oldBin, newBin string  // N−1's and N's binaries
	res            *Result

	olds, news []*instance
	bal        balancer
	t          tally
	sampler    capSampler
	engine     *chaos.Options
	clients    []*chaos.EngineClient
	checkouts  []*checkout
	initial    map[chaos.PoolKey]int64

	invMu      sync.Mutex // guards following
	invariant  []chaos.Violation
	invSamples int
}

// Run builds N−1 from o.Base and N from o.Repo, starts a private MariaDB
// under the work directory, and rolls a fleet of o.Instances instances
// from N−1 to N under traffic (see the package doc). It writes progress
// and the report to o.Out and returns the result; the caller checks
// Result.Violations. An error means the rollout could not be run at all
// (a build failed, an instance did not start, the base commit is not in
// the history: ErrNoBase).
func Run(ctx context.Context, o Options) (*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "holdfast-rollout-")
		if err != nil {
			return nil, fmt.Errorf("rollout: %w", err)
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("rollout: %w", err)
	}
	keep := o.Keep
	defer func() {
		if keep {
			fmt.Fprintf(o.Out, "rollout: work directory kept: %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	// The driver logs every broken connection; the report has them.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	r := &run{o: &o, dir: dir, res: &Result{Base: o.Base, Instances: o.Instances, Cap: o.Cap, Drained: map[string]int{}}}
	defer r.close()
	err := r.run(ctx)
	switch {
	case errors.Is(err, ErrNoBase):
		return nil, err
	case err != nil:
		keep = true
		return nil, fmt.Errorf("%w (work directory %s kept)", err, dir)
	case len(r.res.Violations) > 0:
		keep = true
	}
	r.res.print(o.Out)
	return r.res, nil
}

// newBinary builds N from o.Repo with holdfastproc.Cached, which keeps
// the binary between runs (and shares it with the tests of every
// package): go build relinks only when the sources changed.
func newBinary(o *Options) (string, error) {
	repo, err := filepath.Abs(o.Repo)
	if err != nil {
		return "", fmt.Errorf("rollout: %w", err)
	}
	return holdfastproc.Cached(repo, "./cmd/holdfast")
}
