package controls

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// ctl is a control for tests.
func ctl(k *Kind, key string, v int64) Control { return Control{Kind: k, Key: key, Value: v} }

// put builds a table from each source's controls.
func put(srcs map[Source][]Control) *Table {
	t := &Table{}
	for src, cs := range srcs {
		t.Replace(src, nil, cs)
	}
	return t
}

// The strictest of the sources' controls is in force: any drain drains,
// the smallest limit and max_transaction_time bind; between controls as
// strict, the weaker source's stays (the configuration's drain reason).
func TestStrictestMerge(t *testing.T) {
	tbl := put(map[Source][]Control{
		Config: {
			{Kind: DrainKind, Key: "report", Reason: "configured"},
			ctl(LimitKind, "report", 5), ctl(LimitKind, "search", 2),
			ctl(MaxTxnKind, "report", 2000),
		},
		Local: {ctl(LimitKind, "report", 3), ctl(MaxTxnKind, "report", 5000)},
		Fleet: {
			{Kind: DrainKind, Key: "report", Reason: "INC-1", SetBy: "oncall"},
			{Kind: LimitKind, Key: "report", Value: 4, Shared: true, Cap: 9},
			ctl(LimitKind, "search", 1),
			{Kind: DrainKind, Key: "checkout", Reason: "INC-2"},
		},
	})
	set := tbl.Load()
	for _, tc := range []struct {
		kind   *Kind
		key    string
		want   int64
		src    Source
		reason string
		none   bool
	}{
		{kind: DrainKind, key: "report", src: Config, reason: "configured"},
		{kind: DrainKind, key: "checkout", src: Fleet, reason: "INC-2"},
		{kind: DrainKind, key: "search", none: true},
		{kind: LimitKind, key: "report", want: 3, src: Local},
		{kind: LimitKind, key: "search", want: 1, src: Fleet},
		{kind: MaxTxnKind, key: "report", want: 2000, src: Config},
		{kind: MaxTxnKind, key: "checkout", none: true},
	} {
		c, ok := set.Lookup(tc.kind, tc.key)
		switch {
		case tc.none && ok:
			t.Errorf("%s of %s: %+v in force, want none", tc.kind, tc.key, c)
		case tc.none:
		case !ok || c.Value != tc.want || c.Source != tc.src || c.Reason != tc.reason:
			t.Errorf("%s of %s: %+v (%v), want %d from %s, reason %q", tc.kind, tc.key, c, ok, tc.want, tc.src, tc.reason)
		}
	}
	for key, free := range map[string]bool{"report": false, "search": false, "checkout": false, "cart": true} {
		if got := tbl.Free(key); got != free {
			t.Errorf("Free(%s) = %v, want %v", key, got, free)
		}
	}
	// The fleet's share of a cap, stricter than the local limit, wins
	// whole: the share with the cap it is a share of.
	tbl.Put(Local, ctl(LimitKind, "report", 6))
	if c, _ := tbl.Load().Lookup(LimitKind, "report"); c.Value != 4 || !c.Shared || c.Cap != 9 || c.Show() != "at most 4 here, of 9 fleet-wide" {
		t.Errorf("report's limit: %+v %q, want the fleet's share 4 of 9", c, c.Show())
	}
}

// A local lift takes the configuration's control of its kind off a key
// (on-call undraining a configured drain), not the fleet's; putting a
// local control again ends the lift, and a lift of what the
// configuration no longer has is forgotten.
func TestLocalLift(t *testing.T) {
	tbl := put(map[Source][]Control{Config: {{Kind: DrainKind, Key: "report", Reason: "configured"}, ctl(LimitKind, "report", 2)}})
	if tbl.Free("report") {
		t.Fatal("configured drain not in force")
	}
	tbl.Put(Local, Control{Kind: DrainKind, Key: "report", Reason: "INC-3"})
	if !tbl.Lift(Local, DrainKind, "report") {
		t.Error("Lift of the local drain says there was none")
	}
	if _, ok := tbl.Load().Lookup(DrainKind, "report"); ok {
		t.Error("the configured drain is in force after a local lift")
	}
	if _, ok := tbl.Load().Lookup(LimitKind, "report"); !ok {
		t.Error("a lift of the drain lifted the limit too")
	}
	if tbl.Lift(Local, DrainKind, "report") {
		t.Error("a second lift says there was a drain")
	}
	tbl.Put(Local, Control{Kind: DrainKind, Key: "report", Reason: "again"})
	if c, ok := tbl.Load().Lookup(DrainKind, "report"); !ok || c.Source != Config {
		t.Errorf("after a local drain again: %+v %v, want the configuration's in force again (the first of equals)", c, ok)
	}
	tbl.Lift(Local, DrainKind, "report")
	tbl.Put(Fleet, Control{Kind: DrainKind, Key: "report", Reason: "fleet"})
	if c, ok := tbl.Load().Lookup(DrainKind, "report"); !ok || c.Source != Fleet {
		t.Errorf("a local lift lifted the fleet's drain: %+v %v", c, ok)
	}
	tbl.Lift(Fleet, DrainKind, "report")

	// The configuration drops it: the lift is forgotten, and when the
	// configuration has it again, it is in force.
	tbl.Replace(Config, []*Kind{DrainKind}, nil)
	if n := len(tbl.Of(Local, DrainKind)); n != 0 {
		t.Errorf("%d local lifts kept after the configuration dropped the drain", n)
	}
	tbl.Replace(Config, []*Kind{DrainKind}, []Control{{Kind: DrainKind, Key: "report"}})
	if tbl.Free("report") {
		t.Error("the configured drain is not in force again")
	}
	// A lift alone puts nothing in force: with the configuration's
	// controls lifted, the table is empty (the one-load fast path).
	tbl.Lift(Local, DrainKind, "report")
	tbl.Lift(Local, LimitKind, "report")
	if tbl.Load() != nil {
		t.Errorf("controls in force with every one lifted: %+v", tbl.Load().InForce())
	}
}

// Class and route take precedence by source: the fleet's over this
// instance's over the configuration's, each source's exact tag before its
// patterns, and patterns in the order of their values.
func TestPrecedence(t *testing.T) {
	tbl := put(map[Source][]Control{
		Fleet:  {ctl(ClassKind, "report_daily", int64(Normal)), ctl(RouteKind, "report_*", int64(RoutePrimary))},
		Local:  {ctl(ClassKind, "report_*", int64(Critical)), ctl(RouteKind, "report_daily", int64(RouteReplica))},
		Config: {ctl(ClassKind, "report_*", int64(Background)), ctl(ClassKind, "checkout_*", int64(Critical)), ctl(ClassKind, "*_x", int64(Background)), ctl(ClassKind, "checkout_x", int64(Normal)), ctl(RouteKind, "*", int64(RouteReplicaStaleOK))},
	})
	for tag, want := range map[string]Class{
		"report_daily":  Normal,   // the fleet's exact tag
		"report_hourly": Critical, // the local pattern beats the config's
		"checkout_y":    Critical,
		"checkout_x":    Normal, // the config's exact tag before its patterns
		"cart_x":        Background,
		"cart":          Normal,
	} {
		if got := tbl.Class(tag); got != want {
			t.Errorf("class of %s: %v, want %v", tag, got, want)
		}
	}
	if !tbl.BackgroundCapped() {
		t.Error("a table naming background does not say so")
	}
	for tag, want := range map[string]Route{
		"report_daily": RoutePrimary, // the fleet's pattern beats a local exact tag
		"cart":         RouteReplicaStaleOK,
	} {
		if got := tbl.Route(tag); got != want {
			t.Errorf("route of %s: %v, want %v", tag, got, want)
		}
	}
	// Patterns of one source in value order: critical before background.
	tbl2 := put(map[Source][]Control{Config: {ctl(ClassKind, "a*", int64(Background)), ctl(ClassKind, "*b", int64(Critical))}})
	if got := tbl2.Class("ab"); got != Critical {
		t.Errorf("a tag matching a background and a critical pattern: %v, want critical", got)
	}
	tbl2.Replace(Config, nil, []Control{ctl(ClassKind, "*b", int64(Critical))})
	if tbl2.BackgroundCapped() {
		t.Error("no class names background, yet the background cap applies")
	}
}

// With no control in force, every question is answered from one atomic
// load, without allocating; with controls on other keys, without
// allocating either.
func TestNoControlsFastPath(t *testing.T) {
	var tbl Table
	info := sqlscan.Info{Kind: sqlscan.KindInsert, Statements: 1}
	check := func(what string) {
		t.Helper()
		if !tbl.Free("checkout") || tbl.Class("checkout") != Normal || tbl.Route("checkout") != RoutePrimary || tbl.Refuse("checkout", &info) != nil {
			t.Errorf("%s: checkout is controlled", what)
		}
		if n := testing.AllocsPerRun(100, func() {
			_ = tbl.Free("checkout")
			_ = tbl.Class("checkout")
			_ = tbl.Route("checkout")
			_ = tbl.BackgroundCapped()
			_ = tbl.Refuse("checkout", &info)
		}); n != 0 {
			t.Errorf("%s: %v allocations per lookup", what, n)
		}
	}
	check("no controls")
	if tbl.Load() != nil {
		t.Fatal("the zero table has controls in force")
	}
	tbl.Put(Fleet, ctl(LimitKind, "report", 2))
	tbl.Put(Config, ctl(ClassKind, "report", int64(Background)))
	check("controls on another tag")
	tbl.Lift(Fleet, LimitKind, "report")
	tbl.Replace(Config, nil, nil)
	if tbl.Load() != nil {
		t.Errorf("controls in force after every one was lifted: %+v", tbl.Load().InForce())
	}
}

// Replacing a source's controls with the same ones publishes nothing (the
// fleet's poll says the same each second): the pattern caches stay warm.
// A change of one kind keeps the other kinds' merged sets as they were.
func TestReplaceKeepsUnchangedKinds(t *testing.T) {
	changes := 0
	tbl := &Table{OnChange: func(_, _ *Set) { changes++ }}
	fleetSet := func(share int64) []Control {
		return []Control{ctl(ClassKind, "report_*", int64(Background)), {Kind: LimitKind, Key: "capx", Value: share, Shared: true, Cap: 3}}
	}
	tbl.Replace(Fleet, nil, fleetSet(1))
	_ = tbl.Class("report_x") // fills the cache
	before := tbl.Load()
	tbl.Replace(Fleet, nil, fleetSet(1))
	if changes != 1 || tbl.Load() != before {
		t.Fatalf("the same controls again: %d changes, set replaced %v", changes, tbl.Load() != before)
	}
	tbl.Replace(Fleet, nil, fleetSet(2))
	after := tbl.Load()
	if changes != 2 || after.kinds[ClassKind.id] != before.kinds[ClassKind.id] || after.kinds[LimitKind.id] == before.kinds[LimitKind.id] {
		t.Errorf("a cap's share moved: %d changes; class set kept %v, limit set rebuilt %v",
			changes, after.kinds[ClassKind.id] == before.kinds[ClassKind.id], after.kinds[LimitKind.id] != before.kinds[LimitKind.id])
	}
	if c, _ := after.Lookup(LimitKind, "capx"); c.Value != 2 {
		t.Errorf("capx's share: %d, want 2", c.Value)
	}
}

// OnChange is told each change in order, with the keys whose admission
// controls changed (Changed) and nothing else.
func TestOnChangeTellsChangedKeys(t *testing.T) {
	var got []string
	tbl := &Table{}
	tbl.OnChange = func(old, cur *Set) {
		var keys []string
		for _, k := range []*Kind{DrainKind, LimitKind, MaxTxnKind} {
			Changed(old, cur, k, func(key string) { keys = append(keys, k.Name+":"+key) })
		}
		slices.Sort(keys)
		got = append(got, strings.Join(keys, ","))
	}
	tbl.Replace(Config, nil, []Control{ctl(LimitKind, "a", 2), ctl(LimitKind, "b", 3)})
	tbl.Put(Local, ctl(LimitKind, "a", 5))                                  // not stricter: nothing changes in force
	tbl.Put(Fleet, ctl(LimitKind, "b", 1))                                  // b tighter
	tbl.Put(Local, ctl(ClassKind, "x", int64(Critical)))                    // no admission change
	tbl.Replace(Config, []*Kind{LimitKind}, nil)                            // a: local 5 now; b: fleet's 1 still
	tbl.Put(Local, Control{Kind: DrainKind, Key: "shape/0123456789abcdef"}) // a shape blocked
	want := []string{"limit:a,limit:b", "", "limit:b", "", "limit:a", "drain:shape/0123456789abcdef"}
	if !slices.Equal(got, want) {
		t.Errorf("changes told:\n got %q\nwant %q", got, want)
	}
	if tbl.Free("shape/0123456789abcdef") {
		t.Error("a blocked shape is free")
	}
}

// Pattern lookups are cached, bounded: past the bound they are still
// answered right, resolved each time.
func TestPatternCacheBound(t *testing.T) {
	tbl := put(map[Source][]Control{Config: {ctl(ClassKind, "bg_*", int64(Background))}})
	for i := range maxCache + 100 {
		tag := fmt.Sprintf("bg_%d", i)
		if i%2 == 1 {
			tag = fmt.Sprintf("fg_%d", i)
		}
		want := Background
		if i%2 == 1 {
			want = Normal
		}
		if got := tbl.Class(tag); got != want {
			t.Fatalf("class of %s: %v, want %v", tag, got, want)
		}
	}
	if n := tbl.Load().kinds[ClassKind.id].cached.Load(); n != maxCache {
		t.Errorf("%d lookups cached, want the bound %d", n, maxCache)
	}
}

// The fleet and the admin API check controls by the kind's declaration.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		kind, key string
		value     int64
		err       string // "" valid; else a part of the error
	}{
		{"drain", "checkout", 30000, ""},
		{"drain", "shape/0123456789abcdef", 0, ""},
		{"drain", "shape/0123456789abcdef", 5, "has no grace"},
		{"drain", "shape/XYZ", 0, "16 lower-case hex digits"},
		{"drain", "report_*", 0, "names one tag, not a pattern"},
		{"drain", "", 0, "tag must be 1..64 bytes"},
		{"drain", strings.Repeat("x", 65), 0, "tag must be 1..64 bytes"},
		{"limit", "checkout", 0, ""},
		{"limit", "checkout", -1, "0 or more"},
		{"max_txn", "checkout", 0, "must be positive"},
		{"class", "report_*", 2, ""},
		{"class", "report", 7, "class must be one of [critical normal background], got value 7"},
		{"class", "shape/0123456789abcdef", 0, "not given a class"},
		{"route", "report_*", 3, "route must be one of"},
		{"throttle", "checkout", 5, `got "throttle"`},
	} {
		err := ValidateNamed(tc.kind, tc.key, tc.value)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s %s %d: %v, want valid", tc.kind, tc.key, tc.value, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s %s %d: %v, want an error with %q", tc.kind, tc.key, tc.value, err, tc.err)
		}
	}
	if v, err := ClassKind.ParseValue("report_*", "background"); err != nil || v != int64(Background) {
		t.Errorf("class background: %d %v", v, err)
	}
	if v, err := DrainKind.ParseValue("checkout", "30s"); err != nil || v != 30000 {
		t.Errorf("drain 30s: %d %v", v, err)
	}
	if _, err := RouteKind.ParseValue("x", "sideways"); err == nil {
		t.Error("route sideways parsed")
	}
}

// What is in force lists every kind's controls: exact keys merged (with
// the source in force), patterns as each source set them.
func TestInForce(t *testing.T) {
	tbl := put(map[Source][]Control{
		Config: {ctl(LimitKind, "a", 5), ctl(ClassKind, "r_*", int64(Background))},
		Fleet:  {{Kind: LimitKind, Key: "a", Value: 2, SetBy: "oncall"}, ctl(ClassKind, "r_*", int64(Critical))},
	})
	var got []string
	for _, c := range tbl.Load().InForce() {
		got = append(got, fmt.Sprintf("%s %s %s %s", c.Kind, c.Key, c.Show(), c.Source))
	}
	want := []string{"limit a at most 2 fleet", "class r_* class background config", "class r_* class critical fleet"}
	if !slices.Equal(got, want) {
		t.Errorf("in force:\n got %q\nwant %q", got, want)
	}
}

// Lookups race with changes (run with -race): every answer is one of the
// sets published.
func TestConcurrentLookups(t *testing.T) {
	var tbl Table
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if c := tbl.Class("report_x"); c != Normal && c != Background {
					t.Errorf("class %v", c)
				}
				_ = tbl.Free("report_x")
				_ = tbl.Load().InForce()
			}
		})
	}
	for i := range 500 {
		if i%2 == 0 {
			tbl.Put(Fleet, ctl(ClassKind, "report_*", int64(Background)))
			tbl.Put(Local, ctl(LimitKind, "report_x", int64(i)))
		} else {
			tbl.Replace(Fleet, nil, nil)
			tbl.Lift(Local, LimitKind, "report_x")
		}
	}
	close(stop)
	wg.Wait()
}

// policyControls is the method set the data path's policy asks of the
// controls (the consumer, proxy/policy, declares it): Table has it.
type policyControls interface {
	Free(key string) bool
	Class(key string) Class
	BackgroundCapped() bool
	Route(key string) Route
	Refuse(key string, info *sqlscan.Info) error
}

var _ policyControls = (*Table)(nil)
