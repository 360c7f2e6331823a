package attribution

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
)

type fakeLive struct {
	holders []Holder
	gates   []Gate
}

func (f *fakeLive) Holders() []Holder { return f.holders }
func (f *fakeLive) Gates() []Gate     { return f.gates }

// allMetrics is every metric family the collector emits.
var allMetrics = []string{
	"holdfast_tag_borrows_total",
	"holdfast_tag_connection_limit",
	"holdfast_tag_drained",
	"holdfast_tag_engine_seconds_total",
	"holdfast_tag_errors_total",
	"holdfast_tag_exec_seconds_total",
	"holdfast_tag_held_connections",
	"holdfast_tag_hold_seconds",
	"holdfast_tag_idle_in_transaction_seconds_total",
	"holdfast_tag_pins_total",
	"holdfast_tag_rejected_total",
	"holdfast_tag_slow_transactions_total",
	"holdfast_tag_statement_seconds",
	"holdfast_tag_statements_total",
	"holdfast_tag_transactions_total",
	"holdfast_tag_wait_seconds",
	"holdfast_tags_folded_total",
	"holdfast_tags_retired_total",
}

// collectorFixture records a little traffic on three tags and returns a
// collector over it with live state.
func collectorFixture() (*Recorder, *fakeLive, prometheus.Collector) {
	r := NewRecorder(Options{MaxTags: 3, Known: []string{"holdfast:reserve"}})
	co := r.TagString("checkout")
	co.Borrowed(0)
	co.Borrowed(300 * time.Microsecond)
	co.Statement(time.Millisecond, false)
	co.Statement(2*time.Millisecond, true)
	co.Transaction()
	co.SlowTransaction()
	co.Pinned(PinUserVariable)
	co.Pinned(PinUserVariable)
	co.Pinned("bogus")
	co.Returned(250*time.Millisecond, 3*time.Millisecond, 240*time.Millisecond)
	co.Returned(500*time.Millisecond, 0, 0)

	res := r.TagString("holdfast:reserve")
	res.Borrowed(100 * time.Microsecond)
	res.Statement(400*time.Microsecond, false)
	res.Returned(time.Millisecond, 400*time.Microsecond, 0)

	r.TagString("search").Rejected(RejectDrained)
	r.TagString("late_flow").Statement(time.Millisecond, false) // folded into other
	r.TagString("late_flow").Statement(time.Millisecond, false)

	live := &fakeLive{
		holders: []Holder{{Tag: "checkout", InTransaction: true}, {Tag: "checkout"}, {Tag: "holdfast:reserve"}},
		gates:   []Gate{{Tag: "search", Drained: true}, {Tag: "checkout", Limit: 2}},
	}
	return r, live, NewCollector(r, live)
}

// histogramText is the text exposition of the series of histogram name
// for tag after observations obs (in seconds), with the buckets Buckets
// documents: each bucket counts the observations at most its bound.
func histogramText(name, tag string, obs ...float64) string {
	var b strings.Builder
	sum := 0.0
	for _, o := range obs {
		sum += o
	}
	for _, le := range []string{"0.0001", "0.00025", "0.0005", "0.001", "0.0025", "0.005", "0.01", "0.025",
		"0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf"} {
		bound, _ := strconv.ParseFloat(le, 64)
		n := 0
		for _, o := range obs {
			if o <= bound {
				n++
			}
		}
		fmt.Fprintf(&b, "%s_bucket{tag=%q,le=%q} %d\n", name, tag, le, n)
	}
	fmt.Fprintf(&b, "%s_sum{tag=%q} %s\n", name, tag, strconv.FormatFloat(sum, 'g', -1, 64))
	fmt.Fprintf(&b, "%s_count{tag=%q} %d\n", name, tag, len(obs))
	return b.String()
}

func TestCollectorValues(t *testing.T) {
	_, _, c := collectorFixture()
	want := `
# HELP holdfast_tag_borrows_total Backend connections lent to the tag.
# TYPE holdfast_tag_borrows_total counter
holdfast_tag_borrows_total{tag="checkout"} 2
holdfast_tag_borrows_total{tag="holdfast:reserve"} 1
holdfast_tag_borrows_total{tag="other"} 0
holdfast_tag_borrows_total{tag="search"} 0
# HELP holdfast_tag_statements_total Statements the tag ran.
# TYPE holdfast_tag_statements_total counter
holdfast_tag_statements_total{tag="checkout"} 2
holdfast_tag_statements_total{tag="holdfast:reserve"} 1
holdfast_tag_statements_total{tag="other"} 2
holdfast_tag_statements_total{tag="search"} 0
# HELP holdfast_tag_errors_total Statements of the tag that failed.
# TYPE holdfast_tag_errors_total counter
holdfast_tag_errors_total{tag="checkout"} 1
holdfast_tag_errors_total{tag="holdfast:reserve"} 0
holdfast_tag_errors_total{tag="other"} 0
holdfast_tag_errors_total{tag="search"} 0
# HELP holdfast_tag_exec_seconds_total Part of the tag's connection hold time spent executing statements.
# TYPE holdfast_tag_exec_seconds_total counter
holdfast_tag_exec_seconds_total{tag="checkout"} 0.003
holdfast_tag_exec_seconds_total{tag="holdfast:reserve"} 0.0004
holdfast_tag_exec_seconds_total{tag="other"} 0
holdfast_tag_exec_seconds_total{tag="search"} 0
# HELP holdfast_tag_idle_in_transaction_seconds_total Part of the tag's connection hold time spent idle inside an open transaction, waiting for the client's next statement.
# TYPE holdfast_tag_idle_in_transaction_seconds_total counter
holdfast_tag_idle_in_transaction_seconds_total{tag="checkout"} 0.24
holdfast_tag_idle_in_transaction_seconds_total{tag="holdfast:reserve"} 0
holdfast_tag_idle_in_transaction_seconds_total{tag="other"} 0
holdfast_tag_idle_in_transaction_seconds_total{tag="search"} 0
# HELP holdfast_tag_pins_total Times a client session of the tag was pinned to its backend connection by session state, by reason.
# TYPE holdfast_tag_pins_total counter
holdfast_tag_pins_total{reason="other",tag="checkout"} 1
holdfast_tag_pins_total{reason="user_variable",tag="checkout"} 2
# HELP holdfast_tag_rejected_total Borrows of the tag refused, by reason: drained (the tag is drained), limit (the wait under its connection cap timed out), other.
# TYPE holdfast_tag_rejected_total counter
holdfast_tag_rejected_total{reason="drained",tag="search"} 1
# HELP holdfast_tag_held_connections Backend connections the tag's clients hold now; reported for tags holding one or more and for tags with a drain or cap.
# TYPE holdfast_tag_held_connections gauge
holdfast_tag_held_connections{tag="checkout"} 2
holdfast_tag_held_connections{tag="holdfast:reserve"} 1
holdfast_tag_held_connections{tag="search"} 0
# HELP holdfast_tag_drained 1 when the tag is drained (its new borrows fail fast), else 0; reported for tags with a drain or cap.
# TYPE holdfast_tag_drained gauge
holdfast_tag_drained{tag="checkout"} 0
holdfast_tag_drained{tag="search"} 1
# HELP holdfast_tag_connection_limit Most backend connections the tag may hold at once; reported only for tags with a cap in force.
# TYPE holdfast_tag_connection_limit gauge
holdfast_tag_connection_limit{tag="checkout"} 2
# HELP holdfast_tags_folded_total Tag lookups counted under tag="other" because the name was new past the max_tags bound, or not a valid tag.
# TYPE holdfast_tags_folded_total counter
holdfast_tags_folded_total 2
# HELP holdfast_tag_hold_seconds Time a backend connection was held per borrow, from being lent to the tag to its return to the pool.
# TYPE holdfast_tag_hold_seconds histogram
` + histogramText("holdfast_tag_hold_seconds", "checkout", 0.25, 0.5) +
		histogramText("holdfast_tag_hold_seconds", "holdfast:reserve", 0.001)
	names := []string{
		"holdfast_tag_borrows_total", "holdfast_tag_statements_total", "holdfast_tag_errors_total",
		"holdfast_tag_exec_seconds_total", "holdfast_tag_idle_in_transaction_seconds_total",
		"holdfast_tag_pins_total", "holdfast_tag_rejected_total", "holdfast_tag_held_connections",
		"holdfast_tag_drained", "holdfast_tag_connection_limit", "holdfast_tags_folded_total",
		"holdfast_tag_hold_seconds",
	}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

// TestCollectorRegistry registers the collector on a fresh registry and
// checks that gathering yields exactly the documented metric families, with
// the tag label on all but the folded counter.
func TestCollectorRegistry(t *testing.T) {
	_, _, c := collectorFixture()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, mf := range mfs {
		got = append(got, mf.GetName())
		if mf.GetHelp() == "" {
			t.Errorf("%s: no help", mf.GetName())
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName())
			}
			want := []string{"tag"}
			switch mf.GetName() {
			case "holdfast_tags_folded_total", "holdfast_tags_retired_total":
				want = nil
			case "holdfast_tag_pins_total", "holdfast_tag_rejected_total":
				want = []string{"reason", "tag"}
			}
			if !slices.Equal(labels, want) {
				t.Errorf("%s: labels %v, want %v", mf.GetName(), labels, want)
			}
		}
	}
	if !slices.Equal(got, allMetrics) {
		t.Errorf("gathered %v\nwant %v", got, allMetrics)
	}
	// Wait and statement histograms, checked by value.
	want := `
# HELP holdfast_tag_wait_seconds Time a borrower of the tag waited for a backend connection before it was lent one.
# TYPE holdfast_tag_wait_seconds histogram
` + histogramText("holdfast_tag_wait_seconds", "holdfast:reserve", 0.0001) +
		histogramText("holdfast_tag_wait_seconds", "checkout", 0, 0.0003)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "holdfast_tag_wait_seconds"); err != nil {
		t.Error(err)
	}
	// A histogram appears with its first observation: other has statements
	// only, search only a rejection.
	for _, c := range []struct {
		name string
		want int
	}{{"holdfast_tag_statement_seconds", 3}, {"holdfast_tag_wait_seconds", 2}, {"holdfast_tag_hold_seconds", 2}} {
		if n, err := testutil.GatherAndCount(reg, c.name); err != nil || n != c.want {
			t.Errorf("%s: %d tags, %v; want %d", c.name, n, err, c.want)
		}
	}
}

func TestCollectorLint(t *testing.T) {
	_, _, c := collectorFixture()
	problems, err := testutil.CollectAndLint(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if n := testutil.CollectAndCount(c); n == 0 {
		t.Errorf("nothing collected")
	}
}

// TestCollectorLiveState checks that the live state the proxy supplies
// cannot fail a scrape: nil, invalid UTF-8 and duplicate gates.
func TestCollectorLiveState(t *testing.T) {
	r, _, _ := collectorFixture()
	if n := testutil.CollectAndCount(NewCollector(r, nil),
		"holdfast_tag_held_connections", "holdfast_tag_drained", "holdfast_tag_connection_limit"); n != 0 {
		t.Errorf("nil LiveState: %d live series, want 0", n)
	}
	live := &fakeLive{
		holders: []Holder{{Tag: "bad\xff"}, {Tag: "bad\xfe"}, {Tag: "x"}},
		gates: []Gate{
			{Tag: "x", Limit: 5}, {Tag: "x", Drained: true}, {Tag: "x", Limit: 3}, {Tag: "x", Limit: -1},
			{Tag: "cfg\xff", Drained: true}, {Tag: "undrained"},
		},
	}
	want := `
# HELP holdfast_tag_held_connections Backend connections the tag's clients hold now; reported for tags holding one or more and for tags with a drain or cap.
# TYPE holdfast_tag_held_connections gauge
holdfast_tag_held_connections{tag="bad_"} 2
holdfast_tag_held_connections{tag="cfg_"} 0
holdfast_tag_held_connections{tag="undrained"} 0
holdfast_tag_held_connections{tag="x"} 1
# HELP holdfast_tag_drained 1 when the tag is drained (its new borrows fail fast), else 0; reported for tags with a drain or cap.
# TYPE holdfast_tag_drained gauge
holdfast_tag_drained{tag="cfg_"} 1
holdfast_tag_drained{tag="undrained"} 0
holdfast_tag_drained{tag="x"} 1
# HELP holdfast_tag_connection_limit Most backend connections the tag may hold at once; reported only for tags with a cap in force.
# TYPE holdfast_tag_connection_limit gauge
holdfast_tag_connection_limit{tag="x"} 3
`
	if err := testutil.CollectAndCompare(NewCollector(r, live), strings.NewReader(want),
		"holdfast_tag_held_connections", "holdfast_tag_drained", "holdfast_tag_connection_limit"); err != nil {
		t.Error(err)
	}
}

// TestCardinalityMillion records for one million distinct tag names with the
// default bound and checks that what is kept, and what a scrape returns, is
// bounded by MaxTags and not by the names seen.
func TestCardinalityMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("records for one million tag names")
	}
	const (
		distinct = 1_000_000
		maxTags  = 500
		// One active tag is about 4 KiB of text exposition (three
		// histograms of 19 buckets, eight counters, a few pins).
		perTagBytes = 6 << 10
		maxBytes    = (maxTags + 2) * perTagBytes
		// A Tag is under 1 KiB and the maps about 200 bytes per name;
		// allow twice that plus slack for the runtime. One million kept
		// Tags would need about a gigabyte.
		maxHeap = 2*(maxTags+2)*(1<<10+200) + 1<<20
	)
	var r *Recorder
	growth := heapGrowth(func() {
		r = NewRecorder(Options{MaxTags: maxTags})
		buf := make([]byte, 0, 32)
		for i := range distinct {
			buf = strconv.AppendInt(append(buf[:0], "flow_"...), int64(i), 10)
			t := r.Tag(buf)
			t.Borrowed(time.Duration(i%1000) * time.Microsecond)
			t.Statement(time.Duration(i%5000)*time.Microsecond, i%10 == 0)
			t.Pinned(pinReasons[i%len(pinReasons)])
			t.Returned(time.Duration(i%100)*time.Millisecond, time.Millisecond, 0)
		}
	})
	t.Logf("heap growth after %d distinct names, MaxTags %d: %d bytes (bound %d)", distinct, maxTags, growth, maxHeap)
	if growth > maxHeap {
		t.Errorf("heap grew by %d bytes, want at most %d", growth, maxHeap)
	}

	s := r.Snapshot()
	if len(s) > maxTags+2 {
		t.Errorf("Snapshot has %d tags, want at most %d", len(s), maxTags+2)
	}
	var total uint64
	for _, ts := range s {
		total += ts.Statements
	}
	if total != distinct {
		t.Errorf("Snapshot counts %d statements, want %d", total, distinct)
	}
	if got, want := r.Folded(), uint64(distinct-maxTags); got != want {
		t.Errorf("Folded() = %d, want %d", got, want)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(r, &fakeLive{}))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	enc := expfmt.NewEncoder(&out, expfmt.NewFormat(expfmt.TypeTextPlain))
	series := 0 // as Prometheus counts them: a histogram is buckets+2
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			series++
			if h := m.GetHistogram(); h != nil {
				series += len(h.GetBucket()) + 2 // +Inf (implicit in the data model), and _sum besides _count
			}
		}
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("exposition: %d bytes, %d series (%d metric families), %d tags (bound %d bytes)",
		out.Len(), series, len(mfs), len(s), maxBytes)
	if out.Len() > maxBytes {
		t.Errorf("exposition is %d bytes, want at most %d", out.Len(), maxBytes)
	}
	if bytes.Contains(out.Bytes(), []byte(`"flow_999999"`)) || !bytes.Contains(out.Bytes(), []byte(`tag="other"`)) {
		t.Errorf("a name past the bound has its own series, or other has none")
	}
}

// BenchmarkCollect is the scrape-time cost with MaxTags active tags.
func BenchmarkCollect(b *testing.B) {
	r := NewRecorder(Options{})
	for i := range DefaultMaxTags {
		t := r.TagString("flow_" + strconv.Itoa(i))
		t.Borrowed(time.Millisecond)
		t.Statement(time.Millisecond, false)
		t.Returned(time.Millisecond, time.Millisecond, 0)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(r, &fakeLive{}))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
