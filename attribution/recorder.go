package attribution

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxTags is the number of distinct tags a Recorder keeps when
// Options.MaxTags is zero.
const DefaultMaxTags = 500

// Options configure a Recorder. The zero value is ready to use.
type Options struct {
	// MaxTags is how many distinct tag names get their own accounting,
	// besides Untagged and Other; past it, new names fold into Other with
	// the semantics of Names. Zero means DefaultMaxTags.
	MaxTags int

	// Known names are admitted by NewRecorder, before any traffic, so that
	// they always have their own series: holdfast's own tags
	// (holdfast:reserve, holdfast:refill, ...) belong here. They count
	// toward MaxTags; one that is not a valid tag folds into Other.
	Known []string

	// RetireIdle: a tag with nothing recorded for at least this long gives
	// up its slot when a new name finds every slot taken, least recently
	// active first, so that a retired flow does not keep a slot for the
	// process's lifetime. Its series disappear from the metrics; should it
	// come back, it starts again from zero (a counter reset to Prometheus).
	// Untagged, Other, Known names and names with holdfast's reserved prefix
	// are never retired. Zero keeps every admitted tag for the Recorder's
	// lifetime.
	RetireIdle time.Duration
}

// Recorder keeps the per-tag accounting: one Tag per admitted name, until
// the name is retired (Options.RetireIdle). The zero value is not usable;
// call NewRecorder. Safe for concurrent use.
//
// Looking up a known name takes no lock and does not allocate: it reads an
// immutable snapshot of the name-to-Tag map, refreshed like the one in Names
// (after as many lookups have missed it as it would cost to copy, and at
// once when the last name is admitted). A new name is interned by names;
// admitted, it gets its Tag under mu, and folded, it gets Other's without
// taking mu.
type Recorder struct {
	names      *Names
	other      *Tag
	read       atomic.Pointer[map[string]*Tag] // immutable; a subset of all
	retireIdle time.Duration
	nextSweep  atomic.Int64 // unix ns before which no new name triggers a sweep
	retired    atomic.Uint64

	mu     sync.Mutex      // guards following
	all    map[string]*Tag // a Tag for every name names admitted, plus Untagged and Other
	misses int             // lookups that missed read since it was stored

	// snapMu serializes snapshots: it guards the reader state of every
	// Tag's sums (sumNs.last, sumNs.wraps). Taken before mu, never inside.
	snapMu sync.Mutex
}

// NewRecorder returns an empty Recorder with o's names admitted. It panics
// if o.MaxTags is negative.
func NewRecorder(o Options) *Recorder {
	max := o.MaxTags
	if max == 0 {
		max = DefaultMaxTags
	}
	if max < 0 {
		panic("attribution: NewRecorder: MaxTags is negative")
	}
	if o.RetireIdle < 0 {
		panic("attribution: NewRecorder: RetireIdle is negative")
	}
	r := &Recorder{
		names:      NewNames(max),
		other:      &Tag{name: Other},
		all:        make(map[string]*Tag),
		retireIdle: o.RetireIdle,
	}
	r.all[Other] = r.other
	r.all[Untagged] = &Tag{name: Untagged}
	r.storeReadLocked()
	for _, n := range o.Known {
		r.TagString(n).rec = nil // never retired
	}
	return r
}

// Tag returns the accounting handle for name: a tag returned by AppendCommentTag or
// AppendSanitized, one of holdfast's own names such as "holdfast:reserve",
// Untagged or Other. A name seen before gets the same *Tag back, without
// allocating and, once it is in the lookup snapshot, without a lock. A new
// name is admitted while fewer than MaxTags are; past that, or when name is
// not a valid tag (see Names.Intern), it gets Other's Tag and counts as
// folded. Tag does not keep name.
func (r *Recorder) Tag(name []byte) *Tag {
	if t, ok := (*r.read.Load())[string(name)]; ok {
		return t
	}
	return r.tagSlow(name)
}

// TagString is Tag for a string.
func (r *Recorder) TagString(name string) *Tag {
	if t, ok := (*r.read.Load())[name]; ok {
		return t
	}
	return r.tagSlow([]byte(name))
}

func (r *Recorder) tagSlow(name []byte) *Tag {
	// A fold is counted once per lookup, and only when the name ends up
	// folded (a sweep may free a slot for it first).
	s, folded := r.names.intern(name)
	if folded && r.sweepDue(name) {
		s, folded = r.names.intern(name)
	}
	if folded {
		r.names.folded.Add(1)
		return r.other
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.all[s]
	if !ok {
		if r.retireIdle != 0 {
			// A sweep may have retired s since it was admitted: admit it
			// again, or fold it.
			if _, folded := r.names.Intern(name); folded {
				return r.other
			}
		}
		t = &Tag{name: s, rec: r, seenAt: time.Now()}
		if strings.HasPrefix(s, reservedPrefix) {
			t.rec = nil
		}
		r.all[s] = t
		if len(r.all)-2 == r.names.max {
			// Every slot is taken: new names fold without the lock from
			// now on, so the snapshot must hold every name.
			r.storeReadLocked()
			return t
		}
	}
	r.misses++
	if r.misses >= len(r.all) {
		r.storeReadLocked()
	}
	return t
}

// sweepDue retires idle tags when a valid new name found every slot taken
// and no sweep ran lately; it reports whether any slot came free. Sweeps are
// spaced so that a flood of new names costs one pass over the tags per
// interval, not one per name.
func (r *Recorder) sweepDue(name []byte) bool {
	if r.retireIdle == 0 || !isTag(name) {
		return false
	}
	now := time.Now()
	next := r.nextSweep.Load()
	if now.UnixNano() < next || !r.nextSweep.CompareAndSwap(next, now.Add(min(r.retireIdle/4, 10*time.Second)).UnixNano()) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retireLocked(now) > 0
}

// observeLocked notes, for every retirable tag, when its activity last
// changed, as seen now. Sweeps and snapshots call it, so a tag's idle time
// is measured from the last sweep or snapshot that saw it change: never
// longer than it really is idle.
func (r *Recorder) observeLocked(now time.Time) {
	for _, t := range r.all {
		if t.rec != nil {
			if a := t.activity(); a != t.seenCount {
				t.seenCount, t.seenAt = a, now
			}
		}
	}
}

// retireLocked retires every retirable tag idle for at least RetireIdle and
// returns how many it retired. A retired Tag forwards whatever it is still
// told to its name's next Tag (see Tag.current).
func (r *Recorder) retireLocked(now time.Time) int {
	r.observeLocked(now)
	var gone []string
	for name, t := range r.all {
		if t.rec != nil && now.Sub(t.seenAt) >= r.retireIdle {
			t.retired.Store(true)
			delete(r.all, name)
			gone = append(gone, name)
		}
	}
	if len(gone) == 0 {
		return 0
	}
	r.storeReadLocked()
	r.names.forget(gone)
	r.retired.Add(uint64(len(gone)))
	return len(gone)
}

// Retired returns how many tags have been retired to make room for new
// names (see Options.RetireIdle).
func (r *Recorder) Retired() uint64 { return r.retired.Load() }

func (r *Recorder) storeReadLocked() {
	m := maps.Clone(r.all)
	r.read.Store(&m)
	r.misses = 0
}

// Folded returns how many lookups (Tag and TagString calls) got Other's Tag
// for a name other than Other: a new name past MaxTags, or an invalid one.
// It counts lookups, not distinct names: telling whether a folded name was
// seen before would take memory growing with the names.
func (r *Recorder) Folded() uint64 { return r.names.Folded() }

// Snapshot returns the accounting of every tag with anything recorded,
// sorted by HoldSeconds, largest first, then by name. It takes a lock shared
// with other snapshots only; recording goes on meanwhile, so one snapshot
// is not a consistent cut across tags or counters.
func (r *Recorder) Snapshot() []TagStats {
	r.snapMu.Lock()
	defer r.snapMu.Unlock()
	r.mu.Lock()
	if r.retireIdle != 0 {
		r.observeLocked(time.Now())
	}
	tags := slices.Collect(maps.Values(r.all))
	r.mu.Unlock()

	out := make([]TagStats, 0, len(tags))
	for _, t := range tags {
		// Every tag is read, active or not, so that its sums see each wrap.
		if s := t.statsLocked(); s.active() {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b TagStats) int {
		if c := cmp.Compare(b.HoldSeconds, a.HoldSeconds); c != 0 {
			return c
		}
		return strings.Compare(a.Tag, b.Tag)
	})
	return out
}
