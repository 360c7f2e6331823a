package attribution

import (
	"maps"
	"sync"
	"sync/atomic"
)

// Names interns tag names with a bound on cardinality: the first max distinct
// names are admitted and kept until a Recorder retires them; while max are
// admitted, every new name folds into Other, and the fold is counted.
// Untagged and Other are always present and do not count toward max. The
// zero value is not usable; call NewNames. Safe for concurrent use.
//
// Lookups of admitted names take no lock: they read an immutable snapshot
// of the set. New names go through mu into all, and the snapshot is
// replaced by a copy of all after as many lookups have missed it as all
// holds, so copying costs O(1) per miss amortized (the scheme of sync.Map).
// While max names are admitted a new name folds without taking the lock.
type Names struct {
	max    int
	folded atomic.Uint64
	// full is set, after the snapshot is stored, once max names are
	// admitted, and cleared when forget makes room: while it is set, read
	// holds every admitted name.
	full atomic.Bool
	read atomic.Pointer[map[string]string] // immutable; a subset of all

	mu     sync.Mutex        // guards following
	all    map[string]string // every admitted name, plus Untagged and Other
	misses int               // lookups that missed read since it was stored
}

// NewNames returns an interner that admits at most max distinct names besides
// Untagged and Other. It panics if max < 1.
func NewNames(max int) *Names {
	if max < 1 {
		panic("attribution: NewNames: max must be at least 1")
	}
	n := &Names{
		max: max,
		all: map[string]string{Untagged: Untagged, Other: Other},
	}
	n.storeReadLocked()
	return n
}

// Intern returns the canonical string for b and whether b was folded into
// Other. An admitted name, Untagged or Other comes back as itself. Looking it
// up takes no lock and does not allocate once it is in the snapshot; until
// then, which lasts at most as many lookups as there are names, it is found
// under the lock, and one such lookup pays for refreshing the snapshot. A new
// name is admitted while fewer than max are;
// past the bound it returns (Other, true). A b that is not a sanitized tag
// (empty, longer than MaxTagLen, or holding a byte outside [A-Za-z0-9_.:-],
// which AppendCommentTag never returns) is never admitted: it also returns
// (Other, true).
func (n *Names) Intern(b []byte) (name string, folded bool) {
	s, folded := n.intern(b)
	if folded {
		n.folded.Add(1)
	}
	return s, folded
}

// intern is Intern without counting a fold: a caller that may yet admit
// the name (after retiring idle ones) counts the fold itself.
func (n *Names) intern(b []byte) (name string, folded bool) {
	// Load full first: while it is true, the snapshot loaded next holds every
	// admitted name.
	full := n.full.Load()
	if s, ok := (*n.read.Load())[string(b)]; ok {
		return s, false
	}
	if full {
		return Other, true
	}
	return n.internSlow(b)
}

func (n *Names) internSlow(b []byte) (string, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.all[string(b)]; ok {
		n.missLocked()
		return s, false
	}
	if n.lenLocked() >= n.max || !isTag(b) {
		return Other, true
	}
	s := string(b)
	n.all[s] = s
	if n.lenLocked() == n.max {
		n.storeReadLocked()
		n.full.Store(true)
	} else {
		n.missLocked()
	}
	return s, false
}

// missLocked counts a lookup that missed read and replaces read once the
// misses have paid for the copy.
func (n *Names) missLocked() {
	n.misses++
	if n.misses >= len(n.all) {
		n.storeReadLocked()
	}
}

func (n *Names) storeReadLocked() {
	m := maps.Clone(n.all)
	n.read.Store(&m)
	n.misses = 0
}

func (n *Names) lenLocked() int { return len(n.all) - 2 } // minus Untagged and Other

// forget removes admitted names, making room for as many new ones. Untagged
// and Other cannot be forgotten.
func (n *Names) forget(names []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, s := range names {
		if s != Untagged && s != Other {
			delete(n.all, s)
		}
	}
	n.storeReadLocked()
	n.full.Store(n.lenLocked() >= n.max)
}

// Folded returns how many Intern calls have returned (Other, true) so far.
func (n *Names) Folded() uint64 { return n.folded.Load() }

// Len returns how many names have been admitted, not counting Untagged and
// Other; it never exceeds max.
func (n *Names) Len() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lenLocked()
}

// isTag reports whether b is a name AppendCommentTag could return.
func isTag(b []byte) bool {
	if len(b) == 0 || len(b) > MaxTagLen {
		return false
	}
	for _, c := range b {
		if !tagByte[c] {
			return false
		}
	}
	return true
}
