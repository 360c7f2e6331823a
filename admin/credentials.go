package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
)

// Who may do what on the admin listener (README.md, "Admin API"):
//
//   - a request that changes something (any method but GET, HEAD and
//     OPTIONS) needs a credential of scope write, on loopback too: a
//     sidecar shares its pod's loopback with the application;
//   - a read needs a credential of scope read or write when the listener
//     is not on loopback, and none on loopback.
//
// A credential is a name, a scope and a bearer token. What a write changes
// is recorded as done by the credential's name; a free-text "by" the
// request adds is the caller's word, kept after a slash (see author).

// Scope is what a credential may do.
type Scope int

// The scopes, each allowing what the one before it does.
const (
	ScopeNone  Scope = iota // no credential: what loopback allows
	ScopeRead               // GET, HEAD, OPTIONS
	ScopeWrite              // every request
)

func (s Scope) String() string {
	switch s {
	case ScopeRead:
		return "read"
	case ScopeWrite:
		return "write"
	}
	return "none"
}

// ParseScope reads "read" or "write".
func ParseScope(s string) (Scope, error) {
	switch s {
	case "read":
		return ScopeRead, nil
	case "write":
		return ScopeWrite, nil
	}
	return ScopeNone, fmt.Errorf("admin: scope %q: want read or write", s)
}

// Credential is one named bearer token.
type Credential struct {
	Name  string // recorded as the author of its changes; no '/'
	Scope Scope
	Token string // never logged, never answered
}

// Access is who may reach the listener and how: what Options sets at New
// and Reload replaces whole.
type Access struct {
	// Listen is admin.listen: where ListenAndServe listens. Whether it is
	// a loopback address decides whether reads need a credential (see
	// guard). "" counts as loopback (a Handler served by a test).
	Listen string
	// Credentials are the tokens accepted. None: every write is refused,
	// and every read too off loopback.
	Credentials []Credential
	// TLS, when not nil, is the listener's TLS configuration: every
	// connection accepted from then on is TLS. nil: plain HTTP.
	TLS *tls.Config
	// LocalTokenPath is the file holding the local credential's token
	// (admin.local_token_path), named in the answer to a write refused for
	// want of a credential when it comes from loopback: holdfastctl on
	// this machine reads it from there. "": none.
	LocalTokenPath string
}

// access is an Access ready for the guard: tokens hashed, loopback
// decided. It is never changed, only replaced.
type access struct {
	Access
	loopback bool
	hashed   []hashedCredential
}

type hashedCredential struct {
	name  string
	scope Scope
	sum   [sha256.Size]byte
}

// newAccess prepares ac for the guard. Its error names the credentials
// that make no sense; the access it returns then leaves them out.
func newAccess(ac Access) (*access, error) {
	out := &access{Access: ac, loopback: ac.Listen == "" || isLoopback(ac.Listen)}
	names := map[string]bool{}
	var errs []error
	for _, c := range ac.Credentials {
		var err error
		switch {
		case c.Name == "" || strings.Contains(c.Name, "/"):
			err = fmt.Errorf("admin: credential name %q: want a name without '/'", c.Name)
		case names[c.Name]:
			err = fmt.Errorf("admin: two credentials named %q", c.Name)
		case c.Scope != ScopeRead && c.Scope != ScopeWrite:
			err = fmt.Errorf("admin: credential %q: scope %v", c.Name, c.Scope)
		case c.Token == "":
			err = fmt.Errorf("admin: credential %q has no token", c.Name)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		names[c.Name] = true
		out.hashed = append(out.hashed, hashedCredential{name: c.Name, scope: c.Scope, sum: sha256.Sum256([]byte(c.Token))})
	}
	return out, errors.Join(errs...)
}

// lookup finds the credential whose token is token. It compares the
// token's hash with every credential's in constant time, whichever
// matches, so the answer's timing says nothing of the tokens.
func (ac *access) lookup(token string) (hashedCredential, bool) {
	sum := sha256.Sum256([]byte(token))
	var found hashedCredential
	ok := 0
	for _, c := range ac.hashed {
		if subtle.ConstantTimeCompare(sum[:], c.sum[:]) == 1 {
			found, ok = c, 1
		}
	}
	return found, ok == 1
}

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// caller is who sent a request, as the guard found: the credential's name
// ("" with none) and its scope.
type caller struct {
	name  string
	scope Scope
}

type callerKey struct{}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

func callerOf(r *http.Request) caller {
	c, _ := r.Context().Value(callerKey{}).(caller)
	return c
}

// maxAuthor is set_by's width in holdfast_controls and changed_by's in
// holdfast_authority.
const maxAuthor = 255

// author is who made a change, as recorded with it: the credential's name,
// then "/" and the request's free-text by when it gives one (the caller's
// word, unverified), cut to maxAuthor bytes. by is the unverified part
// ("" when none was given).
func author(r *http.Request) (setBy, by string) {
	name := callerOf(r).name
	if name == "" {
		name = "anonymous" // not reached: the guard lets no write through without a credential
	}
	by = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, r.URL.Query().Get("by"))
	if by == "" {
		return name, ""
	}
	setBy = name + "/" + by
	if len(setBy) > maxAuthor {
		setBy = strings.ToValidUTF8(setBy[:maxAuthor], "")
		by = setBy[len(name)+1:]
	}
	return setBy, by
}

// changed adds who made a change to its answer: set_by as recorded, and
// when the request gave a by, by_unverified with it.
func changed(r *http.Request, ans map[string]any) map[string]any {
	setBy, by := author(r)
	ans["set_by"] = setBy
	if by != "" {
		ans["by_unverified"] = by
	}
	return ans
}

// LocalTokenLen is the length of the local credential's token: hex of 32
// random bytes.
const LocalTokenLen = 64

// WriteLocalToken writes the local credential's token to path, for
// holdfastctl on this machine (admin.local_token_path): a new file, mode
// 0600, renamed over whatever was there, so a reader sees the old token or
// the new one, whole.
func WriteLocalToken(path, token string) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("admin: local token: %w", err)
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.WriteString(token + "\n")
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("admin: local token: %w", err)
	}
	return nil
}

// LoadTLS reads the listener's certificate and key (admin.tls): the TLS
// configuration for Access.TLS, TLS 1.2 at least.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("admin: admin.tls: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
