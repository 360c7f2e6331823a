package proxy

import (
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// heldServer is a Server that serves nothing (no database: the hold is
// proven alone), with failover settings hold and maxHeld, and a session
// of it.
func heldServer(t *testing.T, hold time.Duration, maxHeld int) (*Server, *session) {
	t.Helper()
	cfg := config.Default()
	cfg.Failover.Hold, cfg.Failover.MaxHeld = hold, maxHeld
	srv, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, &session{srv: srv}
}

// noPrimary makes srv's topology have no usable primary, as the monitor
// does (badSince, then the wait).
func noPrimary(srv *Server) {
	srv.topo.badSince.Store(time.Now().UnixNano())
	srv.topo.setPrimary(false)
}

func primaryBack(srv *Server) {
	srv.topo.badSince.Store(0)
	srv.topo.setPrimary(true)
}

// holdAsync runs one hold for key on a goroutine and returns its answer.
func holdAsync(s *session, key string, primary bool) <-chan *mysqlwire.SQLError {
	ch := make(chan *mysqlwire.SQLError, 1)
	go func() {
		var h hold
		serr := s.wait(&h, key, primary)
		s.endHold(&h)
		ch <- serr
	}()
	return ch
}

func want9010(t *testing.T, serr *mysqlwire.SQLError) {
	t.Helper()
	if serr == nil || serr.Code != codePrimarySwitching || serr.State != statePrimarySwitching {
		t.Fatalf("got %v; want 9010 (%s)", serr, statePrimarySwitching)
	}
}

// Nothing switching, nothing paused: no borrow waits.
func TestMustHoldIdle(t *testing.T) {
	srv, _ := heldServer(t, time.Minute, 10)
	if srv.mustHold("checkout", true) || srv.mustHold("checkout", false) {
		t.Fatal("a borrow holds with a primary and no pause")
	}
	primaryBack(srv)
	if srv.mustHold("checkout", true) {
		t.Fatal("a borrow holds with a primary known")
	}
	noPrimary(srv)
	if !srv.mustHold("checkout", true) || srv.mustHold("checkout", false) {
		t.Fatal("without a primary, a borrow for the primary must hold and one for a replica not")
	}
}

// A statement held for the primary runs once one is known; one held past
// failover.hold gets 9010; the counts say so.
func TestHoldForPrimary(t *testing.T) {
	srv, s := heldServer(t, time.Minute, 10)
	noPrimary(srv)
	ch := holdAsync(s, "checkout", true)
	waitFor(t, "the statement held", func() bool { return srv.FailoverStats().HeldNow == 1 })
	select {
	case serr := <-ch:
		t.Fatalf("answered %v while there is no primary", serr)
	case <-time.After(20 * time.Millisecond):
	}
	primaryBack(srv)
	if serr := <-ch; serr != nil {
		t.Fatalf("answered %v once the primary is known", serr)
	}
	if st := srv.FailoverStats(); st.HeldNow != 0 || st.Held != 1 || st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}

	srv, s = heldServer(t, 50*time.Millisecond, 10)
	noPrimary(srv)
	want9010(t, <-holdAsync(s, "checkout", true))
	if st := srv.FailoverStats(); st.HeldNow != 0 || st.Held != 1 || st.Refused != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// No more than failover.max_held statements are held at once; 0 holds
// none.
func TestMaxHeld(t *testing.T) {
	srv, s := heldServer(t, time.Minute, 1)
	noPrimary(srv)
	first := holdAsync(s, "a", true)
	waitFor(t, "the first statement held", func() bool { return srv.FailoverStats().HeldNow == 1 })
	want9010(t, <-holdAsync(&session{srv: srv}, "b", true))
	primaryBack(srv)
	if serr := <-first; serr != nil {
		t.Fatal(serr)
	}

	srv, s = heldServer(t, time.Minute, 0)
	noPrimary(srv)
	want9010(t, <-holdAsync(s, "a", true))
}

// A pause holds the new borrows of the tags it matches, for the primary
// or not, until it is lifted; others pass.
func TestPauseHolds(t *testing.T) {
	srv, s := heldServer(t, time.Minute, 10)
	if err := srv.SetControl("pause", "batch_*", 0, "switchover", "test"); err != nil {
		t.Fatal(err)
	}
	if srv.mustHold("checkout", true) || !srv.mustHold("batch_1", false) {
		t.Fatal("the pause on batch_* does not hold exactly its tags")
	}
	ch := holdAsync(s, "batch_1", false)
	waitFor(t, "the statement held", func() bool { return srv.FailoverStats().HeldNow == 1 })
	if err := srv.SetControl("drain", "other", 0, "", "test"); err != nil { // another change: still paused
		t.Fatal(err)
	}
	select {
	case serr := <-ch:
		t.Fatalf("answered %v while paused", serr)
	case <-time.After(20 * time.Millisecond):
	}
	if err := srv.LiftControl("pause", "batch_*"); err != nil {
		t.Fatal(err)
	}
	if serr := <-ch; serr != nil {
		t.Fatalf("answered %v once the pause was lifted", serr)
	}
	if st := srv.FailoverStats(); st.PauseWaits != 1 || st.Held != 1 {
		t.Fatalf("stats %+v", st)
	}

	srv, s = heldServer(t, 50*time.Millisecond, 10)
	if err := srv.SetControl("pause", "*", 0, "INC-1", "test"); err != nil {
		t.Fatal(err)
	}
	serr := <-holdAsync(s, "checkout", false)
	want9010(t, serr)
	t.Log(serr.Msg)
}
