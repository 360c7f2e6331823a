package chaos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
)

// world builds a journal and the database facts it is judged against.
type world struct {
	t     time.Time
	calls []Call
	f     facts
}

func newWorld() *world {
	return &world{t: time.Unix(1_700_000_000, 0), f: facts{byKey: map[string]*reservationRow{}, byID: map[uint64]*reservationRow{},
		initial: map[PoolKey]int64{{1, 1}: 100}, final: map[PoolKey]int64{{1, 1}: 100}}}
}

// call appends a call that starts 10 ms after the previous one and lasts 5 ms.
func (w *world) call(c Call) *world {
	w.t = w.t.Add(10 * time.Millisecond)
	c.Start, c.End = w.t, w.t.Add(5*time.Millisecond)
	if c.Proc == procReserve && c.Request == nil {
		c.Request, c.Locations = []Line{{Item: 1, Qty: 2}}, [][]int64{{1, 2}}
	}
	w.calls = append(w.calls, c)
	return w
}

// row records reservation id, made with key, in state (1 claimed: its 2
// units come off on_hand).
func (w *world) row(id uint64, key string, state int, kind string, releasedQty int64) *world {
	r := &reservationRow{ID: id, Key: key, State: state, ClaimKind: kind, ReleasedQty: releasedQty, Lines: []Line{{1, 1, 2}}}
	w.f.byKey[key], w.f.byID[id] = r, r
	if state == 1 {
		w.f.final[PoolKey{1, 1}] -= 2
	}
	return w
}

func reserved(key string, id uint64, replayed bool) Call {
	return Call{Proc: procReserve, Key: key, Kind: Answered, Token: token(id), Replayed: replayed, Lines: []Line{{1, 1, 2}}}
}

func claimed(id uint64, outcome string) Call {
	return Call{Proc: procClaim, Token: token(id), Kind: Answered, Outcome: outcome, Lines: []Line{{1, 1, 2}}}
}

func failed(proc, key string, id uint64, code uint16) Call {
	return Call{Proc: proc, Key: key, Token: tokenIf(proc, id), Kind: Failed, Code: code}
}

func lost(proc, key string, id uint64) Call {
	return Call{Proc: proc, Key: key, Token: tokenIf(proc, id), Kind: Unknown, Dropped: true, Msg: "invalid connection"}
}

func unknown9108(proc, key string, id uint64) Call {
	return Call{Proc: proc, Key: key, Token: tokenIf(proc, id), Kind: Unknown, Code: codeOutcomeUnknown}
}

func tokenIf(proc string, id uint64) string {
	if proc == procReserve {
		return ""
	}
	return token(id)
}

func TestJudgeTrueAnswers(t *testing.T) {
	w := newWorld().
		call(reserved("a", 1, false)).call(claimed(1, "claimed")).call(claimed(1, "duplicate")).row(1, "a", 1, "normal", -1).
		// A reserve lost under its COMMIT, then replayed: it took effect.
		call(unknown9108(procReserve, "b", 0)).call(reserved("b", 2, true)).
		// A claim lost, then answered duplicate by the repeat: the lost one claimed.
		call(lost(procClaim, "", 2)).call(claimed(2, "duplicate")).row(2, "b", 1, "normal", -1).
		// Busy, then done by the repeat with the same key.
		call(failed(procReserve, "c", 0, codeBusy)).call(reserved("c", 3, false)).
		call(Call{Proc: procRelease, Token: token(3), Kind: Answered, Outcome: "released", Qty: 2}).row(3, "c", 2, "", 2).
		// Unreachable: nothing.
		call(failed(procReserve, "d", 0, codeUnavailable)).
		// The primary switching (9010): nothing ran; the repeat made it,
		// and a claim answered 9010 claimed nothing until its repeat did.
		call(failed(procReserve, "g", 0, codeSwitching)).call(reserved("g", 5, false)).
		call(failed(procClaim, "", 5, codeSwitching)).call(claimed(5, "claimed")).row(5, "g", 1, "normal", -1).
		call(reserved("h", 6, false)).call(failed(procRelease, "", 6, codeSwitching)).row(6, "h", 0, "", -1).
		// Lost and never made.
		call(lost(procReserve, "e", 0)).call(failed(procReserve, "e", 0, codeBusy)).
		// Abandoned.
		call(reserved("f", 4, false)).row(4, "f", 0, "", -1)
	v := judge(w.calls, w.f, true, false, time.Minute)
	if len(v.Violations) != 0 {
		t.Fatalf("violations in a true journal: %v", v.Violations)
	}
	if r := v.Resolved[procReserve]["9108"]; r == nil || r.Effect != 1 || r.None != 0 {
		t.Errorf("reserve 9108 resolved %+v, want took effect 1", r)
	}
	if r := v.Resolved[procReserve]["connection lost"]; r == nil || r.Effect != 0 || r.None != 1 {
		t.Errorf("reserve lost resolved %+v, want none 1", r)
	}
	if r := v.Resolved[procClaim]["connection lost"]; r == nil || r.Effect != 1 {
		t.Errorf("claim lost resolved %+v, want took effect 1", r)
	}
	if got := v.ClaimedUnits[PoolKey{1, 1}]; got != 6 {
		t.Errorf("claimed units %d, want 6", got)
	}
}

func TestJudgeFindsUntrueAnswers(t *testing.T) {
	for _, c := range []struct {
		name  string
		w     *world
		died  bool
		check string
		about string
	}{
		{"an error took effect", newWorld().call(failed(procReserve, "a", 0, codeUnavailable)).row(1, "a", 0, "", -1),
			false, checkAnswers, "no call that could have made it"},
		{"a replay nobody made", newWorld().call(failed(procReserve, "a", 0, codeBusy)).call(reserved("a", 1, true)).row(1, "a", 0, "", -1),
			false, checkAnswers, "no call that could have made it"},
		{"a success that did not happen", newWorld().call(reserved("a", 1, false)),
			false, checkAnswers, "the database has none"},
		{"two fresh answers", newWorld().call(reserved("a", 1, false)).call(reserved("a", 1, false)).row(1, "a", 0, "", -1),
			false, checkAnswers, "replayed = 0"},
		{"a wrong token", newWorld().call(reserved("a", 2, false)).row(1, "a", 0, "", -1),
			false, checkAnswers, "answered token"},
		{"a claim error that deducted", newWorld().call(reserved("a", 1, false)).call(failed(procClaim, "", 1, codeBusy)).row(1, "a", 1, "normal", -1),
			false, checkAnswers, "no claim that could have made it"},
		{"claimed twice", newWorld().call(reserved("a", 1, false)).call(claimed(1, "claimed")).call(claimed(1, "claimed")).row(1, "a", 1, "normal", -1),
			false, checkOnce, "2 claims"},
		{"a claim answered that did not deduct", newWorld().call(reserved("a", 1, false)).call(claimed(1, "claimed")).row(1, "a", 0, "", -1),
			false, checkAnswers, "is not claimed"},
		{"a duplicate before the claim", newWorld().call(reserved("a", 1, false)).call(claimed(1, "duplicate")).call(claimed(1, "claimed")).row(1, "a", 1, "normal", -1),
			false, checkAnswers, "before the claim that deducted"},
		{"a lost claim answered duplicate by its repeat, with no claim made", newWorld().call(reserved("a", 1, false)).call(claimed(1, "duplicate")).row(1, "a", 0, "", -1),
			false, checkAnswers, "is not claimed"},
		{"late answered as claimed", newWorld().call(reserved("a", 1, false)).call(claimed(1, "claimed")).row(1, "a", 1, "late", -1),
			false, checkAnswers, "claim log says late"},
		{"a release quantity", newWorld().call(reserved("a", 1, false)).call(Call{Proc: procRelease, Token: token(1), Kind: Answered, Outcome: "released", Qty: 1}).row(1, "a", 2, "", 2),
			false, checkAnswers, "recorded quantity 2"},
		{"1105", newWorld().call(failed(procClaim, "", 9, 1105)),
			false, checkCodes, "error 1105"},
		{"1290 from a former primary", newWorld().call(failed(procReserve, "a", 0, 1290)),
			false, checkCodes, "error 1290"},
		{"9010 for a reserve that took effect", newWorld().call(failed(procReserve, "a", 0, codeSwitching)).row(1, "a", 0, "", -1),
			false, checkAnswers, "no call that could have made it"},
		{"9010 for a claim that deducted", newWorld().call(reserved("a", 1, false)).call(failed(procClaim, "", 1, codeSwitching)).row(1, "a", 1, "normal", -1),
			false, checkAnswers, "no claim that could have made it"},
		{"a dropped client connection", newWorld().call(lost(procReserve, "a", 0)),
			false, checkDropped, "client connection died"},
		{"a hung call", newWorld().call(Call{Proc: procReserve, Key: "a", Kind: Unknown, Dropped: true, Hung: true}),
			true, checkDropped, "no answer within"},
		{"a reservation nobody asked for", newWorld().row(7, "zz", 0, "", -1),
			false, checkAnswers, "no client asked for it"},
		{"units lost", func() *world { w := newWorld(); w.f.final[PoolKey{1, 1}] = 99; return w }(),
			false, checkConserved, "initial on_hand 100 != final on_hand 99"},
		{"insufficient stock with plenty", newWorld().call(failed(procReserve, "a", 0, codeInsufficient)),
			false, checkInsufficient, "at least 100 available at location 1"},
		{"insufficient stock while held elsewhere, then claimed", func() *world {
			w := newWorld()
			w.f.initial[PoolKey{1, 1}], w.f.final[PoolKey{1, 1}] = 3, 3
			w.f.initial[PoolKey{1, 2}], w.f.final[PoolKey{1, 2}] = 2, 2
			// 2 of the 3 units at location 1 held; location 2 has 2: a line
			// of 2 fits there. 9101 is false.
			return w.call(reserved("a", 1, false)).call(failed(procReserve, "b", 0, codeInsufficient)).row(1, "a", 0, "", -1)
		}(), false, checkInsufficient, "at least 2 available at location 2"},
		{"answer lines", newWorld().call(Call{Proc: procReserve, Key: "a", Kind: Answered, Token: token(1), Lines: []Line{{1, 2, 2}},
			Request: []Line{{Item: 1, Qty: 2}}, Locations: [][]int64{{1, 2}}}).row(1, "a", 0, "", -1),
			false, checkAnswers, "the database holds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := judge(c.w.calls, c.w.f, c.died, false, time.Minute)
			for _, x := range v.Violations {
				if x.Check == c.check && strings.Contains(x.Detail, c.about) {
					return
				}
			}
			t.Fatalf("want a %q violation about %q; got %v", c.check, c.about, v.Violations)
		})
	}
}

// TestJudgeTrueInsufficient: 9101 is not held against holdfast while the
// units may have been held by another reservation, or claimed.
func TestJudgeTrueInsufficient(t *testing.T) {
	w := newWorld()
	w.f.initial[PoolKey{1, 1}] = 2
	w.f.final[PoolKey{1, 1}] = 2
	// Key a holds both units (and is abandoned); key b wants 2 at location
	// 1 or 2 (which has no ledger row).
	w.call(reserved("a", 1, false)).row(1, "a", 0, "", -1)
	w.call(failed(procReserve, "b", 0, codeInsufficient))
	if v := judge(w.calls, w.f, false, false, time.Minute); len(v.Violations) != 0 {
		t.Fatalf("violations: %v", v.Violations)
	}
	// Expired long before: the units were available, the 9101 false.
	w.t = w.t.Add(2 * time.Minute)
	w.call(failed(procReserve, "c", 0, codeInsufficient))
	v := judge(w.calls, w.f, false, false, time.Minute)
	if len(v.Violations) != 1 || v.Violations[0].Check != checkInsufficient || !strings.Contains(v.Violations[0].Detail, "key c") {
		t.Fatalf("violations: %v; want the 9101 of key c", v.Violations)
	}
}

func TestJudgeLostConnectionsWhenHoldfastDied(t *testing.T) {
	w := newWorld().call(lost(procReserve, "a", 0)).call(Call{Proc: procReserve, Key: "a", Kind: NotSent, Msg: "connection refused"}).
		call(reserved("a", 1, true)).row(1, "a", 0, "", -1)
	if v := judge(w.calls, w.f, true, false, time.Minute); len(v.Violations) != 0 {
		t.Fatalf("violations: %v", v.Violations)
	}
}

func TestParseLineItems(t *testing.T) {
	got, err := parseLineItems([]byte("5,2,3;7,1,1"))
	if err != nil || len(got) != 2 || got[0] != (Line{5, 2, 3}) || got[1] != (Line{7, 1, 1}) {
		t.Fatalf("parseLineItems = %v, %v", got, err)
	}
	if _, err := parseLineItems([]byte("5,2")); err == nil {
		t.Fatal("a short line parsed")
	}
}

// TestConfigIsValid: the configuration the harness writes passes
// holdfast's own validation (the TTL rule above all), with the TTL the
// reserves use.
func TestConfigIsValid(t *testing.T) {
	for _, ttl := range []time.Duration{3 * time.Second, 8 * time.Second} {
		path := filepath.Join(t.TempDir(), "holdfast.yaml")
		y, err := holdfastConfig{Listen: "127.0.0.1:1", Admin: "127.0.0.1:2", Backend: "127.0.0.1:3", Database: "d",
			Instances: 3, TTL: ttl, PoolCap: 200}.proc().Render()
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, y, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := config.Load(path)
		if err != nil {
			t.Fatalf("ttl %v: %v\n%s", ttl, err, y)
		}
		r := cfg.Reservation
		if r.DefaultTTL != ttl || r.MinTTL() >= ttl || r.PoolCap != 200 || cfg.Backend.Instances != 3 {
			t.Fatalf("ttl %v: loaded default_ttl %v, minimum %v, pool_cap %d, instances %d", ttl, r.DefaultTTL, r.MinTTL(), r.PoolCap, cfg.Backend.Instances)
		}
	}
}
