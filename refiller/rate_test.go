package refiller

import (
	"testing"
	"time"
)

// TestRateSeesBurst: a pool that goes from idle to 15,000 units/s (a sale
// opening) shows that rate within a few milliseconds, not after a window
// or two of smoothing from zero; the smoothed rate takes over once windows
// close, and a pool that stops being taken from decays.
func TestRateSeesBurst(t *testing.T) {
	var h hotPool
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	// One unit taken (a test order), then, 60 ms later, 75 units every 5
	// ms: 15,000 units/s.
	h.take(1, at(0))
	for ms := 60; ms <= 75; ms += 5 {
		h.take(75, at(ms))
	}
	if r := h.rateAt(at(76)); r < 10000 {
		t.Errorf("16 ms into a burst of 15000 units/s the rate is %.0f, want at least 10000", r)
	}
	for ms := 80; ms <= 400; ms += 5 {
		h.take(75, at(ms))
	}
	if r := h.rateAt(at(401)); r < 13000 || r > 17000 {
		t.Errorf("after 340 ms at 15000 units/s the rate is %.0f", r)
	}
	// Slower, 2 units every 5 ms (400 units/s): the smoothed rate falls.
	for ms := 405; ms <= 1000; ms += 5 {
		h.take(2, at(ms))
	}
	slow := h.rateAt(at(1001))
	if slow > 1000 {
		t.Errorf("after 600 ms at 400 units/s the rate is %.0f, want it down near 400", slow)
	}
	// Nothing taken for a second: it decays.
	if r := h.rateAt(at(2000)); r > slow/3 {
		t.Errorf("a second idle, the rate is %.0f (%.0f when last taken from)", r, slow)
	}
}
