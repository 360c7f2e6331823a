package fleet

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func TestFairShare(t *testing.T) {
	others := func(wants ...int) []demand {
		var out []demand
		for i, w := range wants {
			out = append(out, demand{id: fmt.Sprintf("b%d", i), wanted: w})
		}
		return out
	}
	for _, tc := range []struct {
		cap, want int
		others    []demand
		share     int
	}{
		{10, 10, nil, 10},
		{10, 3, others(10), 3},
		{10, 10, others(3), 7},
		{10, 10, others(10), 5},
		{10, 10, others(10, 10), 4}, // "a" sorts first: 4, 3, 3
		{10, 0, others(10, 10), 0},
		{3, 5, others(5, 5, 5), 1},
		{0, 5, others(5), 0},
	} {
		if got := fairShare(tc.cap, "a", tc.want, tc.others); got != tc.share {
			t.Errorf("fairShare(cap %d, want %d, others %+v) = %d, want %d", tc.cap, tc.want, tc.others, got, tc.share)
		}
	}
	// Shares never add up to more than the cap, and nobody gets more than
	// it wants.
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 10000; i++ {
		n := 1 + r.IntN(6)
		cap := r.IntN(20)
		wants := make([]int, n)
		for j := range wants {
			wants[j] = r.IntN(15)
		}
		sum := 0
		for j := range wants {
			var os []demand
			for k := range wants {
				if k != j {
					os = append(os, demand{id: fmt.Sprint("i", k), wanted: wants[k]})
				}
			}
			s := fairShare(cap, fmt.Sprint("i", j), wants[j], os)
			if s > wants[j] || s < 0 {
				t.Fatalf("cap %d wants %v: instance %d gets %d", cap, wants, j, s)
			}
			sum += s
		}
		if sum > cap {
			t.Fatalf("cap %d wants %v: shares add up to %d", cap, wants, sum)
		}
	}
}
