package controls

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// Control is one control from one source: a kind on a key with a value.
type Control struct {
	Kind *Kind
	// Key is a tag, a tag pattern (Kind.Pattern) or a shape's key
	// (ShapePrefix...).
	Key string
	// Value is the kind's (Kind.Check); 0 for a kind without one.
	Value  int64
	Reason string // on-call's word, "" when none was given
	SetBy  string // who set it: an admin credential's name ("" from config.yaml)
	// Lift marks a local control that lifts the configuration's control
	// of its kind on Key, without one of its own (Strictest kinds): a
	// configured drain undrained at run time. Value is then unused.
	Lift bool
	// Shared: Value is this instance's share now of a fleet-wide cap of
	// Cap (a fleet limit); else Value is the limit itself.
	Shared bool
	Cap    int64
	// Source is where it comes from; the table sets it.
	Source Source
}

// Show writes the control's value as on-call reads it.
func (c *Control) Show() string {
	s := c.Kind.ShowValue(c.Value)
	if c.Shared {
		s += " here, of " + strconv.FormatInt(c.Cap, 10) + " fleet-wide"
	}
	return s
}

// ckey is a control's place in a source: its kind and key.
type ckey struct {
	kind int
	key  string
}

// Table is the controls of every source and the merged ones in force. The
// zero value is ready to use, with no control in force. Its methods are
// safe for concurrent use; the lookups (Free, Class, Route, Refuse, Load)
// take no lock, and cost one atomic load while no control is in force.
type Table struct {
	// OnChange, when not nil, is told of every change of what is in force,
	// in order, with the table's lock held: it puts what the data path
	// keeps outside the table in step (the gates' drains and limits). It
	// must not call the table's changing methods. Set it before the
	// table's first change.
	OnChange func(old, cur *Set)

	set atomic.Pointer[Set] // in force; nil: no control at all
	// changed is closed, and replaced, at every change of what is in
	// force (Changes); nil until the first call of Changes.
	changed atomic.Pointer[chan struct{}]

	mu  sync.Mutex // guards src; held while a change is published
	src [NumSources]map[ckey]Control
}

// Changes returns a channel closed at the next change of what is in
// force: a waiter loads what it waits on, then waits on the channel it
// got before that load (see proxy/failover.go). Safe at any time.
func (t *Table) Changes() <-chan struct{} {
	for {
		if ch := t.changed.Load(); ch != nil {
			return *ch
		}
		ch := make(chan struct{})
		if t.changed.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// Load returns the controls in force now (nil: none), an immutable
// snapshot.
func (t *Table) Load() *Set { return t.set.Load() }

// Put puts c in force from src, replacing src's control of c's kind on
// c's key (and a lift of it).
func (t *Table) Put(src Source, c Control) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c.Source = src
	k := ckey{c.Kind.id, c.Key}
	if old, ok := t.src[src][k]; ok && old == c {
		return
	}
	if t.src[src] == nil {
		t.src[src] = map[ckey]Control{}
	}
	t.src[src][k] = c
	t.publishLocked([]*Kind{c.Kind})
}

// Lift removes src's control of kind k on key, and reports whether there
// was one. A local lift of a Strictest kind on a key the configuration
// controls lifts the configuration's too (Control.Lift), until the next
// Put of it or the configuration no longer has it.
func (t *Table) Lift(src Source, k *Kind, key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ck := ckey{k.id, key}
	old, had := t.src[src][ck]
	had = had && !old.Lift
	_, inConfig := t.src[Config][ck]
	if src == Local && k.Merge == Strictest && inConfig {
		if old.Lift {
			return had
		}
		if t.src[Local] == nil {
			t.src[Local] = map[ckey]Control{}
		}
		t.src[Local][ck] = Control{Kind: k, Key: key, Lift: true, Source: Local}
	} else {
		if _, ok := t.src[src][ck]; !ok {
			return false
		}
		delete(t.src[src], ck)
	}
	t.publishLocked([]*Kind{k})
	return had
}

// Replace replaces src's controls of the kinds ks (nil: of every kind)
// with cs, which must be of those kinds. When that changes nothing (the
// fleet's poll says the same each second), nothing is published, and the
// caches of pattern lookups stay warm.
func (t *Table) Replace(src Source, ks []*Kind, cs []Control) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := map[ckey]Control{}
	for k, c := range t.src[src] {
		if ks != nil && !slices.Contains(ks, c.Kind) {
			next[k] = c
		}
	}
	for _, c := range cs {
		c.Source = src
		next[ckey{c.Kind.id, c.Key}] = c
	}
	changed := map[*Kind]bool{}
	if src == Config {
		// A local lift of what the configuration no longer has lifts
		// nothing: forget it.
		for k, c := range t.src[Local] {
			if _, ok := next[k]; c.Lift && !ok {
				delete(t.src[Local], k)
				changed[c.Kind] = true
			}
		}
	}
	for k, c := range next {
		if o, ok := t.src[src][k]; !ok || o != c {
			changed[c.Kind] = true
		}
	}
	for k, c := range t.src[src] {
		if _, ok := next[k]; !ok {
			changed[c.Kind] = true
		}
	}
	if len(changed) == 0 {
		return
	}
	t.src[src] = next
	kinds := make([]*Kind, 0, len(changed))
	for k := range changed {
		kinds = append(kinds, k)
	}
	t.publishLocked(kinds)
}

// Of returns src's controls of kind k (nil: of every kind), lifts
// included, in no particular order.
func (t *Table) Of(src Source, k *Kind) []Control {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Control
	for _, c := range t.src[src] {
		if k == nil || c.Kind == k {
			out = append(out, c)
		}
	}
	return out
}

// publishLocked builds and publishes the controls in force after a change
// of the kinds changed, keeping the others' merged sets (and their
// caches) as they were. t.mu held.
func (t *Table) publishLocked(changed []*Kind) {
	old := t.set.Load()
	cur := &Set{kinds: make([]*kindSet, len(registry))}
	if old != nil {
		copy(cur.kinds, old.kinds)
	}
	for _, k := range changed {
		cur.kinds[k.id] = t.buildLocked(k)
	}
	cur.finish()
	if cur.empty() {
		cur = nil
	}
	t.set.Store(cur)
	if ch := t.changed.Swap(nil); ch != nil {
		close(*ch)
	}
	if t.OnChange != nil {
		t.OnChange(old, cur)
	}
}

// buildLocked merges kind k's controls of every source (nil: none).
func (t *Table) buildLocked(k *Kind) *kindSet {
	ks := &kindSet{kind: k}
	n := 0
	for src := range NumSources {
		for _, c := range t.src[src] {
			if c.Kind != k {
				continue
			}
			n++
			if IsPattern(c.Key) {
				ks.patterns[src] = append(ks.patterns[src], c)
				continue
			}
			if ks.exact[src] == nil {
				ks.exact[src] = map[string]Control{}
			}
			ks.exact[src][c.Key] = c
		}
		// Patterns in the order of their values, then of their keys.
		slices.SortFunc(ks.patterns[src], func(a, b Control) int {
			switch {
			case a.Value != b.Value:
				return int(a.Value - b.Value)
			case a.Key < b.Key:
				return -1
			case a.Key > b.Key:
				return 1
			}
			return 0
		})
		if len(ks.patterns[src]) > 0 {
			ks.hasPatterns = true
		}
	}
	if n == 0 {
		return nil
	}
	// Exact keys merged once: lookups of a kind without patterns are one
	// map read.
	ks.merged = map[string]Control{}
	for src := range NumSources {
		for key := range ks.exact[src] {
			if _, done := ks.merged[key]; done {
				continue
			}
			if c, ok := ks.resolve(key); ok {
				ks.merged[key] = c
			}
		}
	}
	if len(ks.merged) == 0 && !ks.hasPatterns {
		return nil // lifts alone: nothing in force
	}
	return ks
}

// Set is the controls in force at one moment: every kind's, merged. It
// is immutable once published, and safe for concurrent use.
type Set struct {
	kinds []*kindSet // by Kind.id; nil: no control of the kind
	// admit are the keys with an admission control in force (Free); nil:
	// none. refusers are the kinds that refuse statements with a control
	// in force; background: some class control names background.
	admit      map[string]struct{}
	refusers   []*kindSet
	background bool
	// pausers are the kinds that pause borrows with a control in force.
	pausers []*kindSet
}

// finish computes the summaries of s's kinds.
func (s *Set) finish() {
	for _, ks := range s.kinds {
		if ks == nil {
			continue
		}
		switch ks.kind.Effect {
		case EffectAdmission:
			for key := range ks.merged {
				if s.admit == nil {
					s.admit = map[string]struct{}{}
				}
				s.admit[key] = struct{}{}
			}
		case EffectRefusal:
			s.refusers = append(s.refusers, ks)
		case EffectPause:
			s.pausers = append(s.pausers, ks)
		case EffectClass:
			s.background = ks.names(int64(Background))
		}
	}
}

// BackgroundCapped reports that some class control in s names the
// background class (false for a nil Set).
func (s *Set) BackgroundCapped() bool { return s != nil && s.background }

func (s *Set) empty() bool {
	for _, ks := range s.kinds {
		if ks != nil {
			return false
		}
	}
	return true
}

// Lookup returns the control of kind k in force for key (a tag, or a
// shape's key), merged from every source; false when none is.
func (s *Set) Lookup(k *Kind, key string) (Control, bool) {
	if s == nil || k.id >= len(s.kinds) || s.kinds[k.id] == nil {
		return Control{}, false
	}
	return s.kinds[k.id].lookup(key)
}

// Keys calls f with every exact key that kind k has a control in force
// on, merged (patterns are not keys).
func (s *Set) Keys(k *Kind, f func(key string, c Control)) {
	if s == nil || s.kinds[k.id] == nil {
		return
	}
	for key, c := range s.kinds[k.id].merged {
		f(key, c)
	}
}

// InForce lists the controls in force. For a kind that names exact keys
// only, the merged control of each key (Source is the one in force); for
// a kind with patterns, every source's controls as they were set (one may
// be shadowed, for some tags, by a stronger source's or a stricter one).
// Sorted by kind, key and source.
func (s *Set) InForce() []Control {
	if s == nil {
		return nil
	}
	var out []Control
	for _, ks := range s.kinds {
		switch {
		case ks == nil:
		case !ks.hasPatterns:
			for _, c := range ks.merged {
				out = append(out, c)
			}
		default:
			for src := range NumSources {
				for _, c := range ks.exact[src] {
					if !c.Lift {
						out = append(out, c)
					}
				}
				out = append(out, ks.patterns[src]...)
			}
		}
	}
	slices.SortFunc(out, func(a, b Control) int {
		switch {
		case a.Kind.id != b.Kind.id:
			return a.Kind.id - b.Kind.id
		case a.Key < b.Key:
			return -1
		case a.Key > b.Key:
			return 1
		}
		return int(a.Source) - int(b.Source)
	})
	return out
}

// Changed calls f with every key whose control of kind k differs between
// old and cur (either may be nil): the keys the data path must put in
// step. Exact keys only (kinds of admission and transaction bounds have
// no patterns).
func Changed(old, cur *Set, k *Kind, f func(key string)) {
	var o, c map[string]Control
	var oks, cks *kindSet
	if old != nil {
		oks = old.kinds[k.id]
	}
	if cur != nil {
		cks = cur.kinds[k.id]
	}
	if oks == cks {
		return // unchanged (or none either side)
	}
	if oks != nil {
		o = oks.merged
	}
	if cks != nil {
		c = cks.merged
	}
	for key, x := range c {
		if y, ok := o[key]; !ok || x != y {
			f(key)
		}
	}
	for key := range o {
		if _, ok := c[key]; !ok {
			f(key)
		}
	}
}

// kindSet is one kind's controls in force, merged. Immutable once built,
// but for its cache.
type kindSet struct {
	kind        *Kind
	exact       [NumSources]map[string]Control
	patterns    [NumSources][]Control // in value order
	hasPatterns bool
	merged      map[string]Control // every exact key's control in force

	// cache remembers pattern lookups: key → *cached. Bounded: tags may
	// carry ids.
	cache  sync.Map
	cached atomic.Int32
}

// maxCache bounds the keys one kind's set remembers.
const maxCache = 4096

type cached struct {
	c  Control
	ok bool
}

// names reports whether some control of the kind has value v.
func (ks *kindSet) names(v int64) bool {
	for src := range NumSources {
		for _, c := range ks.exact[src] {
			if c.Value == v && !c.Lift {
				return true
			}
		}
		for _, c := range ks.patterns[src] {
			if c.Value == v {
				return true
			}
		}
	}
	return false
}

func (ks *kindSet) lookup(key string) (Control, bool) {
	if !ks.hasPatterns {
		c, ok := ks.merged[key]
		return c, ok
	}
	if x, ok := ks.cache.Load(key); ok {
		r := x.(*cached)
		return r.c, r.ok
	}
	c, ok := ks.resolve(key)
	if ks.cached.Load() < maxCache {
		ks.cached.Add(1)
		ks.cache.Store(key, &cached{c, ok})
	}
	return c, ok
}

// resolve finds the control in force for key by the kind's merge rule.
func (ks *kindSet) resolve(key string) (Control, bool) {
	if ks.kind.Merge == Precedence {
		for src := NumSources; src > 0; src-- {
			if c, ok := ks.match(src-1, key); ok {
				return c, true
			}
		}
		return Control{}, false
	}
	// Strictest: the configuration's (unless this instance lifts it),
	// then this instance's, then the fleet's, the strictest winning.
	var eff Control
	has := false
	lifted := false
	if l, ok := ks.exact[Local][key]; ok && l.Lift {
		lifted = true
	}
	for src := range NumSources {
		if src == Config && lifted {
			continue
		}
		for _, c := range ks.matches(src, key) {
			if c.Lift {
				continue
			}
			if !has || ks.kind.Stricter != nil && ks.kind.Stricter(c.Value, eff.Value) {
				eff, has = c, true
			}
		}
	}
	return eff, has
}

// match is src's control for key: its exact one, else its first pattern
// that matches (Precedence).
func (ks *kindSet) match(src Source, key string) (Control, bool) {
	if c, ok := ks.exact[src][key]; ok && !c.Lift {
		return c, true
	}
	for _, c := range ks.patterns[src] {
		if Match(c.Key, key) {
			return c, true
		}
	}
	return Control{}, false
}

// matches is every control of src for key: its exact one and every
// pattern that matches (Strictest).
func (ks *kindSet) matches(src Source, key string) []Control {
	var out []Control
	if c, ok := ks.exact[src][key]; ok {
		out = append(out, c)
	}
	for _, c := range ks.patterns[src] {
		if Match(c.Key, key) {
			out = append(out, c)
		}
	}
	return out
}

// The data path's questions (the policy's Controls): each takes no lock,
// and costs one atomic load while no control is in force.

// Free reports that no admission control (drain, connection cap) is in
// force for key: a borrow may skip admission, a statement be pipelined.
func (t *Table) Free(key string) bool {
	s := t.set.Load()
	if s == nil || s.admit == nil {
		return true
	}
	_, in := s.admit[key]
	return !in
}

// Class is key's overload class (Normal when none is in force).
func (t *Table) Class(key string) Class {
	s := t.set.Load()
	if s == nil || s.kinds[ClassKind.id] == nil {
		return Normal
	}
	if c, ok := s.kinds[ClassKind.id].lookup(key); ok {
		return Class(c.Value)
	}
	return Normal
}

// BackgroundCapped reports that some control names the background class:
// background borrows then pass the background cap and are not
// pipelined.
func (t *Table) BackgroundCapped() bool { return t.set.Load().BackgroundCapped() }

// Route is key's routing policy for reads (RoutePrimary when none).
func (t *Table) Route(key string) Route {
	s := t.set.Load()
	if s == nil || s.kinds[RouteKind.id] == nil {
		return RoutePrimary
	}
	if c, ok := s.kinds[RouteKind.id].lookup(key); ok {
		return Route(c.Value)
	}
	return RoutePrimary
}

// Refusing reports that some statement-level control is in force (for
// some key): Refuse may refuse.
func (t *Table) Refusing() bool {
	s := t.set.Load()
	return s != nil && s.refusers != nil
}

// Refuse returns the refusal (a *Refusal) of a statement of key by a
// statement-level control in force for key, or nil.
func (t *Table) Refuse(key string, info *sqlscan.Info) error {
	s := t.set.Load()
	if s == nil || s.refusers == nil {
		return nil
	}
	for _, ks := range s.refusers {
		if c, ok := ks.lookup(key); ok {
			if err := ks.kind.Refuse(c, key, *info); err != nil {
				return err
			}
		}
	}
	return nil
}

// Paused returns the pause in force for key (a control of an EffectPause
// kind), if any: the key's new borrows wait (proxy/failover.go).
func (t *Table) Paused(key string) (Control, bool) {
	s := t.set.Load()
	if s == nil || s.pausers == nil {
		return Control{}, false
	}
	for _, ks := range s.pausers {
		if c, ok := ks.lookup(key); ok {
			return c, true
		}
	}
	return Control{}, false
}
