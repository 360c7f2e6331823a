package chaos

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// Run builds holdfast, starts a private MariaDB under the work directory
// and runs each scenario of o in turn, writing progress and each
// scenario's report to o.Out. It returns the results; a scenario that
// could not be run at all (holdfast would not build or start) is an
// error. The caller checks Result.Violations.
func Run(ctx context.Context, o Options) ([]*Result, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	dir := o.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "holdfast-chaos-")
		if err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	var results []*Result
	keep := o.Keep
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	// The driver logs every broken connection; the journal has them.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))

	fmt.Fprintf(o.Out, "chaos: work directory %s, seed %d\n", dir, o.Seed)
	bin := filepath.Join(dir, "holdfast")
	if _, err := (holdfastproc.Build{Go: o.Go, Repo: o.Repo, Out: bin, Race: o.Race}).Run(ctx); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	mdir := filepath.Join(dir, "mariadb")
	if err := os.MkdirAll(mdir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	srv, err := dbtest.NewPrivate(mdir, "--innodb-buffer-pool-size=128M", "--max-connections=2000")
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	root := srv.Open("")
	defer root.Close()
	if _, err := root.ExecContext(ctx, fmt.Sprintf("CREATE USER '%s'@'%%' IDENTIFIED BY '%s'", backendUser, backendUser)); err != nil {
		return nil, fmt.Errorf("chaos: create backend account: %w", err)
	}
	fmt.Fprintf(o.Out, "chaos: private MariaDB at %s; holdfast built%s\n", srv.Addr, map[bool]string{true: " with -race"}[o.Race])
	rng := rand.New(rand.NewPCG(o.Seed, 1))
	for i, sc := range o.Scenarios {
		if ctx.Err() != nil {
			break
		}
		s := &scenario{o: &o, n: i + 1, sc: sc, bin: bin, dir: dir, srv: srv, root: root,
			rng: rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))}
		r, err := s.run(ctx)
		if err != nil {
			keep = true
			return results, fmt.Errorf("chaos: scenario %s: %w (work directory %s kept)", sc, err, dir)
		}
		r.print(o.Out)
		results = append(results, r)
		if len(r.Violations) > 0 {
			keep = true
		}
	}
	if keep {
		fmt.Fprintf(o.Out, "chaos: work directory kept: %s\n", dir)
	}
	return results, ctx.Err()
}

// describeScenario is the report's title of a scenario.
func describeScenario(o *Options, sc Scenario) string {
	switch sc {
	case KillBackend:
		return fmt.Sprintf("backend connections killed every %s", o.BackendKillEvery)
	case KillMariaDB:
		return fmt.Sprintf("MariaDB kill -9 every %s, restarted after %v", o.MariaDBKillEvery, o.MariaDBDown)
	case KillHoldfast:
		return fmt.Sprintf("holdfast kill -9 every %s, restarted after %s", o.HoldfastKillEvery, o.HoldfastDown)
	case Instances:
		return fmt.Sprintf("%d holdfast instances on one database", o.Instances)
	case Controls:
		return fmt.Sprintf("%d holdfast instances, on-call controls changed every %s, one instance kill -9 every %s, a backend connection killed every %s",
			o.Instances, o.ControlEvery, o.HoldfastKillEvery, 5*o.BackendKillEvery)
	case Replica:
		return fmt.Sprintf("reads routed to a replica, the replica kill -9 every %s, restarted after %v", o.MariaDBKillEvery, o.MariaDBDown)
	case Switchover:
		return fmt.Sprintf("a primary and a replica behind a VIP, a planned switchover every %s", o.SwitchoverEvery)
	case Failover:
		return fmt.Sprintf("a primary and a replica behind a VIP, the primary kill -9 at %s, the replica promoted %s later", o.SwitchoverEvery, o.PromoteAfter)
	}
	return string(sc)
}

func mapsEqual(a, b map[PoolKey]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Violated reports whether any result has a violation.
func Violated(rs []*Result) bool {
	return slices.ContainsFunc(rs, func(r *Result) bool { return len(r.Violations) > 0 })
}
