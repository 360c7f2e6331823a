package admin

import (
	"crypto/subtle"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// guard admits a request to the API, in this order:
//
//  1. With no token configured (the listener is on loopback then, as
//     config validation requires), the Host must be an IP address,
//     localhost, or admin.listen's host. A page whose own host name was
//     made to resolve to 127.0.0.1 (DNS rebinding) sends its name, and is
//     refused. With a token this check is left out: such a page cannot
//     know the token, and clients may reach the listener by any name.
//  2. With a token, the request must carry it as a bearer token.
//  3. A request that changes something (any method but GET, HEAD,
//     OPTIONS) must come from the same origin: net/http's
//     CrossOriginProtection refuses it when the browser says it was sent
//     by another site (Sec-Fetch-Site) or its Origin is not this Host.
//     Requests without those headers (holdfastctl, curl) are not from a
//     browser and pass.
func (a *Admin) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := *a.token.Load()
		if tok == "" && !a.hostAllowed(r.Host) {
			a.refuse(w, r, http.StatusForbidden, "host "+quote(r.Host)+" is not an address of this admin listener "+
				"(with no admin.token, only an IP address, localhost or admin.listen's host is answered: this keeps "+
				"a DNS-rebinding page out)")
			return
		}
		if tok != "" {
			got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(tok)) != 1 {
				w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (admin.token)")
				return
			}
		}
		if err := cop.Check(r); err != nil {
			a.refuse(w, r, http.StatusForbidden, "cross-origin request refused: "+err.Error()+
				" (Origin "+quote(r.Header.Get("Origin"))+", Host "+quote(r.Host)+"); changes are accepted only from "+
				"this listener's own status page or from clients that are not browsers")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a Host header names this listener for sure:
// an IP address, localhost, or the host of admin.listen.
func (a *Admin) hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return false
	}
	if net.ParseIP(host) != nil || strings.EqualFold(host, "localhost") {
		return true
	}
	lh, _, err := net.SplitHostPort(a.o.Listen)
	return err == nil && lh != "" && strings.EqualFold(lh, host)
}

func (a *Admin) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if a.refusal.due(a.o.Now()) {
		a.o.Log.Warn("admin: request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr,
			"host", r.Host, "origin", r.Header.Get("Origin"), "why", msg)
	}
	writeError(w, code, "%s", msg)
}

// refusalLog limits the refused-request log line to one a second: a hostile
// page in a loop must not flood the log.
type refusalLog struct {
	mu   sync.Mutex // guards last
	last time.Time
}

func (l *refusalLog) due(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.last) < time.Second {
		return false
	}
	l.last = now
	return true
}

func quote(s string) string {
	if len(s) > 100 {
		s = s[:100] + "..."
	}
	return "'" + strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s) + "'"
}
