package ctl

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultAddr is holdfast's default admin.listen.
const DefaultAddr = "127.0.0.1:6034"

// maxBody bounds a response body; the admin API's largest answer, the tag
// list, is bounded by holdfast's tag cardinality limit and far smaller.
const maxBody = 16 << 20

// Tag is one row of GET /api/tags. Counters are totals since holdfast
// started; the seconds are sums over every borrow of the tag.
type Tag struct {
	Tag                      string  `json:"tag"`
	HoldSeconds              float64 `json:"hold_seconds"`                // backend connection held, borrow to return
	ExecSeconds              float64 `json:"exec_seconds"`                // of which executing statements
	IdleInTransactionSeconds float64 `json:"idle_in_transaction_seconds"` // of which idle inside a transaction
	WaitSeconds              float64 `json:"wait_seconds"`                // waiting to borrow
	Borrows                  int64   `json:"borrows"`
	Statements               int64   `json:"statements"`
	Errors                   int64   `json:"errors"`
	Transactions             int64   `json:"transactions"`
	SlowTransactions         int64   `json:"slow_transactions"`
	HeldNow                  int     `json:"held_now"` // backend connections held right now
	Drained                  bool    `json:"drained"`
	Limit                    int     `json:"limit"` // 0: no cap
	// InFlightSeconds is the age of the tag's holds still open (not in
	// HoldSeconds yet), from GET /api/holders; WithInFlight sets it.
	InFlightSeconds float64 `json:"-"`
}

// TagList is the answer of GET /api/tags.
type TagList struct {
	Tags   []Tag `json:"tags"`   // by HoldSeconds, largest first
	Folded int64 `json:"folded"` // new tag names counted under "other" once the bound was reached
}

// Holder is one backend connection held right now (GET /api/holders).
type Holder struct {
	ClientID       uint64  `json:"client_id"` // 0: holdfast's own work (tag "holdfast:...")
	User           string  `json:"user"`
	Tag            string  `json:"tag"`
	HeldForSeconds float64 `json:"held_for_seconds"`
	InTransaction  bool    `json:"in_transaction"`
	Statement      string  `json:"statement"` // current or last statement, possibly a digest
}

// Pool is the answer of GET /api/pool. Open..Max and Clients,
// PinnedSessions are gauges; the rest are totals since holdfast started.
type Pool struct {
	Open  int `json:"open"`
	InUse int `json:"in_use"`
	Idle  int `json:"idle"`
	// Waiting is every borrower queued now: for the pool, under a tag's
	// limit, or for a place in a pipeline (the three below; a holdfast
	// that predates them sends Waiting alone).
	Waiting         int     `json:"waiting"`
	WaitingPool     int     `json:"waiting_pool"`
	WaitingTagLimit int     `json:"waiting_tag_limit"`
	WaitingPipeline int     `json:"waiting_pipeline"`
	Max             int     `json:"max"`
	Acquired        int64   `json:"acquired"`
	Waited          int64   `json:"waited"` // acquisitions that had to queue
	WaitSeconds     float64 `json:"wait_seconds"`
	Timeouts        int64   `json:"timeouts"`
	Rejected        int64   `json:"rejected"` // waiter cap reached
	Clients         int     `json:"clients"`
	PinnedSessions  int     `json:"pinned_sessions"`
}

// Author is who made a change, as holdfast recorded it: the name of the
// credential that made it, then "/" and the request's -by text, which is
// the caller's word and not verified. An older holdfast sends neither.
type Author struct {
	SetBy        string `json:"set_by"`
	ByUnverified string `json:"by_unverified"` // the part after the slash
}

// String is the author as holdfastctl prints it: "oncall", or
// "oncall/alice (by unverified)".
func (a Author) String() string {
	if a.ByUnverified != "" {
		return clean(a.SetBy) + " (by unverified)"
	}
	return clean(a.SetBy)
}

// SetByText is a control's set_by as holdfastctl prints it: marked when a
// part after the credential's name is the caller's unverified word.
func SetByText(setBy string) string {
	if strings.Contains(setBy, "/") {
		return setBy + " (by unverified)"
	}
	return setBy
}

// DrainState is the answer of POST and DELETE /api/tags/{tag}/drain.
type DrainState struct {
	Tag     string `json:"tag"`
	Drained bool   `json:"drained"`
	Scope   string `json:"scope"` // "fleet", or "local (why)"; "" from an older holdfast
	Author
}

// LimitState is the answer of PUT and DELETE /api/tags/{tag}/limit.
type LimitState struct {
	Tag   string `json:"tag"`
	Limit int    `json:"limit"` // 0: no cap
	Scope string `json:"scope"`
	// InForceHere is this instance's share of a fleet-wide cap (or its own
	// limit), when one is in force.
	InForceHere *int `json:"in_force_here"`
	Author
}

// MaxTxnState is the answer to setting a tag's max_transaction_time.
type MaxTxnState struct {
	Tag     string  `json:"tag"`
	Scope   string  `json:"scope"`
	Seconds float64 `json:"max_transaction_seconds"` // 0: the tag has none of its own
	Author
}

// Client calls holdfast's admin API. Build it with NewClient and set its
// exported fields before the first call; it is safe for concurrent use
// from then on.
type Client struct {
	addr string // as the user gave it, for messages
	base string // scheme://host[/prefix], no trailing slash
	hc   *http.Client

	mu        sync.Mutex // guards following
	token     string     // "": send no Authorization header
	tokenFrom string     // where token came from, for messages
	localErr  error      // why holdfast's local token file could not be read

	// Scope is where the control changes (drain, undrain, limit, max
	// transaction time, class) go, and what is recorded with them.
	Scope Scope
	// TokenFrom says where NewClient's token came from ("-token-file
	// /path", "$HOLDFAST_ADMIN_TOKEN"), for the message when it is
	// refused; "" says "the token".
	TokenFrom string
}

// Credential lookup: NewClient's token when not empty. Without one, a
// request refused for want of a credential (401) whose answer names the
// file of holdfast's local credential (admin.local_token_path; holdfast
// names it only to a client on its own machine) is sent again once with
// the token read from that file, and later requests send it too.

// Scope says where a control change goes: the whole fleet (the default),
// or this instance only (Local); For > 0 lifts a fleet control that long
// after; By names who made the change.
type Scope struct {
	Local bool
	For   time.Duration
	By    string
}

// query adds the scope to a control change's query.
func (s Scope) query(q url.Values) url.Values {
	if q == nil {
		q = url.Values{}
	}
	if s.Local {
		q.Set("local", "1")
	}
	if s.For > 0 {
		q.Set("for", s.For.String())
	}
	if s.By != "" {
		q.Set("by", s.By)
	}
	return q
}

// NewClient returns a client for the admin API at addr: HOST:PORT (plain
// HTTP, as holdfast serves it) or an http:// or https:// URL, optionally with
// a path prefix when a reverse proxy sits in front. token, when not empty,
// is sent as "Authorization: Bearer <token>". timeout bounds each request,
// body included; 0 means no bound. A bad addr is a *UsageError.
func NewClient(addr, token string, timeout time.Duration) (*Client, error) {
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") ||
		u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, usagef("bad -addr %q: want HOST:PORT (holdfast's admin.listen) or http://HOST:PORT", addr)
	}
	if timeout < 0 {
		return nil, usagef("bad -timeout %v: want a positive duration, or 0 for none", timeout)
	}
	base := u.Scheme + "://" + u.Host + strings.TrimRight(u.EscapedPath(), "/")
	return &Client{addr: addr, base: base, token: token, hc: &http.Client{Timeout: timeout}}, nil
}

// TrustCA makes the client trust the certificates of the PEM file caFile
// (as well as the system's) for an https:// address: the CA of holdfast's
// admin.tls certificate. Call it before the first request.
func (c *Client) TrustCA(caFile string) error {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return usagef("bad -ca-file: %v", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return usagef("bad -ca-file %s: no PEM certificate in it", caFile)
	}
	c.hc.Transport = &http.Transport{Proxy: http.ProxyFromEnvironment, TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	return nil
}

// ReadTokenFile reads a token from a file: its content, one trailing
// newline dropped (as holdfast reads token_file).
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
	if tok == "" {
		return "", errors.New("the file is empty")
	}
	return tok, nil
}

func (c *Client) credential() (token, from string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	from = c.tokenFrom
	if from == "" {
		from = c.TokenFrom
	}
	return c.token, from
}

// useLocal reads holdfast's local token from path, once, and reports
// whether the client now has it.
func (c *Client) useLocal(path string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.token != "" || c.localErr != nil || path == "" || !filepath.IsAbs(path) {
		return false
	}
	tok, err := ReadTokenFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said below
		}
		c.localErr = fmt.Errorf("holdfast's local token file %s could not be read: %w", path, err)
		return false
	}
	c.token, c.tokenFrom = tok, "holdfast's local token file "+path
	return true
}

// Addr is the admin address as given to NewClient.
func (c *Client) Addr() string { return c.addr }

// Tags returns every tag's totals (GET /api/tags).
func (c *Client) Tags(ctx context.Context) (TagList, error) {
	var l TagList
	err := c.do(ctx, http.MethodGet, "/api/tags", nil, &l, "tags")
	return l, err
}

// Holders returns the backend connections held right now (GET /api/holders).
func (c *Client) Holders(ctx context.Context) ([]Holder, error) {
	var r struct {
		Holders []Holder `json:"holders"`
	}
	err := c.do(ctx, http.MethodGet, "/api/holders", nil, &r, "holders")
	return r.Holders, err
}

// Pool returns the backend pool's state (GET /api/pool).
func (c *Client) Pool(ctx context.Context) (Pool, error) {
	var p Pool
	err := c.do(ctx, http.MethodGet, "/api/pool", nil, &p, "open", "in_use", "max")
	return p, err
}

// Drain makes new borrows for tag fail fast (POST /api/tags/{tag}/drain).
// grace > 0 asks holdfast to kill the tag's holders after it; 0 lets them
// finish. reason, when not empty, is recorded with the drain.
func (c *Client) Drain(ctx context.Context, tag string, grace time.Duration, reason string) (DrainState, error) {
	q := url.Values{}
	if grace > 0 {
		q.Set("grace", grace.String())
	}
	if reason != "" {
		q.Set("reason", reason)
	}
	var s DrainState
	err := c.do(ctx, http.MethodPost, tagPath(tag, "drain"), c.Scope.query(q), &s, "tag", "drained")
	return s, err
}

// Undrain lifts a drain (DELETE /api/tags/{tag}/drain).
func (c *Client) Undrain(ctx context.Context, tag string) (DrainState, error) {
	var s DrainState
	err := c.do(ctx, http.MethodDelete, tagPath(tag, "drain"), c.Scope.query(nil), &s, "tag", "drained")
	return s, err
}

// SetLimit caps tag at max concurrent backend connections (PUT
// /api/tags/{tag}/limit?max=N); max 0 lifts the cap (DELETE). reason, when
// not empty, is shown with the limit (GET /api/gates, the status page).
func (c *Client) SetLimit(ctx context.Context, tag string, max int, reason string) (LimitState, error) {
	var s LimitState
	err := c.setOrLift(ctx, tag, "limit", "max", strconv.Itoa(max), max > 0, reason, &s, "limit")
	return s, err
}

// setOrLift PUTs tag's control what with param=value (and reason) when
// set, else DELETEs it; the answer goes to out, which must name the tag
// and the fields in required.
func (c *Client) setOrLift(ctx context.Context, tag, what, param, value string, set bool, reason string, out any, required ...string) error {
	method, q := http.MethodDelete, url.Values(nil)
	if set {
		method, q = http.MethodPut, url.Values{param: {value}}
		if reason != "" {
			q.Set("reason", reason)
		}
	}
	return c.do(ctx, method, tagPath(tag, what), c.Scope.query(q), out, append([]string{"tag"}, required...)...)
}

// SetMaxTransactionTime bounds how long a transaction of tag may hold its
// backend connection (PUT /api/tags/{tag}/max_transaction_time?max=D); 0
// lifts the tag's own bound (DELETE).
func (c *Client) SetMaxTransactionTime(ctx context.Context, tag string, d time.Duration) (MaxTxnState, error) {
	var s MaxTxnState
	err := c.setOrLift(ctx, tag, "max_transaction_time", "max", d.String(), d > 0, "", &s, "max_transaction_seconds")
	return s, err
}

// ClassState is the answer to a class change.
type ClassState struct {
	Tag          string `json:"tag"`
	Class        string `json:"class"`
	ClassHereNow string `json:"class_here_now"`
	Scope        string `json:"scope"`
	Author
}

// SetClass puts the tags matching pattern in an overload class
// (PUT /api/tags/{tag}/class?class=C); class "" lifts it (DELETE).
func (c *Client) SetClass(ctx context.Context, pattern, class, reason string) (ClassState, error) {
	var s ClassState
	err := c.setOrLift(ctx, pattern, "class", "class", class, class != "", reason, &s, "class_here_now")
	return s, err
}

// RouteState is the answer to a route change.
type RouteState struct {
	Tag          string `json:"tag"`
	Route        string `json:"route"`
	RouteHereNow string `json:"route_here_now"`
	Scope        string `json:"scope"`
	Author
}

// SetRoute gives the tags matching pattern a routing policy
// (PUT /api/tags/{tag}/route?policy=P); policy "" lifts it (DELETE).
func (c *Client) SetRoute(ctx context.Context, pattern, policy, reason string) (RouteState, error) {
	var s RouteState
	err := c.setOrLift(ctx, pattern, "route", "policy", policy, policy != "", reason, &s, "route_here_now")
	return s, err
}

// ControlState is the answer to a change through PUT or DELETE
// /api/tags/{tag}/{kind}.
type ControlState struct {
	Tag   string `json:"tag"`
	Kind  string `json:"kind"`
	Scope string `json:"scope"`
	// InForceHere: a control of the kind holds for the tag on the
	// instance asked, after the change; HereNow is it as shown.
	InForceHere bool   `json:"in_force_here"`
	HereNow     string `json:"here_now"`
	Author
}

// SetControl puts a control of kind on tag (PUT /api/tags/{tag}/{kind},
// with value= when not empty); set false lifts it (DELETE).
func (c *Client) SetControl(ctx context.Context, tag, kind, value string, set bool, reason string) (ControlState, error) {
	var s ControlState
	method, q := http.MethodDelete, url.Values{}
	if set {
		method = http.MethodPut
		if value != "" {
			q.Set("value", value)
		}
		if reason != "" {
			q.Set("reason", reason)
		}
	}
	err := c.do(ctx, method, tagPath(tag, kind), c.Scope.query(q), &s, "tag", "kind", "in_force_here")
	return s, err
}

// FleetControl is one of the fleet's controls (GET /api/controls).
type FleetControl struct {
	Tag     string    `json:"tag"`
	Kind    string    `json:"kind"`
	Value   int64     `json:"value"`
	SetBy   string    `json:"set_by"`
	Reason  string    `json:"reason"`
	SetAt   time.Time `json:"set_at"`
	Expires time.Time `json:"expires_at"`
	// Shown is the value as holdfast shows it ("" from an older
	// holdfast, or for a kind it does not know).
	Shown string `json:"shown"`
}

// HereControl is a control in force on the instance asked, from any
// source: config, local or fleet (GET /api/controls).
type HereControl struct {
	Tag    string `json:"tag"`
	Kind   string `json:"kind"`
	Shown  string `json:"shown"`
	Source string `json:"source"`
	Reason string `json:"reason"`
	SetBy  string `json:"set_by"`
}

// Controls is the answer of GET /api/controls.
type Controls struct {
	Fleet    bool           `json:"fleet"` // false: this holdfast shares no controls
	Known    bool           `json:"known"`
	Stale    bool           `json:"stale"`
	NoSchema bool           `json:"no_schema"`
	Error    string         `json:"error"`
	LastRead time.Time      `json:"last_read"`
	Controls []FleetControl `json:"controls"`
	// Ignored, Truncated, Caps and Instance: see commands.go.
	Ignored   []IgnoredControl `json:"ignored"`
	Truncated bool             `json:"truncated"`
	Caps      []CapShares      `json:"caps"`
	Instance  string           `json:"instance_id"`
	// Here is every control in force on the instance, from every source
	// (absent from an older holdfast).
	Here []HereControl `json:"here"`
	// NotEverywhere: see commands.go.
	NotEverywhere []Unapplied `json:"not_everywhere"`
}

// Unapplied is a control in force that some live instances cannot apply,
// being of a kind they do not know (GET /api/controls, /api/fleet).
type Unapplied struct {
	Tag   string   `json:"tag"`
	Kind  string   `json:"kind"`
	NotBy []string `json:"not_applied_by"`
	Live  int      `json:"live_instances"`
}

// Controls returns the fleet's controls.
func (c *Client) Controls(ctx context.Context) (Controls, error) {
	var out Controls
	err := c.do(ctx, http.MethodGet, "/api/controls", nil, &out, "fleet")
	return out, err
}

// Member is one instance of the fleet (GET /api/fleet).
type Member struct {
	ID        string    `json:"instance_id"`
	Address   string    `json:"address"`
	Version   string    `json:"version"`
	PoolMax   int       `json:"pool_max"`
	StartedAt time.Time `json:"started_at"`
	LastSeen  time.Time `json:"last_seen"`
	// The schema versions it runs against, and the kinds of control it
	// applies: 0 and nil when it records none (a version before schema
	// version 6).
	SchemaMin int      `json:"schema_min"`
	SchemaMax int      `json:"schema_max"`
	Kinds     []string `json:"control_kinds"`
}

// FleetStatus is the answer of GET /api/fleet.
type FleetStatus struct {
	Fleet  bool `json:"fleet"`
	Status struct {
		Instance string    `json:"instance_id"`
		Known    bool      `json:"known"`
		Stale    bool      `json:"stale"`
		NoSchema bool      `json:"no_schema"`
		Error    string    `json:"error"`
		LastRead time.Time `json:"last_read"`
		Members  []Member  `json:"members"`
		Duties   []string  `json:"duties"`
		// Where holdfast's tables are, and whether that is still
		// backend.database (not moved to fleet.database).
		Tables       string `json:"tables_schema"`
		TablesLegacy bool   `json:"tables_legacy"`
		// The controls in force some live instances cannot apply; and
		// whether the database is too old for instances to record their
		// schema range and control kinds (before schema version 6).
		NotEverywhere     []Unapplied `json:"not_everywhere"`
		MembersUnrecorded bool        `json:"members_unrecorded"`
	} `json:"status"`
}

// Fleet returns the fleet's live instances as this one knows them.
func (c *Client) Fleet(ctx context.Context) (FleetStatus, error) {
	var out FleetStatus
	err := c.do(ctx, http.MethodGet, "/api/fleet", nil, &out, "fleet")
	return out, err
}

// tagPath is /api/tags/{tag}/{what} with tag escaped as one path segment.
func tagPath(tag, what string) string {
	return "/api/tags/" + escapeSegment(tag) + "/" + what
}

// escapeSegment percent-encodes every byte of s outside RFC 3986's
// unreserved set [A-Za-z0-9-._~]. Stricter than url.PathEscape, which leaves
// ':' alone: "holdfast:reserve" becomes "holdfast%3Areserve", so no router
// can mistake a tag for a scheme, a parameter or two segments.
func escapeSegment(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		ch := s[i]
		if 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' ||
			ch == '-' || ch == '.' || ch == '_' || ch == '~' {
			b.WriteByte(ch)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[ch>>4])
		b.WriteByte(hex[ch&15])
	}
	return b.String()
}

// do sends one request and decodes a 2xx JSON answer into out, which must
// carry every key in required (so a different service answering on the
// port is reported, not shown as an empty table). Every failure is an
// *Error, except the end of ctx, which is returned as ctx.Err().
func (c *Client) do(ctx context.Context, method, path string, q url.Values, out any, required ...string) error {
	target := c.base + path
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	e := &Error{Addr: c.addr, Method: method, Path: path}
	status, body, err := c.send(ctx, method, target)
	if err == nil && status == http.StatusUnauthorized && c.useLocal(localTokenPath(body)) {
		// Refused for want of a credential: nothing was done, so the
		// request may be sent again with the local one.
		status, body, err = c.send(ctx, method, target)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var be buildError
		if errors.As(err, &be) {
			e.Message, e.Err = "cannot build the request", be.error
			return e
		}
		return c.networkError(e, err)
	}
	e.Status = status
	if status < 200 || status > 299 {
		return c.statusError(e, body)
	}
	if len(body) > maxBody {
		e.Message = fmt.Sprintf("response larger than %d MiB", maxBody>>20)
		return e
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		e.Message = fmt.Sprintf("response is not a JSON object (%v): %s", err, snippet(body))
		e.Err = err
		e.Hint = "is " + c.addr + " holdfast's admin.listen?"
		return e
	}
	for _, k := range required {
		if _, ok := keys[k]; !ok {
			e.Message = fmt.Sprintf("response has no %q field: %s", k, snippet(body))
			e.Hint = "is " + c.addr + " holdfast's admin.listen, and is that holdfast new enough to serve " + path + "?"
			return e
		}
	}
	if err := json.Unmarshal(body, out); err != nil {
		e.Message = fmt.Sprintf("cannot decode the response: %v", err)
		e.Err = err
		return e
	}
	return nil
}

// buildError is a request that could not be built.
type buildError struct{ error }

// send sends one request and reads its answer, bounded by maxBody+1.
func (c *Client) send(ctx context.Context, method, target string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return 0, nil, buildError{err}
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "holdfastctl")
	if tok, _ := c.credential(); tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, body, nil
}

// localTokenPath is the file of holdfast's local credential that a 401
// answer names ("" when it names none).
func localTokenPath(body []byte) string {
	var r struct {
		Path string `json:"local_token_path"`
	}
	_ = json.Unmarshal(body, &r)
	return r.Path
}

func (c *Client) networkError(e *Error, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // drop the repeated method and URL
	}
	e.Err = err
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		e.Message = fmt.Sprintf("no answer within %v: %v", c.hc.Timeout, err)
	} else {
		e.Message = err.Error()
	}
	e.Hint = "is holdfast running with admin.listen set to " + c.addr + "? point -addr at it"
	var ua x509.UnknownAuthorityError
	var ve *tls.CertificateVerificationError
	if errors.As(err, &ua) || errors.As(err, &ve) {
		e.Hint = "holdfast's admin.tls certificate is not one this machine trusts: pass -ca-file (or set HOLDFAST_ADMIN_CA_FILE) to the PEM file of its CA"
	}
	return e
}

func (c *Client) statusError(e *Error, body []byte) error {
	var r struct {
		Error *string `json:"error"`
	}
	if json.Unmarshal(body, &r) == nil && r.Error != nil {
		e.Message = *r.Error
	} else {
		e.Message = snippet(body)
		if e.Message == "" {
			e.Message = "(empty body)"
		}
	}
	tok, from := c.credential()
	theToken := "the token"
	if from != "" {
		theToken += " from " + from
	}
	change := e.Method != http.MethodGet && e.Method != http.MethodHead
	const where = "set HOLDFAST_ADMIN_TOKEN_FILE (or -token-file FILE) to a file holding the token of a credential in holdfast's admin.credentials"
	switch {
	case e.Status == http.StatusUnauthorized && tok == "" && change:
		e.Hint = "this command changes the fleet: it needs a write credential; " + where + " with scope write"
	case e.Status == http.StatusUnauthorized && tok == "":
		e.Hint = "this admin listener is not on loopback: every command needs a credential; " + where + " (scope read or write)"
	case e.Status == http.StatusUnauthorized:
		e.Hint = theToken + " was refused: it is not one of holdfast's credentials (or a reload changed them)"
	case e.Status == http.StatusForbidden && strings.Contains(e.Message, "has scope read"):
		e.Hint = "this command changes the fleet: it needs a write credential, and " + theToken + " is a read credential's; " + where + " with scope write"
	case e.Status == http.StatusBadRequest && strings.Contains(e.Message, "HTTPS server"):
		e.Hint = "holdfast's admin listener speaks TLS (admin.tls): use -addr https://HOST:PORT"
	case r.Error == nil && (e.Status == http.StatusNotFound || e.Status == http.StatusMethodNotAllowed):
		e.Hint = "is " + c.addr + " holdfast's admin.listen, and is that holdfast new enough to serve " + e.Path + "?"
	}
	c.mu.Lock()
	if e.Status == http.StatusUnauthorized && c.localErr != nil {
		e.Hint += "; " + c.localErr.Error() + " (run holdfastctl as holdfast's user on its machine, or give a credential)"
	}
	c.mu.Unlock()
	return e
}

// snippet is the start of a body as one clean line, for messages.
func snippet(body []byte) string {
	return truncate(clean(string(bytes.TrimSpace(body))), 120)
}

// Error is a failed admin API call.
type Error struct {
	Addr    string // the admin address as given
	Method  string
	Path    string // escaped, without the query
	Status  int    // HTTP status; 0 when no response arrived
	Message string // the server's "error" text, or what went wrong
	Hint    string // what to check; may be empty
	Err     error  // underlying network or decoding error; may be nil
}

func (e *Error) Error() string {
	var s string
	if e.Status == 0 {
		s = fmt.Sprintf("cannot reach holdfast's admin API at %s (%s %s): %s", e.Addr, e.Method, e.Path, clean(e.Message))
	} else {
		status := strconv.Itoa(e.Status)
		if t := http.StatusText(e.Status); t != "" {
			status += " " + t
		}
		s = fmt.Sprintf("%s %s at %s: %s: %s", e.Method, e.Path, e.Addr, status, clean(e.Message))
	}
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// UsageError is a mistake on the command line, found before any request
// was sent; cmd/holdfastctl exits 2 on it.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }
