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

// numBuckets is len(Buckets); histograms hold one more count, for +Inf.
const numBuckets = 18

var (
	bounds   [numBuckets]float64 // Buckets as the package uses them
	boundsNs [numBuckets]uint64  // the same in nanoseconds, for comparing integers
)

func init() {
	if len(Buckets) != numBuckets {
		panic("attribution: len(Buckets) != numBuckets")
	}
	for i, b := range Buckets {
		bounds[i] = b
		boundsNs[i] = uint64(math.Round(b * 1e9))
		if i > 0 && boundsNs[i] <= boundsNs[i-1] {
			panic("attribution: Buckets not ascending")
		}
	}
}

// bucketOf returns the index of the bucket that holds ns: the first i with
// ns <= boundsNs[i], or numBuckets (+Inf) when ns is above every bound.
func bucketOf(ns uint64) int {
	i, j := 0, numBuckets
	for i < j {
		h := int(uint(i+j) >> 1)
		if ns > boundsNs[h] {
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

// sumNs is a running total of nanoseconds: adding is one atomic add. The
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

// wrapSeconds is 2^64 nanoseconds in seconds.
const wrapSeconds = 18446744073.709551616

// secondsLocked returns the total in seconds, wraps included. The caller
// holds Recorder.snapMu.
func (s *sumNs) secondsLocked() float64 {
	raw := s.v.Load()
	if raw < s.last {
		s.wraps++
	}
	s.last = raw
	return float64(s.wraps)*wrapSeconds + float64(raw)/1e9
}

// histogram is a fixed-bucket histogram of durations over Buckets, made of
// atomic counters: observing is two atomic adds and takes no lock. Its count
// is the sum of its buckets. A snapshot taken while observations are under
// way may count one of them in the buckets and not yet in the sum, or the
// other way round; the next snapshot has it in both. The zero value is ready
// to use.
type histogram struct {
	counts [numBuckets + 1]atomic.Uint64 // the last is +Inf
	sum    sumNs
}

func (h *histogram) observe(ns uint64) {
	h.counts[bucketOf(ns)].Add(1)
	h.sum.add(ns)
}

// snapshotLocked copies h; the caller holds Recorder.snapMu.
func (h *histogram) snapshotLocked() HistogramSnapshot {
	s := HistogramSnapshot{Counts: make([]uint64, numBuckets+1)}
	for i := range h.counts {
		s.Counts[i] = h.counts[i].Load()
		s.Count += s.Counts[i]
	}
	s.Sum = h.sum.secondsLocked()
	return s
}

// HistogramSnapshot is a copy of one histogram over Buckets.
type HistogramSnapshot struct {
	// Counts is not cumulative: for i < len(Buckets), Counts[i] is the number
	// of observations in (Buckets[i-1], Buckets[i]] (from 0 for i == 0), and
	// Counts[len(Buckets)] is the number above the last bound (+Inf). It has
	// len(Buckets)+1 entries, or none in a zero HistogramSnapshot.
	Counts []uint64
	Count  uint64  // observations, the sum of Counts
	Sum    float64 // sum of the observations, in seconds
}

// Quantile estimates the q-quantile (0 <= q <= 1) as the upper bound of the
// bucket it falls in: +Inf when that is the last bucket, 0 when s is empty.
func (s HistogramSnapshot) Quantile(q float64) float64 {
	if s.Count == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(s.Count))), 1)
	var seen uint64
	for i, c := range s.Counts {
		seen += c
		if seen >= rank && i < numBuckets {
			return bounds[i]
		}
	}
	return math.Inf(1)
}

// constHistogram turns s into a Prometheus histogram, with the cumulative
// bucket counts Prometheus expects.
func (s HistogramSnapshot) constHistogram(desc *prometheus.Desc, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, numBuckets)
	var cum uint64
	for i, b := range bounds {
		if i < len(s.Counts) {
			cum += s.Counts[i]
		}
		buckets[b] = cum
	}
	return prometheus.MustNewConstHistogram(desc, s.Count, s.Sum, buckets, labels...)
}

// Histogram is a histogram of durations over Buckets for other packages'
// metrics (the proxy's overload classes), the same as the tags' ones.
// Observing takes no lock. The zero value is ready to use.
type Histogram struct {
	h  histogram
	mu sync.Mutex // serialises snapshots (the sum's reader state)
}

// Observe adds one duration.
func (h *Histogram) Observe(d time.Duration) { h.h.observe(nanos(d)) }

// Snapshot copies the histogram.
func (h *Histogram) Snapshot() HistogramSnapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.h.snapshotLocked()
}

// Metric turns s into a Prometheus histogram of desc with labels.
func (s HistogramSnapshot) Metric(desc *prometheus.Desc, labels ...string) prometheus.Metric {
	return s.constHistogram(desc, labels...)
}
