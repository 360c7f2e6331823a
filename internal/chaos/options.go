package chaos

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"
)

// Scenario names one fault, run alone on a fresh database.
type Scenario string

// The scenarios, in the order `make chaos` runs them.
const (
	// KillBackend kills one of holdfast's backend connections (KILL
	// CONNECTION of a thread of the backend account, from the process
	// list) every Options.BackendKillEvery.
	KillBackend Scenario = "backend"
	// KillMariaDB kills MariaDB with SIGKILL every Options.MariaDBKillEvery
	// and restarts it after each of Options.MariaDBDown in turn.
	KillMariaDB Scenario = "mariadb"
	// KillHoldfast kills holdfast with SIGKILL every
	// Options.HoldfastKillEvery and restarts it after Options.HoldfastDown.
	KillHoldfast Scenario = "holdfast"
	// Instances runs Options.Instances holdfast instances on one database,
	// client i connected to instance i mod Instances; no other fault.
	Instances Scenario = "instances"
	// Controls runs Options.Instances instances on one database whose
	// clients tag their calls, while on-call controls of those tags change
	// every Options.ControlEvery through a random instance's admin API,
	// one instance after another is killed with SIGKILL every
	// Options.HoldfastKillEvery, and a backend connection is killed every
	// 5 × Options.BackendKillEvery.
	Controls Scenario = "controls"
	// Replica runs a replica of the server (GTID replication) that
	// holdfast routes the catalog tag's reads to, and kills it with
	// SIGKILL every Options.MariaDBKillEvery, restarting it after each of
	// Options.MariaDBDown in turn. Every client reads its own reservation
	// back (read-your-writes) after each reserve, and readers read the
	// stock: every read must be answered, and truly.
	Replica Scenario = "replica"
	// Switchover runs the scenario's database on a primary and a replica
	// of its own (GTID replication) behind a VIP (a relay the harness
	// moves), holdfast's backend address the VIP, and switches the
	// primary over every Options.SwitchoverEvery as an HA tool does a
	// planned switchover: the primary read-only, the replica caught up and
	// promoted, the old primary replicating from it, the VIP moved. The
	// engine's calls must keep exactly-once answers; 9010 is a true
	// "nothing ran" answer, 1290 from a read-only server is not one.
	Switchover Scenario = "switchover"
	// Failover is Switchover's setup with the primary killed (SIGKILL)
	// Options.SwitchoverEvery into the traffic and the replica promoted
	// Options.PromoteAfter later (its relay log applied first, then the
	// VIP moved), once.
	Failover Scenario = "failover"
)

// Scenarios lists every scenario in order.
var Scenarios = []Scenario{KillBackend, KillMariaDB, KillHoldfast, Instances, Controls, Replica, Switchover, Failover}

// ParseScenarios reads a comma-separated list of scenario names ("all"
// for every one).
func ParseScenarios(s string) ([]Scenario, error) {
	if s == "" || s == "all" {
		return slices.Clone(Scenarios), nil
	}
	var out []Scenario
	for _, name := range strings.Split(s, ",") {
		sc := Scenario(strings.TrimSpace(name))
		if !slices.Contains(Scenarios, sc) {
			return nil, fmt.Errorf("chaos: unknown scenario %q (want %s or all)", sc, scenarioList())
		}
		out = append(out, sc)
	}
	return out, nil
}

func scenarioList() string {
	names := make([]string, len(Scenarios))
	for i, s := range Scenarios {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Options configures Run. DefaultOptions gives `make chaos`; ShortOptions
// the few-second version run by `make test`. The zero value is not usable.
type Options struct {
	Repo string // repository root, where ./cmd/holdfast is built
	Go   string // the go command
	// Race builds holdfast with -race; a data race it reports is a
	// violation.
	Race bool
	// Dir is the work directory (binary, configurations, logs, the private
	// server's data). Empty: a temporary directory, removed at the end
	// unless Keep is set or a violation was found.
	Dir  string
	Keep bool
	Out  io.Writer // progress and the report; nil: os.Stdout

	Scenarios []Scenario
	Clients   int           // concurrent clients, each one connection to holdfast
	Traffic   time.Duration // how long each scenario's traffic runs
	// TTL is every reserve's ttl_seconds (whole seconds, at least 3 s);
	// the configuration's payment_timeout, callback_retry_window and
	// clock_skew are set just below it, as the TTL rule demands.
	TTL time.Duration
	// PoolCap is reservation.pool_cap (and the refiller's).
	PoolCap int

	BackendKillEvery  time.Duration
	MariaDBKillEvery  time.Duration
	MariaDBDown       []time.Duration // downtime of successive kills, in turn
	HoldfastKillEvery time.Duration
	HoldfastDown      time.Duration
	Instances         int
	ControlEvery      time.Duration
	// SwitchoverEvery is how often the switchover scenario switches the
	// primary over, and when into the traffic the failover scenario kills
	// it; PromoteAfter how long after the kill the replica is promoted.
	SwitchoverEvery time.Duration
	PromoteAfter    time.Duration

	// RetryBudget bounds how long a client repeats one call that got a
	// retryable answer (unknown outcome, 9107, 9010, 2003, 1040, 1053, no
	// connection) before it gives the order up.
	RetryBudget time.Duration
	// AnswerTimeout is the client's read timeout: a call unanswered this
	// long is a violation (holdfast bounds every call by call_timeout).
	AnswerTimeout time.Duration
	// Settle bounds the wait, after the traffic, for clients to finish
	// their retries and for the sweeper to expire what was left behind.
	Settle time.Duration

	// Items are inventory items 1..Items, each at locations 1 and 2, with
	// OnHand units per location; items 1..ScarceItems have ScarceOnHand
	// (they sell out), the next one, which two lines in ten ask for, has
	// HotOnHand.
	Items        int
	ScarceItems  int
	OnHand       int64
	ScarceOnHand int64
	HotOnHand    int64
	Seed         uint64 // of the clients' random choices; 0: from the clock
}

// DefaultOptions returns the settings of `make chaos`: 256 clients, eight
// scenarios of 100 s of traffic each, about 20 minutes in all.
func DefaultOptions() Options {
	return Options{
		Repo: ".", Go: "go",
		Scenarios:         slices.Clone(Scenarios),
		Clients:           256,
		Traffic:           100 * time.Second,
		TTL:               8 * time.Second,
		PoolCap:           1000,
		BackendKillEvery:  100 * time.Millisecond,
		MariaDBKillEvery:  20 * time.Second,
		MariaDBDown:       []time.Duration{2 * time.Second, 8 * time.Second},
		HoldfastKillEvery: 12 * time.Second,
		HoldfastDown:      time.Second,
		Instances:         3,
		ControlEvery:      2 * time.Second,
		SwitchoverEvery:   30 * time.Second,
		PromoteAfter:      2 * time.Second,
		RetryBudget:       30 * time.Second,
		AnswerTimeout:     30 * time.Second,
		Settle:            90 * time.Second,
		Items:             24,
		ScarceItems:       2,
		OnHand:            6000,
		ScarceOnHand:      300,
		HotOnHand:         30000,
	}
}

// ShortOptions returns a few-second run of one scenario with few
// clients, for `make test`.
func ShortOptions(sc Scenario) Options {
	o := DefaultOptions()
	o.Scenarios = []Scenario{sc}
	o.Clients = 8
	o.Traffic = 4 * time.Second
	o.TTL = 3 * time.Second
	o.PoolCap = 200
	o.MariaDBKillEvery = 2 * time.Second
	o.MariaDBDown = []time.Duration{time.Second}
	o.HoldfastKillEvery = 2 * time.Second
	o.HoldfastDown = 300 * time.Millisecond
	o.SwitchoverEvery = 1500 * time.Millisecond
	o.Settle = 60 * time.Second
	o.Items = 6
	o.ScarceItems = 1
	o.OnHand = 600
	o.ScarceOnHand = 40
	o.HotOnHand = 1000
	return o
}

func (o *Options) validate() error {
	switch {
	case len(o.Scenarios) == 0:
		return fmt.Errorf("chaos: no scenario")
	case o.Clients < 1:
		return fmt.Errorf("chaos: clients must be positive, got %d", o.Clients)
	case o.TTL < 3*time.Second || o.TTL%time.Second != 0:
		return fmt.Errorf("chaos: ttl must be whole seconds, at least 3s, got %v", o.TTL)
	case o.Items < 2 || o.ScarceItems >= o.Items || o.ScarceItems < 0:
		return fmt.Errorf("chaos: need at least 2 items and fewer scarce ones, got %d and %d", o.Items, o.ScarceItems)
	case o.PoolCap < 1:
		return fmt.Errorf("chaos: pool cap must be positive")
	case o.Instances < 1:
		return fmt.Errorf("chaos: instances must be positive")
	case o.SwitchoverEvery <= 0 || o.PromoteAfter < 0:
		return fmt.Errorf("chaos: switchover-every must be positive and promote-after not negative")
	case len(o.MariaDBDown) == 0:
		return fmt.Errorf("chaos: no MariaDB downtime given")
	}
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	return nil
}
