package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// Reads on replicas (backend.replicas, routing). A read may go to a replica
// when it is an autocommit SELECT outside a transaction from a session that
// keeps no backend connection, with nothing that depends on the session or
// may write (policy.PlainSelect: no function that is not built in, no locking
// clause, no variables), and its tag's policy (routing.tags) allows it:
//
//   - replica_stale_ok: to a replica within routing.max_replica_lag;
//   - replica: the same, and once the session has written (its last GTID,
//     from the server's OK) or run a CALL holdfast.* (the engine's
//     commits), only to a replica that has applied that write; else the
//     primary.
//
// Lag is measured by GTID position: every routing.check_interval the
// topology check (topologymon.go) reads the primary's gtid_binlog_pos and
// each replica's gtid_slave_pos; a replica's lag is how long ago the
// primary had the first position the replica has not applied. A replica
// gets reads only while it replicates from the current primary, judged by
// identity (followsPrimary in topology.go: the server_id its connected IO
// thread reads from its source, else its source's address), so a former
// primary gets reads again only once it replicates from the new one
// within the bound. A replica that cannot be read, lags past the bound,
// replicates from no one or from another server than the primary (a
// retired primary, another replica), whose replication status holdfast's
// account may not read (SLAVE MONITOR, REPLICATION CLIENT on MySQL), is
// the primary itself, or whose session defaults differ from the
// primary's gets no reads until that changes (each change is logged and
// counted); so does every replica while no primary is known (a
// switchover under way, a split brain). A read whose
// replica connection fails before any byte of its answer reached the client
// is run again on the primary: the one case where holdfast sends a
// statement twice. Everything else goes to the primary.
//
// Each replica has its own backend record (its pool under its own cap, its
// kill connection); a connection knows its backend (backendConn.be), so a
// lease, a kill and a release reach the right server.

// replicaAcquireBudget is how long a read waits for a replica's connection
// before it goes to the primary instead.
const replicaAcquireBudget = 100 * time.Millisecond

// Routing policies (package controls).
type policy = controls.Route

const (
	policyPrimary = controls.RoutePrimary
	policyReplica = controls.RouteReplica
	policyStaleOK = controls.RouteReplicaStaleOK
)

// replica is one of backend.replicas.
type replica struct {
	be     backend
	weight int
	max    int                          // backend.replicas[].max (0: pool.max)
	state  atomic.Pointer[replicaState] // nil until first checked: no reads
	// Reads routed to it that ran on the primary after all (it could not
	// lend a connection, or its connection failed before answering); the
	// reads it served are its backend's borrows.
	fellBack       atomic.Uint64
	defaultsDiffer atomic.Bool // its session defaults are not the primary's
}

// replicaState is what the last check found.
type replicaState struct {
	up     bool
	reason string  // why not up
	pos    gtidPos // applied
	lag    time.Duration
}

// routing is the replicas and what they are checked against.
type routing struct {
	replicas []*replica
	// The tags' policies are controls (s.ctrl, kind route): routing.tags
	// the configuration's, holdfastctl route this instance's or the
	// fleet's.
	maxLag   time.Duration
	interval time.Duration

	mu      sync.Mutex // guards history
	history []posSample
	// stats
	changes atomic.Uint64 // replicas going in or out of service
}

// posSample is the primary's position at a time.
type posSample struct {
	at  time.Time
	pos gtidPos
}

// newRouting builds the replicas of cfg (nil when there are none): each
// of backend.replicas, then each address backend.address resolves to now
// that is not one of them, when it resolves to more than one (a name of
// every server: the ones that are not the primary are replicas; each
// check tells which is which). An address the name gains later is checked
// for the topology but gets no reads until holdfast restarts. New calls
// it.
func (s *Server) newRouting(cfg config.Config) (*routing, error) {
	if len(cfg.Backend.Replicas) == 0 {
		return nil, nil
	}
	rt := &routing{maxLag: cfg.Routing.MaxReplicaLag, interval: cfg.Routing.CheckInterval}
	var routes []controls.Control
	for pat, pol := range cfg.Routing.Tags {
		if p, ok := controls.ParseRoute(pol); ok {
			routes = append(routes, controls.Control{Kind: controls.RouteKind, Key: pat, Value: int64(p)})
		}
	}
	s.ctrl.Replace(controls.Config, []*controls.Kind{controls.RouteKind}, routes)
	for _, rc := range cfg.Backend.Replicas {
		r, err := s.newReplica(cfg, rc, rc.Address)
		if err != nil {
			return nil, err
		}
		rt.replicas = append(rt.replicas, r)
	}
	for _, addr := range nameReplicas(cfg.Backend, lookupHost) {
		r, err := s.newReplica(cfg, config.Replica{Address: addr}, cfg.Backend.Address)
		if err != nil {
			return nil, err
		}
		rt.replicas = append(rt.replicas, r)
	}
	return rt, nil
}

// lookupHost resolves a name (a variable for tests).
var lookupHost = func(host string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupHost(ctx, host)
}

// nameReplicas are the addresses backend.address's name resolves to,
// sorted, that are not among backend.replicas: none when it is an address
// already, cannot be resolved, or resolves to one address only (the
// primary's, or a VIP's that moves with it).
func nameReplicas(b config.Backend, lookup func(string) ([]string, error)) []string {
	host, port, err := net.SplitHostPort(b.Address)
	if err != nil || net.ParseIP(host) != nil {
		return nil
	}
	ips, err := lookup(host)
	if err != nil {
		return nil
	}
	slices.Sort(ips)
	ips = slices.Compact(ips)
	if len(ips) < 2 {
		return nil
	}
	var out []string
	for _, ip := range ips {
		addr := net.JoinHostPort(ip, port)
		if !slices.ContainsFunc(b.Replicas, func(rc config.Replica) bool { return rc.Address == addr }) {
			out = append(out, addr)
		}
	}
	return out
}

// newReplica builds one replica at rc.Address, its TLS checked against
// tlsAddr's host name (its own address, or backend.address for an
// address the name resolves to).
func (s *Server) newReplica(cfg config.Config, rc config.Replica, tlsAddr string) (*replica, error) {
	r := &replica{weight: max(1, rc.Weight)}
	r.be.addr = rc.Address
	bt, err := loadBackendTLS(cfg.Backend.TLS, tlsAddr)
	if err != nil {
		return nil, fmt.Errorf("proxy: replica %s: %w", rc.Address, err)
	}
	r.be.tls = &bt
	r.max = rc.Max
	lim := replicaLimits(cfg.Pool, rc.Max)
	p, err := pool.New(pool.Options[variant, *backendConn]{
		Dial: func(ctx context.Context, v variant) (*backendConn, error) {
			bs, err := s.dialSettings(v)
			if err != nil {
				return nil, err
			}
			bc, err := dialBackend(ctx, r.be.settings(bs), v)
			if err == nil {
				bc.be = &r.be
			}
			return bc, err
		},
		OnFirstDial: func(bc *backendConn) error { return s.learnReplica(r, bc) },
		Log:         s.log,
	}, lim)
	if err != nil {
		return nil, fmt.Errorf("proxy: replica %s: %w", rc.Address, err)
	}
	r.be.pool = p
	return r, nil
}

// errNoReplicas refuses a route set on an instance without replicas.
var errNoReplicas = errors.New("this holdfast has no backend.replicas: every read goes to the primary")

// SetTagRoute gives the tags matching pattern a routing policy on this
// instance (policy "" lifts this instance's own); it fails without
// backend.replicas.
func (s *Server) SetTagRoute(pattern, policy string) error {
	if s.routing == nil {
		return errNoReplicas
	}
	if policy == "" {
		s.ctrl.Lift(controls.Local, controls.RouteKind, pattern)
		return nil
	}
	p, ok := controls.ParseRoute(policy)
	if !ok {
		return fmt.Errorf("route: want primary, replica or replica_stale_ok, got %q", policy)
	}
	s.ctrl.Put(controls.Local, controls.Control{Kind: controls.RouteKind, Key: pattern, Value: int64(p)})
	return nil
}

// RouteOf is the routing policy in force for tag ("primary" without
// backend.replicas).
func (s *Server) RouteOf(tag string) string {
	if s.routing == nil {
		return "primary"
	}
	return s.ctrl.Route(tag).String()
}

// replicaLimits is a replica pool's limits: the pool's settings, opened
// only on demand (no minimum), capped at its own max when set.
func replicaLimits(p config.Pool, max int) pool.Limits[variant] {
	lim := limitsFrom(p)
	// A read that finds the replica busy goes to the primary rather than
	// queue: its wait is the budget, or pool.acquire_timeout if shorter.
	if lim.AcquireTimeout <= 0 || lim.AcquireTimeout > replicaAcquireBudget {
		lim.AcquireTimeout = replicaAcquireBudget
	}
	lim.Min = 0
	if max > 0 {
		lim.Max = max
	}
	lim.MaxIdle = min(lim.MaxIdle, lim.Max)
	return lim
}

// learnReplica runs on a replica's first connection: a replica whose
// session defaults differ from the primary's gets no reads (a session's
// state is restored on it relative to the primary's defaults).
func (s *Server) learnReplica(r *replica, bc *backendConn) error {
	ctx, cancel := context.WithTimeout(s.ctx, s.exchangeTimeout())
	defer cancel()
	base, _, err := s.readBase(ctx, bc)
	if err != nil {
		return err
	}
	info := bc.info
	r.be.info.Store(&info)
	r.be.base.Store(base)
	bc.vars = base.Vars
	if pb := s.primary.base.Load(); pb != nil && !pb.Vars.Equal(base.Vars) {
		if !r.defaultsDiffer.Swap(true) {
			s.log.Warn("replica gets no reads: its session defaults differ from the primary's", "replica", r.be.addr,
				"replica", base.Vars.Get("collation_connection")+" "+base.Vars.Get("sql_mode"),
				"primary", pb.Vars.Get("collation_connection")+" "+pb.Vars.Get("sql_mode"))
		}
	}
	s.log.Info("replica connected", "addr", r.be.addr, "version", bc.version)
	return nil
}

// routeRead returns the replica a read goes to under routing policy pol,
// or nil for the primary. Policy decided that the statement may go to one
// under pol (policy.Decide: an autocommit plain SELECT from a session
// that keeps no connection, naming no variables, without a
// /* holdfast:primary */ hint and with nothing that only the primary or
// the session's own connection knows, policy.PrimaryOnly); here a replica
// is picked that has what pol asks.
func (s *session) routeRead(pol policy) *replica {
	rt := s.srv.routing
	if rt == nil || pol == policyPrimary {
		return nil
	}
	var after gtidPos
	if pol == policyReplica && !s.state.RYWAfter.IsZero() {
		var ok bool
		if after, ok = rt.sampleAfter(s.state.RYWAfter); !ok {
			return nil // the engine's writes are not yet in a sample
		}
	}
	total := 0
	var buf [8]*replica
	cands := buf[:0]
	for _, r := range rt.replicas {
		st := r.state.Load()
		if st == nil || !st.up || r.defaultsDiffer.Load() {
			continue
		}
		if pol == policyReplica && !st.pos.covers(s.state.Writes) {
			continue
		}
		if after != nil && !st.pos.covers(after) {
			continue
		}
		cands = append(cands, r)
		total += r.weight
	}
	if len(cands) == 0 {
		return nil
	}
	if after != nil && len(cands) == len(rt.replicas) {
		s.state.RYWAfter = time.Time{} // every replica has the engine's writes now
	}
	pick := rand.IntN(total)
	for _, r := range cands {
		if pick < r.weight {
			return r
		}
		pick -= r.weight
	}
	return cands[len(cands)-1]
}

// noteWrite records the GTID of a commit the session's statement made, so
// that its reads under the replica policy wait for it (routeRead).
func (s *session) noteWrite(gtid string) {
	s.state.NoteWrite(parseGTID(gtid))
}

// sampleAfter returns the first sample of the primary's position taken at
// or after t.
func (rt *routing) sampleAfter(t time.Time) (gtidPos, bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, smp := range rt.history {
		if !smp.at.Before(t) {
			return smp.pos, true
		}
	}
	return nil, false
}

// lagOf is how long ago the primary had the first sampled position pos
// does not cover (0 when it covers the latest). known is false when pos
// lacks even the oldest sample and that is younger than max_replica_lag:
// the replica may be further behind than the history shows (just after
// start, or after the primary could not be read for a while).
func (rt *routing) lagOf(pos gtidPos, now time.Time) (lag time.Duration, known bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for i, smp := range rt.history {
		if !pos.covers(smp.pos) {
			lag = now.Sub(smp.at)
			return lag, i > 0 || lag > rt.maxLag
		}
	}
	return 0, true
}

// replicaDown takes r out of service after its connection failed during a
// statement, until the next check finds it well.
func (s *Server) replicaDown(r *replica, err error) {
	st := &replicaState{reason: "a connection failed: " + err.Error()}
	if prev := r.state.Swap(st); prev != nil && prev.up {
		s.routing.changes.Add(1)
		s.log.Warn("replica out of service: its reads go to the primary", "replica", r.be.addr, "reason", st.reason)
	}
}

// gtidPos is a MariaDB GTID position: the last sequence number applied in
// each replication domain.
type gtidPos map[uint32]uint64

// covers reports whether p has applied everything q has (nil q: nothing).
func (p gtidPos) covers(q gtidPos) bool {
	for d, seq := range q {
		if p[d] < seq {
			return false
		}
	}
	return true
}

// parseGTIDPos reads "0-1-100,1-2-5" (domain-server-sequence, one per
// domain; empty for none).
func parseGTIDPos(s string) (gtidPos, bool) {
	pos := gtidPos{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		d, seq, ok := parseGTID(part)
		if !ok {
			return nil, false
		}
		pos[d] = max(pos[d], seq)
	}
	return pos, true
}

// parseGTID reads one MariaDB GTID, domain-server-sequence.
func parseGTID(s string) (domain uint32, seq uint64, ok bool) {
	a, rest, ok1 := strings.Cut(s, "-")
	_, c, ok2 := strings.Cut(rest, "-")
	if !ok1 || !ok2 {
		return 0, 0, false
	}
	d, err1 := strconv.ParseUint(a, 10, 32)
	n, err2 := strconv.ParseUint(c, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return uint32(d), n, true
}

// ReplicaState is one replica as the admin API shows it.
type ReplicaState struct {
	Address  string     `json:"address"`
	Up       bool       `json:"in_service"`
	Reason   string     `json:"reason,omitempty"`
	Lag      float64    `json:"lag_seconds"`
	Position string     `json:"gtid_position"`
	Routed   uint64     `json:"reads_routed"`
	FellBack uint64     `json:"reads_fell_back"`
	Pool     pool.Stats `json:"-"`
	InUse    int        `json:"connections_in_use"`
	Idle     int        `json:"connections_idle"`
	// Its leases since start: borrows, and the seconds borrowers waited
	// and held its connections.
	Borrows     uint64  `json:"borrows"`
	WaitSeconds float64 `json:"wait_seconds"`
	HoldSeconds float64 `json:"hold_seconds"`
	// Tags splits them by tag, most held first.
	Tags []ReplicaTag `json:"tags"`
}

// ReplicaTag is one tag's leases of one replica.
type ReplicaTag struct {
	Tag         string  `json:"tag"`
	Borrows     uint64  `json:"borrows"`
	WaitSeconds float64 `json:"wait_seconds"`
	HoldSeconds float64 `json:"hold_seconds"`
}

// Replicas lists the replicas and their state (none without
// backend.replicas).
func (s *Server) Replicas() []ReplicaState {
	if s.routing == nil {
		return nil
	}
	out := make([]ReplicaState, 0, len(s.routing.replicas))
	for _, r := range s.routing.replicas {
		ps := r.be.pool.Stats()
		borrows := r.be.borrows.Load() // every borrow of a replica is a routed read
		rs := ReplicaState{Address: r.be.addr, Routed: borrows, FellBack: r.fellBack.Load(), Pool: ps, InUse: ps.InUse, Idle: ps.Idle,
			Borrows: borrows, WaitSeconds: time.Duration(r.be.waitNs.Load()).Seconds(), HoldSeconds: time.Duration(r.be.holdNs.Load()).Seconds(),
			Tags: []ReplicaTag{}}
		r.be.byTag.Range(func(k, v any) bool {
			u := v.(*tagUse)
			rs.Tags = append(rs.Tags, ReplicaTag{Tag: k.(string), Borrows: u.borrows.Load(),
				WaitSeconds: time.Duration(u.waitNs.Load()).Seconds(), HoldSeconds: time.Duration(u.holdNs.Load()).Seconds()})
			return true
		})
		slices.SortFunc(rs.Tags, func(a, b ReplicaTag) int {
			switch {
			case a.HoldSeconds > b.HoldSeconds:
				return -1
			case a.HoldSeconds < b.HoldSeconds:
				return 1
			}
			return strings.Compare(a.Tag, b.Tag)
		})
		if st := r.state.Load(); st != nil {
			rs.Up, rs.Reason, rs.Lag = st.up && !r.defaultsDiffer.Load(), st.reason, st.lag.Seconds()
			if r.defaultsDiffer.Load() {
				rs.Reason = "its session defaults differ from the primary's"
			}
			var parts []string
			for d, seq := range st.pos {
				parts = append(parts, strconv.FormatUint(uint64(d), 10)+":"+strconv.FormatUint(seq, 10))
			}
			rs.Position = strings.Join(parts, ",")
		} else {
			rs.Reason = "not checked yet"
		}
		out = append(out, rs)
	}
	return out
}

var (
	dReplicaUp       = prometheus.NewDesc("holdfast_replica_in_service", "1 while a replica gets reads (reachable, within routing.max_replica_lag, session defaults as the primary's).", []string{"replica"}, nil)
	dReplicaLag      = prometheus.NewDesc("holdfast_replica_lag_seconds", "How long ago the primary had the first GTID position the replica has not applied (its last check).", []string{"replica"}, nil)
	dReplicaReads    = prometheus.NewDesc("holdfast_replica_reads_total", "Reads routed to the replica.", []string{"replica"}, nil)
	dReplicaFallback = prometheus.NewDesc("holdfast_replica_fallbacks_total", "Reads routed to the replica that ran on the primary instead: it could not lend a connection, or its connection failed before answering.", []string{"replica"}, nil)
	dReplicaConns    = prometheus.NewDesc("holdfast_replica_connections", "Backend connections open to the replica, by state.", []string{"replica", "state"}, nil)
	dReplicaChanges  = prometheus.NewDesc("holdfast_replica_service_changes_total", "Replicas going into or out of service.", nil, nil)
	dBackendBorrows  = prometheus.NewDesc("holdfast_backend_borrows_total", "Backend connections lent, by backend (primary, or a replica's address).", []string{"backend"}, nil)
	dBackendWait     = prometheus.NewDesc("holdfast_backend_wait_seconds_total", "Time borrowers waited for a connection, by backend.", []string{"backend"}, nil)
	dBackendHold     = prometheus.NewDesc("holdfast_backend_hold_seconds_total", "Time connections were held (finished holds), by backend.", []string{"backend"}, nil)
	dReplicaTagHold  = prometheus.NewDesc("holdfast_replica_tag_hold_seconds_total", "Time a tag held a replica's connections (finished holds).", []string{"replica", "tag"}, nil)
	dReplicaTagWait  = prometheus.NewDesc("holdfast_replica_tag_wait_seconds_total", "Time a tag's borrowers waited for a replica's connection.", []string{"replica", "tag"}, nil)
)

// ReplicaCollector exports the replicas' metrics (none without
// backend.replicas).
func (s *Server) ReplicaCollector() prometheus.Collector { return replicaCollector{s} }

type replicaCollector struct{ s *Server }

func (c replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dReplicaUp, dReplicaLag, dReplicaReads, dReplicaFallback, dReplicaConns, dReplicaChanges,
		dBackendBorrows, dBackendWait, dBackendHold, dReplicaTagHold, dReplicaTagWait} {
		ch <- d
	}
}

func (c replicaCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, t prometheus.ValueType, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, l...)
	}
	backend := func(be *backend, name string) {
		g(dBackendBorrows, prometheus.CounterValue, float64(be.borrows.Load()), name)
		g(dBackendWait, prometheus.CounterValue, time.Duration(be.waitNs.Load()).Seconds(), name)
		g(dBackendHold, prometheus.CounterValue, time.Duration(be.holdNs.Load()).Seconds(), name)
	}
	backend(&c.s.primary, "primary")
	if c.s.routing == nil {
		return
	}
	for _, r := range c.s.Replicas() {
		g(dBackendBorrows, prometheus.CounterValue, float64(r.Borrows), r.Address)
		g(dBackendWait, prometheus.CounterValue, r.WaitSeconds, r.Address)
		g(dBackendHold, prometheus.CounterValue, r.HoldSeconds, r.Address)
		for _, u := range r.Tags {
			g(dReplicaTagHold, prometheus.CounterValue, u.HoldSeconds, r.Address, u.Tag)
			g(dReplicaTagWait, prometheus.CounterValue, u.WaitSeconds, r.Address, u.Tag)
		}
		up := 0.0
		if r.Up {
			up = 1
		}
		g(dReplicaUp, prometheus.GaugeValue, up, r.Address)
		g(dReplicaLag, prometheus.GaugeValue, r.Lag, r.Address)
		g(dReplicaReads, prometheus.CounterValue, float64(r.Routed), r.Address)
		g(dReplicaFallback, prometheus.CounterValue, float64(r.FellBack), r.Address)
		g(dReplicaConns, prometheus.GaugeValue, float64(r.Pool.InUse), r.Address, "in_use")
		g(dReplicaConns, prometheus.GaugeValue, float64(r.Pool.Idle), r.Address, "idle")
	}
	g(dReplicaChanges, prometheus.CounterValue, float64(c.s.routing.changes.Load()))
}
