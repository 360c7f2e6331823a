package attribution

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

func TestNamesBound(t *testing.T) {
	n := NewNames(2)
	steps := []struct {
		in         string
		want       string
		wantFolded bool
	}{
		{"a", "a", false},
		{Untagged, Untagged, false},
		{Other, Other, false},
		{"b", "b", false},
		{"c", Other, true}, // full
		{"a", "a", false},  // admitted names stay
		{"b", "b", false},
		{"c", Other, true}, // and folded ones stay folded
		{Untagged, Untagged, false},
		{Other, Other, false},
		{"holdfast:reserve", Other, true},
	}
	for i, s := range steps {
		got, folded := n.Intern([]byte(s.in))
		if got != s.want || folded != s.wantFolded {
			t.Fatalf("step %d: Intern(%q) = %q, %v; want %q, %v", i, s.in, got, folded, s.want, s.wantFolded)
		}
	}
	if got := n.Len(); got != 2 {
		t.Errorf("Len() = %d, want 2", got)
	}
	if got := n.Folded(); got != 3 {
		t.Errorf("Folded() = %d, want 3", got)
	}
}

func TestNamesInvalid(t *testing.T) {
	n := NewNames(10)
	for _, in := range []string{"", "a b", "a/b", "caf\xc3\xa9", "\x00", strings.Repeat("a", MaxTagLen+1)} {
		if got, folded := n.Intern([]byte(in)); got != Other || !folded {
			t.Errorf("Intern(%q) = %q, %v; want %q, true", in, got, folded, Other)
		}
	}
	if got := n.Len(); got != 0 {
		t.Errorf("Len() = %d after invalid names, want 0", got)
	}
	if got := n.Folded(); got != 6 {
		t.Errorf("Folded() = %d, want 6", got)
	}
	long := strings.Repeat("a", MaxTagLen)
	if got, folded := n.Intern([]byte(long)); got != long || folded {
		t.Errorf("Intern(MaxTagLen bytes) = %q, %v", got, folded)
	}
}

// TestNamesCanonical checks that Intern hands out one string per name, not a
// copy per call, whether the name is found in the snapshot or under the lock.
func TestNamesCanonical(t *testing.T) {
	n := NewNames(1000)
	first := make(map[string]string)
	for round := range 3 {
		for i := range 100 {
			b := []byte("flow_" + strconv.Itoa(i))
			got, _ := n.Intern(b)
			if round == 0 {
				first[got] = got
				continue
			}
			if unsafe.StringData(got) != unsafe.StringData(first[got]) {
				t.Fatalf("round %d: Intern(%q) returned a new copy", round, b)
			}
		}
	}
	if got, _ := n.Intern([]byte(Untagged)); unsafe.StringData(got) != unsafe.StringData(Untagged) {
		t.Errorf("Intern(Untagged) is not the Untagged constant")
	}
}

func TestNewNamesPanics(t *testing.T) {
	for _, max := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("NewNames(%d) did not panic", max)
				}
			}()
			NewNames(max)
		}()
	}
}

// TestNamesConcurrent interns an overlapping set of names from many
// goroutines; run it with -race. Names must be admitted first come, first
// served: each name gets the same answer on every call, exactly max names are
// admitted, and Folded counts every call that got Other.
func TestNamesConcurrent(t *testing.T) {
	const (
		max        = 50
		distinct   = 3 * max
		goroutines = 16
		calls      = 5000
	)
	n := NewNames(max)
	type result struct {
		name   string
		folded bool
	}
	results := make([][]result, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 1))
			buf := make([]byte, 0, 16)
			for range calls {
				i := r.IntN(distinct + 2)
				switch i {
				case distinct:
					buf = append(buf[:0], Untagged...)
				case distinct + 1:
					buf = append(buf[:0], Other...)
				default:
					buf = strconv.AppendInt(append(buf[:0], "flow_"...), int64(i), 10)
				}
				name, folded := n.Intern(buf)
				if !folded && name != string(buf) || folded && name != Other {
					t.Errorf("Intern(%q) = %q, %v", buf, name, folded)
					return
				}
				results[g] = append(results[g], result{string(buf), folded})
			}
		})
	}
	wg.Wait()

	answer := make(map[string]bool) // name -> folded
	admitted, foldedCalls := 0, uint64(0)
	for _, rs := range results {
		for _, r := range rs {
			if prev, ok := answer[r.name]; ok && prev != r.folded {
				t.Fatalf("Intern(%q) answered both folded and not folded", r.name)
			} else if !ok {
				answer[r.name] = r.folded
				if !r.folded && r.name != Untagged && r.name != Other {
					admitted++
				}
			}
			if r.folded {
				foldedCalls++
			}
		}
	}
	if admitted != max || n.Len() != max {
		t.Errorf("admitted %d names, Len() = %d; want %d", admitted, n.Len(), max)
	}
	if answer[Untagged] || answer[Other] {
		t.Errorf("Untagged or Other was folded")
	}
	if got := n.Folded(); got != foldedCalls {
		t.Errorf("Folded() = %d, want %d", got, foldedCalls)
	}
}

// TestNamesMillion interns one million distinct names and checks that only
// max of them are kept: heap growth must be proportional to max.
func TestNamesMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("interns one million names")
	}
	const (
		max      = 1000
		distinct = 1_000_000
		// About 100 bytes per kept name in two maps; allow ten times that,
		// plus slack for the runtime. One million kept names would need more
		// than 30 MB.
		bound = 10*100*max + 1<<20
	)
	var n *Names
	growth := heapGrowth(func() {
		n = NewNames(max)
		buf := make([]byte, 0, 32)
		for i := range distinct {
			buf = strconv.AppendInt(append(buf[:0], "flow_"...), int64(i), 10)
			n.Intern(buf)
		}
	})
	t.Logf("heap growth after %d distinct names, max %d: %d bytes", distinct, max, growth)
	if growth > bound {
		t.Errorf("heap grew by %d bytes, want at most %d", growth, bound)
	}
	if got := n.Len(); got != max {
		t.Errorf("Len() = %d, want %d", got, max)
	}
	if got := n.Folded(); got != distinct-max {
		t.Errorf("Folded() = %d, want %d", got, distinct-max)
	}
	runtime.KeepAlive(n)
}

// heapGrowth runs f and returns how much the live heap grew across it:
// what f allocated and left reachable.
func heapGrowth(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return int64(after.HeapAlloc) - int64(before.HeapAlloc)
}

func TestNamesInternAllocs(t *testing.T) {
	long := strings.Repeat("x", MaxTagLen) // too long for the runtime's 32-byte stack buffer
	n := NewNames(3)
	for _, s := range []string{"checkout", long} {
		n.Intern([]byte(s))
	}
	check := func(what string, b []byte) {
		t.Helper()
		if allocs := testing.AllocsPerRun(100, func() { n.Intern(b) }); allocs != 0 {
			t.Errorf("%s: %v allocations per Intern, want 0", what, allocs)
		}
	}
	// Before the set is full, a newly admitted name is found under the lock
	// until enough lookups have missed the snapshot to pay for refreshing
	// it; from then on it is in the snapshot.
	for range 10 {
		n.Intern([]byte("checkout"))
	}
	if _, ok := (*n.read.Load())["checkout"]; !ok {
		t.Fatal("snapshot not refreshed after 10 lookups of 4 names")
	}
	check("known name, set not full", []byte("checkout"))
	check("known long name", []byte(long))
	check("Untagged", []byte(Untagged))
	n.Intern([]byte("refill"))
	check("known name, set full", []byte("refill"))
	check("new name folded", []byte("junk"))
	check("invalid name", []byte("a b"))
}

func BenchmarkNamesIntern(b *testing.B) {
	n := NewNames(1000)
	names := make([][]byte, 1000)
	for i := range names {
		names[i] = fmt.Appendf(nil, "flow_%d", i)
		n.Intern(names[i])
	}
	b.Run("known", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			n.Intern(names[i%len(names)])
			i++
		}
	})
	b.Run("known-parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				n.Intern(names[i%len(names)])
				i++
			}
		})
	})
	b.Run("folded-parallel", func(b *testing.B) {
		junk := []byte("junk")
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Intern(junk)
			}
		})
	})
}
