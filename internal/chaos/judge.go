package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"time"
)

// reservationRow is one row of the reservations table as the judge needs
// it.
type reservationRow struct {
	ID          uint64
	Key         string
	State       int    // 0 active (or expired), 1 claimed, 2 released
	ClaimKind   string // normal, late, forced; "" unless claimed
	ReleasedQty int64  // released_quantity; -1 when NULL
	Lines       []Line // as reserved, the location chosen for each
}

// facts is the database at the end of a scenario, for the judge.
type facts struct {
	byKey map[string]*reservationRow
	byID  map[uint64]*reservationRow
	// Ledger on_hand per pool, before the traffic and after it.
	initial, final map[PoolKey]int64
}

// Violation is one broken promise.
type Violation struct {
	Check  string // which check found it
	Detail string
}

func (v Violation) String() string { return v.Check + ": " + v.Detail }

// resolution counts the unknown outcomes of one kind (9108, or a lost
// client connection) by what the database says they did.
type resolution struct{ Effect, None int }

// verdict is what the judge found in a scenario's journal.
type verdict struct {
	Violations []Violation
	// Unknown outcomes by procedure, then "9108" or "connection lost".
	Resolved map[string]map[string]*resolution
	// ClaimedUnits is the quantity of every claimed reservation (the
	// database's claim log), per pool.
	ClaimedUnits map[PoolKey]int64
	// ForcedPools holds each pool a claim deducted from by force, with the
	// earliest start of such a claim: pool + reserved may exceed on_hand
	// there until the refiller trims the pool.
	ForcedPools map[PoolKey]time.Time
}

func (v *verdict) fail(check, format string, a ...any) {
	v.Violations = append(v.Violations, Violation{check, fmt.Sprintf(format, a...)})
}

func (v *verdict) resolve(c *Call, effect bool) {
	kind := "connection lost"
	if c.Code != 0 {
		kind = strconv.Itoa(int(c.Code))
	}
	if v.Resolved[c.Proc] == nil {
		v.Resolved[c.Proc] = map[string]*resolution{}
	}
	r := v.Resolved[c.Proc][kind]
	if r == nil {
		r = &resolution{}
		v.Resolved[c.Proc][kind] = r
	}
	if effect {
		r.Effect++
	} else {
		r.None++
	}
}

// resolveAll resolves each of cs, calls whose outcome was unknown: made,
// if not nil, is the one whose effect the database shows; the others did
// nothing.
func (v *verdict) resolveAll(cs []*Call, made *Call) {
	for _, c := range cs {
		v.resolve(c, c == made)
	}
}

// earliest is the call of cs that started first.
func earliest(cs []*Call) *Call {
	return slices.MinFunc(cs, func(a, b *Call) int { return a.Start.Compare(b.Start) })
}

// Checks, as the report names them.
const (
	checkAnswers   = "true answers"
	checkCodes     = "expected errors"
	checkDropped   = "client connections kept"
	checkOnce      = "claimed once"
	checkConserved = "conservation"
)

// judge compares every call in the journal with the database. holdfastDied
// says holdfast processes were killed in the scenario, so client
// connections may die under calls; otherwise a dead client connection is
// a violation (holdfast itself must answer every call). ttl is the
// reserves' ttl_seconds.
func judge(calls []Call, f facts, holdfastDied, controls bool, ttl time.Duration) *verdict {
	v := &verdict{Resolved: map[string]map[string]*resolution{}, ClaimedUnits: map[PoolKey]int64{},
		ForcedPools: map[PoolKey]time.Time{}}
	byKey := map[string][]*Call{}
	byToken := map[string][]*Call{}
	for i := range calls {
		c := &calls[i]
		switch {
		case c.Kind == Failed && !expectedCode(c, controls):
			v.fail(checkCodes, "%s", c)
		case c.Kind == Answered && c.Outcome != "" && !validOutcome(c):
			v.fail(checkCodes, "unexpected answer: %s", c)
		}
		if c.Hung {
			v.fail(checkDropped, "no answer within %s: %s", c.End.Sub(c.Start).Round(time.Second), c)
		} else if c.Dropped && !holdfastDied {
			v.fail(checkDropped, "the client connection died while holdfast ran: %s", c)
		}
		if c.Proc == procReserve {
			byKey[c.Key] = append(byKey[c.Key], c)
		} else {
			byToken[c.Token] = append(byToken[c.Token], c)
		}
	}
	known := map[uint64]bool{}
	for key, cs := range byKey {
		if row := f.byKey[key]; row != nil {
			known[row.ID] = true
		}
		v.judgeReserve(key, cs, f.byKey[key])
	}
	for _, row := range f.byKey {
		if !known[row.ID] {
			v.fail(checkAnswers, "reservation %s (key %s) exists, and no client asked for it", token(row.ID), row.Key)
		}
	}
	for _, row := range f.byID {
		cs := byToken[token(row.ID)]
		delete(byToken, token(row.ID))
		v.judgeFinish(row, cs)
	}
	for tok, cs := range byToken {
		for _, c := range cs {
			if c.Kind == Answered {
				v.fail(checkAnswers, "answered for a token no reservation has: %s", c)
			}
		}
		_ = tok
	}
	v.judgeInsufficient(calls, f, ttl)
	// Conservation: every unit that left on_hand left by a claim.
	for _, row := range f.byID {
		if row.State != 1 {
			continue
		}
		for _, l := range row.Lines {
			v.ClaimedUnits[PoolKey{l.Item, l.Group}] += l.Qty
		}
	}
	for k, before := range f.initial {
		after, ok := f.final[k]
		if !ok {
			v.fail(checkConserved, "%s: the ledger row is gone", k)
			continue
		}
		if claimed := v.ClaimedUnits[k]; before != after+claimed {
			v.fail(checkConserved, "%s: initial on_hand %d != final on_hand %d + units claimed %d (%+d)",
				k, before, after, claimed, after+claimed-before)
		}
	}
	return v
}

func validOutcome(c *Call) bool {
	switch c.Proc {
	case procClaim:
		return slices.Contains([]string{"claimed", "late", "forced", "duplicate"}, c.Outcome)
	case procRelease:
		return slices.Contains([]string{"released", "duplicate", "expired", "claimed"}, c.Outcome)
	}
	return false
}

func token(id uint64) string { return fmt.Sprintf("rsv_%016x", id) }

// judgeReserve checks every reserve made with one idempotency key. The
// reservation, if any, was made by exactly one call: the one answered
// replayed = 0, or, when no call was, one whose outcome was unknown.
// Every other call must have done nothing (a replay, or an error).
func (v *verdict) judgeReserve(key string, cs []*Call, row *reservationRow) {
	var fresh, replays, unknown []*Call
	for _, c := range cs {
		switch c.Kind {
		case Answered:
			if c.Replayed {
				replays = append(replays, c)
			} else {
				fresh = append(fresh, c)
			}
			if row == nil {
				v.fail(checkAnswers, "answered a reservation, and the database has none with key %s: %s", key, c)
				continue
			}
			if c.Token != token(row.ID) {
				v.fail(checkAnswers, "answered token %s, and the reservation with key %s is %s: %s", c.Token, key, token(row.ID), c)
			}
			if why := linesMismatch(c, row.Lines); why != "" {
				v.fail(checkAnswers, "%s: %s", why, c)
			}
		case Unknown:
			unknown = append(unknown, c)
		}
	}
	if row == nil {
		v.resolveAll(unknown, nil)
		return
	}
	switch {
	case len(fresh) > 1:
		v.fail(checkAnswers, "%d calls were answered replayed = 0 for key %s; the first: %s; the second: %s", len(fresh), key, fresh[0], fresh[1])
	case len(fresh) == 1:
		for _, r := range replays {
			if r.End.Before(fresh[0].Start) {
				v.fail(checkAnswers, "a replay was answered before the call that made the reservation began: %s; maker: %s", r, fresh[0])
			}
		}
		v.resolveAll(unknown, nil)
	case len(unknown) > 0:
		v.resolveAll(unknown, earliest(unknown))
	default:
		v.fail(checkAnswers, "reservation %s with key %s exists, yet no call that could have made it was answered with it (%s)",
			token(row.ID), key, describe(cs))
	}
}

// linesMismatch says how an answer's lines differ from what the request
// allowed and the database holds; "" if they agree.
func linesMismatch(c *Call, have []Line) string {
	if len(c.Lines) != len(have) {
		return fmt.Sprintf("answered %d lines, the database holds %d (%v)", len(c.Lines), len(have), have)
	}
	for i, l := range c.Lines {
		if l != have[i] {
			return fmt.Sprintf("answered line %d as %+v, the database holds %+v", i+1, l, have[i])
		}
		if c.Proc == procReserve && (i >= len(c.Request) || l.Item != c.Request[i].Item || l.Qty != c.Request[i].Qty ||
			!slices.Contains(c.Locations[i], l.Group)) {
			return fmt.Sprintf("answered line %d as %+v, which the request did not ask for", i+1, l)
		}
	}
	return ""
}

// judgeFinish checks the claims and releases of one reservation against
// its state: a claimed reservation was claimed by exactly one call (the
// one answered claimed, late or forced, or else an unknown one), a
// released one released by exactly one, and an active one by none.
func (v *verdict) judgeFinish(row *reservationRow, cs []*Call) {
	var claimers, dups, claimUnknown, releasers, relDups, relUnknown []*Call
	for _, c := range cs {
		switch {
		case c.Kind == Unknown && c.Proc == procClaim:
			claimUnknown = append(claimUnknown, c)
		case c.Kind == Unknown:
			relUnknown = append(relUnknown, c)
		case c.Kind != Answered:
		case c.Proc == procClaim && c.Outcome == "duplicate":
			dups = append(dups, c)
		case c.Proc == procClaim:
			claimers = append(claimers, c)
			if why := linesMismatch(c, row.Lines); why != "" {
				v.fail(checkAnswers, "%s: %s", why, c)
			}
		case c.Outcome == "duplicate":
			relDups = append(relDups, c)
		case c.Outcome == "claimed":
			if row.State != 1 {
				v.fail(checkAnswers, "release answered that the reservation was claimed, and it is not: %s", c)
			}
		default:
			releasers = append(releasers, c)
		}
	}
	tok := token(row.ID)
	if row.State != 1 {
		for _, c := range append(claimers, dups...) {
			v.fail(checkAnswers, "claim answered %s, and reservation %s is not claimed (state %d): %s", c.Outcome, tok, row.State, c)
		}
		v.resolveAll(claimUnknown, nil)
	}
	if row.State != 2 {
		for _, c := range append(releasers, relDups...) {
			v.fail(checkAnswers, "release answered %s, and reservation %s is not released (state %d): %s", c.Outcome, tok, row.State, c)
		}
		v.resolveAll(relUnknown, nil)
	}
	switch row.State {
	case 1:
		wantKind := map[string]string{"claimed": "normal", "late": "late", "forced": "forced"}
		switch {
		case len(claimers) > 1:
			v.fail(checkOnce, "reservation %s: %d claims were answered as the one that deducted: %s; %s", tok, len(claimers), claimers[0], claimers[1])
		case len(claimers) == 1:
			if wantKind[claimers[0].Outcome] != row.ClaimKind {
				v.fail(checkAnswers, "claim answered %s, and the claim log says %s: %s", claimers[0].Outcome, row.ClaimKind, claimers[0])
			}
			for _, d := range dups {
				if d.End.Before(claimers[0].Start) {
					v.fail(checkAnswers, "a claim answered duplicate before the claim that deducted began: %s; claimer: %s", d, claimers[0])
				}
			}
			v.resolveAll(claimUnknown, nil)
			if row.ClaimKind == "forced" {
				v.forced(row, claimers[0])
			}
		case len(claimUnknown) > 0:
			first := earliest(claimUnknown)
			v.resolveAll(claimUnknown, first)
			if row.ClaimKind == "forced" {
				v.forced(row, first)
			}
		default:
			v.fail(checkAnswers, "reservation %s is claimed (%s), yet no claim that could have made it was answered so (%s)",
				tok, row.ClaimKind, describe(cs))
		}
	case 2:
		switch {
		case len(releasers) > 1:
			v.fail(checkAnswers, "reservation %s: %d releases were answered as the one that released it: %s; %s", tok, len(releasers), releasers[0], releasers[1])
		case len(releasers) == 1:
			r := releasers[0]
			if want := row.ReleasedQty; (r.Outcome == "released" && (r.Qty != want || r.Qty <= 0)) || (r.Outcome == "expired" && (r.Qty != 0 || want != 0)) {
				v.fail(checkAnswers, "release answered %s with quantity %d, and the database recorded quantity %d: %s", r.Outcome, r.Qty, want, r)
			}
			for _, d := range relDups {
				if d.End.Before(r.Start) {
					v.fail(checkAnswers, "a release answered duplicate before the release began: %s; releaser: %s", d, r)
				}
			}
			v.resolveAll(relUnknown, nil)
		case len(relUnknown) > 0:
			v.resolveAll(relUnknown, earliest(relUnknown))
		default:
			v.fail(checkAnswers, "reservation %s is released, yet no release that could have done it was answered so (%s)", tok, describe(cs))
		}
	}
}

func (v *verdict) forced(row *reservationRow, c *Call) {
	for _, l := range row.Lines {
		k := PoolKey{l.Item, l.Group}
		if t, ok := v.ForcedPools[k]; !ok || c.Start.Before(t) {
			v.ForcedPools[k] = c.Start
		}
	}
}

// describe lists calls for a violation's detail.
func describe(cs []*Call) string {
	if len(cs) == 0 {
		return "no call"
	}
	s := ""
	for i, c := range cs {
		if i > 0 {
			s += "; "
		}
		s += c.String()
	}
	return s
}
