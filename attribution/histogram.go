package attribution

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Buckets are the histogram upper bounds in seconds, 100µs to 60s, shared by
// every holdfast_tag_*_seconds histogram. A value equal to a bound falls in
// that bound's bucket (Prometheus "le"). The package reads its own copy,
// taken at start-up: changing Buckets changes nothing.
var Buckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// numBuckets is len(Buckets), and the most bounds a Histogram may have;
// histograms hold one more count, for +Inf.
const numBuckets = 18

// Bounds are a Histogram's bucket upper bounds, fixed when made. A value
// equal to a bound falls in that bound's bucket (Prometheus "le").
// Histograms count in whole units (nanoseconds for durations) and compare
// integers; the bounds and the sum are exposed in the metric's unit
// (seconds for durations).
type Bounds struct {
	upper []float64 // in the exposed unit, ascending
	ints  []uint64  // the same in observed units
	per   float64   // observed units per exposed unit: 1e9 for seconds, 1 for counts
}

// DurationBounds returns bounds in seconds for a histogram of durations
// (Histogram.Observe). It panics unless they ascend and are 1 to 18.
func DurationBounds(seconds ...float64) *Bounds { return newBounds(seconds, 1e9) }

// CountBounds returns bounds for a histogram of whole numbers
// (Histogram.ObserveCount). It panics unless they ascend and are 1 to 18.
func CountBounds(upper ...float64) *Bounds { return newBounds(upper, 1) }

func newBounds(upper []float64, per float64) *Bounds {
	if len(upper) == 0 || len(upper) > numBuckets {
		panic("attribution: histogram bounds: want 1 to 18")
	}
	b := &Bounds{upper: append([]float64(nil), upper...), ints: make([]uint64, len(upper)), per: per}
	for i, u := range upper {
		b.ints[i] = uint64(math.Round(u * per))
		if i > 0 && b.ints[i] <= b.ints[i-1] {
			panic("attribution: histogram bounds not ascending")
		}
	}
	return b
}

// tagBounds are Buckets as the package uses them: the tags' histograms'
// and a zero Histogram's.
var tagBounds = DurationBounds(Buckets...)

// index returns the index of the bucket that holds v: the first i with
// v <= ints[i], or len(ints) (+Inf) when v is above every bound.
func (b *Bounds) index(v uint64) int {
	i, j := 0, len(b.ints)
	for i < j {
		h := int(uint(i+j) >> 1)
		if v > b.ints[h] {
			i = h + 1
		} else {
			j = h
		}
	}
	return i
}

// nanos converts d for accounting: a negative duration counts as zero, so
// that a counter never goes down.
func nanos(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	return uint64(d)
}

// sumNs is a running total of nanoseconds (or of a count histogram's
// values): adding is one atomic add. The
// uint64 wraps after 2^64 ns, about 584 years of cumulative time (a tag
// holding 500 connections without pause gets there in 1.2 years), so readers
// widen it: secondsLocked counts the wraps it sees between two reads. That
// is exact as long as something reads the sum at least once per wrap, which
// any scrape interval does.
type sumNs struct {
	v atomic.Uint64
	// Reader state, guarded by Recorder.snapMu.
	last, wraps uint64
}

func (s *sumNs) add(ns uint64) {
	if ns != 0 {
		s.v.Add(ns)
	}
}

// wrapUnits is 2^64.
const wrapUnits = 18446744073709551616.0

// secondsLocked returns the total of nanoseconds in seconds, wraps
// included. The caller serialises reads (for a Tag's sums it holds
// Recorder.snapMu).
func (s *sumNs) secondsLocked() float64 { return s.valueLocked(1e9) }

// valueLocked returns the total divided by per, wraps included, as
// secondsLocked does.
func (s *sumNs) valueLocked(per float64) float64 {
	raw := s.v.Load()
	if raw < s.last {
		s.wraps++
	}
	s.last = raw
	return float64(s.wraps)*(wrapUnits/per) + float64(raw)/per
}

// Histogram is a fixed-bucket histogram of atomic counters, turned into a
// Prometheus histogram at scrape time: the tags' histograms, and other
// packages' (the proxy's overload classes, the reservation engine's, the
// refiller's). Observing is two atomic adds and takes no lock. Its count
// is the sum of its buckets. A snapshot taken while observations are under
// way may count one of them in the buckets and not yet in the sum, or the
// other way round; the next snapshot has it in both. The zero value is
// ready to use: a histogram of durations over Buckets. NewHistogram makes
// one over other bounds.
type Histogram struct {
	b      *Bounds                       // nil: tagBounds
	counts [numBuckets + 1]atomic.Uint64 // counts[len(bounds)] is +Inf; any after it stay 0
	sum    sumNs
	mu     sync.Mutex // serialises Snapshot (the sum's reader state)
}

// NewHistogram returns an empty histogram over b.
func NewHistogram(b *Bounds) *Histogram { return &Histogram{b: b} }

func (h *Histogram) bounds() *Bounds {
	if h.b == nil {
		return tagBounds
	}
	return h.b
}

// Observe adds one duration, to a histogram of DurationBounds (or a zero
// Histogram). A negative duration counts as zero.
func (h *Histogram) Observe(d time.Duration) { h.observe(nanos(d)) }

// ObserveCount adds one value, to a histogram of CountBounds.
func (h *Histogram) ObserveCount(n uint64) { h.observe(n) }

func (h *Histogram) observe(v uint64) {
	h.counts[h.bounds().index(v)].Add(1)
	h.sum.add(v)
}

// Snapshot copies the histogram.
func (h *Histogram) Snapshot() HistogramSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.snapshotLocked()
}

// snapshotLocked copies h; the caller serialises snapshots of h (holds
// h.mu or, for a Tag's histograms, Recorder.snapMu).
func (h *Histogram) snapshotLocked() HistogramSnapshot {
	b := h.bounds()
	s := HistogramSnapshot{Bounds: b.upper, Counts: make([]uint64, len(b.upper)+1)}
	for i := range s.Counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = h.sum.valueLocked(b.per)
	return s
}

// HistogramSnapshot is a copy of one Histogram.
type HistogramSnapshot struct {
	// Bounds are the histogram's upper bounds, in its unit (seconds for
	// durations); nil, in a zero HistogramSnapshot, means Buckets. The
	// slice is the histogram's own, shared by every snapshot: read only.
	Bounds []float64
	// Counts is not cumulative: for i < len(Bounds), Counts[i] is the
	// number of observations in (Bounds[i-1], Bounds[i]] (from 0 for
	// i == 0), and Counts[len(Bounds)] is the number above the last bound
	// (+Inf). It has len(Bounds)+1 entries, or none in a zero
	// HistogramSnapshot.
	Counts []uint64
	Count  uint64  // observations, the sum of Counts
	Sum    float64 // sum of the observations, in the histogram's unit
}

func (s HistogramSnapshot) bounds() []float64 {
	if s.Bounds == nil {
		return tagBounds.upper
	}
	return s.Bounds
}

// Quantile estimates the q-quantile (0 <= q <= 1) as the upper bound of the
// bucket it falls in: +Inf when that is the last bucket, 0 when s is empty.
func (s HistogramSnapshot) Quantile(q float64) float64 {
	if s.Count == 0 {
		return 0
	}
	bounds := s.bounds()
	rank := max(uint64(math.Ceil(q*float64(s.Count))), 1)
	var seen uint64
	for i, c := range s.Counts {
		seen += c
		if seen >= rank && i < len(bounds) {
			return bounds[i]
		}
	}
	return math.Inf(1)
}

// Metric turns s into a Prometheus histogram of desc with labels, with the
// cumulative bucket counts Prometheus expects.
func (s HistogramSnapshot) Metric(desc *prometheus.Desc, labels ...string) prometheus.Metric {
	bounds := s.bounds()
	buckets := make(map[float64]uint64, len(bounds))
	var cum uint64
	for i, b := range bounds {
		if i < len(s.Counts) {
			cum += s.Counts[i]
		}
		buckets[b] = cum
	}
	return prometheus.MustNewConstHistogram(desc, s.Count, s.Sum, buckets, labels...)
}
