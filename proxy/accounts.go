package proxy

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/pool"
)

// Backend accounts. Every backend connection is logged in as one account,
// and the pool keeps connections of different accounts apart: the account
// is part of the pool key (see variant), so a session only ever uses
// connections of its own user's account, all under the one pool.max, and a
// connection returned by one account may be closed to make room for
// another's (a swap). Id 0 is the service account, backend.user: clients
// without an account of their own and the pool's minimum. Other accounts
// are holdfast's own (fleet.user, else backend.user under an id of its
// own: the engine's borrows, whose connections open in the schema of
// holdfast's tables; kills and replica checks dial it too), configured
// users' backend_user, and accounts learned when a client logs in with its
// backend password (auth.from_backend); each gets an id, never reused
// while holdfast runs.

// account is one backend login. Values are never changed once published:
// a change replaces the pointer.
type account struct {
	user     string
	password string
	hash     []byte // SHA1(password) instead of password (a learned account)
	limits   pool.KeyLimits
}

// accountName tells configured accounts from learned ones and from
// holdfast's own of the same name (their credentials come from different
// places, and holdfast's own connections open in another database).
type accountName struct {
	user    string
	learned bool
	own     bool
}

// accounts is the registry of backend accounts.
type accounts struct {
	mu   sync.Mutex // guards the fields below
	ids  map[accountName]uint32
	byID map[uint32]*account
	keys map[variant]bool // pool keys sessions used (see useKey)
	next uint32

	// own is the id of holdfast's own account, set by New before anything
	// runs and never changed (fleet.user is read at start-up).
	own uint32
	// tables is the schema of holdfast's tables (SetTablesSchema); nil:
	// backend.database.
	tables atomic.Pointer[string]
}

// maxAccounts bounds account ids to what a variant carries.
const maxAccounts = 1<<24 - 1

func (a *accounts) get(id uint32) *account {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.byID[id]
}

// put registers (or updates) an account and returns its id.
func (a *accounts) put(name accountName, acc *account) (uint32, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.ids == nil {
		a.ids, a.byID, a.keys = map[accountName]uint32{}, map[uint32]*account{}, map[variant]bool{}
	}
	id, ok := a.ids[name]
	if !ok {
		if a.next == maxAccounts {
			return 0, fmt.Errorf("proxy: more than %d backend accounts", maxAccounts)
		}
		a.next++
		id = a.next
		a.ids[name] = id
	}
	a.byID[id] = acc
	return id, nil
}

// note records that a session uses key v, and reports whether the pool's
// limits must now name it (a key of an account with limits, first seen).
func (a *accounts) note(v variant) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.keys[v] {
		return false
	}
	acc := a.byID[v.account()]
	if acc == nil || acc.limits == (pool.KeyLimits{}) {
		return false
	}
	a.keys[v] = true
	return true
}

// keyLimits are the per-key limits of the keys sessions used.
func (a *accounts) keyLimits() map[variant]pool.KeyLimits {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := map[variant]pool.KeyLimits{}
	for v := range a.keys {
		if acc := a.byID[v.account()]; acc != nil && acc.limits != (pool.KeyLimits{}) {
			m[v] = acc.limits
		}
	}
	return m
}

// setUsers installs cfg's users, registering their backend accounts.
func (s *Server) setUsers(cfg config.Config) error {
	us := make([]User, 0, len(cfg.Users))
	for _, u := range cfg.Users {
		x := User{Name: u.Name, Password: u.Password, AuthPlugin: u.AuthPlugin, Admin: u.Admin, DefaultTag: u.DefaultTag}
		if u.BackendUser != "" {
			id, err := s.accts.put(accountName{user: u.BackendUser}, &account{user: u.BackendUser, password: u.BackendPassword,
				limits: pool.KeyLimits{Min: u.BackendPool.Min, Max: u.BackendPool.Max}})
			if err != nil {
				return err
			}
			x.account = id
		}
		us = append(us, x)
	}
	s.users.set(us)
	return nil
}

// setOwnAccount registers holdfast's own account (config.Own): New calls
// it once.
func (s *Server) setOwnAccount(cfg config.Config) error {
	user, password := cfg.Own()
	id, err := s.accts.put(accountName{user: user, own: true}, &account{user: user, password: password})
	s.accts.own = id
	return err
}

// SetTablesSchema names the schema that holds holdfast's own tables: the
// engine's borrows (BorrowEngine) get connections whose current database
// it is, a connection lent before a change included once it is borrowed
// again. Until it is called, it is backend.database. Safe at any time.
func (s *Server) SetTablesSchema(schema string) { s.accts.tables.Store(&schema) }

// TablesSchema is the schema SetTablesSchema named, or backend.database.
func (s *Server) TablesSchema() string {
	if p := s.accts.tables.Load(); p != nil {
		return *p
	}
	return s.config().Backend.Database
}

// ownSettings is how holdfast's own connections that need no database
// (kills, replica checks) reach the backend: as holdfast's own account,
// with no current database.
func (s *Server) ownSettings() BackendSettings {
	bs := s.backendSettings()
	if acc := s.accts.get(s.accts.own); acc != nil {
		bs.User, bs.Password = acc.user, acc.password
	}
	bs.Database = ""
	return bs
}

// noteKillRefused logs a kill the backend refused for want of a
// privilege: holdfast's own account may not end other accounts'
// statements.
func (s *Server) noteKillRefused(err error, thread uint32) {
	var se *mysqlwire.SQLError
	if !errors.As(err, &se) || (se.Code != codeKillDenied && se.Code != codeSpecificAccessDenied) {
		return
	}
	user, _ := s.config().Own()
	s.log.Warn("the backend refused holdfast's KILL QUERY: its account may not end other accounts' statements; grant it CONNECTION ADMIN (MySQL 8: CONNECTION_ADMIN), see holdfast migrate -print-grants",
		"account", user, "backend_thread", thread, "err", se.Msg)
}

// codeSpecificAccessDenied is ER_SPECIFIC_ACCESS_DENIED_ERROR: a
// statement needs a privilege the account lacks.
const codeSpecificAccessDenied = 1227

// learnAccount registers the backend account of a user who logged in with
// its backend password (auth.from_backend); hash is SHA1(password).
func (s *Server) learnAccount(user string, hash []byte) (uint32, error) {
	return s.accts.put(accountName{user: user, learned: true}, &account{user: user, hash: hash,
		limits: pool.KeyLimits{Max: s.config().Auth.FromBackend.BackendPoolMax}})
}

// useKey is called when a session starts using pool key v: the first time
// a key of an account with limits is seen, the pool learns its limits.
func (s *Server) useKey(v variant) {
	if v.account() != 0 && s.accts.note(v) {
		if err := s.applyLimits(); err != nil {
			s.log.Warn("could not apply a backend account's pool limits", "err", err)
		}
	}
}

// applyLimits gives the pool the configured limits and the per-key limits
// of the accounts in use.
func (s *Server) applyLimits() error {
	s.limitsMu.Lock()
	defer s.limitsMu.Unlock()
	l := limitsFrom(s.config().Pool)
	l.Keys = s.accts.keyLimits()
	if err := s.pool.SetLimits(l); err != nil {
		return err
	}
	if s.routing != nil {
		for _, r := range s.routing.replicas {
			if err := r.be.pool.SetLimits(replicaLimits(s.config().Pool, r.max)); err != nil {
				return err
			}
		}
	}
	return nil
}

// dialSettings is how to open a connection of key v: as v's account.
func (s *Server) dialSettings(v variant) (BackendSettings, error) {
	bs := s.backendSettings()
	if id := v.account(); id != 0 {
		acc := s.accts.get(id)
		if acc == nil {
			return bs, fmt.Errorf("proxy: no backend account %d", id)
		}
		bs.User, bs.Password, bs.PasswordHash = acc.user, acc.password, acc.hash
		if id == s.accts.own {
			bs.Database = s.TablesSchema()
		}
	}
	return bs, nil
}
