package proxy

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/proxy/pool"
)

// Topology is the servers holdfast checks and what it makes of them, as
// the admin API (GET /api/topology) shows it.
type Topology struct {
	// State is primary (one primary), no_primary (no server is writable
	// and replicates from no one: a switchover under way, or the primary
	// down), split_brain (more than one is: holdfast uses none), or
	// unknown (not checked yet).
	State string `json:"state"`
	// Primary is the primary's identity (@@hostname:@@port#@@server_id)
	// and PrimaryAddresses the addresses it was reached at; empty without
	// one.
	Primary          string   `json:"primary,omitempty"`
	PrimaryAddresses []string `json:"primary_addresses,omitempty"`
	// Since is when the state (and primary) began; CheckedAt the last
	// check. Zero before the first check.
	Since                time.Time        `json:"since"`
	CheckedAt            time.Time        `json:"checked_at"`
	CheckIntervalSeconds float64          `json:"check_interval_seconds"`
	Servers              []TopologyServer `json:"servers"`
	// Retired are the servers whose connections are no longer lent for
	// the primary's work (a former primary, the servers of a split
	// brain), sorted.
	Retired []string `json:"retired"`
	// Since start: primaries replaced (switchovers and failovers seen),
	// split brains begun, seconds without a usable primary, checks run,
	// statements answered 1290 (read-only) by a backend, connections
	// closed because their server was retired, and dials that reached a
	// retired server.
	PrimaryChanges     uint64  `json:"primary_changes"`
	SplitBrains        uint64  `json:"split_brains"`
	NoPrimarySeconds   float64 `json:"no_primary_seconds"`
	Checks             uint64  `json:"checks"`
	ReadOnlyAnswers    uint64  `json:"read_only_answers"`
	RetiredConnections uint64  `json:"retired_connections"`
	RetiredDials       uint64  `json:"retired_dials"`
	// Failover is the statements held while there was no usable primary
	// or a pause was in force, retried, and answered 9010.
	Failover FailoverStats `json:"failover"`
}

// TopologyServer is one candidate address at the last check.
type TopologyServer struct {
	Address string `json:"address"`
	// Source is where the address comes from: backend.address (one of
	// the addresses its name resolves to) or backend.replicas.
	Source string `json:"source"`
	// Server is the identity of the server reached there
	// (@@hostname:@@port#@@server_id); empty when unreachable.
	Server string `json:"server,omitempty"`
	// Role is primary, replica, read_only (replicating from no one),
	// split_brain, unreachable or unknown.
	Role      string `json:"role"`
	Reachable bool   `json:"reachable"`
	ReadOnly  bool   `json:"read_only"`
	// Replicating is yes, no, or unknown (the account may not read the
	// replication status: SLAVE MONITOR / REPLICATION CLIENT).
	Replicating string `json:"replicating"`
	// ReplicatesFrom is the source's address and server_id as the server
	// names them, when it replicates.
	ReplicatesFrom string `json:"replicates_from,omitempty"`
	Retired        bool   `json:"retired"`
	Error          string `json:"error,omitempty"`
}

// Topology returns the last check's view (State unknown before the first).
func (s *Server) Topology() Topology {
	t := s.topo
	ps := s.pool.Stats()
	out := Topology{State: topoUnknown.String(), CheckIntervalSeconds: t.interval.Seconds(), Servers: []TopologyServer{}, Retired: []string{},
		PrimaryChanges: t.primaryChanges.Load(), SplitBrains: t.splitBrains.Load(), NoPrimarySeconds: t.noPrimary(time.Now()).Seconds(),
		Checks: t.checks.Load(), ReadOnlyAnswers: t.readOnlyAnswers.Load(), RetiredConnections: ps.Closed[pool.CloseRetired], RetiredDials: ps.RetiredDials,
		Failover: s.FailoverStats()}
	v := t.view.Load()
	if v == nil {
		return out
	}
	out.State, out.Since, out.CheckedAt = v.state.String(), v.since, v.at
	if v.state == topoPrimary {
		out.Primary = string(v.primary)
	}
	for i, o := range v.obs {
		src := "backend.replicas"
		if o.fromName {
			src = "backend.address"
		}
		ts := TopologyServer{Address: o.addr, Source: src, Server: string(o.id), Role: v.roles[i].String(), Reachable: o.reachable,
			ReadOnly: o.readOnly, Replicating: "unknown", Retired: v.retired[o.id], Error: o.err}
		if o.replKnown {
			ts.Replicating = "no"
			if o.replicating {
				ts.Replicating = "yes"
				ts.ReplicatesFrom = o.sourceAddr
				if o.sourceNum != "" {
					ts.ReplicatesFrom += " (server_id " + o.sourceNum + ")"
				}
			}
		}
		if !o.reachable {
			ts.Replicating = "unknown"
		}
		if v.roles[i] == rolePrimary {
			out.PrimaryAddresses = append(out.PrimaryAddresses, o.addr)
		}
		out.Servers = append(out.Servers, ts)
	}
	for id := range v.retired {
		out.Retired = append(out.Retired, string(id))
	}
	slices.Sort(out.Retired)
	return out
}

// noPrimary is the time spent without a usable primary up to now.
func (t *topology) noPrimary(now time.Time) time.Duration {
	d := t.noPrimaryNs.Load()
	if since := t.badSince.Load(); since != 0 {
		d += max(now.UnixNano()-since, 0)
	}
	return time.Duration(d)
}

var (
	dBackendRole = prometheus.NewDesc("holdfast_backend_role",
		"1 for each candidate server's role at the last topology check (0 for its other roles): primary, replica, read_only, split_brain, unreachable.",
		[]string{"address", "role"}, nil)
	dFailoverNoPrimary = prometheus.NewDesc("holdfast_failover_no_primary",
		"1 while no server is writable and replicates from no one (a switchover under way, or the primary down).", nil, nil)
	dFailoverSplit = prometheus.NewDesc("holdfast_failover_split_brain",
		"1 while more than one server is writable and replicates from no one: holdfast uses none of them for the primary's work.", nil, nil)
	dFailoverChanges = prometheus.NewDesc("holdfast_failover_primary_changes_total",
		"Primaries replaced by another (switchovers and failovers seen).", nil, nil)
	dFailoverSplits = prometheus.NewDesc("holdfast_failover_split_brains_total",
		"Split brains begun.", nil, nil)
	dFailoverNoPrimarySecs = prometheus.NewDesc("holdfast_failover_no_primary_seconds_total",
		"Time without a usable primary (no primary, or a split brain).", nil, nil)
	dFailoverReadOnly = prometheus.NewDesc("holdfast_failover_read_only_answers_total",
		"Statements a backend answered with error 1290 (read-only), each of which made holdfast check the servers at once.", nil, nil)
	dFailoverRetiredDials = prometheus.NewDesc("holdfast_failover_retired_dials_total",
		"Dials of the backend address that reached a retired server (a former primary): closed at once.", nil, nil)
	dFailoverHeldNow = prometheus.NewDesc("holdfast_failover_held_statements",
		"Statements held now, holding no backend connection, for a usable primary (or a pause to lift).", nil, nil)
	dFailoverHeld = prometheus.NewDesc("holdfast_failover_held_total",
		"Statements held for a usable primary or a pause (each counted once).", nil, nil)
	dFailoverHeldSecs = prometheus.NewDesc("holdfast_failover_held_seconds",
		"How long each held statement was held.", nil, nil)
	dFailoverRetried = prometheus.NewDesc("holdfast_failover_retried_total",
		"Statements answered 1290 by a read-only former primary and run again on the new one (certain not to have run).", nil, nil)
	dFailoverRefused = prometheus.NewDesc("holdfast_failover_refused_total",
		"Statements answered 9010 (the primary is switching): held past failover.hold or failover.max_held, or a transaction or pinned session lost with a former primary.", nil, nil)
	dFailoverPauseWaits = prometheus.NewDesc("holdfast_failover_pause_waits_total",
		"Statements held by a pause control.", nil, nil)
	dFailoverReplayed = prometheus.NewDesc("holdfast_failover_transactions_replayed_total",
		"Transactions a primary switch met that were replayed on the new primary, every answer as the client saw it (failover.transaction_replay).", nil, nil)
	dFailoverReplayFailed = prometheus.NewDesc("holdfast_failover_transaction_replays_failed_total",
		"Transactions a primary switch met whose replay on the new primary did not take place or answered differently: rolled back, answered 9010.", nil, nil)
	dTopologyChecks = prometheus.NewDesc("holdfast_topology_checks_total",
		"Topology checks run (each reads every candidate server once).", nil, nil)
)

// TopologyCollector exports the topology's metrics.
func (s *Server) TopologyCollector() prometheus.Collector { return topologyCollector{s} }

type topologyCollector struct{ s *Server }

func (c topologyCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dBackendRole, dFailoverNoPrimary, dFailoverSplit, dFailoverChanges, dFailoverSplits,
		dFailoverNoPrimarySecs, dFailoverReadOnly, dFailoverRetiredDials, dFailoverHeldNow, dFailoverHeld, dFailoverHeldSecs,
		dFailoverRetried, dFailoverRefused, dFailoverPauseWaits, dFailoverReplayed, dFailoverReplayFailed, dTopologyChecks} {
		ch <- d
	}
}

func (c topologyCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, t prometheus.ValueType, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, l...)
	}
	b := func(ok bool) float64 {
		if ok {
			return 1
		}
		return 0
	}
	t := c.s.topo
	v := t.view.Load()
	seen := map[string]bool{}
	if v != nil {
		for i, o := range v.obs {
			if seen[o.addr] {
				continue
			}
			seen[o.addr] = true
			for r := roleUnreachable; r < numRoles; r++ {
				g(dBackendRole, prometheus.GaugeValue, b(v.roles[i] == r), o.addr, r.String())
			}
		}
		g(dFailoverNoPrimary, prometheus.GaugeValue, b(v.state == topoNoPrimary))
		g(dFailoverSplit, prometheus.GaugeValue, b(v.state == topoSplitBrain))
	} else {
		g(dFailoverNoPrimary, prometheus.GaugeValue, 0)
		g(dFailoverSplit, prometheus.GaugeValue, 0)
	}
	g(dFailoverChanges, prometheus.CounterValue, float64(t.primaryChanges.Load()))
	g(dFailoverSplits, prometheus.CounterValue, float64(t.splitBrains.Load()))
	g(dFailoverNoPrimarySecs, prometheus.CounterValue, t.noPrimary(time.Now()).Seconds())
	g(dFailoverReadOnly, prometheus.CounterValue, float64(t.readOnlyAnswers.Load()))
	g(dFailoverRetiredDials, prometheus.CounterValue, float64(c.s.pool.Stats().RetiredDials))
	fo := &c.s.fo
	g(dFailoverHeldNow, prometheus.GaugeValue, float64(fo.heldNow.Load()))
	g(dFailoverHeld, prometheus.CounterValue, float64(fo.held.Load()))
	ch <- fo.heldTime.Snapshot().Metric(dFailoverHeldSecs)
	g(dFailoverRetried, prometheus.CounterValue, float64(fo.retried.Load()))
	g(dFailoverRefused, prometheus.CounterValue, float64(fo.refused.Load()))
	g(dFailoverPauseWaits, prometheus.CounterValue, float64(fo.pauseWaits.Load()))
	g(dFailoverReplayed, prometheus.CounterValue, float64(fo.replayed.Load()))
	g(dFailoverReplayFailed, prometheus.CounterValue, float64(fo.replayFailed.Load()))
	g(dTopologyChecks, prometheus.CounterValue, float64(t.checks.Load()))
}
