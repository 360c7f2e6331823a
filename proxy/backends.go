package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/pool"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// backend is what holdfast knows of one backend server, and keeps for it:
// what its first connection said (its greeting's capabilities, its session
// defaults, globals and collations, its statement limit), and the
// connection kills go out on. The primary is backend.address; each of
// backend.replicas has its own (replicas.go).
type backend struct {
	addr        string                            // a replica's address ("" for the primary: backend.address)
	pool        *pool.Pool[variant, *backendConn] // its connections
	info        atomic.Pointer[backendInfo]       // from the first connection's greeting
	base        atomic.Pointer[varstate.Base]     // nil until learned (learnBackend)
	maxPrepared atomic.Int64                      // max_prepared_stmt_count; 0 until known
	killer      killer                            // sends KILL QUERY on a connection of its own
	// tls is a replica's backend.tls, loaded for its own address (the
	// primary's is Server.backendTLS).
	tls *backendTLS
	// Its leases since start: how many, how long their borrowers waited,
	// how long they were held (the per-tag split is the Recorder's).
	borrows        atomic.Uint64
	waitNs, holdNs atomic.Int64
	// byTag splits a replica's leases by tag (tag name → *tagUse; the
	// primary's split is the Recorder's). Tags are bounded by
	// attribution.max_tags (the rest fold into other).
	byTag sync.Map
}

// settings returns bs, the primary's dial settings, for this backend: a
// replica's own address and TLS.
func (be *backend) settings(bs BackendSettings) BackendSettings {
	if be.addr != "" {
		bs.Address, bs.TLS = be.addr, *be.tls
	}
	return bs
}

// tagUse is one tag's leases of one backend.
type tagUse struct {
	borrows        atomic.Uint64
	waitNs, holdNs atomic.Int64
}

// use returns the tag's counters on be (replicas only: nil for the
// primary, or without a tag).
func (be *backend) use(tag *attribution.Tag) *tagUse {
	if be.addr == "" || tag == nil {
		return nil
	}
	name := tag.Name()
	if u, ok := be.byTag.Load(name); ok {
		return u.(*tagUse)
	}
	u, _ := be.byTag.LoadOrStore(name, &tagUse{})
	return u.(*tagUse)
}
