package proxy

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/controls"
)

// Overload classes. Each tag has a class: critical (the flow that earns
// the money), normal (the default) or background (reports, resyncs,
// retries that can wait). When the pool is saturated, its borrowers queue
// in order of arrival plus their class's handicap (critical none, normal
// overload.critical_wait, background half of overload.background_wait), so
// critical work goes first, yet no class starves: a waiter is served
// before higher-class work that arrives more than its handicap after it.
// Background borrowers also never hold more than pool.max minus
// overload.reserve connections (a gate of their own, in front of the
// pool, so the reserve holds whatever the session variant), are not
// pipelined (a pipelined statement bypasses that gate), and are shed with
// error 9006 once they have waited overload.background_wait; critical and
// normal ones wait up to pool.acquire_timeout as before. Pipes carry one
// class, so a critical SELECT never queues on a connection behind a
// background one.
//
// A tag's class comes from the fleet's controls (holdfastctl class), then
// this instance's run-time ones (--local), then overload.classes in the
// configuration. With no class anywhere, finding a borrow's class is one
// atomic load; every borrow's wait is still counted under its class.

// class is an overload class (package controls).
type class = controls.Class

const (
	classCritical   = controls.Critical
	classNormal     = controls.Normal
	classBackground = controls.Background
	numClasses      = controls.NumClasses
)

// classNames are config's class names, in class order.
var classNames = [numClasses]string(config.OverloadClasses)

// parseClass returns the class named s.
func parseClass(s string) (class, bool) { return controls.ParseClass(s) }

// codeShed is the error of a borrow shed under overload.
const codeShed = 9006

// errShed is wrapped by a shed borrow's error (a shedError).
var errShed = errors.New("shed under overload")

// shedError is the cause a background borrow's wait ends with.
type shedError struct {
	tag  string
	wait time.Duration
}

func (e shedError) Error() string {
	return fmt.Sprintf("tag '%s' (class background) waited %v for a backend connection while the pool was saturated, and was shed: "+
		"nothing ran and a transaction begun was rolled back; retry later", e.tag, e.wait)
}
func (e shedError) Is(target error) bool { return target == errShed }

// matchTag reports whether tag matches pattern, * standing for any run of
// characters.
func matchTag(pattern, tag string) bool { return controls.Match(pattern, tag) }

// classes is the server's overload state; the classes in force are
// controls (s.ctrl, kind class).
type classes struct {
	// gate caps background borrows at pool.max - overload.reserve.
	gate      gates
	reserveMu sync.Mutex // serializes applyReserve (taken after s.ctrl's lock)

	stats [numClasses]classStats
}

type classStats struct {
	admitted, shed, overBudget atomic.Uint64
	wait                       attribution.Histogram
}

const backgroundGateKey = "background"

// applyReserve puts the background cap in force (pool.max - reserve) when
// some tag is background, and lifts it when none is.
func (s *Server) applyReserve() {
	s.classes.reserveMu.Lock()
	defer s.classes.reserveMu.Unlock()
	if !s.ctrl.BackgroundCapped() {
		s.classes.gate.setLimit(backgroundGateKey, noLimit, nil)
		return
	}
	cfg := s.config()
	s.classes.gate.setLimit(backgroundGateKey, max(cfg.Pool.Max-cfg.Overload.Reserve, 1), nil)
}

// applyConfigClasses puts overload.classes in force.
func (s *Server) applyConfigClasses(o config.Overload) {
	m := map[string]class{}
	// Lowest class first, so that a pattern listed twice keeps the
	// highest.
	for cl := numClasses; cl > 0; cl-- {
		for _, p := range o.Classes[classNames[cl-1]] {
			m[p] = cl - 1
		}
	}
	set := make([]controls.Control, 0, len(m))
	for p, cl := range m {
		set = append(set, controls.Control{Kind: controls.ClassKind, Key: p, Value: int64(cl)})
	}
	s.ctrl.Replace(controls.Config, []*controls.Kind{controls.ClassKind}, set)
	s.applyReserve() // pool.max or overload.reserve may have changed
}

// classOf is the class of a borrow for tag key (see policy.Key).
func (s *Server) classOf(key string) class { return s.ctrl.Class(key) }

// ClassOf returns the name of tag's class.
func (s *Server) ClassOf(tag string) string { return s.classOf(tag).String() }

// handicap is how much later than its arrival a borrower of cl queues.
func (s *Server) handicap(cl class) time.Duration {
	switch cl {
	case classNormal:
		return s.config().Overload.CriticalWait
	case classBackground:
		return s.config().Overload.BackgroundWait / 2
	}
	return 0
}

// admitClass passes a background borrow through the background cap within
// ctx; it reports whether the borrow was counted (and must exit).
func (s *Server) admitClass(ctx context.Context, cl class) (bool, error) {
	if cl != classBackground {
		return false, nil
	}
	return s.classes.gate.enter(ctx, backgroundGateKey)
}

// classWaited accounts a borrow of cl admitted after wait.
func (s *Server) classWaited(cl class, wait time.Duration) {
	st := &s.classes.stats[cl]
	st.admitted.Add(1)
	st.wait.Observe(wait)
	if cl == classCritical && wait > s.config().Overload.CriticalWait {
		st.overBudget.Add(1)
	}
}

var (
	dClassAdmitted   = prometheus.NewDesc("holdfast_class_admitted_total", "Borrows of a backend connection admitted, by overload class.", []string{"class"}, nil)
	dClassShed       = prometheus.NewDesc("holdfast_class_shed_total", "Borrows shed after waiting overload.background_wait (error 9006), by overload class.", []string{"class"}, nil)
	dClassOverBudget = prometheus.NewDesc("holdfast_class_waits_over_budget_total", "Critical borrows that waited longer than overload.critical_wait (the pool is too small for critical work).", []string{"class"}, nil)
	dClassWait       = prometheus.NewDesc("holdfast_class_wait_seconds", "Time borrows waited for a backend connection (controls and pool), by overload class.", []string{"class"}, nil)
	dClassTag        = prometheus.NewDesc("holdfast_tag_class", "1 for the overload class of each tag that has one other than normal.", []string{"tag", "class"}, nil)
)

// ClassCollector exports the overload classes' metrics.
func (s *Server) ClassCollector() prometheus.Collector { return classCollector{s} }

type classCollector struct{ s *Server }

func (c classCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dClassAdmitted
	ch <- dClassShed
	ch <- dClassOverBudget
	ch <- dClassWait
	ch <- dClassTag
}

func (c classCollector) Collect(ch chan<- prometheus.Metric) {
	for cl := range numClasses {
		st := &c.s.classes.stats[cl]
		n := cl.String()
		ch <- prometheus.MustNewConstMetric(dClassAdmitted, prometheus.CounterValue, float64(st.admitted.Load()), n)
		ch <- prometheus.MustNewConstMetric(dClassShed, prometheus.CounterValue, float64(st.shed.Load()), n)
		if cl == classCritical {
			ch <- prometheus.MustNewConstMetric(dClassOverBudget, prometheus.CounterValue, float64(st.overBudget.Load()), n)
		}
		ch <- st.wait.Snapshot().Metric(dClassWait, n)
	}
	for _, tc := range c.s.TagClasses() {
		ch <- prometheus.MustNewConstMetric(dClassTag, prometheus.GaugeValue, 1, tc.Tag, tc.Class)
	}
}

// TagClass is one tag's class (holdfast_tag_class).
type TagClass struct {
	Tag   string `json:"tag"`
	Class string `json:"class"`
}

// TagClasses lists the tags seen lately whose class is not normal.
func (s *Server) TagClasses() []TagClass {
	if s.ctrl.Load() == nil {
		return nil
	}
	var out []TagClass
	for _, ts := range s.rec.Snapshot() {
		if cl := s.classOf(ts.Tag); cl != classNormal {
			out = append(out, TagClass{ts.Tag, cl.String()})
		}
	}
	return out
}

// ClassStat is one class's counts since start (the holdfast_class_*
// metrics, as values).
type ClassStat struct {
	Class       string  `json:"class"`
	Admitted    uint64  `json:"admitted"`
	Shed        uint64  `json:"shed"`
	OverBudget  uint64  `json:"over_budget"`
	WaitP99Secs float64 `json:"wait_p99_seconds"` // -1: above the last bucket (60 s)
}

// ClassStats returns each class's counts since start.
func (s *Server) ClassStats() []ClassStat {
	out := make([]ClassStat, numClasses)
	for cl := range numClasses {
		st := &s.classes.stats[cl]
		p99 := st.wait.Snapshot().Quantile(0.99)
		if math.IsInf(p99, 1) {
			p99 = -1 // JSON has no +Inf
		}
		out[cl] = ClassStat{Class: cl.String(), Admitted: st.admitted.Load(), Shed: st.shed.Load(), OverBudget: st.overBudget.Load(),
			WaitP99Secs: p99}
	}
	return out
}

// SetTagClass puts the tags matching pattern (a tag, or * for any run of
// characters) in class on this instance; class "" lifts this instance's
// own. The fleet's classes win over it.
func (s *Server) SetTagClass(pattern, class string) error {
	if class == "" {
		s.ctrl.Lift(controls.Local, controls.ClassKind, pattern)
		return nil
	}
	cl, ok := parseClass(class)
	if !ok {
		return fmt.Errorf("class: want critical, normal or background, got %q", class)
	}
	s.ctrl.Put(controls.Local, controls.Control{Kind: controls.ClassKind, Key: pattern, Value: int64(cl)})
	return nil
}
