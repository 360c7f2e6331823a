package proxy

import (
	"crypto/sha1"
	"crypto/subtle"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// Logins: who a client logging in (or sending COM_CHANGE_USER) is, and
// what a failed attempt costs. Both paths run the same steps: wait out the
// delay earlier failures for this user and address imposed, resolve the
// user (a configured one, else with auth.from_backend the backend's own
// account), check the scramble, and record the outcome.

// errLoginRefused is an attempt refused unchecked: too many attempts for
// one user and address are already waiting their turn.
var errLoginRefused = errors.New("proxy: login refused: attempts for this user and address already queued")

// loginKey is what failed logins are counted by: the user and the
// client's address (not its port).
func loginKey(user string, remote net.Addr) string {
	return user + "\x00" + remoteIP(remote).String()
}

// remoteIP is the client's IP address (nil when remote has none).
func remoteIP(remote net.Addr) net.IP {
	if ta, ok := remote.(*net.TCPAddr); ok {
		return ta.IP
	}
	if remote != nil {
		if h, _, err := net.SplitHostPort(remote.String()); err == nil {
			return net.ParseIP(h)
		}
	}
	return nil
}

// loginWait waits, when earlier failures for key ask for it, before an
// attempt's password is checked: attempts for a key that failed are
// checked one per delay, however many arrive at once, and an attempt whose
// turn would come later than auth.max_failure_delay is refused unchecked
// (errLoginRefused). release, when not nil, gives up the caller's
// handshake slot first, so that waiting logins never keep other clients'
// logins waiting.
func (s *Server) loginWait(key string, release func()) error {
	a := s.config().Auth
	d := s.logins.turn(key, time.Now(), a.FailureDelay, a.MaxFailureDelay)
	if d <= 0 {
		return nil
	}
	if d > a.MaxFailureDelay {
		return errLoginRefused
	}
	if release != nil {
		release()
	}
	s.logins.waiting.Add(1)
	defer s.logins.waiting.Add(-1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.ctx.Done():
		return errors.New("proxy: shutting down")
	}
}

// resolveUser finds who name is: a configured user, else (with
// auth.from_backend) the backend account MariaDB would pick for the
// client's address. When nobody may log in as name, why says why (for the
// log only); u then checks against a random password, so that the answer
// is the same as for a wrong one. se is the error to send when the
// backend could not be asked.
func (s *Server) resolveUser(name string, remote net.Addr) (u User, why string, se *mysqlwire.SQLError) {
	if u, ok := s.users.get(name); ok {
		return u, "", nil
	}
	unknown := User{Name: name, Password: unknownUserPassword, AuthPlugin: pluginNative}
	cfg := s.config()
	fb := cfg.Auth.FromBackend
	switch {
	case !fb.Enabled:
		return unknown, "unknown user", nil
	case name == fb.LookupUser || name == cfg.Backend.User:
		return unknown, "holdfast's own backend account (backend.user, auth.from_backend.lookup_user) is not for clients", nil
	}
	hash2, why, err := s.beUsers.lookup(s, name, remoteIP(remote))
	if err != nil {
		return unknown, "", newErr(codeConnectFailed, "HY000", "holdfast: could not check user '%s' against the backend: %v", name, err)
	}
	if why != "" {
		return unknown, why, nil
	}
	return User{Name: name, AuthPlugin: pluginNative, hash2: hash2}, "", nil
}

// verify checks a client's scramble resp of salt for u. For a user known
// by the backend's SHA1(SHA1(password)), it also returns SHA1(password),
// recovered from the scramble, with which holdfast logs in to the backend
// as that user.
func (u User) verify(salt, resp []byte) (hash1 []byte, ok bool) {
	if u.hash2 == nil {
		return nil, checkScramble(u.AuthPlugin, u.Password, salt, resp)
	}
	// resp = SHA1(pw) XOR SHA1(salt + SHA1(SHA1(pw))).
	if len(resp) != sha1.Size {
		return nil, false
	}
	h := sha1.New()
	h.Write(salt)
	h.Write(u.hash2)
	x := h.Sum(nil)
	for i := range x {
		x[i] ^= resp[i]
	}
	h2 := sha1.Sum(x)
	if subtle.ConstantTimeCompare(h2[:], u.hash2) != 1 {
		return nil, false
	}
	return x, true
}

// loginDone records a login's outcome (why, from resolveUser, is empty
// for a user who may log in): a success clears the address's
// failures (and registers a from_backend user's backend account); a
// failure is counted, delays the next attempt and is logged, without any
// secret, at most once per power of two of consecutive failures. It returns
// the user as the session has it, or the error to send.
func (s *Server) loginDone(u User, why string, hash1 []byte, ok bool, remote net.Addr, withPassword bool) (User, *mysqlwire.SQLError) {
	key := loginKey(u.Name, remote)
	if ok && why == "" {
		s.logins.succeeded(key)
		if u.hash2 != nil {
			id, err := s.learnAccount(u.Name, hash1)
			if err != nil {
				return u, newErr(codeConnectFailed, "HY000", "holdfast: %v", err)
			}
			u.account, u.hash2 = id, nil
		}
		return u, nil
	}
	if why == "" {
		why = "wrong password"
	}
	s.logins.failures.Add(1)
	n, next := s.logins.failed(key, time.Now(), s.config().Auth.FailureDelay, s.config().Auth.MaxFailureDelay)
	if n&(n-1) == 0 {
		s.log.Info("login failed", "user", u.Name, "client", remoteIP(remote).String(), "reason", why,
			"consecutive_failures", n, "next_attempt_delay", next)
	}
	return u, accessDenied(u.Name, remote, withPassword)
}

// loginRefused answers an attempt refused unchecked (errLoginRefused).
func (s *Server) loginRefused(name string, remote net.Addr, withPassword bool) *mysqlwire.SQLError {
	s.logins.failures.Add(1)
	return accessDenied(name, remote, withPassword)
}

// loginDelays tracks consecutive failed logins per user and address.
type loginDelays struct {
	failures atomic.Uint64 // failed logins, since start
	waiting  atomic.Int64  // logins waiting their turn now

	mu sync.Mutex // guards m
	m  map[string]*loginFailures
}

type loginFailures struct {
	n    int       // consecutive failures
	next time.Time // when the next attempt may be checked
	last time.Time // the last failure
}

const (
	maxLoginKeys = 1 << 16 // failure records kept at most
	loginForget  = 15 * time.Minute
)

// delay is the wait after n consecutive failures.
func loginDelay(n int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// turn books an attempt for key at now and returns how long it must wait
// before its password is checked (0: at once).
func (d *loginDelays) turn(key string, now time.Time, base, max time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.m[key]
	if f == nil || now.Sub(f.last) > loginForget {
		return 0
	}
	start := f.next
	if start.Before(now) {
		start = now
	}
	wait := start.Sub(now)
	if wait <= max {
		f.next = start.Add(loginDelay(f.n, base, max))
	}
	return wait
}

// failed records a failure for key; it returns the consecutive failures
// and the delay the next attempt will wait.
func (d *loginDelays) failed(key string, now time.Time, base, max time.Duration) (int, time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.m == nil {
		d.m = map[string]*loginFailures{}
	}
	f := d.m[key]
	if f == nil || now.Sub(f.last) > loginForget {
		if f == nil && len(d.m) >= maxLoginKeys {
			d.evictLocked(now)
		}
		f = &loginFailures{}
		d.m[key] = f
	}
	f.n++
	f.last = now
	delay := loginDelay(f.n, base, max)
	if next := now.Add(delay); next.After(f.next) {
		f.next = next
	}
	return f.n, delay
}

func (d *loginDelays) succeeded(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.m, key)
}

// evictLocked makes room: forgotten records first, else any one.
func (d *loginDelays) evictLocked(now time.Time) {
	for k, f := range d.m {
		if now.Sub(f.last) > loginForget {
			delete(d.m, k)
		}
	}
	for k := range d.m {
		if len(d.m) < maxLoginKeys {
			return
		}
		delete(d.m, k)
	}
}
