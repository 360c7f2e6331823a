package proxy

import (
	"slices"
	"strings"
)

// The topology: which of the servers holdfast may reach is the primary,
// as the HA tool (MaxScale, orchestrator, an operator, a cloud's Multi-AZ)
// has arranged them. holdfast follows it and never changes it.
//
// The candidates are the addresses backend.address resolves to (resolved
// again at every check: a name the switchover moves) and
// backend.replicas. Every routing.check_interval each is asked, in one
// round trip on a connection of holdfast's own account kept open between
// checks, for @@read_only, @@innodb_read_only, its identity (@@hostname,
// @@port, @@server_id), its GTID positions, and whom it replicates from
// (SHOW ALL SLAVES STATUS on MariaDB, which needs SLAVE MONITOR; SHOW
// REPLICA STATUS on MySQL, REPLICATION CLIENT). decide makes the roles of
// one check's observations; retireAfter says which servers the primary's
// pool must no longer use. Both are pure (topology_test.go tests them by
// table); topologymon.go runs the checks and applies the result.
//
// The primary is the one writable server that replicates from no one. A
// server that turns read-only stops being the primary at that check, before
// any name moves; two writable servers that replicate from no one are a
// split brain, and holdfast uses neither. Connections are matched to
// servers by identity (serverID), read at every dial, because a VIP or a
// relay keeps its address while the server behind it changes.

// serverID names one server: @@hostname, @@port and @@server_id, as
// "host:port#id" ("" when not known). The same server reached through
// different addresses (a VIP and its own) has one serverID.
type serverID string

// serverIDOf builds a serverID from the values of hostname, port and
// server_id ("" when any is missing).
func serverIDOf(vars map[string]string) serverID {
	h, p, id := vars["hostname"], vars["port"], vars["server_id"]
	if h == "" || p == "" || id == "" {
		return ""
	}
	return serverID(h + ":" + p + "#" + id)
}

// serverObs is what one check saw of one candidate address.
type serverObs struct {
	addr      string // the address checked
	fromName  bool   // one of backend.address's addresses (else a replica's)
	reachable bool
	err       string // why it is not reachable, or what could not be read
	id        serverID
	serverNum string // @@server_id
	readOnly  bool   // @@read_only or @@innodb_read_only
	// replKnown says whether the replication status could be read (the
	// account may lack SLAVE MONITOR / REPLICATION CLIENT); replicating
	// whether a replication thread runs (IO Yes or Connecting, SQL Yes);
	// source the server_id and host:port of the source of the first that
	// does ("" when unknown); sourceLinked whether that one's IO thread is
	// connected to its source (IO Yes: then sourceNum is the server_id of
	// the server it is connected to, not one it was connected to before).
	replKnown    bool
	replicating  bool
	sourceLinked bool
	sourceNum    string
	sourceAddr   string
	// GTID positions (MariaDB), nil when unreadable.
	binlogPos, slavePos gtidPos
}

// role is what a server is in the topology.
type role uint8

const (
	roleUnknown     role = iota // not checked yet
	roleUnreachable             // the check could not read it
	rolePrimary                 // the one writable server that replicates from no one
	roleReplica                 // a replication thread runs
	roleReadOnly                // read-only and replicating from no one (a demoted primary)
	roleSplit                   // writable, replicating from no one, beside another such
	numRoles
)

var roleNames = [numRoles]string{"unknown", "unreachable", "primary", "replica", "read_only", "split_brain"}

func (r role) String() string { return roleNames[r] }

// topoState is the topology's state as a whole.
type topoState uint8

const (
	topoUnknown    topoState = iota // not checked yet
	topoPrimary                     // exactly one primary
	topoNoPrimary                   // no writable server (a switchover under way, or the primary down)
	topoSplitBrain                  // more than one writable server replicating from no one
	numTopoStates
)

var topoStateNames = [numTopoStates]string{"unknown", "primary", "no_primary", "split_brain"}

func (s topoState) String() string { return topoStateNames[s] }

// decision is what one check's observations make of the topology.
type decision struct {
	state   topoState
	primary serverID   // when state is topoPrimary
	roles   []role     // by observation
	writers []serverID // the writable servers replicating from no one, sorted
}

// decide gives each observation its role and the topology its state. A
// server seen through several addresses counts once. A server whose
// replication status cannot be read is taken to replicate from no one.
func decide(obs []serverObs) decision {
	d := decision{roles: make([]role, len(obs))}
	if len(obs) == 0 {
		return d
	}
	for i, o := range obs {
		switch {
		case !o.reachable || o.id == "":
			d.roles[i] = roleUnreachable
		case o.replKnown && o.replicating:
			d.roles[i] = roleReplica
		case o.readOnly:
			d.roles[i] = roleReadOnly
		default:
			if !slices.Contains(d.writers, o.id) {
				d.writers = append(d.writers, o.id)
			}
		}
	}
	slices.Sort(d.writers)
	switch len(d.writers) {
	case 0:
		d.state = topoNoPrimary
	case 1:
		d.state, d.primary = topoPrimary, d.writers[0]
	default:
		d.state = topoSplitBrain
	}
	for i, o := range obs {
		if d.roles[i] != roleUnknown {
			continue
		}
		if d.state == topoPrimary {
			d.roles[i] = rolePrimary
		} else if o.reachable {
			d.roles[i] = roleSplit
		}
	}
	return d
}

// retireAfter returns the servers the primary's pool must no longer use
// after decision d (a new set; prev is not changed). prev is the set
// before it, last the primary before it ("" when none was known yet):
//
//   - with a primary P, every other server seen, and the former primary,
//     are retired, and P is not (a primary that comes back is used again);
//   - with no primary, the former primary is retired once it is seen
//     read-only or replicating (not while it is merely unreachable: its
//     connections fail by themselves, and it may come back as it was);
//   - in a split brain, every writable server is retired (and the former
//     primary as with no primary);
//   - a server once retired stays retired until it is the primary.
func retireAfter(prev map[serverID]bool, last serverID, d decision, obs []serverObs) map[serverID]bool {
	next := make(map[serverID]bool, len(prev)+2)
	for id := range prev {
		next[id] = true
	}
	demoted := func() bool { // the former primary is seen read-only or replicating
		for i, o := range obs {
			if o.id == last && last != "" && (d.roles[i] == roleReadOnly || d.roles[i] == roleReplica) {
				return true
			}
		}
		return false
	}
	switch d.state {
	case topoPrimary:
		for _, o := range obs {
			if o.reachable && o.id != "" {
				next[o.id] = true
			}
		}
		if last != "" {
			next[last] = true
		}
		delete(next, d.primary)
	case topoNoPrimary:
		if demoted() {
			next[last] = true
		}
	case topoSplitBrain:
		for _, id := range d.writers {
			next[id] = true
		}
		if demoted() {
			next[last] = true
		}
	}
	return next
}

// sameSet reports whether a and b hold the same servers.
func sameSet(a, b map[serverID]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for id := range a {
		if !b[id] {
			return false
		}
	}
	return true
}

// setString lists a set's servers, sorted, comma-separated.
func setString(m map[serverID]bool) string {
	l := make([]string, 0, len(m))
	for id := range m {
		l = append(l, string(id))
	}
	slices.Sort(l)
	return strings.Join(l, ", ")
}

// followsPrimary reports whether o, a replica's observation, replicates
// from the primary p (the observation decide made the primary), judged by
// identity: while o's IO thread is connected, the server_id it read from
// its source (Master_Server_Id) must be p's @@server_id; while it is not
// connected (Connecting: that server_id may be a former source's, or 0),
// the source's configured host:port must be an address the check reached
// p at, or p's own @@hostname:@@port. A server whose replication status
// cannot be read, that replicates from no one, or from another server (a
// retired primary, another replica), does not. why says why not (""
// when it does). updateReplicas calls it for every replica at every check.
func followsPrimary(o serverObs, p serverObs, obs []serverObs) (ok bool, why string) {
	switch {
	case !o.replKnown:
		return false, "cannot read whom it replicates from: grant holdfast's account SLAVE MONITOR (MariaDB) or REPLICATION CLIENT (MySQL)"
	case !o.replicating:
		return false, "it replicates from no one"
	case o.sourceLinked && o.sourceNum != "":
		if o.sourceNum == p.serverNum {
			return true, ""
		}
		return false, "it replicates from server_id " + o.sourceNum + " (" + o.sourceAddr + "), not from the primary (server_id " + p.serverNum + ")"
	}
	if o.sourceAddr != "" {
		if own := ownAddr(p.id); own != "" && strings.EqualFold(own, o.sourceAddr) {
			return true, ""
		}
		for _, x := range obs {
			if x.id == p.id && x.reachable && strings.EqualFold(x.addr, o.sourceAddr) {
				return true, ""
			}
		}
	}
	src := o.sourceAddr
	if src == "" {
		src = "an unknown source"
	}
	return false, "it is not connected to its source, " + src + ", and that is not an address of the primary"
}

// ownAddr is the @@hostname:@@port part of a serverID ("" when none).
func ownAddr(id serverID) string {
	s := string(id)
	if i := strings.LastIndexByte(s, '#'); i >= 0 {
		return s[:i]
	}
	return ""
}
