package proxy

import (
	"math"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Backend prepared statements are a resource of the whole database server:
// max_prepared_stmt_count (16,382 by default) counts every connection's,
// holdfast's and everyone else's, and past it every prepare fails with
// 1461. So each backend connection keeps at most a share of it (see
// Server.stmtConfig), statements that no client holds any more are the
// first to go when room is needed, and a 1461 makes holdfast give back
// what it can and try once more.

// codeTooManyStmts is the server's "Can't create more than
// max_prepared_stmt_count statements".
const codeTooManyStmts = 1461

// stmtConfig is what prepareOn needs to know of the server.
type stmtConfig struct {
	size    int                   // statements per backend connection
	held    func(key string) bool // whether a client holds a statement
	count   *atomic.Int64         // statements open on backends, all connections
	retried *atomic.Uint64        // prepares retried after 1461
}

// stmtConfig returns the prepared-statement limits in force: at most
// sessions.statement_cache per connection, and together, over pool.max
// connections, at most sessions.prepared_statement_share of the server's
// max_prepared_stmt_count divided among the holdfast instances
// (Server.instances).
func (s *Server) stmtConfig() stmtConfig {
	return stmtConfig{size: s.stmtCacheSize(), held: s.stmtRefs.held, count: &s.backendStmts, retried: &s.stmtRetries}
}

func (s *Server) stmtCacheSize() int {
	cfg := s.config()
	n := cfg.Sessions.StatementCache
	if budget := s.stmtBudget(); budget > 0 {
		n = min(n, max(1, budget/cfg.Pool.Max))
	}
	return n
}

// stmtBudget is how many backend statements this instance may keep open
// together (0: unknown until the backend's max_prepared_stmt_count is).
func (s *Server) stmtBudget() int {
	limit := s.primary.maxPrepared.Load()
	if limit <= 0 {
		return 0
	}
	cfg := s.config()
	return max(1, int(math.Floor(float64(limit)*cfg.Sessions.PreparedStatementShare/float64(s.instances()))))
}

// stmtRefs counts the client statements that hold each backend statement
// key (database and text).
type stmtRefs struct {
	mu sync.Mutex // guards m
	m  map[string]int
}

func (r *stmtRefs) add(key string) {
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string]int{}
	}
	r.m[key]++
	r.mu.Unlock()
}

func (r *stmtRefs) drop(key string) {
	r.mu.Lock()
	if n := r.m[key]; n <= 1 {
		delete(r.m, key)
	} else {
		r.m[key] = n - 1
	}
	r.mu.Unlock()
}

func (r *stmtRefs) held(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[key] > 0
}

// stmtCache is one backend connection's prepared statements, by key, most
// recently used last. Evicted statements wait in toClose until their
// COM_STMT_CLOSE goes out with the next command.
type stmtCache struct {
	lru     *simplelru.LRU[string, *backendStmt]
	toClose []uint32
	count   *atomic.Int64 // the server's gauge of open backend statements
}

func newStmtCache(count *atomic.Int64) *stmtCache {
	c := &stmtCache{count: count}
	// Size is managed by makeRoom; the LRU itself never evicts.
	c.lru, _ = simplelru.NewLRU[string, *backendStmt](math.MaxInt32, nil)
	return c
}

func (c *stmtCache) add(key string, bs *backendStmt) {
	c.lru.Add(key, bs)
	c.count.Add(1)
}

// makeRoom evicts statements until at most keep remain, the least
// recently used of those no client holds (held) first, then the least
// recently used of the rest (when held is nil, any). It returns how many
// it evicted.
func (c *stmtCache) makeRoom(keep int, held func(string) bool) int {
	n := 0
	if held != nil && c.lru.Len() > keep {
		for _, k := range c.lru.Keys() { // oldest first
			if c.lru.Len() <= keep {
				break
			}
			if !held(k) {
				c.evict(k)
				n++
			}
		}
	}
	for c.lru.Len() > keep {
		k, _, _ := c.lru.GetOldest()
		c.evict(k)
		n++
	}
	return n
}

// evictUnheld evicts every statement no client holds, and returns how
// many.
func (c *stmtCache) evictUnheld(held func(string) bool) int {
	n := 0
	for _, k := range c.lru.Keys() {
		if !held(k) {
			c.evict(k)
			n++
		}
	}
	return n
}

func (c *stmtCache) evict(key string) {
	if bs, ok := c.lru.Peek(key); ok {
		c.toClose = append(c.toClose, bs.id)
		c.lru.Remove(key)
	}
}

// forget drops every statement without closing it (the connection was
// reset or closed, which closed them on the server).
func (c *stmtCache) forget() {
	if c == nil {
		return
	}
	c.count.Add(-int64(c.lru.Len() + len(c.toClose)))
	c.lru.Purge()
	c.toClose = c.toClose[:0]
}
