package ctl

import (
	"encoding/json"
	"strings"
	"testing"
)

// GET /api/controls with a cap shared by three instances and two rows the
// instance ignores.
const controlsJSON = `{"fleet":true,"instance_id":"pod-b","known":true,"stale":false,"no_schema":false,"error":"",
 "last_read":"2026-03-01T12:00:00Z",
 "controls":[{"tag":"capx","kind":"limit","value":3,"set_by":"oncall","reason":"INC-7","set_at":"2026-03-01T11:58:00Z"}],
 "ignored":[{"tag":"checkout","kind":"throttle","value":5,"set_by":"newer-holdfast","reason":"","set_at":"2026-03-01T11:59:00Z","ignored_because":"kind must be drain, limit, max_txn, class or route, got \"throttle\""},
  {"tag":"report","kind":"class","value":7,"set_by":"by-hand","reason":"","set_at":"2026-03-01T11:59:30Z","ignored_because":"class must be one of [critical normal background], got value 7"}],
 "truncated":false,
 "caps":[{"tag":"capx","cap":3,"granted":1,"share":1,"admits":1,"renewed":"2026-03-01T12:00:00Z","grants":[
  {"instance_id":"pod-a","granted":1,"wanted":8,"share":1},
  {"instance_id":"pod-b","granted":1,"wanted":8,"share":1},
  {"instance_id":"pod-c","granted":1,"wanted":7,"share":1}]}],
 "here":[{"kind":"limit","tag":"capx","value":1,"shown":"at most 1 here, of 3 fleet-wide","source":"fleet","set_by":"oncall"},
  {"kind":"class","tag":"report_*","value":2,"shown":"class background","source":"config"}]}`

// holdfastctl controls shows the controls in force, the rows ignored (as
// ignored, with why, never among those in force) and each instance's
// grant, share and demand of a fleet-wide cap.
func TestControlsShowsIgnoredAndShares(t *testing.T) {
	var cs Controls
	if err := json.Unmarshal([]byte(controlsJSON), &cs); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := writeControls(&out, cs); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	t.Logf("\n%s", got)
	inForce, rest, ok := strings.Cut(got, "IGNORED")
	if !ok {
		t.Fatalf("no IGNORED section:\n%s", got)
	}
	if strings.Contains(inForce, "throttle") || strings.Contains(inForce, "by-hand") || !strings.Contains(inForce, "capx") {
		t.Errorf("the controls in force list an ignored row, or miss the cap:\n%s", inForce)
	}
	for _, want := range []string{"2 row(s)", `got "throttle"`, "got value 7",
		"pod-a", "pod-b (this)", "pod-c", "DEMAND"} {
		if !strings.Contains(rest, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	_, here, ok := strings.Cut(rest, "IN FORCE ON THIS INSTANCE")
	if !ok || !strings.Contains(here, "at most 1 here, of 3 fleet-wide") || !strings.Contains(here, "class background") ||
		strings.Contains(here, "throttle") {
		t.Errorf("the controls in force on the instance, from every source, are not shown (or show an ignored row):\n%s", here)
	}
	for _, ln := range strings.Split(rest, "\n") {
		if strings.Contains(ln, "pod-c") && !strings.HasSuffix(strings.TrimSpace(ln), "1       1       7") {
			t.Errorf("pod-c's line %q: want grant 1, share 1, demand 7", ln)
		}
	}
}

// holdfastctl controls warns of a control in force on only part of the
// fleet, naming the instances that cannot apply it.
func TestControlsWarnsNotEverywhere(t *testing.T) {
	var cs Controls
	if err := json.Unmarshal([]byte(controlsJSON), &cs); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := writeControls(&out, cs); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "WARNING") {
		t.Errorf("a warning with every control applied everywhere:\n%s", out.String())
	}
	cs.NotEverywhere = []Unapplied{{Tag: "checkout", Kind: "throttle", NotBy: []string{"pod-b", "pod-c"}, Live: 3}}
	out.Reset()
	if err := writeControls(&out, cs); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", out.String())
	for _, want := range []string{"WARNING: 1 control(s) in force on only part of the fleet", "pod-b, pod-c (2 of 3 live instances)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
