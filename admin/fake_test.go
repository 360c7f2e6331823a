package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/fleet"
	"github.com/holdfast-db/holdfast/proxy"
	"github.com/holdfast-db/holdfast/proxy/controls"
)

// fakeServer is a Server whose answers the test sets, recording the
// on-call calls made on it.
type fakeServer struct {
	mu      sync.Mutex // guards following
	stats   proxy.ServerStats
	waiting proxy.Waiting
	tags    []proxy.TagInfo
	holders []proxy.HolderInfo
	gates   []proxy.GateState
	folded  uint64
	calls   []string
	classes map[string]string
	here    []proxy.ControlState // local controls of kinds without routes of their own
}

// locked returns what get reads of f, under f.mu.
func locked[T any](f *fakeServer, get func() T) T {
	f.mu.Lock()
	defer f.mu.Unlock()
	return get()
}

func (f *fakeServer) Stats() proxy.ServerStats {
	return locked(f, func() proxy.ServerStats { return f.stats })
}

func (f *fakeServer) Waiting() proxy.Waiting {
	return locked(f, func() proxy.Waiting { return f.waiting })
}

func (f *fakeServer) TagsFolded() uint64 { return locked(f, func() uint64 { return f.folded }) }

func (f *fakeServer) Tags() []proxy.TagInfo {
	return locked(f, func() []proxy.TagInfo { return append([]proxy.TagInfo(nil), f.tags...) })
}

func (f *fakeServer) Holders() []proxy.HolderInfo {
	return locked(f, func() []proxy.HolderInfo { return append([]proxy.HolderInfo(nil), f.holders...) })
}

func (f *fakeServer) Gates() []proxy.GateState {
	return locked(f, func() []proxy.GateState { return append([]proxy.GateState(nil), f.gates...) })
}

func (f *fakeServer) DrainTag(tag, reason string, grace time.Duration) {
	f.record("drain " + tag + " " + reason + " " + grace.String())
	f.gate(tag, func(g *proxy.GateState) { g.Drained, g.Reason = true, reason })
}

func (f *fakeServer) UndrainTag(tag string) {
	f.record("undrain " + tag)
	f.gate(tag, func(g *proxy.GateState) { g.Drained, g.Reason = false, "" })
}

func (f *fakeServer) SetMaxTransactionTime(tag string, d time.Duration) {
	f.record("maxtxn " + tag + " " + d.String())
	f.gate(tag, func(g *proxy.GateState) { g.MaxTransactionTime = d })
}

func (f *fakeServer) SetTagClass(pattern, class string) error {
	f.record("class " + pattern + " " + class)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.classes == nil {
		f.classes = map[string]string{}
	}
	f.classes[pattern] = class
	return nil
}

func (f *fakeServer) Replicas() []proxy.ReplicaState { return nil }

func (f *fakeServer) SetTagRoute(string, string) error { return errors.New("no replicas") }

func (f *fakeServer) RouteOf(string) string { return "primary" }

func (f *fakeServer) ClassStats() []proxy.ClassStat {
	return []proxy.ClassStat{{Class: "critical"}, {Class: "normal"}, {Class: "background"}}
}

func (f *fakeServer) ClassOf(tag string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.classes[tag]; c != "" {
		return c
	}
	return "normal"
}

func (f *fakeServer) LimitTag(tag string, n int) {
	f.record("limit " + tag + " " + strings.Repeat("I", n))
	f.gate(tag, func(g *proxy.GateState) { g.Limit, g.Limited = n, n > 0 })
}

func (f *fakeServer) SetControl(kind, key string, value int64, reason, setBy string) error {
	k := controls.KindNamed(kind)
	if k == nil {
		return errors.New("no such kind")
	}
	if err := k.Validate(key, value); err != nil {
		return err
	}
	f.record("control " + kind + " " + key + " " + reason + " " + setBy)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.here = slices.DeleteFunc(f.here, func(c proxy.ControlState) bool { return c.Kind == kind && c.Tag == key })
	f.here = append(f.here, proxy.ControlState{Kind: kind, Tag: key, Value: value, Shown: k.ShowValue(value), Source: "local", Reason: reason, SetBy: setBy})
	return nil
}

func (f *fakeServer) LiftControl(kind, key string) error {
	f.record("lift " + kind + " " + key)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.here = slices.DeleteFunc(f.here, func(c proxy.ControlState) bool { return c.Kind == kind && c.Tag == key })
	return nil
}

func (f *fakeServer) Controls() []proxy.ControlState {
	return locked(f, func() []proxy.ControlState { return slices.Clone(f.here) })
}

func (f *fakeServer) ControlOf(kind, key string) (proxy.ControlState, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.here {
		if c.Kind == kind && (c.Tag == key || controls.Match(c.Tag, key)) {
			return c, true
		}
	}
	return proxy.ControlState{}, false
}

// gate changes (or adds) tag's gate as the proxy would show it.
func (f *fakeServer) gate(tag string, change func(*proxy.GateState)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.gates {
		if f.gates[i].Tag == tag {
			change(&f.gates[i])
			return
		}
	}
	g := proxy.GateState{Tag: tag}
	change(&g)
	f.gates = append(f.gates, g)
}

func (f *fakeServer) record(c string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
}

func (f *fakeServer) recorded() []string {
	return locked(f, func() []string { return append([]string(nil), f.calls...) })
}

func (f *fakeServer) set(fn func(f *fakeServer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(f)
}

func newListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// answer is one response, its body read.
type answer struct {
	status int
	header http.Header
	body   string
}

// do sends a request to h and reads the answer; host ("" means
// 127.0.0.1:6034, "-" none) and the headers in hdr ("Name: value") are set
// on it, "Remote-Addr: host:port" as the peer's address (192.0.2.1:1234
// without).
func do(t *testing.T, h http.Handler, method, target, host string, hdr ...string) answer {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	switch host {
	case "":
		host = "127.0.0.1:6034"
	case "-":
		host = ""
	}
	req.Host = host
	for _, kv := range hdr {
		k, v, _ := strings.Cut(kv, ": ")
		if k == "Remote-Addr" { // not a header: the peer's address
			req.RemoteAddr = v
			continue
		}
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	b, _ := io.ReadAll(rec.Result().Body)
	return answer{rec.Code, rec.Result().Header, string(b)}
}

// decode unmarshals an answer's body into v.
func decode(t *testing.T, a answer, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(a.body), v); err != nil {
		t.Fatalf("%v: %s", err, a.body)
	}
}

// The tests' credentials: oncall may write, prometheus may read.
const (
	writeToken = "w-0123456789abcdef"
	readToken  = "r-0123456789abcdef"
	asWriter   = "Authorization: Bearer " + writeToken
	asReader   = "Authorization: Bearer " + readToken
)

func testCredentials() []Credential {
	return []Credential{{Name: "oncall", Scope: ScopeWrite, Token: writeToken}, {Name: "prometheus", Scope: ScopeRead, Token: readToken}}
}

// withCredentials is o with the tests' credentials.
func withCredentials(o Options) Options {
	o.Credentials = testCredentials()
	return o
}

// fakeFleet is a Fleet recording the controls set and lifted.
type fakeFleet struct {
	mu      sync.Mutex // guards following
	set     []fleet.Control
	removed []string // "kind tag"
}

func (f *fakeFleet) Set(_ context.Context, c fleet.Control, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.set = append(f.set, c)
	return nil
}

func (f *fakeFleet) Remove(_ context.Context, tag string, kind fleet.Kind) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, string(kind)+" "+tag)
	return true, nil
}

func (f *fakeFleet) Status() fleet.Status { return fleet.Status{Known: true} }

func (f *fakeFleet) controls() []fleet.Control {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fleet.Control(nil), f.set...)
}
