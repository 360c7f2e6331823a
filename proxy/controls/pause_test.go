package controls

import "testing"

// Paused finds a pause by exact tag or pattern from any source; Changes is
// closed by every change of what is in force, and only then.
func TestPausedAndChanges(t *testing.T) {
	var tb Table
	if _, ok := tb.Paused("checkout"); ok {
		t.Fatal("paused with no control")
	}
	ch := tb.Changes()
	tb.Put(Local, Control{Kind: ReadOnlyKind, Key: "batch"})
	select {
	case <-ch:
	default:
		t.Fatal("Changes not closed by a change")
	}
	if _, ok := tb.Paused("checkout"); ok {
		t.Fatal("paused by a readonly")
	}
	ch = tb.Changes()
	tb.Put(Fleet, Control{Kind: PauseKind, Key: "*", Reason: "switchover"})
	<-ch
	for _, tag := range []string{"checkout", "batch", ""} {
		if c, ok := tb.Paused(tag); !ok || c.Reason != "switchover" {
			t.Fatalf("Paused(%q) = %+v, %v", tag, c, ok)
		}
	}
	ch = tb.Changes()
	select {
	case <-ch:
		t.Fatal("Changes closed with no change since")
	default:
	}
	tb.Lift(Fleet, PauseKind, "*")
	<-ch
	if _, ok := tb.Paused("checkout"); ok {
		t.Fatal("paused after the lift")
	}
	if err := PauseKind.Validate("report_*", 0); err != nil {
		t.Fatalf("a pause on a pattern: %v", err)
	}
	if err := PauseKind.Validate("x", 5); err == nil {
		t.Fatal("a pause took a value")
	}
}
