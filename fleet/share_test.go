package fleet

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func wantsOf(ws ...int) []Want {
	out := make([]Want, len(ws))
	for i, w := range ws {
		out[i] = Want{ID: fmt.Sprint("i", i), Want: w}
	}
	return out
}

// Shares without remainder, or with all demand under the cap, are exact
// and the same in every round.
func TestSharesExact(t *testing.T) {
	for _, tc := range []struct {
		cap   int
		wants []int
		want  []int
	}{
		{10, []int{10}, []int{10}},
		{10, []int{3, 4}, []int{3, 4}},           // all under the cap
		{3, []int{8, 8, 8}, []int{1, 1, 1}},      // even
		{6, []int{16, 4, 4}, []int{4, 1, 1}},     // by demand
		{10, []int{8, 0, 2}, []int{8, 0, 2}},     // idle instance
		{0, []int{5, 5}, []int{0, 0}},            // cap 0 admits no one
		{5, []int{-3, maxWant * 4}, []int{0, 5}}, // rows written by hand
		{12, []int{8, 8, 8, 0, 0, 0}, []int{4, 4, 4, 0, 0, 0}},
	} {
		for round := uint64(0); round < 50; round++ {
			if got := Shares(tc.cap, round, wantsOf(tc.wants...)); !slices.Equal(got, tc.want) {
				t.Fatalf("Shares(%d, round %d, %v) = %v, want %v", tc.cap, round, tc.wants, got, tc.want)
			}
		}
	}
}

// Random caps and demands: in every round the shares add up to the cap
// (or to the demand when it fits), none exceeds its demand or falls below
// the floor of its exact share, and the result does not depend on the
// order of the rows. Over many rounds each instance gets its exact share
// on average.
func TestSharesProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 400; i++ {
		n := 1 + r.IntN(8)
		capN := r.IntN(30)
		ws := make([]int, n)
		sum := 0
		for j := range ws {
			ws[j] = r.IntN(20)
			sum += ws[j]
		}
		wants := wantsOf(ws...)
		total := make([]int, n)
		const rounds = 2000
		for round := uint64(1e9); round < 1e9+rounds; round++ {
			got := Shares(capN, round, wants)
			shuffled := slices.Clone(wants)
			r.Shuffle(n, func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
			again := Shares(capN, round, shuffled)
			s := 0
			for j, g := range got {
				s += g
				total[j] += g
				if g > ws[j] || g < 0 {
					t.Fatalf("cap %d wants %v round %d: instance %d gets %d", capN, ws, round, j, g)
				}
				if sum > capN && g < capN*ws[j]/sum {
					t.Fatalf("cap %d wants %v round %d: instance %d gets %d, under its floor", capN, ws, round, j, g)
				}
				k := slices.IndexFunc(shuffled, func(w Want) bool { return w.ID == wants[j].ID })
				if again[k] != g {
					t.Fatalf("cap %d wants %v round %d: the order of the rows changed instance %d's share", capN, ws, round, j)
				}
			}
			if s != min(capN, sum) {
				t.Fatalf("cap %d wants %v round %d: shares %v add up to %d", capN, ws, round, got, s)
			}
		}
		for j := range ws {
			exact := float64(ws[j]) * rounds
			if sum > capN {
				exact = float64(capN) * float64(ws[j]) / float64(sum) * rounds
			}
			if d := float64(total[j]) - exact; d > 0.02*rounds || d < -0.02*rounds {
				t.Fatalf("cap %d wants %v: instance %d got %d slot-rounds in %d rounds, its exact share is %.0f", capN, ws, j, total[j], rounds, exact)
			}
		}
	}
}

// A cap smaller than the instances that want it goes round by turns: with
// the same demand everywhere, every instance gets a slot in most rounds
// and none goes without one for long; with skewed demand, turns follow it.
func TestSharesTurns(t *testing.T) {
	for _, tc := range []struct {
		cap     int
		wants   []int
		maxGap  int // the most rounds in a row an instance may go without a slot
		minFrac float64
	}{
		// The same demand everywhere: strictly round.
		{3, []int{8, 8, 8, 8}, 1, 0.75},                   // a fourth instance joins a cap of 3
		{1, []int{8, 8, 8}, 2, 0.33},                      // cap 1 over three
		{2, []int{8, 8, 8, 8, 8, 8, 8, 8, 8, 8}, 4, 0.20}, // cap 2 over ten
		{10, repeat(8, 100), 9, 0.10},                     // cap 10 over a hundred sidecars
		// Uneven demand: turns in proportion, no long waits.
		{3, []int{8, 8, 8, 8, 7}, 2, 0.53},    // 7 × 3 / 39 = 0.54
		{1, []int{8, 7}, 2, 0.46},             // 7 / 15 = 0.47
		{4, []int{9, 8, 8, 8, 8, 7}, 2, 0.57}, // 7 × 4 / 48 = 0.58
	} {
		wants := wantsOf(tc.wants...)
		const rounds = 5000
		gap := make([]int, len(wants))
		maxGap := make([]int, len(wants))
		got := make([]int, len(wants))
		for round := uint64(7777); round < 7777+rounds; round++ {
			for j, s := range Shares(tc.cap, round, wants) {
				if s > 0 {
					got[j]++
					gap[j] = 0
					continue
				}
				gap[j]++
				maxGap[j] = max(maxGap[j], gap[j])
			}
		}
		worst := slices.Max(maxGap)
		least := float64(slices.Min(got)) / rounds
		t.Logf("cap %d over %d instances: each had a slot in at least %.2f of the rounds, went without one at most %d rounds in a row",
			tc.cap, len(wants), least, worst)
		if worst > tc.maxGap || least < tc.minFrac {
			t.Errorf("cap %d over %d instances: longest wait %d rounds (want <= %d), least share of rounds %.2f (want >= %.2f)",
				tc.cap, len(wants), worst, tc.maxGap, least, tc.minFrac)
		}
	}
	// Skewed 16 / 4 / 0 under a cap of 3: 2.4 / 0.6 / 0 on average.
	wants := wantsOf(16, 4, 0)
	var sum [3]int
	const rounds = 1000
	for round := uint64(0); round < rounds; round++ {
		for j, s := range Shares(3, round, wants) {
			sum[j] += s
		}
	}
	if sum[2] != 0 || sum[0] < 2350 || sum[0] > 2450 || sum[1] < 550 || sum[1] > 650 {
		t.Errorf("skewed 16/4/0 under a cap of 3: %v slot-rounds in %d rounds, want about 2400/600/0", sum, rounds)
	}
}

func repeat(v, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// Rounds are numbered by the database's clock alike everywhere.
func TestRound(t *testing.T) {
	r, left := Round(5_300_000, 2*time.Second)
	if r != 2 || left != 700*time.Millisecond {
		t.Fatalf("Round(5.3 s, 2 s) = %d, %v; want 2, 700ms", r, left)
	}
}
