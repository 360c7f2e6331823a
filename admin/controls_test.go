package admin

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/proxy/controls"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// quietKind is a kind declared by this test alone: the admin API sets and
// lifts it without a line of its own, as it will any kind declared in
// package controls.
var quietKind = controls.Register(&controls.Kind{
	Name: "quiet_test", Merge: controls.Strictest, Effect: controls.EffectRefusal, Pattern: true,
	Check: func(_ string, v int64) error {
		if v < 0 || v > 9 {
			return fmt.Errorf("quiet_test must be 0..9, got %d", v)
		}
		return nil
	},
	Parse: func(s string) (int64, error) {
		var v int64
		_, err := fmt.Sscan(s, &v)
		return v, err
	},
	Show:   func(v int64) string { return fmt.Sprintf("quiet level %d", v) },
	Refuse: func(controls.Control, string, sqlscan.Info) error { return nil },
})

// Any kind of control is set and lifted through PUT and DELETE
// /api/tags/{tag}/{kind}: for the fleet (the row as the kind checks it)
// or this instance (recording the credential's name), with a write
// credential only; the answer says what holds here now, /api/controls
// and the status page list it with where it is lifted.
func TestGenericControls(t *testing.T) {
	f, fl := newFake(), &fakeFleet{}
	h := New(f, withCredentials(Options{Fleet: fl})).Handler()
	for _, c := range []struct{ method, target, hdr string }{
		{"PUT", "/api/tags/report_*/quiet_test?value=3", ""},
		{"DELETE", "/api/tags/report_*/quiet_test", ""},
		{"PUT", "/api/tags/report_*/quiet_test?value=3", asReader},
	} {
		var hdr []string
		if c.hdr != "" {
			hdr = append(hdr, c.hdr)
		}
		if a := do(t, h, c.method, c.target, "", hdr...); a.status != 401 && a.status != 403 {
			t.Errorf("%s %s without a write credential: %d %s", c.method, c.target, a.status, a.body)
		}
	}
	if calls, set := f.recorded(), fl.controls(); len(calls) != 0 || len(set) != 0 {
		t.Fatalf("refused changes reached the server %q or the fleet %+v", calls, set)
	}

	a := do(t, h, "PUT", "/api/tags/report_*/quiet_test?value=3&reason=INC-5&for=30m&by=alice", "", asWriter)
	set := fl.controls()
	if a.status != 200 || len(set) != 1 || set[0].Tag != "report_*" || set[0].Kind != "quiet_test" || set[0].Value != 3 ||
		set[0].Reason != "INC-5" || set[0].SetBy != "oncall/alice" || !strings.Contains(a.body, `"scope": "fleet"`) ||
		!strings.Contains(a.body, `"shown": "quiet level 3"`) {
		t.Fatalf("fleet set: %d %s; fleet %+v", a.status, a.body, set)
	}
	if a := do(t, h, "DELETE", "/api/tags/report_*/quiet_test", "", asWriter); a.status != 200 || !slices.Contains(fl.removed, "quiet_test report_*") {
		t.Errorf("fleet lift: %d %s; removed %q", a.status, a.body, fl.removed)
	}

	a = do(t, h, "PUT", "/api/tags/report_*/quiet_test?value=4&local=1&reason=try", "", asWriter)
	if a.status != 200 || !strings.Contains(a.body, `"in_force_here": true`) || !strings.Contains(a.body, `"here_now": "quiet level 4"`) ||
		!strings.Contains(a.body, `"set_by": "oncall"`) {
		t.Errorf("local set: %d %s", a.status, a.body)
	}
	var st struct {
		Here []struct{ Kind, Tag, Shown, Source, Lift string } `json:"controls_here"`
	}
	decode(t, do(t, h, "GET", "/api/status", ""), &st)
	if len(st.Here) != 1 || st.Here[0].Shown != "quiet level 4" || st.Here[0].Lift != "/api/tags/report_%2A/quiet_test" || st.Here[0].Source != "local" {
		t.Errorf("the status page's controls here: %+v", st.Here)
	}
	if a := do(t, h, "GET", "/api/controls", ""); !strings.Contains(a.body, `"here": [`) || !strings.Contains(a.body, `"kind": "quiet_test"`) {
		t.Errorf("/api/controls lacks the control here: %s", a.body)
	}
	if a := do(t, h, "DELETE", "/api/tags/report_*/quiet_test?local=1", "", asWriter); a.status != 200 || !strings.Contains(a.body, `"in_force_here": false`) {
		t.Errorf("local lift: %d %s", a.status, a.body)
	}
	if got, want := f.recorded(), []string{"control quiet_test report_* try oncall", "lift quiet_test report_*"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}

	for _, c := range []struct {
		method, target string
		status         int
		want           string
	}{
		{"PUT", "/api/tags/x/quiet_test?value=12", 400, "value: quiet_test must be 0..9, got 12"},
		{"PUT", "/api/tags/x/throttle?value=1", 404, `\"throttle\" is not a kind of control`},
		{"PUT", "/api/tags/x/drain", 404, "a drain is set and lifted through /api/tags/{tag}/drain"},
		{"DELETE", "/api/tags/x/max_txn", 404, "/api/tags/{tag}/max_transaction_time"},
		{"PUT", "/api/tags/a%20b/quiet_test?value=1", 400, "is not a tag or a tag pattern"},
	} {
		a := do(t, h, c.method, c.target, "", asWriter)
		if a.status != c.status || !strings.Contains(a.body, c.want) {
			t.Errorf("%s %s: %d %s, want %d with %q", c.method, c.target, a.status, a.body, c.status, c.want)
		}
	}
}
