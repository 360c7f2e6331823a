package bench

import (
	"strings"
	"testing"
	"time"
)

// The report's arithmetic on a made-up run: classes, lies, lost writes,
// errors after the switch, transactions open at the flip, added latency,
// and the acceptance checks built on them.
func TestSwitchoverReport(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := swEvents{start: t0, fault: at(10000), ended: at(10500)}
	ev.retired = at(10010)
	ans := []swAnswer{
		{path: pathHoldfast, ids: []int64{1}, start: at(100), end: at(102)},                                       // ok, 2 ms baseline
		{path: pathHoldfast, ids: []int64{2}, start: at(9999), end: at(10001), code: codeReadOnly},                // 1290 before retirement
		{path: pathHoldfast, ids: []int64{3}, start: at(10020), end: at(10021), code: codeReadOnly},               // 1290 after it
		{path: pathHoldfast, ids: []int64{4, 5}, txn: true, start: at(9990), end: at(10100), code: codeSwitching}, // open at the flip
		{path: pathHoldfast, ids: []int64{6}, start: at(10100), end: at(10902)},                                   // waited 802 ms, ok
		{path: pathHoldfast, ids: []int64{7}, start: at(10600), end: at(10601), code: codeLost},                   // in doubt, after the end
		{path: pathHoldfast, ids: []int64{8}, start: at(10700), end: at(10701), code: 1062},                       // says nothing ran, but 8 is there
		{path: pathDirect, ids: []int64{9}, start: at(200), end: at(201)},                                         // ok but lost
	}
	r := &swReport{scenario: "planned", ev: ev, answers: ans, have: map[int64]bool{1: true, 6: true, 7: true, 8: true}}
	p := r.analyse(pathHoldfast)
	if p.ops != 7 || p.ok != 2 || p.readOnly != 2 || p.readOnlyAfterRetire != 1 || p.openAtFlip != 1 || p.switchingOpen != 1 ||
		p.inDoubt != 1 || p.inDoubtCommitted != 1 || p.lies != 1 || p.afterEnd != 2 || p.lostAcked != 0 {
		t.Fatalf("holdfast path: %+v", p)
	}
	if p.worst != 800*time.Millisecond || !p.worstAt.Equal(at(10100)) {
		t.Fatalf("worst added latency %v at %v, want 800ms at 10.1s", p.worst, p.worstAt)
	}
	if d := r.analyse(pathDirect); d.lostAcked != 1 || d.ok != 1 {
		t.Fatalf("direct path: %+v", d)
	}
	var failed []string
	for _, c := range r.checks() {
		if !c.met {
			failed = append(failed, c.what)
		}
	}
	want := "0 errors other than 9010|0 errors begun after the switch ended|no write answered by a read-only server"
	if strings.Join(failed, "|") != want {
		t.Fatalf("failed checks %q, want %q", failed, want)
	}
	r.scenario = "kill"
	ev.promoted = at(10500)
	r.ev = ev
	if p := r.analyse(pathHoldfast); p.resumeAfter != 402*time.Millisecond {
		t.Fatalf("writes resumed %v after the promotion, want 402ms (the write that waited through it)", p.resumeAfter)
	}
	for _, c := range r.checks() {
		if strings.HasPrefix(c.what, "every answer true") == c.met {
			t.Errorf("kill check %q: met %v (%s)", c.what, c.met, c.got)
		}
	}
}

// The pause scenario's checks: the pause taken by holdfast, no error at
// all (not even 9010), latency within the pause's length plus a second;
// and the kill scenario's lost acknowledged writes.
func TestSwitchoverPauseAndKillChecks(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := swEvents{start: t0, fault: at(10000), flip: at(10300), ended: at(11000), paused: at(10000), lifted: at(11000),
		pauseSet: "ok", pauseLift: "ok"}
	ans := []swAnswer{
		{path: pathHoldfast, ids: []int64{1}, start: at(100), end: at(102)},
		{path: pathHoldfast, ids: []int64{2, 3}, txn: true, start: at(10010), end: at(11050)}, // waited out the pause
	}
	r := &swReport{scenario: "pause", ev: ev, answers: ans, have: map[int64]bool{1: true, 2: true, 3: true}}
	failed := func() (out []string) {
		for _, c := range r.checks() {
			if !c.met {
				out = append(out, c.what)
			}
		}
		return out
	}
	if f := failed(); len(f) != 0 {
		t.Fatalf("failed checks %q, want none", f)
	}
	r.answers = append(r.answers, swAnswer{path: pathHoldfast, ids: []int64{4}, start: at(10500), end: at(10600), code: codeSwitching})
	r.ev.pauseSet = "404 Not Found: no such kind"
	if f := strings.Join(failed(), "|"); f != "the pause set and lifted through the admin API|0 errors at all" {
		t.Fatalf("failed checks %q", f)
	}
	r.scenario, r.ev.promoted = "kill", at(10500)
	delete(r.have, 3)
	if f := strings.Join(failed(), "|"); f != "0 acknowledged writes lost (the replica's relay log applied)" {
		t.Fatalf("failed checks %q", f)
	}
}
