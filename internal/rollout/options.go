package rollout

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// DefaultBase is the commit N−1 is built from by default: the release
// before the schema's version 6 (which added the members' schema ranges
// and control kinds), whose instances keep holdfast's tables in
// backend.database and have no admin credentials.
const DefaultBase = "f22f59f"

// Options configure Run. DefaultOptions gives `make bench-rollout`;
// ShortOptions the run of `make test`. The zero value is not usable.
type Options struct {
	Repo string // the checkout N is built from, whose git history holds Base
	Base string // the commit N−1 is built from (DefaultBase)
	Go   string // the go command that builds N−1; "" is "go" (N is built as the tests build it: holdfastproc.Cached)
	// Dir is the work directory (configurations, logs, the private
	// server's data). Empty: a temporary directory, removed at the
	// end unless Keep is set or a violation was found.
	Dir  string
	Keep bool
	Out  io.Writer // progress and the report; nil: os.Stdout

	// Instances is the fleet's size: as many N−1 instances are replaced
	// by as many N instances.
	Instances int
	// Phase is how long the traffic runs before N's migrate, after it,
	// and after each replacement.
	Phase time.Duration
	// Clients of each kind of traffic.
	EngineClients, CheckoutClients, DrainedClients, CappedClients int
	// Cap is the fleet-wide cap on the capped tag (connections).
	Cap int
	// CapHold is how long each statement of the capped tag runs (a SLEEP).
	CapHold time.Duration
	// TTL is every reserve's ttl_seconds (whole seconds, at least 3 s).
	TTL time.Duration
	// BadStep are statements run on holdfast's tables right after N's
	// migrate, as an administrator: a deliberately bad migration, for the
	// test that shows the harness fails on one.
	BadStep []string
}

// DefaultOptions returns the settings of `make bench-rollout`: three
// instances, 10 s of traffic per phase, about a minute and a half of
// traffic in all.
func DefaultOptions() Options {
	return Options{
		Repo: ".", Base: DefaultBase, Go: "go",
		Instances:       3,
		Phase:           10 * time.Second,
		EngineClients:   12,
		CheckoutClients: 8,
		DrainedClients:  2,
		CappedClients:   8,
		Cap:             2,
		CapHold:         50 * time.Millisecond,
		TTL:             4 * time.Second,
	}
}

// ShortOptions returns a run of a few seconds per phase with few
// clients, for `make test`.
func ShortOptions() Options {
	o := DefaultOptions()
	o.Phase = 2 * time.Second
	o.EngineClients = 4
	o.CheckoutClients = 3
	o.DrainedClients = 1
	o.CappedClients = 4
	o.TTL = 3 * time.Second
	return o
}

func (o *Options) validate() error {
	switch {
	case o.Instances < 1:
		return fmt.Errorf("rollout: instances must be positive, got %d", o.Instances)
	case o.Base == "":
		return errors.New("rollout: no base commit to build the earlier version from")
	case o.Phase <= 0:
		return fmt.Errorf("rollout: phase must be positive, got %v", o.Phase)
	case o.EngineClients < 1 || o.CheckoutClients < 1 || o.DrainedClients < 1 || o.CappedClients < 1:
		return errors.New("rollout: every kind of traffic needs a client")
	case o.Cap < 1 || o.CappedClients <= o.Cap:
		return fmt.Errorf("rollout: the cap (%d) must be positive and below the capped clients (%d), or it is never reached", o.Cap, o.CappedClients)
	case o.TTL < 3*time.Second || o.TTL%time.Second != 0:
		return fmt.Errorf("rollout: ttl must be whole seconds, at least 3s, got %v", o.TTL)
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Go == "" {
		o.Go = "go"
	}
	return nil
}
