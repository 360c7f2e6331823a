package chaos

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// checkInsufficient names the check that an "insufficient stock" answer
// (9101) was true: the engine may say so only when the ledger truly lacks
// the units.
const checkInsufficient = "true insufficient stock"

// expiryMargin covers the distance between the client's clock, which
// times the journal, and the database's, which times expiry (both are this
// machine's, the database's read at the reserve's COMMIT).
const expiryMargin = time.Second

// holding is a reservation's line as the journal bounds it in time: it
// cannot have held units before from, nor after until.
type holding struct {
	from, until time.Time
	qty         int64
}

// judgeInsufficient finds 9101 answers the database proves false. For
// each line of such a reserve and each of its locations it bounds what was
// available while the call ran from below: on_hand then was at least the
// final on_hand plus every claim of that pool begun after the call ended;
// the live reserved quantity was at most that of every reservation that
// may have been held at some moment of the call (made by a call begun
// before it ended; not claimed or released by a call answered before it
// began, nor expired by then). If every line had a location whose lower
// bound covers its quantity, the answer was false.
func (v *verdict) judgeInsufficient(calls []Call, f facts, ttl time.Duration) {
	type claimAt struct {
		at  time.Time
		qty int64
	}
	holds := map[PoolKey][]holding{}
	claims := map[PoolKey][]claimAt{}
	byKey := map[string][]*Call{}
	byToken := map[string][]*Call{}
	var short []*Call
	for i := range calls {
		c := &calls[i]
		switch {
		case c.Proc == procReserve:
			byKey[c.Key] = append(byKey[c.Key], c)
			if c.Kind == Failed && c.Code == codeInsufficient {
				short = append(short, c)
			}
		default:
			byToken[c.Token] = append(byToken[c.Token], c)
		}
	}
	if len(short) == 0 {
		return
	}
	for key, cs := range byKey {
		row := f.byKey[key]
		if row == nil {
			continue
		}
		from, last := cs[0].Start, cs[0].End
		for _, c := range cs {
			from, last = minTime(from, c.Start), maxTime(last, c.End)
		}
		until := last.Add(ttl + expiryMargin)
		for _, c := range byToken[token(row.ID)] {
			if c.Kind != Answered {
				continue
			}
			switch {
			case c.Proc == procClaim && c.Outcome != "duplicate":
				until = minTime(until, c.End)
				for _, l := range row.Lines {
					k := PoolKey{l.Item, l.Group}
					claims[k] = append(claims[k], claimAt{c.Start, l.Qty})
				}
			case c.Proc == procRelease && c.Outcome == "released":
				until = minTime(until, c.End)
			}
		}
		for _, l := range row.Lines {
			k := PoolKey{l.Item, l.Group}
			holds[k] = append(holds[k], holding{from, until, l.Qty})
		}
	}
	for k := range claims {
		slices.SortFunc(claims[k], func(a, b claimAt) int { return a.at.Compare(b.at) })
	}
	// claimedAfter is the quantity claimed from pool k by claims begun
	// after t.
	claimedAfter := func(k PoolKey, t time.Time) int64 {
		cs := claims[k]
		i := sort.Search(len(cs), func(i int) bool { return cs[i].at.After(t) })
		var n int64
		for _, c := range cs[i:] {
			n += c.qty
		}
		return n
	}
	for _, c := range short {
		var why []string
		lie := true
		for i, l := range c.Request {
			best, bestAt := int64(-1<<62), int64(0)
			for _, g := range c.Locations[i] {
				k := PoolKey{l.Item, g}
				final, ok := f.final[k]
				if !ok {
					continue
				}
				onHand := final + claimedAfter(k, c.End)
				if onHand < l.Qty {
					continue // cannot prove anything here
				}
				var held int64
				for _, h := range holds[k] {
					if h.from.Before(c.End) && h.until.After(c.Start) {
						held += h.qty
					}
				}
				if a := onHand - held; a > best {
					best, bestAt = a, g
				}
			}
			if best < l.Qty {
				lie = false
				break
			}
			why = append(why, fmt.Sprintf("line %d (item %d, qty %d): at least %d available at location %d", i+1, l.Item, l.Qty, best, bestAt))
		}
		if lie {
			v.fail(checkInsufficient, "%s; the database says %v", c, why)
		}
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
