package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// The topology monitor (see topology.go): one goroutine, from Serve to
// Close, checks every candidate server every routing.check_interval (and
// at once when a statement was answered 1290, "read-only": NoteReadOnly),
// on one connection per server that also serves the replica checks
// (replicas.go), and applies what it finds: the retired servers' pool
// connections are retired (pool.Retire), a new primary is learned again
// (pool.Relearn), the replicas' lag is measured against the primary's
// position, and the hooks of OnTopologyChange run.

// kickGap is the least time between two checks that a 1290 asked for.
const kickGap = 10 * time.Millisecond

// redialNotPrimary is how often the monitor dials a name's address again
// while the server it reached is not the primary and a primary is known
// elsewhere (while none is known: at every check), so that it follows a
// VIP that moves while keeping its address.
const redialNotPrimary = 5 * time.Second

// topology is what the monitor publishes: read without locks by anyone.
type topology struct {
	interval time.Duration
	kick     chan struct{} // cap 1: check again now

	// gen counts the changes of the retired set (a primary that changed,
	// turned read-only, or a split brain) and the primaries found (after
	// none, or another): connections made before a change may be to a
	// server no longer to be used (one made while there was no primary
	// may have reached the former one through a name not yet moved).
	gen  atomic.Uint64
	view atomic.Pointer[topoView]

	// Since start.
	checks, primaryChanges, splitBrains, readOnlyAnswers atomic.Uint64
	// noPrimaryNs is the time spent without a usable primary (no primary,
	// or a split brain), spans that ended; badSince (UnixNano) is when the
	// current one began, 0 when there is a primary.
	noPrimaryNs atomic.Int64
	badSince    atomic.Int64

	hooksMu sync.Mutex // guards hooks
	hooks   []func()

	waitMu sync.Mutex  // guards wait
	wait   primaryWait // zero until the first check: nothing to wait for
}

// topoView is one check's outcome.
type topoView struct {
	at      time.Time
	state   topoState
	since   time.Time // when state began
	primary serverID  // when state is topoPrimary
	obs     []serverObs
	roles   []role
	retired map[serverID]bool
}

func newTopology(interval time.Duration) *topology {
	return &topology{interval: interval, kick: make(chan struct{}, 1)}
}

// primaryWait is what waitPrimary waits on: closed when a primary is known
// (state primary), replaced by an open one when it no longer is.
type primaryWait struct {
	known bool
	ch    chan struct{}
}

// setPrimary records whether a primary is known now. Only the monitor
// calls it.
func (t *topology) setPrimary(known bool) {
	t.waitMu.Lock()
	defer t.waitMu.Unlock()
	if t.wait.ch == nil {
		t.wait.ch = make(chan struct{})
	}
	switch {
	case known && !t.wait.known:
		close(t.wait.ch)
	case !known && t.wait.known:
		t.wait.ch = make(chan struct{})
	}
	t.wait.known = known
}

// waitPrimary returns at once while a primary is known, or before the
// first check; otherwise (no primary, a split brain) it waits until one is
// known or ctx ends (its error then). The statement path may call it
// before borrowing a connection for the primary's work, so that a
// statement waits out a switchover holding no backend connection.
func (t *topology) waitPrimary(ctx context.Context) error {
	t.waitMu.Lock()
	known, ch := t.wait.known || t.wait.ch == nil, t.wait.ch
	t.waitMu.Unlock()
	if known {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// NoteReadOnly tells holdfast that a statement was answered 1290 ("the
// server is running with the --read-only option"): the servers are checked
// again at once. Any part of holdfast (the statement path, the engine, the
// fleet's connections) may call it, at any time; it does not block.
func (s *Server) NoteReadOnly() {
	s.topo.readOnlyAnswers.Add(1)
	s.topo.checkNow()
}

// checkNow has the monitor check the servers again at once (after
// kickGap), unless a check is asked for already; it does not block.
func (t *topology) checkNow() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// codeReadOnly is ER_OPTION_PREVENTS_STATEMENT: "The MariaDB server is
// running with the --read-only option so it cannot execute this
// statement" (also other options: secure_file_priv, ...).
const codeReadOnly = 1290

// noteBackendErr calls NoteReadOnly when code is 1290.
func (s *Server) noteBackendErr(code uint16) {
	if code == codeReadOnly {
		s.NoteReadOnly()
	}
}

// OnTopologyChange registers f to run after each change of the servers
// holdfast uses for the primary's work (the primary turning read-only, a
// split brain, a primary found after none or another): on the monitor's goroutine, without
// locks, in order of registration. f must not block for long. Register
// before Serve.
func (s *Server) OnTopologyChange(f func()) {
	s.topo.hooksMu.Lock()
	defer s.topo.hooksMu.Unlock()
	s.topo.hooks = append(s.topo.hooks, f)
}

// TopologyGeneration counts the changes OnTopologyChange reports: a
// connection opened at an older generation may be to a server no longer
// to be used. Safe at any time.
func (s *Server) TopologyGeneration() uint64 { return s.topo.gen.Load() }

// topoMonitor is the monitor goroutine's own state.
type topoMonitor struct {
	s       *Server
	conns   map[string]*monConn // by candidate address
	last    serverID            // the last primary known ("": none yet)
	state   topoState
	since   time.Time
	retired map[serverID]bool
	// warned are the warnings logged once (by key); the checks of one
	// round run at once, so warnedMu guards it.
	warnedMu sync.Mutex
	warned   map[string]bool
}

// monConn is the monitor's connection to one candidate address.
type monConn struct {
	bc       *backendConn
	dialedAt time.Time
}

// candidate is one address to check.
type candidate struct {
	addr     string
	fromName bool     // one of backend.address's addresses
	replica  *replica // one of backend.replicas (nil: none)
}

// monitor runs the checks until the server stops.
func (s *Server) monitor() {
	defer s.wg.Done()
	m := &topoMonitor{s: s, conns: map[string]*monConn{}, warned: map[string]bool{}}
	defer m.closeAll()
	t := time.NewTicker(s.topo.interval)
	defer t.Stop()
	var last time.Time
	for {
		last = time.Now()
		m.check()
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.topo.kick:
			if d := kickGap - time.Since(last); d > 0 {
				select {
				case <-s.ctx.Done():
					return
				case <-time.After(d):
				}
			}
		}
	}
}

func (m *topoMonitor) closeAll() {
	for _, mc := range m.conns {
		if mc.bc != nil {
			mc.bc.close()
		}
	}
}

// candidates are the addresses backend.address resolves to now, then the
// replicas' (an address in both is checked once).
func (m *topoMonitor) candidates(ctx context.Context) []candidate {
	s := m.s
	addr := s.config().Backend.Address
	var out []candidate
	host, port, err := net.SplitHostPort(addr)
	if err == nil && net.ParseIP(host) == nil {
		ips, lerr := net.DefaultResolver.LookupHost(ctx, host)
		if lerr != nil || len(ips) == 0 {
			m.warnOnce("resolve:"+host, "the topology check cannot resolve backend.address; it checks the name as it is", "addr", addr, "err", lerr)
			out = append(out, candidate{addr: addr, fromName: true})
		} else {
			slices.Sort(ips)
			for _, ip := range slices.Compact(ips) {
				out = append(out, candidate{addr: net.JoinHostPort(ip, port), fromName: true})
			}
		}
	} else {
		out = append(out, candidate{addr: addr, fromName: true})
	}
	if rt := s.routing; rt != nil {
		for _, r := range rt.replicas {
			if i := slices.IndexFunc(out, func(c candidate) bool { return c.addr == r.be.addr }); i >= 0 {
				out[i].replica = r
				continue
			}
			out = append(out, candidate{addr: r.be.addr, replica: r})
		}
	}
	return out
}

// check runs one check of every candidate and applies it.
func (m *topoMonitor) check() {
	s := m.s
	ctx, cancel := context.WithTimeout(s.ctx, max(s.topo.interval, time.Second))
	defer cancel()
	now := time.Now()
	cands := m.candidates(ctx)
	for _, c := range cands {
		if m.conns[c.addr] == nil {
			m.conns[c.addr] = &monConn{}
		}
	}
	for addr, mc := range m.conns { // addresses the name no longer leads to
		if !slices.ContainsFunc(cands, func(c candidate) bool { return c.addr == addr }) {
			if mc.bc != nil {
				mc.bc.close()
			}
			delete(m.conns, addr)
		}
	}
	obs := make([]serverObs, len(cands))
	var wg sync.WaitGroup
	for i, c := range cands {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs[i] = m.observe(ctx, m.conns[c.addr], c)
		}()
	}
	wg.Wait()
	if s.ctx.Err() != nil {
		return
	}
	s.topo.checks.Add(1)
	d := decide(obs)
	m.apply(d, obs, now)
	var pobs *serverObs
	if d.state == topoPrimary {
		for i := range obs {
			if d.roles[i] == rolePrimary {
				pobs = &obs[i]
				break
			}
		}
	}
	if s.routing != nil {
		s.updateReplicas(cands, obs, d, pobs, now)
	}
	// A name's address that reached a server other than the primary is
	// dialed again (a VIP may have moved to another server meanwhile).
	for i, c := range cands {
		mc := m.conns[c.addr]
		if !c.fromName || mc.bc == nil || d.roles[i] == rolePrimary {
			continue
		}
		if d.state != topoPrimary || now.Sub(mc.dialedAt) >= redialNotPrimary {
			mc.bc.close()
			mc.bc = nil
		}
	}
}

// checkSQL is one check's statements, in one round trip: the variables,
// then the replication status (MariaDB: every connection, SLAVE
// MONITOR; MySQL: every channel, REPLICATION CLIENT). SHOW, not SELECT: a
// check does not count as a read (Com_select).
func checkSQL(mariaDB bool) string {
	const vars = "SHOW GLOBAL VARIABLES WHERE Variable_name IN ('read_only', 'innodb_read_only', 'hostname', 'port', 'server_id', 'gtid_binlog_pos', 'gtid_slave_pos')"
	if mariaDB {
		return vars + "; SHOW ALL SLAVES STATUS"
	}
	return vars + "; SHOW REPLICA STATUS"
}

// observe checks one candidate on its connection, dialing it when needed;
// a connection that fails is closed, to be dialed again at the next check.
func (m *topoMonitor) observe(ctx context.Context, mc *monConn, c candidate) serverObs {
	s := m.s
	o := serverObs{addr: c.addr, fromName: c.fromName}
	if mc.bc == nil {
		bs := s.ownSettings()
		if c.replica != nil && !c.fromName {
			bs = c.replica.be.settings(bs)
		}
		bs.Address = c.addr
		bc, err := dialBackend(ctx, bs, 0)
		if err != nil {
			o.err = err.Error()
			return o
		}
		mc.bc, mc.dialedAt = bc, time.Now()
	}
	res, err := mc.bc.queryEach(ctx, checkSQL(mc.bc.info.mariaDB))
	if len(res) == 0 || (err != nil && isIOError(err)) {
		if err == nil {
			err = errors.New("no answer")
		}
		mc.bc.close()
		mc.bc = nil
		o.err = err.Error()
		return o
	}
	vars := map[string]string{}
	for _, r := range res[0].rows {
		if len(r) == 2 {
			vars[strings.ToLower(string(r[0]))] = string(r[1])
		}
	}
	o.reachable = true
	o.id, o.serverNum = serverIDOf(vars), vars["server_id"]
	o.readOnly = isOn(vars["read_only"]) || isOn(vars["innodb_read_only"])
	for name, pos := range map[string]*gtidPos{"gtid_binlog_pos": &o.binlogPos, "gtid_slave_pos": &o.slavePos} {
		if p, ok := parseGTIDPos(vars[name]); ok && hasVarRow(res[0], name) {
			*pos = p
		}
	}
	if len(res) > 1 {
		o.replKnown = true
		src := replicationOf(res[1])
		o.replicating, o.sourceLinked, o.sourceNum, o.sourceAddr = src.replicating, src.linked, src.num, src.addr
	} else {
		var se *mysqlwire.SQLError
		if errors.As(err, &se) {
			o.err = "cannot read whom it replicates from: " + se.Error()
			grant := "SLAVE MONITOR"
			if !mc.bc.info.mariaDB {
				grant = "REPLICATION CLIENT"
			}
			m.warnOnce("repl:"+c.addr, "the topology check cannot read whom a server replicates from: grant holdfast's account "+grant+
				" (holdfast migrate -print-grants); until then a writable server is taken to replicate from no one, and this server gets no replica reads", "addr", c.addr, "err", se.Msg)
		}
	}
	return o
}

// hasVarRow reports whether the variables' result has a row for name.
func hasVarRow(r *textResult, name string) bool {
	return slices.ContainsFunc(r.rows, func(row [][]byte) bool { return len(row) == 2 && strings.EqualFold(string(row[0]), name) })
}

// isOn reads a boolean variable's SHOW value.
func isOn(v string) bool { return strings.EqualFold(v, "ON") || v == "1" }

// replSource is whom a server replicates from, as replicationOf reads it.
type replSource struct {
	replicating bool   // a replication thread runs (IO Yes or Connecting, or SQL Yes)
	linked      bool   // that connection's IO thread is connected (Yes)
	num         string // the source's server_id ("" when not known)
	addr        string // the source's host:port as configured on the replica ("" when not known)
}

// replicationOf reads SHOW ALL SLAVES STATUS (MariaDB) or SHOW REPLICA
// STATUS (MySQL): whether a replication thread runs, and the source of
// the first connection or channel whose thread runs.
func replicationOf(r *textResult) replSource {
	col := func(names ...string) int {
		for _, n := range names {
			if i := slices.IndexFunc(r.columns, func(c string) bool { return strings.EqualFold(c, n) }); i >= 0 {
				return i
			}
		}
		return -1
	}
	ioCol, sqlCol := col("Slave_IO_Running", "Replica_IO_Running"), col("Slave_SQL_Running", "Replica_SQL_Running")
	idCol, hostCol, portCol := col("Master_Server_Id", "Source_Server_Id"), col("Master_Host", "Source_Host"), col("Master_Port", "Source_Port")
	get := func(row [][]byte, i int) string {
		if i < 0 || i >= len(row) {
			return ""
		}
		return string(row[i])
	}
	for _, row := range r.rows {
		io, sq := get(row, ioCol), get(row, sqlCol)
		if strings.EqualFold(io, "Yes") || strings.EqualFold(io, "Connecting") || strings.EqualFold(sq, "Yes") {
			src := get(row, hostCol)
			if p := get(row, portCol); src != "" && p != "" {
				src = net.JoinHostPort(src, p)
			}
			id := get(row, idCol)
			if id == "0" {
				id = "" // not known until the IO thread has connected
			}
			return replSource{replicating: true, linked: strings.EqualFold(io, "Yes"), num: id, addr: src}
		}
	}
	return replSource{}
}

// queryEach runs a text of several statements and returns each one's
// result up to the first that failed, and that failure (a
// *mysqlwire.SQLError leaves the connection usable).
func (bc *backendConn) queryEach(ctx context.Context, sql string) ([]*textResult, error) {
	if dl, ok := ctx.Deadline(); ok {
		_ = bc.nc.SetDeadline(dl)
		defer bc.nc.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { _ = bc.nc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := bc.writeCommandString(comQuery, sql); err != nil {
		return nil, err
	}
	var out []*textResult
	for {
		res := &textResult{}
		more, err := bc.readOneResult(res)
		if err != nil {
			return out, err
		}
		out = append(out, res)
		if !more {
			return out, nil
		}
	}
}

// apply publishes one check's decision: the state, the retired servers
// (and their connections retired from the pool), a new primary learned
// again, the counters and the log.
func (m *topoMonitor) apply(d decision, obs []serverObs, now time.Time) {
	s, t := m.s, m.s.topo
	retired := retireAfter(m.retired, m.last, d, obs)
	changedRetired := !sameSet(retired, m.retired)
	prevState, prevPrimary := m.state, m.last
	if d.state != m.state || (d.state == topoPrimary && d.primary != m.last) {
		m.since = now
	}
	m.state = d.state
	switch d.state {
	case topoPrimary:
		if m.last != "" && d.primary != m.last {
			t.primaryChanges.Add(1)
			// What was learned of the former primary is learned again
			// from the new one: its defaults, version, capabilities,
			// statement limit at its pool's next dial (see also below),
			// and the positions replica lag is measured against.
			s.pool.Relearn()
			if s.routing != nil {
				s.routing.mu.Lock()
				s.routing.history = nil
				s.routing.mu.Unlock()
			}
			s.log.Warn("the primary changed: connections to the former one are retired", "primary", d.primary,
				"addresses", addrsOf(obs, d.primary), "former", m.last)
		} else if prevState != topoPrimary {
			s.log.Info("primary found", "primary", d.primary, "addresses", addrsOf(obs, d.primary))
		}
		m.last = d.primary
	case topoNoPrimary:
		if prevState == topoPrimary || prevState == topoSplitBrain {
			s.log.Warn("no primary: no server is writable and replicates from no one; writes cannot succeed until the HA tool promotes one",
				"former", prevPrimary, "servers", describeObs(obs, d))
		}
	case topoSplitBrain:
		if prevState != topoSplitBrain {
			t.splitBrains.Add(1)
			s.log.Error("split brain: more than one server is writable and replicates from no one; holdfast uses none of them for the primary's work until one is read-only or replicates",
				"writable", d.writers, "servers", describeObs(obs, d))
		}
	}
	bad := d.state == topoNoPrimary || d.state == topoSplitBrain
	if since := t.badSince.Load(); bad && since == 0 {
		t.badSince.Store(now.UnixNano())
	} else if !bad && since != 0 {
		t.noPrimaryNs.Add(now.UnixNano() - since)
		t.badSince.Store(0)
	}
	m.retired = retired
	t.setPrimary(d.state == topoPrimary)
	t.view.Store(&topoView{at: now, state: d.state, since: m.since, primary: d.primary, obs: obs, roles: d.roles, retired: retired})
	found := d.state == topoPrimary && (prevState != topoPrimary || d.primary != prevPrimary)
	// Borrowers whose dials failed meanwhile (the primary down, or the
	// address leading to a retired one) dial again once a primary is
	// found, not at the end of their back-off: after Retire below, so
	// that a dial still reaching a retired server is refused.
	defer func() {
		if found {
			s.pool.Redial()
		}
	}()
	if !changedRetired && (!found || prevPrimary == "") {
		return
	}
	t.gen.Add(1)
	if changedRetired {
		r := retired
		s.pool.Retire(func(bc *backendConn) bool { return bc.server != "" && r[bc.server] })
		if m.last != "" && r[m.last] {
			// The pool's next dial reaches a server not retired (a dial
			// that reaches a retired one is refused before it learns
			// anything): it learns that server, the new primary as a
			// rule, at once.
			s.pool.Relearn()
		}
		s.log.Warn("servers retired: connections to them are no longer lent, idle ones closed, in-use ones closed on release", "retired", setString(r))
	}
	t.hooksMu.Lock()
	hooks := slices.Clone(t.hooks)
	t.hooksMu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// addrsOf lists the addresses through which server id was seen.
func addrsOf(obs []serverObs, id serverID) string {
	var l []string
	for _, o := range obs {
		if o.id == id {
			l = append(l, o.addr)
		}
	}
	return strings.Join(l, ", ")
}

// describeObs is each server's role, for the log.
func describeObs(obs []serverObs, d decision) string {
	var l []string
	for i, o := range obs {
		x := o.addr + " " + d.roles[i].String()
		if o.err != "" && !o.reachable {
			x += " (" + o.err + ")"
		}
		l = append(l, x)
	}
	return strings.Join(l, "; ")
}

func (m *topoMonitor) warnOnce(key, msg string, args ...any) {
	m.warnedMu.Lock()
	seen := m.warned[key]
	m.warned[key] = true
	m.warnedMu.Unlock()
	if seen {
		return
	}
	m.s.log.Warn(msg, args...)
}

// updateReplicas sets each replica's state from its observation: in
// service when it replicates from the current primary (followsPrimary:
// by the source's server_id, or its address while not connected; a
// server whose replication status cannot be read gets no reads), within
// routing.max_replica_lag of the primary's position. A former primary is
// in service again only once it replicates from the new one within the
// bound. The monitor calls it after each check that has replicas.
func (s *Server) updateReplicas(cands []candidate, obs []serverObs, d decision, pobs *serverObs, now time.Time) {
	rt := s.routing
	if pobs != nil && pobs.binlogPos != nil {
		rt.mu.Lock()
		keep := 2*rt.maxLag + 2*rt.interval
		i := 0
		for i < len(rt.history) && now.Sub(rt.history[i].at) > keep {
			i++
		}
		rt.history = append(rt.history[i:], posSample{at: now, pos: pobs.binlogPos})
		rt.mu.Unlock()
	}
	seen := map[serverID]string{} // replicas' servers: the address of the first replica that reached each
	for i, c := range cands {
		r := c.replica
		if r == nil {
			continue
		}
		o := obs[i]
		st := &replicaState{}
		var follows bool
		var why string
		if pobs != nil {
			follows, why = followsPrimary(o, *pobs, obs)
		}
		first, dup := seen[o.id]
		if o.id != "" && !dup {
			seen[o.id] = c.addr
		}
		switch {
		case !o.reachable:
			st.reason = "cannot read its position: " + o.err
		case o.slavePos == nil:
			st.reason = "cannot read its position: no gtid_slave_pos: replica routing needs MariaDB's GTIDs"
		case d.roles[i] == rolePrimary:
			st.pos, st.reason = o.slavePos, "it is the primary now"
		case dup:
			// One server reached at two addresses (a replica's own and
			// one the name resolves to) gets its reads once.
			st.pos, st.reason = o.slavePos, "the same server as replica "+first+": its reads go there"
		case pobs == nil:
			st.pos, st.reason = o.slavePos, "no primary to measure its lag against ("+d.state.String()+")"
		case pobs.binlogPos == nil:
			st.pos, st.reason = o.slavePos, "cannot read the primary's position"
		case !follows:
			st.pos, st.reason = o.slavePos, why
		default:
			st.pos = o.slavePos
			var known bool
			st.lag, known = rt.lagOf(o.slavePos, now)
			st.up = known && st.lag <= rt.maxLag
			switch {
			case !known:
				st.reason = fmt.Sprintf("catching up: it lacks the oldest position holdfast has seen on the primary, %v ago (lag not known yet)", st.lag.Round(time.Millisecond))
			case !st.up:
				st.reason = fmt.Sprintf("lags %v behind the primary (routing.max_replica_lag %v)", st.lag.Round(time.Millisecond), rt.maxLag)
			}
		}
		prev := r.state.Swap(st)
		switch {
		case st.up && (prev == nil || !prev.up):
			rt.changes.Add(1)
			s.log.Info("replica in service", "replica", r.be.addr, "lag", st.lag)
		case !st.up && (prev == nil || prev.up || prev.reason != st.reason && !strings.HasPrefix(st.reason, "lags")):
			if prev != nil && prev.up {
				rt.changes.Add(1)
			}
			s.log.Warn("replica out of service: its reads go to the primary", "replica", r.be.addr, "reason", st.reason)
		}
	}
}
