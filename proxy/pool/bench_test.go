package pool

import (
	"context"
	"sync"
	"testing"
	"time"
)

// stackPool is the baseline: a mutex and a slice, no waiting, no checks,
// no stats — the least a pool can cost.
type stackPool struct {
	mu    sync.Mutex
	conns []*fakeConn
}

func (s *stackPool) get() *fakeConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.conns[len(s.conns)-1]
	s.conns = s.conns[:len(s.conns)-1]
	return c
}

func (s *stackPool) put(c *fakeConn) {
	s.mu.Lock()
	s.conns = append(s.conns, c)
	s.mu.Unlock()
}

func benchPool(b *testing.B, max int) *testPool {
	d := &fakeDialer{}
	p, err := New(Options[key, *fakeConn]{Dial: d.dial}, Limits[key]{Max: max, MaxIdle: max, MaxWaiters: 1 << 20, AcquireTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	return p
}

// BenchmarkAcquireRelease lends and returns one idle connection, next to
// the baseline; compare the two in the same run.
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	b.Run("pool", func(b *testing.B) {
		p := benchPool(b, 8)
		p.Release(must(p.Acquire(ctx, 0)))
		b.ReportAllocs()
		for b.Loop() {
			c, err := p.Acquire(ctx, 0)
			if err != nil {
				b.Fatal(err)
			}
			p.Release(c, true)
		}
	})
	b.Run("baseline", func(b *testing.B) {
		s := &stackPool{conns: []*fakeConn{{}}}
		b.ReportAllocs()
		for b.Loop() {
			s.put(s.get())
		}
	})
}

// BenchmarkAcquireReleaseContended has more borrowers than connections,
// so that borrowers queue and are handed connections.
func BenchmarkAcquireReleaseContended(b *testing.B) {
	ctx := context.Background()
	p := benchPool(b, 2)
	b.ReportAllocs()
	b.SetParallelism(4)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := p.Acquire(ctx, 0)
			if err != nil {
				b.Error(err)
				return
			}
			p.Release(c, true)
		}
	})
}

func must(c *fakeConn, err error) (*fakeConn, bool) {
	if err != nil {
		panic(err)
	}
	return c, true
}
