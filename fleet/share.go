package fleet

import (
	"math/bits"
	"slices"
	"strings"
	"time"
)

// How a fleet-wide cap is shared. Each instance that renews its grant of a
// cap writes what it wants (its demand: the slots its borrows hold plus
// those queued under the cap, the most at once since its last renewal),
// and every instance computes the same split of the cap from the same
// rows, with Shares: a pure function of the cap, the wants and the round.
//
//   - Shares follow demand: each instance's share is cap × its want / the
//     wants' sum (all it wants when the sum fits under the cap), so every
//     waiting borrow of the fleet gets about the same part of the cap,
//     whichever instance it waits on.
//   - What whole slots leave over goes by turns. Rounds are TurnRounds
//     poll intervals long, numbered by the database's clock (so every
//     instance is in the same round); in each round the left-over slots go
//     to instances with a chance in proportion to the fractions they were
//     owed (systematic sampling, its offset moved on by the golden ratio
//     each round), so that over a few rounds every instance gets its exact
//     share and none waits for long. A cap of 3 over four instances with
//     the same demand leaves each without a slot one round in four, never
//     the same one for good.
//
// Everything is integer arithmetic, so every instance (whatever its CPU)
// computes the same split.

// TurnRounds is how many poll intervals a round of turns lasts.
const TurnRounds = 2

// maxWant bounds the want Shares takes of one instance, so that a row
// written by hand cannot overflow the arithmetic.
const maxWant = 1 << 20

// Want is one instance's demand on a cap.
type Want struct {
	ID   string
	Want int
}

// Shares returns each instance's share of cap in round: out[i] is
// wants[i]'s. Shares add up to min(cap, Σ want) and none exceeds its want.
// The order of wants does not matter (instances are told apart by ID,
// which must be unique).
func Shares(cap int, round uint64, wants []Want) []int {
	out := make([]int, len(wants))
	if cap <= 0 || len(wants) == 0 {
		return out
	}
	var sum int64
	w := make([]int64, len(wants))
	for i, x := range wants {
		w[i] = int64(min(max(x.Want, 0), maxWant))
		sum += w[i]
	}
	if sum <= int64(cap) {
		for i := range out {
			out[i] = int(w[i])
		}
		return out
	}
	// cap < sum: floors of cap × want / sum, and the fractions owed, in
	// units of 1/sum. The fractions add up to left × sum exactly.
	c := int64(cap)
	frac := make([]int64, len(wants))
	left := c
	for i := range wants {
		out[i] = int(c * w[i] / sum)
		frac[i] = c * w[i] % sum
		left -= int64(out[i])
	}
	if left == 0 {
		return out
	}
	// Lay the fractions end to end in the order of the IDs, and put left
	// points sum apart from an offset in [0, sum): an instance whose
	// fraction holds a point gets one slot more. A fraction is shorter than
	// sum, so it holds at most one point.
	order := make([]int, len(wants))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(wants[a].ID, wants[b].ID) })
	off := turnOffset(round, uint64(sum), frac)
	var at int64 // where the next fraction starts
	for _, i := range order {
		f := frac[i]
		if f == 0 {
			continue
		}
		// The first point at or after at: off + k × sum, k >= 0.
		k := int64(0)
		if at > off {
			k = (at - off + sum - 1) / sum
		}
		if k < left && off+k*sum < at+f {
			out[i]++
		}
		at += f
	}
	return out
}

// turnOffset is round's offset of the points in [0, n): round × step mod
// n. When the fractions owed (frac, in [0, n)) that are not 0 are all the
// same, step is that fraction, and the slots left over go strictly round
// the instances. Otherwise step is the number nearest n × 0.618 (the
// golden ratio's fractional part) that is prime to n, so that successive
// rounds' offsets spread evenly over [0, n) and every n rounds take each
// value once.
func turnOffset(round, n uint64, frac []int64) int64 {
	if n <= 1 {
		return 0
	}
	var step uint64
	for _, f := range frac {
		if f == 0 {
			continue
		}
		if step != 0 && uint64(f) != step {
			step = goldenStep(n)
			break
		}
		step = uint64(f)
	}
	hi, lo := bits.Mul64(round%n, step)
	_, r := bits.Div64(hi, lo, n)
	return int64(r)
}

// goldenStep is the number nearest n × 0.618 that is prime to n (n > 1).
func goldenStep(n uint64) uint64 {
	hi, lo := bits.Mul64(n, 618034)
	base, _ := bits.Div64(hi, lo, 1000000)
	for d := uint64(0); d < n; d++ {
		if s := base + d; s > 0 && s < n && gcd(s, n) == 1 {
			return s
		}
		if s := base - d; d <= base && s > 0 && gcd(s, n) == 1 {
			return s
		}
	}
	return 1
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// renewal is Grant's decision: from a cap's live rows gs (sorted by
// instance; gs[self] is instance's, self < 0 when it has none) in round,
// it returns instance's share, with every row's fair share and instance's
// row with its new demand and grant, and the index of that row.
func renewal(cap int, round uint64, gs []Grant, self int, instance string, want, used int) (Share, int) {
	if self < 0 {
		gs = append(gs, Grant{Instance: instance})
		slices.SortFunc(gs, func(a, b Grant) int { return strings.Compare(a.Instance, b.Instance) })
		self = slices.IndexFunc(gs, func(g Grant) bool { return g.Instance == instance })
	}
	gs[self].Wanted = max(want, 0)
	wants := make([]Want, len(gs))
	grantedOthers := 0
	for i, g := range gs {
		wants[i] = Want{ID: g.Instance, Want: g.Wanted}
		if i != self {
			grantedOthers += max(g.Granted, 0)
		}
	}
	for i, s := range Shares(cap, round, wants) {
		gs[i].Share = s
	}
	fair, mine := gs[self].Share, max(gs[self].Granted, 0)
	g := mine
	switch {
	case fair > mine: // up to the share, into free slots only
		g = min(fair, max(mine, cap-grantedOthers))
	case fair < mine: // down to the share, not below what may be held
		g = min(mine, max(fair, used))
	}
	gs[self].Granted = g
	next := Shares(cap, round+1, wants)[self]
	return Share{Cap: cap, Granted: g, Fair: fair, Next: next, Grants: gs}, self
}

// Round is the round of turns at the database's time t (microseconds since
// the epoch) for rounds of length period, and how long it has left.
func Round(t int64, period time.Duration) (round uint64, left time.Duration) {
	p := max(period.Microseconds(), 1)
	if t < 0 {
		t = 0
	}
	return uint64(t / p), time.Duration(p-t%p) * time.Microsecond
}
