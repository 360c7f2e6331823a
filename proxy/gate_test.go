package proxy

import (
	"context"
	"testing"
	"time"
)

// A limit coming into force counts the holds under way: one that entered
// an earlier limit of the tag (lifted since) gives its slot back once, as
// it leaves that gate; one that entered none gives it back at its end; a
// mark of an earlier limit gives nothing back to a later one.
func TestLimitCountsHoldsUnderWay(t *testing.T) {
	srv := &Server{sessions: map[uint32]*session{}}
	hold := func(id uint32, gated string) *session {
		x := &session{srv: srv, id: id, holdSince: time.Now(), holdKey: "t", gatedKey: gated}
		srv.sessions[id] = x
		return x
	}
	g := &srv.gates
	setLimit := func(n int) {
		g.setLimit("t", n, func(epoch uint64) (int, int) { return srv.markHolders("t", epoch) })
	}
	inUse := func() (int, int) {
		g.mu.Lock()
		defer g.mu.Unlock()
		gt := g.m["t"]
		return gt.inUse, gt.pre
	}

	setLimit(2)
	counted, err := g.enter(context.Background(), "t")
	if !counted || err != nil {
		t.Fatalf("enter under the limit: %v %v", counted, err)
	}
	a := hold(1, "t") // entered the first limit
	setLimit(noLimit)
	b := hold(2, "") // began with no limit in force
	setLimit(1)
	if n, pre := inUse(); n != 2 || pre != 1 {
		t.Fatalf("a limit set over two holds: %d counted, %d to give back at their end; want 2, 1", n, pre)
	}
	// a ends: through the gate it entered, and nothing more.
	g.exit("t")
	a.endHoldMirror(true)
	if n, pre := inUse(); n != 1 || pre != 1 {
		t.Fatalf("after the gated hold ended: %d counted, %d pre; want 1, 1", n, pre)
	}
	// b ends, and its slot is given back after the limit was lifted and
	// set again (it ended between the two): it gives the new limit
	// nothing, which counts c only.
	stale := b.preEpoch
	b.endHoldMirror(true)
	setLimit(noLimit)
	c := hold(3, "")
	setLimit(1)
	g.exitPre("t", stale)
	if n, pre := inUse(); n != 1 || pre != 1 {
		t.Fatalf("a hold of an earlier limit gave its slot back to a later one: %d counted, %d pre; want 1, 1 (c's)", n, pre)
	}
	c.endHoldMirror(true)
	if n, pre := inUse(); n != 0 || pre != 0 {
		t.Fatalf("every hold ended: %d counted, %d pre; want 0, 0", n, pre)
	}
}
