package attribution

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestRecorderLookup(t *testing.T) {
	r := NewRecorder(Options{MaxTags: 3, Known: []string{"holdfast:reserve", "holdfast:refill"}})
	res := r.TagString("holdfast:reserve")
	if res.Name() != "holdfast:reserve" || r.Tag([]byte("holdfast:reserve")) != res {
		t.Fatalf("known name: got %q, or a different handle", res.Name())
	}
	a := r.Tag([]byte("checkout"))
	if a.Name() != "checkout" || r.TagString("checkout") != a {
		t.Fatalf("Tag(checkout) = %q, or a different handle", a.Name())
	}
	other := r.TagString(Other)
	if other.Name() != Other {
		t.Fatalf("TagString(Other) = %q", other.Name())
	}
	if u := r.TagString(Untagged); u.Name() != Untagged || u == other {
		t.Fatalf("TagString(Untagged) = %q", u.Name())
	}
	// Full: 2 known + checkout. New and invalid names fold into Other.
	for _, n := range []string{"late", "a b", "", strings.Repeat("x", MaxTagLen+1), "late"} {
		if got := r.TagString(n); got != other {
			t.Errorf("TagString(%q) = %q, want Other", n, got.Name())
		}
	}
	if got := r.Folded(); got != 5 {
		t.Errorf("Folded() = %d, want 5", got)
	}
	// Admitted names keep their handles.
	if r.Tag([]byte("checkout")) != a || r.TagString("holdfast:refill").Name() != "holdfast:refill" {
		t.Errorf("admitted names lost their handles")
	}
	if got := r.Folded(); got != 5 {
		t.Errorf("Folded() = %d after known lookups, want 5", got)
	}
}

func TestNewRecorderOptions(t *testing.T) {
	if got := NewRecorder(Options{}).names.max; got != DefaultMaxTags {
		t.Errorf("MaxTags 0: max = %d, want %d", got, DefaultMaxTags)
	}
	defer func() {
		if recover() == nil {
			t.Errorf("NewRecorder(MaxTags: -1) did not panic")
		}
	}()
	NewRecorder(Options{MaxTags: -1})
}

func TestReasons(t *testing.T) {
	r := NewRecorder(Options{})
	tag := r.TagString("t")
	for _, reason := range pinReasons {
		tag.Pinned(reason)
	}
	tag.Pinned("something_new")
	tag.Pinned("")
	tag.Pinned("TEMPORARY_TABLE")
	tag.Rejected(RejectDrained)
	tag.Rejected(RejectLimit)
	tag.Rejected(RejectLimit)
	tag.Rejected("cancelled")
	s := r.Snapshot()[0]
	wantPins := make(map[string]uint64)
	for _, reason := range pinReasons {
		wantPins[reason] = 1
	}
	wantPins[PinOther] = 4
	if !maps.Equal(s.Pins, wantPins) {
		t.Errorf("Pins = %v, want %v", s.Pins, wantPins)
	}
	if want := map[string]uint64{"drained": 1, "limit": 2, "other": 1}; !maps.Equal(s.Rejected, want) {
		t.Errorf("Rejected = %v, want %v", s.Rejected, want)
	}
	if len(pinReasons) != 12 {
		t.Errorf("%d pin reasons, want 11 and other", len(pinReasons))
	}
}

// TestSnapshot checks what a snapshot holds, which tags it lists and in
// which order.
func TestSnapshot(t *testing.T) {
	r := NewRecorder(Options{Known: []string{"holdfast:refill"}})
	if got := r.Snapshot(); len(got) != 0 {
		t.Fatalf("new Recorder: Snapshot = %+v, want empty", got)
	}
	r.TagString("looked_up_only")

	a := r.TagString("a")
	a.Borrowed(2 * time.Millisecond)
	a.Statement(time.Millisecond, false)
	a.Statement(3*time.Millisecond, true)
	a.Transaction()
	a.SlowTransaction()
	a.Returned(200*time.Millisecond, 4*time.Millisecond, 190*time.Millisecond)

	b := r.TagString("b")
	for range 2 {
		b.Borrowed(0)
		b.Statement(time.Millisecond, false)
		b.Returned(time.Second, time.Millisecond, 0)
	}
	r.TagString("drained_only").Rejected(RejectDrained)
	r.TagString("c").Borrowed(time.Millisecond) // still held: no hold time yet

	s := r.Snapshot()
	var names []string
	for _, ts := range s {
		names = append(names, ts.Tag)
	}
	// By hold time, ties by name.
	if want := []string{"b", "a", "c", "drained_only"}; !slices.Equal(names, want) {
		t.Fatalf("Snapshot tags = %v, want %v", names, want)
	}
	got := s[1]
	want := TagStats{
		Tag: "a", Borrows: 1, Statements: 2, Errors: 1, Transactions: 1, SlowTransactions: 1,
		HoldSeconds: 0.2, ExecSeconds: 0.004, IdleInTxnSeconds: 0.19, WaitSeconds: 0.002, StatementSeconds: 0.004,
	}
	if got.Tag != want.Tag || got.Borrows != want.Borrows || got.Statements != want.Statements ||
		got.Errors != want.Errors || got.Transactions != want.Transactions || got.SlowTransactions != want.SlowTransactions ||
		got.HoldSeconds != want.HoldSeconds || got.ExecSeconds != want.ExecSeconds ||
		got.IdleInTxnSeconds != want.IdleInTxnSeconds || got.WaitSeconds != want.WaitSeconds ||
		got.StatementSeconds != want.StatementSeconds || got.Pins != nil || got.Rejected != nil {
		t.Errorf("a: got %+v\nwant %+v", got, want)
	}
	if got.Hold.Counts[10] != 1 || got.Wait.Counts[4] != 1 || got.Stmt.Counts[3] != 1 || got.Stmt.Counts[5] != 1 {
		t.Errorf("a: histograms %v %v %v", got.Hold.Counts, got.Wait.Counts, got.Stmt.Counts)
	}
	if s[0].Borrows != 2 || s[0].HoldSeconds != 2 || s[0].IdleInTxnSeconds != 0 {
		t.Errorf("b: %+v", s[0])
	}
}

// TestRecorderConcurrent records from many goroutines on one shared tag and
// on one tag each, while new tags are admitted and snapshots taken; run it
// with -race. Every total must be exact.
func TestRecorderConcurrent(t *testing.T) {
	const (
		goroutines = 16
		iterations = 2000
		spare      = 50
	)
	r := NewRecorder(Options{MaxTags: goroutines + 1 + spare})

	// op records iteration i on tag; want accumulates what it should add.
	type totals struct {
		borrows, statements, errors, txns, slow uint64
		holdNs, execNs, idleNs, waitNs, stmtNs  uint64
		hold, wait, stmt                        [numBuckets + 1]uint64
		pins                                    map[string]uint64
		rejected                                map[string]uint64
	}
	op := func(tag *Tag, i int) {
		wait := time.Duration(i%300) * time.Microsecond
		stmt := time.Duration(i%1000)*time.Microsecond + time.Duration(i)
		hold := time.Duration(i%50) * time.Millisecond
		tag.Borrowed(wait)
		tag.Statement(stmt, i%7 == 0)
		if i%3 == 0 {
			tag.Transaction()
		}
		if i%5 == 0 {
			tag.SlowTransaction()
		}
		if i%11 == 0 {
			tag.Pinned(pinReasons[i%len(pinReasons)])
		}
		if i%13 == 0 {
			tag.Rejected(rejectReasons[i%len(rejectReasons)])
		}
		tag.Returned(hold, stmt, hold/2)
	}
	want := func(n int) totals {
		var w totals
		w.pins, w.rejected = map[string]uint64{}, map[string]uint64{}
		for i := range iterations {
			wait := time.Duration(i%300) * time.Microsecond
			stmt := time.Duration(i%1000)*time.Microsecond + time.Duration(i)
			hold := time.Duration(i%50) * time.Millisecond
			w.borrows++
			w.statements++
			if i%7 == 0 {
				w.errors++
			}
			if i%3 == 0 {
				w.txns++
			}
			if i%5 == 0 {
				w.slow++
			}
			if i%11 == 0 {
				w.pins[pinReasons[i%len(pinReasons)]]++
			}
			if i%13 == 0 {
				w.rejected[rejectReasons[i%len(rejectReasons)]]++
			}
			w.holdNs += uint64(hold)
			w.execNs += uint64(stmt)
			w.idleNs += uint64(hold / 2)
			w.waitNs += uint64(wait)
			w.stmtNs += uint64(stmt)
			w.hold[refBucket(hold)]++
			w.wait[refBucket(wait)]++
			w.stmt[refBucket(stmt)]++
		}
		// n goroutines each did the same.
		m := uint64(n)
		for _, p := range []*uint64{&w.borrows, &w.statements, &w.errors, &w.txns, &w.slow,
			&w.holdNs, &w.execNs, &w.idleNs, &w.waitNs, &w.stmtNs} {
			*p *= m
		}
		for i := range w.hold {
			w.hold[i] *= m
			w.wait[i] *= m
			w.stmt[i] *= m
		}
		for k := range w.pins {
			w.pins[k] *= m
		}
		for k := range w.rejected {
			w.rejected[k] *= m
		}
		return w
	}

	var wg sync.WaitGroup
	stop := make(chan struct{})
	snapshots := 0
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				r.Snapshot()
				snapshots++
			}
		}
	})
	// Each goroutine admits the shared tag and its own concurrently with the
	// others, then all record at once; junk names take the spare slots and
	// then fold into Other, concurrently with the recording.
	var workers, admitted sync.WaitGroup
	admitted.Add(goroutines)
	for g := range goroutines {
		workers.Go(func() {
			own := []byte("own_" + strconv.Itoa(g))
			shared := []byte("shared")
			r.Tag(shared)
			r.Tag(own)
			admitted.Done()
			admitted.Wait()
			junk := make([]byte, 0, 32)
			for i := range iterations {
				op(r.Tag(shared), i) // looked up every time, as the proxy does
				op(r.Tag(own), i)
				junk = strconv.AppendInt(append(junk[:0], "junk_"...), int64(g*iterations+i), 10)
				r.Tag(junk).Transaction()
			}
		})
	}
	workers.Wait()
	close(stop)
	wg.Wait()
	t.Logf("%d snapshots taken during the run", snapshots)

	byTag := make(map[string]TagStats)
	for _, s := range r.Snapshot() {
		byTag[s.Tag] = s
	}
	if want := goroutines + 1 + spare + 1; len(byTag) != want {
		t.Errorf("Snapshot has %d tags, want %d", len(byTag), want)
	}
	check := func(name string, w totals) {
		t.Helper()
		s, ok := byTag[name]
		if !ok {
			t.Errorf("%s: missing from Snapshot", name)
			return
		}
		if s.Borrows != w.borrows || s.Statements != w.statements || s.Errors != w.errors ||
			s.Transactions != w.txns || s.SlowTransactions != w.slow {
			t.Errorf("%s: counts %d %d %d %d %d, want %d %d %d %d %d", name,
				s.Borrows, s.Statements, s.Errors, s.Transactions, s.SlowTransactions,
				w.borrows, w.statements, w.errors, w.txns, w.slow)
		}
		for _, c := range []struct {
			what string
			got  float64
			ns   uint64
		}{
			{"hold", s.HoldSeconds, w.holdNs}, {"exec", s.ExecSeconds, w.execNs}, {"idle", s.IdleInTxnSeconds, w.idleNs},
			{"wait", s.WaitSeconds, w.waitNs}, {"statement", s.StatementSeconds, w.stmtNs},
		} {
			if c.got != float64(c.ns)/1e9 {
				t.Errorf("%s: %s seconds = %v, want %v", name, c.what, c.got, float64(c.ns)/1e9)
			}
		}
		for _, h := range []struct {
			what string
			got  HistogramSnapshot
			want [numBuckets + 1]uint64
		}{{"hold", s.Hold, w.hold}, {"wait", s.Wait, w.wait}, {"stmt", s.Stmt, w.stmt}} {
			if !slices.Equal(h.got.Counts, h.want[:]) {
				t.Errorf("%s: %s buckets = %v, want %v", name, h.what, h.got.Counts, h.want)
			}
		}
		if !maps.Equal(s.Pins, w.pins) || !maps.Equal(s.Rejected, w.rejected) {
			t.Errorf("%s: pins %v rejected %v, want %v %v", name, s.Pins, s.Rejected, w.pins, w.rejected)
		}
	}
	check("shared", want(goroutines))
	for g := range goroutines {
		check("own_"+strconv.Itoa(g), want(1))
	}
	// spare junk names were admitted, each with one transaction; the rest
	// folded into Other.
	junkTags := 0
	for name, s := range byTag {
		if strings.HasPrefix(name, "junk_") {
			junkTags++
			if s.Transactions != 1 {
				t.Errorf("%s: %d transactions, want 1", name, s.Transactions)
			}
		}
	}
	if junkTags != spare {
		t.Errorf("%d junk tags admitted, want %d", junkTags, spare)
	}
	if got, want := byTag[Other].Transactions, uint64(goroutines*iterations-spare); got != want {
		t.Errorf("other: %d transactions, want %d", got, want)
	}
	if got, want := r.Folded(), uint64(goroutines*iterations-spare); got != want {
		t.Errorf("Folded() = %d, want %d", got, want)
	}
}

func TestRecorderAllocs(t *testing.T) {
	long := strings.Repeat("x", MaxTagLen) // longer than the runtime's 32-byte stack buffer
	r := NewRecorder(Options{MaxTags: 3, Known: []string{"holdfast:reserve"}})
	name := []byte("checkout_completion")
	r.Tag(name)
	r.TagString(long)
	for range 10 { // let the lookups pay for the snapshot refresh
		r.Tag(name)
	}
	check := func(what string, f func()) {
		t.Helper()
		if allocs := testing.AllocsPerRun(100, f); allocs != 0 {
			t.Errorf("%s: %v allocations, want 0", what, allocs)
		}
	}
	check("Tag, known name", func() { r.Tag(name) })
	check("Tag, known long name", func() { r.Tag([]byte(long)) })
	check("TagString, known name", func() { r.TagString("holdfast:reserve") })
	check("Tag, Untagged", func() { r.Tag([]byte(Untagged)) })
	junk := []byte("junk_not_admitted")
	check("Tag, new name past MaxTags", func() { r.Tag(junk) })
	check("Tag, invalid name", func() { r.Tag([]byte("a b")) })

	tag := r.Tag(name)
	check("Borrowed", func() { tag.Borrowed(time.Millisecond) })
	check("Returned", func() { tag.Returned(time.Second, time.Millisecond, 900*time.Millisecond) })
	check("Statement", func() { tag.Statement(time.Millisecond, false) })
	check("Statement failed", func() { tag.Statement(time.Millisecond, true) })
	check("Transaction", func() { tag.Transaction() })
	check("SlowTransaction", func() { tag.SlowTransaction() })
	check("Pinned", func() { tag.Pinned(PinUserVariable) })
	check("Pinned other", func() { tag.Pinned("whatever") })
	check("Rejected", func() { tag.Rejected(RejectLimit) })
	check("Name", func() { _ = tag.Name() })
	check("statement path", func() { r.Tag(name).Statement(time.Millisecond, false) })
}

var (
	durSink time.Duration
	tagSink *Tag
)

// clockBaseline is what the proxy pays anyway to time one statement: two
// clock reads. Benchmarks report their cost as a multiple of it (x-clock).
func clockBaseline(n int) float64 {
	start := time.Now()
	for range n {
		t0 := time.Now()
		durSink += time.Since(t0)
	}
	return float64(time.Since(start).Nanoseconds()) / float64(n)
}

func reportClock(b *testing.B) {
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp/clockBaseline(b.N), "x-clock")
}

func benchRecorder() (*Recorder, [][]byte) {
	r := NewRecorder(Options{})
	names := make([][]byte, 200)
	for i := range names {
		names[i] = fmt.Appendf(nil, "flow_%03d_checkout", i)
		for range 3 * len(names) { // into the lookup snapshot
			r.Tag(names[i])
		}
	}
	return r, names
}

// BenchmarkStatementPath is the proxy's per-statement cost: look the tag up
// by the bytes AppendCommentTag returned, then record the statement.
func BenchmarkStatementPath(b *testing.B) {
	r, names := benchRecorder()
	b.Run("one-tag", func(b *testing.B) {
		b.ReportAllocs()
		name := names[0]
		for b.Loop() {
			r.Tag(name).Statement(850*time.Microsecond, false)
		}
		reportClock(b)
	})
	b.Run("200-tags", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r.Tag(names[i%len(names)]).Statement(850*time.Microsecond, false)
			i++
		}
		reportClock(b)
	})
	b.Run("folded", func(b *testing.B) {
		full := NewRecorder(Options{MaxTags: 1})
		full.TagString("only")
		junk := []byte("flow_not_admitted")
		b.ReportAllocs()
		for b.Loop() {
			full.Tag(junk).Statement(850*time.Microsecond, false)
		}
		reportClock(b)
	})
	b.Run("parallel-one-tag", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r.Tag(names[0]).Statement(850*time.Microsecond, false)
			}
		})
	})
	b.Run("parallel-200-tags", func(b *testing.B) {
		b.ReportAllocs()
		var seed sync.Mutex
		next := 0
		b.RunParallel(func(pb *testing.PB) {
			seed.Lock()
			i := next * 37
			next++
			seed.Unlock()
			for pb.Next() {
				r.Tag(names[i%len(names)]).Statement(850*time.Microsecond, false)
				i++
			}
		})
	})
}

// BenchmarkBorrowPath is the proxy's per-borrow cost: look the tag up, then
// record the borrow and the return.
func BenchmarkBorrowPath(b *testing.B) {
	r, names := benchRecorder()
	b.Run("one-tag", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			t := r.Tag(names[0])
			t.Borrowed(30 * time.Microsecond)
			t.Returned(3*time.Millisecond, time.Millisecond, 1500*time.Microsecond)
		}
		reportClock(b)
	})
	b.Run("parallel-one-tag", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				t := r.Tag(names[0])
				t.Borrowed(30 * time.Microsecond)
				t.Returned(3*time.Millisecond, time.Millisecond, 1500*time.Microsecond)
			}
		})
	})
}

// snapshotByTag indexes a Snapshot by tag name.
func snapshotByTag(r *Recorder) map[string]TagStats {
	m := make(map[string]TagStats)
	for _, s := range r.Snapshot() {
		m[s.Tag] = s
	}
	return m
}

func TestRecorderRetiresIdleTags(t *testing.T) {
	r := NewRecorder(Options{MaxTags: 4, RetireIdle: 50 * time.Millisecond, Known: []string{"shop"}})
	shop, a, b := r.TagString("shop"), r.TagString("a"), r.TagString("b")
	own := r.TagString("holdfast:refill") // reserved prefix: never retired
	// b is idle from before start on, so b retired less than RetireIdle
	// after start would be a bug.
	start := time.Now()
	for _, x := range []*Tag{shop, a, b, own} {
		x.Borrowed(0)
	}
	if got := r.TagString("c"); got != r.other {
		t.Fatalf("a new name with every slot taken and nothing idle got %q, want %q", got.Name(), Other)
	}
	// Keep a busy; shop, b and holdfast:refill go idle. c must get b's slot
	// once b has been idle for RetireIdle, and not before.
	var c *Tag
	for time.Since(start) < 5*time.Second {
		a.Statement(time.Millisecond, false)
		r.Snapshot()
		if c = r.TagString("c"); c != r.other {
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if c == r.other {
		t.Fatal("c never got a slot although b was idle")
	}
	if idle := time.Since(start); idle < 50*time.Millisecond {
		t.Fatalf("b was retired after %v idle, before RetireIdle", idle)
	}
	if !b.retired.Load() || a.retired.Load() || shop.retired.Load() || own.retired.Load() {
		t.Fatalf("retired: b %v (want true), a %v, shop %v, holdfast:refill %v (want false)",
			b.retired.Load(), a.retired.Load(), shop.retired.Load(), own.retired.Load())
	}
	if r.Retired() != 1 {
		t.Fatalf("Retired() = %d, want 1", r.Retired())
	}
	snap := snapshotByTag(r)
	if _, ok := snap["b"]; ok {
		t.Fatal("a retired tag is still in the snapshot")
	}
	if snap["a"].Borrows != 1 || snap["shop"].Borrows != 1 || snap["holdfast:refill"].Borrows != 1 {
		t.Fatalf("kept tags lost their counts: %+v", snap)
	}

	// An old handle to b keeps working: what it records lands in Other
	// while every slot is taken, or under b again should a slot have come
	// free meanwhile (a stalled machine can leave a idle long enough).
	c.Borrowed(0)
	b.Borrowed(time.Millisecond)
	b.Returned(time.Millisecond, time.Millisecond, 0)
	snap = snapshotByTag(r)
	if n, h := snap[Other].Borrows+snap["b"].Borrows, snap[Other].Hold.Count+snap["b"].Hold.Count; n != 1 || h != 1 {
		t.Fatalf("a retired handle's records went astray: other %+v, b %+v", snap[Other], snap["b"])
	}
}

func TestRecorderRetiredHandleReadmits(t *testing.T) {
	r := NewRecorder(Options{MaxTags: 1, RetireIdle: time.Millisecond})
	b := r.TagString("b")
	b.Borrowed(0)
	deadline := time.Now().Add(5 * time.Second)
	for !b.retired.Load() && time.Now().Before(deadline) {
		r.Snapshot()
		time.Sleep(2 * time.Millisecond)
		r.TagString("c")
	}
	if !b.retired.Load() {
		t.Fatal("b was never retired")
	}
	// c holds the only slot now. Once c is idle too, b's old handle gets
	// its name admitted again and records under it.
	for time.Now().Before(deadline) {
		r.Snapshot()
		time.Sleep(2 * time.Millisecond)
		b.Statement(time.Millisecond, false)
		if snap := snapshotByTag(r); snap["b"].Statements >= 1 {
			if got := r.TagString("b"); got == b || got.retired.Load() {
				t.Fatal("the name b resolves to its retired Tag")
			}
			return
		}
	}
	t.Fatal("b's old handle never got its name back")
}

func TestRecorderRetireConcurrent(t *testing.T) {
	// Lookups, old handles and sweeps at once, for the race detector, and
	// the bound holds throughout.
	r := NewRecorder(Options{MaxTags: 8, RetireIdle: time.Millisecond})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var handles [8][]*Tag
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tag := r.TagString("t" + strconv.Itoa(g) + "_" + strconv.Itoa(i%20))
				tag.Borrowed(0)
				tag.Returned(time.Microsecond, 0, 0)
				handles[g] = append(handles[g], tag)
				if len(handles[g]) > 50 {
					handles[g][i%50].Statement(0, false)
				}
				if i%100 == 0 {
					r.Snapshot()
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if n := len(r.Snapshot()); n > 8+2 {
		t.Fatalf("%d tags in the snapshot, bound is 8 plus untagged and other", n)
	}
	if n := r.names.Len(); n > 8 {
		t.Fatalf("names holds %d, bound 8", n)
	}
	r.mu.Lock()
	n := len(r.all) - 2
	r.mu.Unlock()
	if n > 8 {
		t.Fatalf("recorder holds %d tags, bound 8", n)
	}
	if r.Retired() == 0 {
		t.Fatal("nothing was retired")
	}
}

// TestRecorderFoldedCountsOnlyFolds: a lookup that a sweep admits (by
// retiring an idle tag) is not counted as folded; every lookup that did
// fold is.
func TestRecorderFoldedCountsOnlyFolds(t *testing.T) {
	r := NewRecorder(Options{MaxTags: 1, RetireIdle: 20 * time.Millisecond})
	r.TagString("a").Borrowed(0)
	var others uint64
	deadline := time.Now().Add(5 * time.Second)
	for r.TagString("b") == r.other {
		others++
		if time.Now().After(deadline) {
			t.Fatal("b never got a's slot although a was idle")
		}
		time.Sleep(2 * time.Millisecond)
	}
	if others == 0 {
		t.Fatal("b was admitted at once: the test shows nothing")
	}
	if got := r.Folded(); got != others {
		t.Fatalf("Folded() = %d, but %d lookups folded", got, others)
	}
}
