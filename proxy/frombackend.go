package proxy

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Users from the backend (auth.from_backend). A client user that
// config.yaml does not list is checked against the backend's own account
// table, read with a dedicated lookup account and cached for
// auth.from_backend.cache_ttl. For mysql_native_password the server keeps
// SHA1(SHA1(password)): enough to check a client's scramble, and the
// scramble then yields SHA1(password), with which holdfast logs in to the
// backend as that user (see User.verify and dialConn). Only that plugin is
// covered; an account with any other (unix_socket, ed25519, a MySQL
// caching_sha2_password account, several methods), with no password, an
// invalid stored credential, locked, with its password expired, or a role,
// is refused: never taken for "no password". The account is the one
// MariaDB would pick for the client's address: the most specific host
// pattern matching it.

// storedAccount is one row of the backend's account table for a user.
type storedAccount struct {
	host, plugin, auth               string
	locked, expired, several, isRole bool
}

// backendUsers reads accounts from the backend and caches them.
type backendUsers struct {
	// look is one slot, taken while a lookup runs (I/O); it guards bc and
	// bcAs. A lookup waits for it within the same bound as its query.
	look chan struct{}
	bc   *backendConn // the lookup account's connection, kept between lookups
	bcAs string       // who bc is logged in as ("user\x00password")

	mu    sync.Mutex // guards cache and look's creation
	cache map[string]cachedAccounts
}

// slot returns the lookup slot.
func (b *backendUsers) slot() chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.look == nil {
		b.look = make(chan struct{}, 1)
	}
	return b.look
}

type cachedAccounts struct {
	rows []storedAccount // none: no such user
	at   time.Time
}

const maxCachedUsers = 10000

// lookup returns SHA1(SHA1(password)) of the account the backend would
// pick for name at ip, or why nobody may log in as name from there.
func (b *backendUsers) lookup(s *Server, name string, ip net.IP) (hash2 []byte, why string, err error) {
	rows, err := b.rows(s, name)
	if err != nil {
		return nil, "", err
	}
	if len(rows) == 0 {
		return nil, "unknown user", nil
	}
	row, ok := pickAccount(rows, ip)
	if !ok {
		return nil, "no backend account of this user matches the client's address", nil
	}
	return row.credential()
}

// credential is the row's SHA1(SHA1(password)), or why it cannot be used.
func (a storedAccount) credential() ([]byte, string, error) {
	switch {
	case a.isRole:
		return nil, "a role, not a user", nil
	case a.locked:
		return nil, "account locked", nil
	case a.expired:
		return nil, "password expired", nil
	case a.several:
		return nil, "account with several authentication methods (IDENTIFIED VIA ... OR ...)", nil
	case a.plugin != pluginNative:
		return nil, fmt.Sprintf("authentication plugin %q (only mysql_native_password accounts log in through auth.from_backend)", a.plugin), nil
	case a.auth == "":
		return nil, "account without a password (never accepted through auth.from_backend)", nil
	}
	h, err := hex.DecodeString(strings.TrimPrefix(a.auth, "*"))
	if len(a.auth) != 41 || a.auth[0] != '*' || err != nil {
		return nil, "invalid stored credential", nil
	}
	return h, "", nil
}

// rows returns name's accounts, from the cache while fresh.
func (b *backendUsers) rows(s *Server, name string) ([]storedAccount, error) {
	ttl := s.config().Auth.FromBackend.CacheTTL
	if rows, ok := b.cached(name, ttl); ok {
		return rows, nil
	}
	// One bound for the whole lookup: the wait for another to finish, the
	// dial and the query.
	ctx, cancel := context.WithTimeout(s.ctx, s.config().Backend.ExchangeTimeout)
	defer cancel()
	look := b.slot()
	select {
	case look <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("proxy: read the backend's accounts (auth.from_backend): waiting for another lookup: %w", context.Cause(ctx))
	}
	defer func() { <-look }()
	if rows, ok := b.cached(name, ttl); ok { // read meanwhile
		return rows, nil
	}
	rows, err := b.read(ctx, s, name)
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.cache == nil {
		b.cache = map[string]cachedAccounts{}
	}
	if len(b.cache) >= maxCachedUsers {
		now := time.Now()
		for k, c := range b.cache {
			if now.Sub(c.at) > ttl || len(b.cache) >= maxCachedUsers {
				delete(b.cache, k)
			}
		}
	}
	b.cache[name] = cachedAccounts{rows: rows, at: time.Now()}
	b.mu.Unlock()
	return rows, nil
}

func (b *backendUsers) cached(name string, ttl time.Duration) ([]storedAccount, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.cache[name]
	if !ok || time.Since(c.at) > ttl {
		return nil, false
	}
	return c.rows, true
}

// The account table: MariaDB 10.4+ keeps it in mysql.global_priv (the
// mysql.user view does not show whether an account is locked); MySQL 8 in
// mysql.user (not tested here: no MySQL server to test against), which is
// asked first when the greeting says MySQL. Both
// queries give host, plugin, authentication string, locked, expired,
// several methods, role. (MariaDB's JSON_VALUE reads a JSON true as "1".)
const (
	accountsQueryMariaDB = "SELECT Host, JSON_VALUE(Priv, '$.plugin'), JSON_VALUE(Priv, '$.authentication_string'), " +
		"IFNULL(JSON_VALUE(Priv, '$.account_locked'), '') IN ('1', 'true'), IFNULL(JSON_VALUE(Priv, '$.password_last_changed'), '') = '0', " +
		"JSON_EXISTS(Priv, '$.auth_or'), IFNULL(JSON_VALUE(Priv, '$.is_role'), '') IN ('1', 'true') " +
		"FROM mysql.global_priv WHERE User = CONVERT(X'%x' USING utf8mb4)"
	accountsQueryMySQL = "SELECT Host, plugin, authentication_string, account_locked = 'Y', password_expired = 'Y', 0, 0 " +
		"FROM mysql.user WHERE User = CONVERT(X'%x' USING utf8mb4)"
)

// read asks the backend for name's accounts, on the lookup account's
// connection (dialed, or redialed once after an I/O error), within ctx.
// The lookup slot is held.
func (b *backendUsers) read(ctx context.Context, s *Server, name string) ([]storedAccount, error) {
	fb := s.config().Auth.FromBackend
	bs := s.backendSettings()
	bs.User, bs.Password, bs.Database = fb.LookupUser, fb.LookupPassword, "" // it may read nothing else
	as := bs.User + "\x00" + bs.Password
	var res *textResult
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if b.bc != nil && b.bcAs != as {
			b.bc.close()
			b.bc = nil
		}
		if b.bc == nil {
			if b.bc, err = dialBackend(ctx, bs, 0); err != nil {
				b.bc = nil
				return nil, fmt.Errorf("proxy: auth.from_backend.lookup_user: %w", err)
			}
			b.bcAs = as
		}
		if b.bc.info.mariaDB {
			res, err = b.bc.query(ctx, fmt.Sprintf(accountsQueryMariaDB, name))
		}
		// MySQL, or a MariaDB before 10.4 (no mysql.global_priv).
		if se := (*mysqlwire.SQLError)(nil); !b.bc.info.mariaDB || errors.As(err, &se) && se.Code == 1146 {
			res, err = b.bc.query(ctx, fmt.Sprintf(accountsQueryMySQL, name))
		}
		if !isIOError(err) {
			break
		}
		b.bc.close()
		b.bc = nil
	}
	if err != nil {
		return nil, fmt.Errorf("proxy: read the backend's accounts (auth.from_backend): %w", err)
	}
	rows := make([]storedAccount, 0, len(res.rows))
	for _, r := range res.rows {
		if len(r) != 7 {
			return nil, fmt.Errorf("proxy: read the backend's accounts: %d columns", len(r))
		}
		rows = append(rows, storedAccount{host: string(r[0]), plugin: string(r[1]), auth: string(r[2]),
			locked: string(r[3]) == "1", expired: string(r[4]) == "1", several: string(r[5]) == "1", isRole: string(r[6]) == "1"})
	}
	return rows, nil
}

// forget drops the cache (a reload may have changed who may look up).
func (b *backendUsers) forget() {
	b.mu.Lock()
	b.cache = nil
	b.mu.Unlock()
}

// close closes the lookup connection (at shutdown).
func (b *backendUsers) close() {
	look := b.slot()
	look <- struct{}{} // a running lookup is bounded
	defer func() { <-look }()
	if b.bc != nil {
		b.bc.close()
		b.bc = nil
	}
}

// pickAccount returns the row MariaDB would pick for a client at ip: the
// most specific host pattern that matches it.
func pickAccount(rows []storedAccount, ip net.IP) (storedAccount, bool) {
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b storedAccount) int { return hostSort(b.host) - hostSort(a.host) })
	for _, r := range rows {
		if hostMatches(r.host, ip) {
			return r, true
		}
	}
	return storedAccount{}, false
}

// hostSort ranks a host pattern as MariaDB's ACL does (get_sort): higher
// is more specific. A pattern without wildcards is 128; one whose first
// wildcard is at position i, i+2 (at most 127); "%" alone 1; empty 0.
func hostSort(p string) int {
	chars := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i+1 < len(p) {
				i++
			}
		case '%', '_':
			pos := i + 1
			if !(pos == 1 && p == "%") {
				pos++
			}
			return min(pos, 127)
		}
		chars = 128
	}
	return chars
}

// hostMatches reports whether host pattern p matches a client at ip.
// holdfast knows the client's address, not a name for it: a pattern
// matches the address as written (with % and _ wildcards, or an
// address/netmask pair), and "localhost" a loopback address; other host
// names match nothing.
func hostMatches(p string, ip net.IP) bool {
	if ip == nil {
		return false
	}
	if p == "" {
		p = "%" // an account for any host
	}
	if strings.EqualFold(p, "localhost") {
		return ip.IsLoopback()
	}
	if addr, mask, ok := strings.Cut(p, "/"); ok {
		a, m := net.ParseIP(addr).To4(), net.ParseIP(mask).To4()
		c := ip.To4()
		if a == nil || m == nil || c == nil {
			return false
		}
		for i := range c {
			if c[i]&m[i] != a[i] {
				return false
			}
		}
		return true
	}
	return wildMatch(strings.ToLower(p), strings.ToLower(ip.String()))
}

// wildMatch matches s against a LIKE pattern: % any run, _ any one
// character, \ quotes the next.
func wildMatch(p, s string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '%':
			for len(p) > 0 && p[0] == '%' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if wildMatch(p, s[i:]) {
					return true
				}
			}
			return false
		case '_':
			if s == "" {
				return false
			}
		case '\\':
			if len(p) > 1 {
				p = p[1:]
			}
			fallthrough
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return s == ""
}
