package ctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// AuthorityState is the answer of GET and PUT /api/authority: the
// Redis-migration kill switch as the answering holdfast runs it.
type AuthorityState struct {
	Version             int64     `json:"version"`
	Authority           string    `json:"authority"` // redis or holdfast
	Shops               []int64   `json:"shops"`     // on holdfast, with authority redis
	Percent             int       `json:"percent"`   // shops with CRC32(shop_id) % 100 below it are on holdfast
	ChangedAt           time.Time `json:"changed_at"`
	ChangedBy           string    `json:"changed_by"`
	Reason              string    `json:"reason"`
	PollIntervalSeconds float64   `json:"poll_interval_seconds"`
	RedisStale          bool      `json:"redis_stale"`
	RedisStaleSince     time.Time `json:"redis_stale_since"`
	RedisStaleReason    string    `json:"redis_stale_reason"`
}

// AuthorityChange is a new state of the switch.
type AuthorityChange struct {
	Authority string // redis or holdfast
	Shops     []int64
	Percent   int
	Reason    string
	Force     bool
}

// Authority reads the switch (GET /api/authority).
func (c *Client) Authority(ctx context.Context) (AuthorityState, error) {
	var s AuthorityState
	err := c.do(ctx, http.MethodGet, "/api/authority", nil, &s, "version", "authority")
	return s, err
}

// SetAuthority writes the switch's next version (PUT /api/authority).
func (c *Client) SetAuthority(ctx context.Context, ch AuthorityChange) (AuthorityState, error) {
	q := url.Values{"authority": {ch.Authority}}
	if ch.Percent > 0 {
		q.Set("percent", strconv.Itoa(ch.Percent))
	}
	if len(ch.Shops) > 0 {
		parts := make([]string, len(ch.Shops))
		for i, s := range ch.Shops {
			parts[i] = strconv.FormatInt(s, 10)
		}
		q.Set("shops", strings.Join(parts, ","))
	}
	if ch.Reason != "" {
		q.Set("reason", ch.Reason)
	}
	if ch.Force {
		q.Set("force", "true")
	}
	if c.Scope.By != "" {
		q.Set("by", c.Scope.By)
	}
	var s AuthorityState
	err := c.do(ctx, http.MethodPut, "/api/authority", q, &s, "version", "authority")
	return s, err
}

// ParseAuthority checks holdfastctl authority's arguments: the authority,
// -shops (comma-separated ids) and -percent.
func ParseAuthority(authority, shops string, percent int) (AuthorityChange, error) {
	ch := AuthorityChange{Authority: authority, Percent: percent}
	if authority != "redis" && authority != "holdfast" {
		return ch, usagef("authority: want redis or holdfast, got %q", authority)
	}
	if percent < 0 || percent > 100 {
		return ch, usagef("-percent: want 0 to 100, got %d", percent)
	}
	for _, f := range strings.Split(shops, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil || n < 1 {
			return ch, usagef("-shops: want comma-separated shop ids, got %q", f)
		}
		ch.Shops = append(ch.Shops, n)
	}
	if authority == "holdfast" && (len(ch.Shops) > 0 || percent > 0) {
		return ch, usagef("with authority holdfast every shop is on holdfast: -shops and -percent go with authority redis " +
			"(holdfastctl authority redis -percent 50 puts half the shops on holdfast)")
	}
	return ch, nil
}

// ShowAuthority prints the switch in force.
func (c *CLI) ShowAuthority(ctx context.Context) error {
	s, err := c.Client.Authority(ctx)
	if err != nil {
		return err
	}
	return writeAuthority(c.Out, s, "")
}

// SetAuthority changes the switch and prints its new state.
func (c *CLI) SetAuthority(ctx context.Context, ch AuthorityChange) error {
	s, err := c.Client.SetAuthority(ctx, ch)
	if err != nil {
		return err
	}
	return writeAuthority(c.Out, s, "switched: ")
}

func writeAuthority(w io.Writer, s AuthorityState, prefix string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%sauthority switch version %d: ", prefix, s.Version)
	switch {
	case s.Authority == "holdfast":
		b.WriteString("holdfast decides every shop's reserves (Redis is still written)\n")
	case s.Percent == 0 && len(s.Shops) == 0:
		b.WriteString("Redis decides every shop's reserves (holdfast runs in shadow)\n")
	default:
		fmt.Fprintf(&b, "Redis decides reserves, except %d%% of shops (CRC32(shop_id) %% 100 < %d)", s.Percent, s.Percent)
		if len(s.Shops) > 0 {
			parts := make([]string, len(s.Shops))
			for i, x := range s.Shops {
				parts[i] = strconv.FormatInt(x, 10)
			}
			fmt.Fprintf(&b, " and shops %s", strings.Join(parts, ","))
		}
		b.WriteString(", which holdfast decides\n")
	}
	if !s.ChangedAt.IsZero() {
		fmt.Fprintf(&b, "changed %s by %s", s.ChangedAt.UTC().Format(time.RFC3339), clean(SetByText(s.ChangedBy)))
		if s.Reason != "" {
			fmt.Fprintf(&b, " (%s)", clean(s.Reason))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "every holdfast reads the switch every %gs: compare holdfast_authority_switch_version across the fleet\n", s.PollIntervalSeconds)
	if s.RedisStale {
		fmt.Fprintf(&b, "REDIS IS STALE since %s (%s): run holdfast resync-redis before Redis decides again\n",
			s.RedisStaleSince.UTC().Format(time.RFC3339), clean(s.RedisStaleReason))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
