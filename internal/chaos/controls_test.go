package chaos

import (
	"strings"
	"testing"
	"time"
)

// The controller's log: a lift whose answer was lost ends the certainty
// at its start (it may have been lifted) and keeps the control possible;
// a set that answers makes it certain again one bound later.
func TestControlLogFailedLift(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var l controlLog
	l.set("drain", at(0), at(1), true, 0)
	l.lift("drain", at(10), at(11), false) // lost: maybe lifted
	l.set("drain", at(20), at(21), true, 0)
	l.lift("drain", at(30), at(31), true)
	ws := l.windows("drain")
	if len(ws) != 2 {
		t.Fatalf("windows %+v, want two", ws)
	}
	first, second := ws[0], ws[1]
	if !first.sureFrom.Equal(at(1).Add(controlBound)) || !first.sureUntil.Equal(at(10)) {
		t.Fatalf("first window certain %v..%v, want %v..%v", first.sureFrom, first.sureUntil, at(1).Add(controlBound), at(10))
	}
	if !second.mayFrom.Equal(at(10)) || !second.sureFrom.Equal(at(21).Add(controlBound)) || !second.sureUntil.Equal(at(30)) {
		t.Fatalf("second window %+v: want possible from the lost lift, certain from the next set plus the bound", second)
	}
	if !first.mayUntil.After(second.mayFrom) {
		t.Fatalf("a gap between the windows: %v .. %v, though the drain was possible throughout", first.mayUntil, second.mayFrom)
	}
}

// A drain with an expiry, then another drain and a lift before that
// expiry (as a chaos run did): the lift ends the drain then, so the
// expiring drain is certain only until the next request starts, not
// until its expiry.
func TestControlLogLiftBeforeExpiry(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var l controlLog
	l.set("drain", at(0), at(10), true, 0)                  // no expiry
	l.set("drain", at(2000), at(2010), true, 6*time.Second) // now until 8 s
	l.set("drain", at(4000), at(4010), true, 0)             // no expiry again
	l.lift("drain", at(6000), at(6010), true)               // lifted at 6 s
	served := Call{Kind: Answered, Tag: tagDrained, Start: at(6100), End: at(6150)}
	if v := checkControls([]Call{served}, &l); len(v) != 0 {
		t.Fatalf("a call served after the lift was judged: %v (windows %+v)", v, l.windows("drain"))
	}
	before := Call{Kind: Answered, Tag: tagDrained, Start: at(3100), End: at(3150)}
	if v := checkControls([]Call{before}, &l); len(v) != 1 {
		t.Fatalf("a call served while the drain was certainly in force was not judged (windows %+v)", l.windows("drain"))
	}
}

// The check that caps are shared: an instance whose capped calls are only
// refused (9002) for longer than the bound, while it is up and another
// instance's are answered, is starved; one that was killed meanwhile, or
// whose wait is within the bound, is not.
func TestCheckShares(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var l controlLog
	l.set("limit", at(0), at(10), true, 0)
	l.lift("limit", at(60000), at(60010), true) // certain from 3 s to 60 s
	call := func(inst, endMs int, kind Kind, code uint16) Call {
		return Call{Instance: inst, Tag: tagCapped, Kind: kind, Code: code, Start: at(endMs - 100), End: at(endMs)}
	}
	shared := func(starvedFrom, starvedUntil int, extra ...Call) []Call {
		var cs []Call
		for ms := 3000; ms < 60000; ms += 500 {
			cs = append(cs, call(0, ms, Answered, 0))
			if ms < starvedFrom || ms >= starvedUntil {
				cs = append(cs, call(1, ms, Answered, 0))
			} else {
				cs = append(cs, call(1, ms, Failed, codeTagLimit))
			}
		}
		return append(cs, extra...)
	}
	if v := checkShares(shared(0, 0), l.windows("limit")); len(v) != 0 {
		t.Fatalf("both served throughout: %v", v)
	}
	if v := checkShares(shared(10000, 10000+int(starveBound/time.Millisecond)-500), l.windows("limit")); len(v) != 0 {
		t.Fatalf("a wait within the bound: %v", v)
	}
	v := checkShares(shared(10000, 40000), l.windows("limit"))
	if len(v) != 1 || v[0].Check != checkShared || !strings.Contains(v[0].Detail, "instance 1") {
		t.Fatalf("instance 1 refused for 30 s while instance 0 was served: %v, want one violation", v)
	}
	lostCall := Call{Instance: 1, Tag: tagDrained, Kind: NotSent, Start: at(24000), End: at(24100)}
	if v := checkShares(shared(10000, 40000, lostCall), l.windows("limit")); len(v) != 0 {
		t.Fatalf("instance 1 was killed in the stretch: %v", v)
	}
}
