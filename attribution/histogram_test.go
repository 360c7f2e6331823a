package attribution

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
		if time.Duration(tagBounds.ints[i]).Seconds() != b {
			t.Errorf("bound %d: %v ns is not %v s", i, tagBounds.ints[i], b)
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
		if got := tagBounds.index(nanos(tc.d)); got != tc.want {
			t.Errorf("bucketOf(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
	// Every bound, one below and one above, against the float rule.
	for i, ns := range tagBounds.ints {
		for _, d := range []time.Duration{time.Duration(ns) - 1, time.Duration(ns), time.Duration(ns) + 1} {
			if got, want := tagBounds.index(uint64(d)), refBucket(d); got != want {
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

// TestBoundsOfOtherHistograms checks histograms over bounds of their own:
// durations exposed in seconds and counts exposed as they are, each value
// in the bucket the Prometheus rule puts it in, and the exposition built
// from the snapshot.
func TestBoundsOfOtherHistograms(t *testing.T) {
	d := NewHistogram(DurationBounds(.0005, .001, 5))
	for _, v := range []time.Duration{-1, 500 * time.Microsecond, 500*time.Microsecond + 1, time.Millisecond, 6 * time.Second} {
		d.Observe(v)
	}
	s := d.Snapshot()
	if want := []uint64{2, 2, 0, 1}; !slices.Equal(s.Counts, want) || s.Count != 5 || !slices.Equal(s.Bounds, []float64{.0005, .001, 5}) {
		t.Errorf("durations: %+v, want counts %v", s, want)
	}
	if want := (6e9 + 500e3 + 500e3 + 1 + 1e6) / 1e9; s.Sum != want {
		t.Errorf("durations: sum %v, want %v", s.Sum, want)
	}
	if q := s.Quantile(0.5); q != .001 {
		t.Errorf("durations: median %v", q)
	}

	c := NewHistogram(CountBounds(1, 2, 4))
	for _, n := range []uint64{1, 2, 3, 4, 5, 300} {
		c.ObserveCount(n)
	}
	s = c.Snapshot()
	if want := []uint64{1, 1, 2, 2}; !slices.Equal(s.Counts, want) || s.Sum != 315 {
		t.Errorf("counts: %+v, want counts %v and sum 315", s, want)
	}
	var m dto.Metric
	if err := s.Metric(prometheus.NewDesc("x", "x", nil, nil)).Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	var got []string
	for _, b := range h.GetBucket() {
		got = append(got, fmt.Sprintf("%v:%d", b.GetUpperBound(), b.GetCumulativeCount()))
	}
	if want := []string{"1:1", "2:2", "4:4"}; !slices.Equal(got, want) || h.GetSampleCount() != 6 || h.GetSampleSum() != 315 {
		t.Errorf("exposition: buckets %v count %d sum %v, want %v, 6, 315", got, h.GetSampleCount(), h.GetSampleSum(), want)
	}

	for _, bad := range [][]float64{nil, {1, 1}, {2, 1}, make([]float64, numBuckets+1)} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("CountBounds(%v) did not panic", bad)
				}
			}()
			CountBounds(bad...)
		}()
	}
}
