package attribution

import (
	"math"
	"slices"
	"testing"
	"time"
)

// refBucket is the bucket of d by the Prometheus rule, in floats: the first
// bound d is at or below, else +Inf.
func refBucket(d time.Duration) int {
	for i, b := range Buckets {
		if d.Seconds() <= b {
			return i
		}
	}
	return len(Buckets)
}

func TestBuckets(t *testing.T) {
	if len(Buckets) != numBuckets || Buckets[0] != 100e-6 || Buckets[len(Buckets)-1] != 60 {
		t.Fatalf("Buckets = %v", Buckets)
	}
	if !slices.IsSorted(Buckets) {
		t.Errorf("Buckets not ascending")
	}
	for i, b := range Buckets {
		if time.Duration(boundsNs[i]).Seconds() != b {
			t.Errorf("bound %d: %v ns is not %v s", i, boundsNs[i], b)
		}
	}
}

func TestBucketPlacement(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int
	}{
		{-time.Second, 0}, // counts as zero
		{0, 0},
		{1, 0},
		{100 * time.Microsecond, 0}, // le="0.0001"
		{100*time.Microsecond + 1, 1},
		{250 * time.Microsecond, 1},
		{250*time.Microsecond + 1, 2},
		{time.Millisecond, 3},
		{time.Second, 12},
		{time.Second + 1, 13},
		{60 * time.Second, numBuckets - 1},
		{60*time.Second + 1, numBuckets}, // +Inf
		{time.Hour, numBuckets},
		{math.MaxInt64, numBuckets},
	} {
		if got := bucketOf(nanos(tc.d)); got != tc.want {
			t.Errorf("bucketOf(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	// Every bound, one below and one above, against the float rule.
	for i, ns := range boundsNs {
		for _, d := range []time.Duration{time.Duration(ns) - 1, time.Duration(ns), time.Duration(ns) + 1} {
			if got, want := bucketOf(uint64(d)), refBucket(d); got != want {
				t.Errorf("bound %d: bucketOf(%v) = %d, want %d", i, d, got, want)
			}
		}
	}
}

// TestHistogramSnapshot observes values at the edges through a Tag and
// checks counts, sums and the Prometheus buckets built from them.
func TestHistogramSnapshot(t *testing.T) {
	r := NewRecorder(Options{})
	tag := r.TagString("edges")
	ds := []time.Duration{
		100 * time.Microsecond,     // le 0.0001
		100*time.Microsecond + 1,   // le 0.00025
		time.Millisecond,           // le 0.001
		60 * time.Second,           // le 60
		61 * time.Second,           // +Inf
		-5 * time.Millisecond,      // le 0.0001, adds 0 to the sum
		3 * time.Hour,              // +Inf
		2500 * time.Microsecond,    // le 0.0025
		2500*time.Microsecond - 1,  // le 0.0025
		2500*time.Microsecond + 1,  // le 0.005
		30*time.Second + 1,         // le 60
		10 * time.Second,           // le 10
		time.Duration(0),           // le 0.0001
		time.Duration(1),           // le 0.0001
		25*time.Millisecond - 1,    // le 0.025
		250*time.Millisecond + 999, // le 0.5
	}
	var wantNs uint64
	want := make([]uint64, numBuckets+1)
	for _, d := range ds {
		tag.Statement(d, false)
		want[refBucket(max(d, 0))]++
		wantNs += nanos(d)
	}
	s := r.Snapshot()[0]
	if !slices.Equal(s.Stmt.Counts, want) {
		t.Errorf("Counts = %v, want %v", s.Stmt.Counts, want)
	}
	if s.Stmt.Count != uint64(len(ds)) || s.Statements != uint64(len(ds)) {
		t.Errorf("Count = %d, Statements = %d, want %d", s.Stmt.Count, s.Statements, len(ds))
	}
	if wantSum := float64(wantNs) / 1e9; s.Stmt.Sum != wantSum || s.StatementSeconds != wantSum {
		t.Errorf("Sum = %v, StatementSeconds = %v, want %v", s.Stmt.Sum, s.StatementSeconds, wantSum)
	}
	if want := []uint64{4, 1, 0, 1, 2, 1, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 2, 2}; !slices.Equal(s.Stmt.Counts, want) {
		t.Errorf("Counts = %v, want (by hand) %v", s.Stmt.Counts, want)
	}
	if s.Hold.Count != 0 || len(s.Hold.Counts) != numBuckets+1 {
		t.Errorf("Hold = %+v, want empty with %d buckets", s.Hold, numBuckets+1)
	}
}

// TestSumWrap checks that a sum read across a wrap of its uint64 keeps
// counting up.
func TestSumWrap(t *testing.T) {
	var s sumNs
	s.v.Store(math.MaxUint64 - 1e9 + 1) // 1 s short of wrapping
	before := s.secondsLocked()
	s.add(3e9)
	after := s.secondsLocked()
	if got := after - before; math.Abs(got-3) > 1e-6 {
		t.Errorf("across the wrap the sum grew by %v s, want 3", got)
	}
	s.add(1e9)
	if got := s.secondsLocked() - after; math.Abs(got-1) > 1e-6 {
		t.Errorf("after the wrap the sum grew by %v s, want 1", got)
	}
}

func TestQuantile(t *testing.T) {
	var h HistogramSnapshot
	if got := h.Quantile(0.99); got != 0 {
		t.Errorf("empty: Quantile = %v", got)
	}
	h.Counts = make([]uint64, numBuckets+1)
	h.Counts[0], h.Counts[3], h.Counts[numBuckets] = 90, 9, 1
	h.Count = 100
	for _, tc := range []struct{ q, want float64 }{
		{0, 0.0001}, {0.5, 0.0001}, {0.9, 0.0001}, {0.91, 0.001}, {0.99, 0.001}, {1, math.Inf(1)},
	} {
		if got := h.Quantile(tc.q); got != tc.want {
			t.Errorf("Quantile(%v) = %v, want %v", tc.q, got, tc.want)
		}
	}
}
