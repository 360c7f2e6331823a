package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// fakeAuthority records the changes asked for.
type fakeAuthority struct {
	mu      sync.Mutex // guards following
	st      AuthorityState
	changes []AuthorityChange
	refuse  error
}

func (f *fakeAuthority) AuthorityState(context.Context) (AuthorityState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st, nil
}

func (f *fakeAuthority) SetAuthority(_ context.Context, c AuthorityChange) (AuthorityState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refuse != nil {
		return AuthorityState{}, f.refuse
	}
	f.changes = append(f.changes, c)
	f.st.Version++
	f.st.Authority, f.st.Shops, f.st.Percent, f.st.Reason = c.Authority, c.Shops, c.Percent, c.Reason
	return f.st, nil
}

// TestAuthorityRoute: GET shows the switch, PUT changes it with its
// arguments checked; refusals map to 400 and 409; the route keeps the
// credential, Host and Origin checks of every other route; without an Authority
// there is no route.
func TestAuthorityRoute(t *testing.T) {
	f := &fakeAuthority{st: AuthorityState{Version: 3, Authority: "redis", PollIntervalSeconds: 1}}
	h := New(newFake(), withCredentials(Options{Authority: f})).Handler()
	auth := asWriter

	a := do(t, h, "GET", "/api/authority", "", auth)
	if a.status != 200 || !strings.Contains(a.body, `"version": 3`) || !strings.Contains(a.body, `"authority": "redis"`) ||
		!strings.Contains(a.body, `"poll_interval_seconds": 1`) {
		t.Fatalf("GET: %d %s", a.status, a.body)
	}
	a = do(t, h, "PUT", "/api/authority?authority=redis&percent=50&shops=7,9&reason=INC-1&force=true&by=alice", "", auth, "User-Agent: holdfastctl")
	if a.status != 200 || !strings.Contains(a.body, `"version": 4`) || !strings.Contains(a.body, `"percent": 50`) {
		t.Fatalf("PUT: %d %s", a.status, a.body)
	}
	c := f.changes[0]
	if c.Authority != "redis" || c.Percent != 50 || fmt.Sprint(c.Shops) != "[7 9]" || c.Reason != "INC-1" || !c.Force ||
		c.By != "oncall/alice" {
		t.Fatalf("change asked: %+v", c)
	}
	for _, q := range []string{"authority=mysql", "authority=redis&percent=101", "authority=redis&shops=a", "authority=redis&force=maybe", ""} {
		if a := do(t, h, "PUT", "/api/authority?"+q, "", auth); a.status != 400 {
			t.Errorf("PUT ?%s: %d %s, want 400", q, a.status, a.body)
		}
	}
	f.refuse = fmt.Errorf("%w: stale", ErrAuthorityRefused)
	if a := do(t, h, "PUT", "/api/authority?authority=redis", "", auth); a.status != 409 || !strings.Contains(a.body, "stale") {
		t.Errorf("refused: %d %s, want 409", a.status, a.body)
	}
	f.refuse = fmt.Errorf("%w: bad", ErrAuthorityInvalid)
	if a := do(t, h, "PUT", "/api/authority?authority=holdfast", "", auth); a.status != 400 {
		t.Errorf("invalid: %d %s, want 400", a.status, a.body)
	}
	f.refuse = errors.New("database down")
	if a := do(t, h, "PUT", "/api/authority?authority=holdfast", "", auth); a.status != 503 {
		t.Errorf("failure: %d %s, want 503", a.status, a.body)
	}
	f.refuse = nil

	// The guards.
	if a := do(t, h, "PUT", "/api/authority?authority=holdfast", ""); a.status != 401 {
		t.Errorf("no credential: %d", a.status)
	}
	if a := do(t, h, "PUT", "/api/authority?authority=holdfast", "", asReader); a.status != 403 {
		t.Errorf("a read credential: %d", a.status)
	}
	if a := do(t, h, "PUT", "/api/authority?authority=holdfast", "", auth, "Origin: http://evil.example"); a.status != 403 {
		t.Errorf("cross-origin PUT: %d", a.status)
	}
	open := New(newFake(), Options{Authority: f}).Handler()
	if a := do(t, open, "PUT", "/api/authority?authority=holdfast", "rebound.example:6034"); a.status != 403 {
		t.Errorf("rebinding host, no credential: %d", a.status)
	}
	if n := len(f.changes); n != 1 {
		t.Fatalf("%d changes went through; only the first was allowed", n)
	}
	if a := do(t, New(newFake(), Options{}).Handler(), "GET", "/api/authority", ""); a.status != 404 {
		t.Errorf("no Authority: %d, want 404", a.status)
	}
}
