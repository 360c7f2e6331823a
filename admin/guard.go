package admin

import (
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// guard admits a request to the API, in this order:
//
//  1. A request with an Authorization header must carry the bearer token
//     of one of the listener's credentials (401 otherwise); it then acts
//     as that credential, under any Host name.
//  2. A request without one is refused off loopback (401). On loopback
//     its Host must be an IP address or localhost (403 otherwise): a page
//     whose own host name was made to resolve to 127.0.0.1 (DNS
//     rebinding) sends its name, and is refused. Such a page cannot know
//     a token.
//  3. A request that changes something (any method but GET, HEAD,
//     OPTIONS) must come from the same origin: net/http's
//     CrossOriginProtection refuses it when the browser says it was sent
//     by another site (Sec-Fetch-Site) or its Origin is not this Host
//     (403). Requests without those headers (holdfastctl, curl) are not
//     from a browser and pass.
//  4. It must also carry a credential of scope write, on loopback too:
//     401 without one, 403 with one of scope read.
//
// The handlers find the credential with callerOf. No token is ever
// logged or answered.
func (a *Admin) guard(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ac := a.access.Load()
		var who caller
		switch h := r.Header.Get("Authorization"); {
		case h != "":
			tok, bearer := strings.CutPrefix(h, "Bearer ")
			c, found := ac.lookup(tok)
			if !bearer || !found {
				a.unauthorized(w, r, ac, "the bearer token is not one of this listener's credentials "+
					"(admin.credentials, admin.token, or the local token in admin.local_token_path's file)")
				return
			}
			who = caller{name: c.name, scope: c.scope}
		case !ac.loopback:
			a.unauthorized(w, r, ac, "admin.listen "+quote(ac.Listen)+" is not a loopback address: every request needs a credential "+
				"(Authorization: Bearer <token> of admin.credentials)")
			return
		case !hostAllowed(r.Host):
			a.refuse(w, r, http.StatusForbidden, "host "+quote(r.Host)+" is not an address of this admin listener "+
				"(without a credential, only an IP address or localhost is answered: this keeps "+
				"a DNS-rebinding page out)")
			return
		}
		if !safeMethod(r.Method) {
			if err := cop.Check(r); err != nil {
				a.refuse(w, r, http.StatusForbidden, "cross-origin request refused: "+err.Error()+
					" (Origin "+quote(r.Header.Get("Origin"))+", Host "+quote(r.Host)+"); changes are accepted only from "+
					"this listener's own status page or from clients that are not browsers")
				return
			}
			switch who.scope {
			case ScopeNone:
				a.unauthorized(w, r, ac, "this request changes the fleet: it needs a credential of scope write "+
					"(Authorization: Bearer <token> of admin.credentials, or the local token in admin.local_token_path's file), on loopback too")
				return
			case ScopeRead:
				a.refuse(w, r, http.StatusForbidden, "credential "+quote(who.name)+" has scope read: this request changes the fleet "+
					"and needs a credential of scope write")
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(withCaller(r.Context(), who)))
	})
}

// safeMethod reports whether a request with method changes nothing.
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// unauthorized answers 401. To a request from loopback it names the local
// credential's file, if any (a path, not a secret): holdfastctl on this
// machine reads the token from there.
func (a *Admin) unauthorized(w http.ResponseWriter, r *http.Request, ac *access, msg string) {
	a.logRefusal(r, msg)
	w.Header().Set("WWW-Authenticate", `Bearer realm="holdfast"`)
	ans := map[string]string{"error": "admin: " + msg}
	if ac.LocalTokenPath != "" && remoteLoopback(r) {
		ans["local_token_path"] = ac.LocalTokenPath
	}
	writeJSON(w, http.StatusUnauthorized, ans)
}

func remoteLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostAllowed reports whether a Host header names a loopback listener for
// sure: an IP address or localhost. (A request without a credential
// reaches only a loopback listener, whose admin.listen is one of those.)
func hostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "" {
		return false
	}
	return net.ParseIP(host) != nil || strings.EqualFold(host, "localhost")
}

func (a *Admin) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	a.logRefusal(r, msg)
	writeError(w, code, "%s", msg)
}

// logRefusal logs a refused request, at most once a second.
func (a *Admin) logRefusal(r *http.Request, msg string) {
	if a.refusal.due(a.o.Now()) {
		a.o.Log.Warn("admin: request refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr,
			"host", r.Host, "origin", r.Header.Get("Origin"), "why", msg)
	}
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
