package proxy

import (
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// What holdfast holds a user to beyond its password: the tags its
// statements may carry (users[].tags, refuse_other_tags) and how many of
// its clients may be connected at once (users[].max_clients); for users
// from the backend, auth.from_backend's. Without a list of tags, a tag is
// whatever the client says. The statement path checks a tag against the
// list in force (tag.go) with one atomic load when the user has none.

// codeTagRefused is the error of a statement, or a login's conn_tag
// attribute, whose tag its user may not carry (refuse_other_tags).
const codeTagRefused = 9012

// tagRules are the tags a user may carry. Immutable once published.
type tagRules struct {
	patterns []string // users[].tags
	refuse   bool     // refuse_other_tags
	dflt     string   // the user's default_tag, sanitized: always allowed
}

// allows reports whether a user held to r may carry the sanitized tag b.
func (r *tagRules) allows(b []byte) bool {
	if string(b) == r.dflt {
		return true
	}
	for _, p := range r.patterns {
		if p == string(b) || strings.IndexByte(p, '*') >= 0 && matchTag(p, string(b)) {
			return true
		}
	}
	return false
}

// userRules are one user's bounds, as the configuration in force gives
// them. Immutable once published; a reload publishes new ones.
type userRules struct {
	defaultTag string    // default_tag, as configured
	tags       *tagRules // nil: any tag, the client's word
	maxClients int       // 0: only sessions.max_clients
	setting    string    // where they are configured: "users[].max_clients" or "auth.from_backend.max_clients"
}

var anyUser = &userRules{setting: "users[].max_clients"}

func newUserRules(defaultTag string, tags []string, refuse bool, maxClients int, setting string) *userRules {
	r := &userRules{defaultTag: defaultTag, maxClients: maxClients, setting: setting}
	if len(tags) > 0 {
		var buf [attribution.MaxTagLen]byte
		d, _ := attribution.AppendSanitized(buf[:0], []byte(defaultTag))
		r.tags = &tagRules{patterns: tags, refuse: refuse, dflt: string(d)}
	}
	return r
}

// userEntry is one user's standing on this server: the bounds in force
// (swapped on reload) and its counters. An entry is made at the user's
// first login and kept: entries are bounded by the configured users and
// the backend accounts that logged in.
type userEntry struct {
	name  string
	rules atomic.Pointer[userRules] // never nil

	clients   atomic.Int64  // client connections open now, logged in as the user
	defaulted atomic.Uint64 // tags outside its list, run as untagged
	refused   atomic.Uint64 // ... refused (refuse_other_tags)
	rejected  atomic.Uint64 // logins refused at its max_clients
	lastLog   atomic.Int64  // UnixNano of the last rejection logged
}

// take counts a client of the user in, unless max_clients are open.
func (e *userEntry) take() bool {
	max := int64(e.rules.Load().maxClients)
	for {
		n := e.clients.Load()
		if max > 0 && n >= max {
			return false
		}
		if e.clients.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release counts a client of the user out (e nil: none was counted).
func (e *userEntry) release() {
	if e != nil {
		e.clients.Add(-1)
	}
}

// userTable is every userEntry, and the bounds a reload publishes.
type userTable struct {
	rejected atomic.Uint64 // logins refused at a user's max_clients, all users

	mu          sync.Mutex // guards following
	byName      map[string]*userEntry
	configured  map[string]*userRules
	fromBackend *userRules
}

// rulesForLocked is name's bounds: a configured user's, else those of
// users from the backend (as resolveUser looks a user up).
func (t *userTable) rulesForLocked(name string) *userRules {
	if r, ok := t.configured[name]; ok {
		return r
	}
	if t.fromBackend != nil {
		return t.fromBackend
	}
	return anyUser
}

// set publishes cfg's bounds, for new logins and for the open sessions'
// next statements.
func (t *userTable) set(cfg config.Config) {
	conf := make(map[string]*userRules, len(cfg.Users))
	for _, u := range cfg.Users {
		conf[u.Name] = newUserRules(u.DefaultTag, u.Tags, u.RefuseOtherTags, u.MaxClients, "users[].max_clients")
	}
	fb := cfg.Auth.FromBackend
	fromBackend := newUserRules(fb.DefaultTag, fb.Tags, fb.RefuseOtherTags, fb.MaxClients, "auth.from_backend.max_clients")
	t.mu.Lock()
	defer t.mu.Unlock()
	t.configured, t.fromBackend = conf, fromBackend
	for name, e := range t.byName {
		e.rules.Store(t.rulesForLocked(name))
	}
}

// entry is name's entry, made on first use.
func (t *userTable) entry(name string) *userEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.byName[name]; e != nil {
		return e
	}
	if t.byName == nil {
		t.byName = map[string]*userEntry{}
	}
	e := &userEntry{name: name}
	e.rules.Store(t.rulesForLocked(name))
	t.byName[name] = e
	return e
}

// UserStats is one user's standing, for metrics.
type UserStats struct {
	User    string
	Clients int64 // open now
	// TagsDefaulted counts statements (and logins' conn_tag attributes)
	// whose tag was outside the user's tags and that ran as untagged;
	// TagsRefused those refused (refuse_other_tags).
	TagsDefaulted, TagsRefused uint64
	Rejected                   uint64 // logins refused at the user's max_clients
}

// userStats returns every user that logged in since start.
func (s *Server) userStats() []UserStats {
	t := &s.userTable
	t.mu.Lock()
	es := make([]*userEntry, 0, len(t.byName))
	for _, e := range t.byName {
		es = append(es, e)
	}
	t.mu.Unlock()
	out := make([]UserStats, len(es))
	for i, e := range es {
		out[i] = UserStats{User: e.name, Clients: e.clients.Load(), TagsDefaulted: e.defaulted.Load(),
			TagsRefused: e.refused.Load(), Rejected: e.rejected.Load()}
	}
	return out
}

// admitUser counts a client of u in, once its password checked out, and
// checks its conn_tag attribute: it returns u with its entry set (the
// caller releases it when the client leaves), or the error to send.
func (s *Server) admitUser(u User, attrs map[string]string) (User, *mysqlwire.SQLError) {
	e := s.userTable.entry(u.Name)
	if !e.take() {
		e.rejected.Add(1)
		s.userTable.rejected.Add(1)
		r := e.rules.Load()
		now := time.Now().UnixNano()
		if last := e.lastLog.Load(); now-last > int64(10*time.Second) && e.lastLog.CompareAndSwap(last, now) {
			s.log.Warn("login refused: the user's max_clients are connected", "user", u.Name, "max_clients", r.maxClients, "setting", r.setting)
		}
		return u, newErr(codeConCount, "08004", "Too many connections (holdfast: user '%s' has %s = %d connected)", u.Name, r.setting, r.maxClients)
	}
	if se := s.loginTag(e, attrs); se != nil {
		e.release()
		return u, se
	}
	u.entry = e
	return u, nil
}

// loginTag checks a login's conn_tag connection attribute against its
// user's tags: outside them, the login is refused under
// refuse_other_tags, and otherwise counted (its session's untagged
// statements then run under the user's default_tag, see connTag).
func (s *Server) loginTag(e *userEntry, attrs map[string]string) *mysqlwire.SQLError {
	tr := e.rules.Load().tags
	if tr == nil {
		return nil
	}
	var buf [attribution.MaxTagLen]byte
	b, ok := attrTag(buf[:0], attrs)
	if !ok || tr.allows(b) {
		return nil
	}
	if tr.refuse {
		e.refused.Add(1)
		return newErr(codeTagRefused, "42000", "holdfast: user '%s' may not carry tag '%s' (its tags: %s); the conn_tag connection attribute was refused with the login",
			e.name, b, strings.Join(tr.patterns, ", "))
	}
	e.defaulted.Add(1)
	return nil
}

// errTagRefused is a statement's refusal under refuse_other_tags.
func errTagRefused(user string, tag []byte, tr *tagRules) *mysqlwire.SQLError {
	return newErr(codeTagRefused, "42000", "holdfast: user '%s' may not carry tag '%s' (its tags: %s); the statement was refused and nothing ran",
		user, tag, strings.Join(tr.patterns, ", "))
}
