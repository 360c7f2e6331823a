package attribution

import (
	"cmp"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
}

// Recorder keeps the per-tag accounting: one Tag per admitted name, for the
// Recorder's lifetime. The zero value is not usable; call NewRecorder. Safe
// for concurrent use.
//
// Looking up a known name takes no lock and does not allocate: it reads an
// immutable snapshot of the name-to-Tag map, refreshed like the one in Names
// (after as many lookups have missed it as it would cost to copy, and at
// once when the last name is admitted). A new name is interned by names;
// admitted, it gets its Tag under mu, and folded, it gets Other's without
// taking mu.
type Recorder struct {
	names *Names
	other *Tag
	read  atomic.Pointer[map[string]*Tag] // immutable; a subset of all

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
	r := &Recorder{
		names: NewNames(max),
		other: &Tag{name: Other},
		all:   make(map[string]*Tag),
	}
	r.all[Other] = r.other
	r.all[Untagged] = &Tag{name: Untagged}
	r.storeReadLocked()
	for _, n := range o.Known {
		r.TagString(n)
	}
	return r
}

// Tag returns the accounting handle for name: a tag returned by AppendTag or
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
	s, folded := r.names.Intern(name)
	if folded {
		return r.other
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.all[s]
	if !ok {
		t = &Tag{name: s}
		r.all[s] = t
		if len(r.all)-2 == r.names.max {
			// The last admission: the snapshot becomes final.
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
