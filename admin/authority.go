package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Redis-migration kill switch: GET /api/authority shows the authority
// switch in force on this instance, PUT /api/authority changes it for the
// whole fleet (README.md, "Admin API"; docs/migration.md).

// Authority is the authority switch, as cmd/holdfast wires it from package
// reservation/legacy. Both methods may be called from any goroutine.
type Authority interface {
	AuthorityState(ctx context.Context) (AuthorityState, error)
	// SetAuthority writes the switch's next version. Its error wraps
	// ErrAuthorityInvalid for a change that makes no sense and
	// ErrAuthorityRefused for one refused as unsafe (the Redis counters are
	// stale); anything else is a failure to reach the database.
	SetAuthority(ctx context.Context, c AuthorityChange) (AuthorityState, error)
}

// Errors SetAuthority wraps.
var (
	ErrAuthorityInvalid = errors.New("admin: invalid authority change")
	ErrAuthorityRefused = errors.New("admin: authority change refused")
)

// AuthorityState is the answer of GET and PUT /api/authority.
type AuthorityState struct {
	// Version is the switch version this instance runs.
	Version   int64     `json:"version"`
	Authority string    `json:"authority"` // redis or holdfast
	Shops     []int64   `json:"shops"`     // on holdfast, with authority redis
	Percent   int       `json:"percent"`   // shops with CRC32(shop_id) % 100 below it are on holdfast
	ChangedAt time.Time `json:"changed_at,omitzero"`
	ChangedBy string    `json:"changed_by"`
	Reason    string    `json:"reason"`
	// PollIntervalSeconds is how often every instance reads the switch: a
	// change is in force on the whole fleet within it.
	PollIntervalSeconds float64 `json:"poll_interval_seconds"`
	// RedisStale says the Redis counters missed a write (fleet-wide);
	// holdfast resync-redis clears it.
	RedisStale       bool      `json:"redis_stale"`
	RedisStaleSince  time.Time `json:"redis_stale_since,omitzero"`
	RedisStaleReason string    `json:"redis_stale_reason,omitempty"`
}

// AuthorityChange is what PUT /api/authority asks for.
type AuthorityChange struct {
	Authority string
	Shops     []int64
	Percent   int
	Reason    string
	By        string // who asked: the credential's name, then "/" and the request's by, if any
	Force     bool
}

func (a *Admin) apiAuthority(w http.ResponseWriter, r *http.Request) {
	st, err := a.o.Authority.AuthorityState(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (a *Admin) apiSetAuthority(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	c := AuthorityChange{Authority: q.Get("authority"), Reason: q.Get("reason"), By: by(r)}
	if c.Authority != "redis" && c.Authority != "holdfast" {
		writeError(w, http.StatusBadRequest, "authority: want redis or holdfast, got %q", c.Authority)
		return
	}
	if v := q.Get("percent"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			writeError(w, http.StatusBadRequest, "percent: want 0 to 100, got %q", v)
			return
		}
		c.Percent = n
	}
	if v := q.Get("shops"); v != "" {
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || n < 1 {
				writeError(w, http.StatusBadRequest, "shops: want comma-separated shop ids, got %q", v)
				return
			}
			c.Shops = append(c.Shops, n)
		}
	}
	switch v := q.Get("force"); v {
	case "", "0", "false":
	case "1", "true":
		c.Force = true
	default:
		writeError(w, http.StatusBadRequest, "force: want true or false, got %q", v)
		return
	}
	st, err := a.o.Authority.SetAuthority(r.Context(), c)
	switch {
	case errors.Is(err, ErrAuthorityInvalid):
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	case errors.Is(err, ErrAuthorityRefused):
		writeError(w, http.StatusConflict, "%v", err)
		return
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "%v", err)
		return
	}
	a.o.Log.Warn("admin: authority switched", "version", st.Version, "authority", st.Authority, "shops", c.Shops,
		"percent", st.Percent, "force", c.Force, "reason", c.Reason, "remote", r.RemoteAddr, "by", c.By)
	writeJSON(w, http.StatusOK, st)
}
