package fleet

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// oldHeartbeat is the heartbeat of holdfast before schema version 6
// (f22f59f's Store.Heartbeat), word for word: it names its columns, so it
// keeps working once version 6 has added others.
const oldHeartbeat = `INSERT INTO holdfast_members (instance_id, address, version, pool_max, stmt_budget, started_at, last_seen)
VALUES (?, ?, ?, ?, ?, NOW(6), NOW(6))
ON DUPLICATE KEY UPDATE address = VALUES(address), version = VALUES(version), pool_max = VALUES(pool_max),
  stmt_budget = VALUES(stmt_budget), last_seen = VALUES(last_seen)`

// An instance records the schema range and control kinds it understands
// in its heartbeat; an instance of an older version, whose heartbeat
// names only the columns it knows, still beats, and reads back as one
// that recorded nothing.
func TestMembersRecordTheirRange(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	me := Member{ID: "new", Address: "h:1", Version: "v2", PoolMax: 4, SchemaMin: 5, SchemaMax: 6, Kinds: []Kind{KindDrain, "readonly"}}
	if err := st.Heartbeat(ctx, me); err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.ExecContext(ctx, oldHeartbeat, "old", "h:2", "v1", 4, 0); err != nil {
		t.Fatalf("the heartbeat of a version before schema 6 fails on this schema: %v", err)
	}
	ms, err := st.Members(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 {
		t.Fatalf("members %+v, want 2", ms)
	}
	got, old := ms[0], ms[1]
	if got.ID != "new" || got.SchemaMin != 5 || got.SchemaMax != 6 || !slices.Equal(got.Kinds, me.Kinds) || !got.Recorded() {
		t.Errorf("new instance read back as %+v, want its range 5-6 and kinds %v", got, me.Kinds)
	}
	if old.ID != "old" || old.Recorded() || old.SchemaMin != 0 || old.SchemaMax != 0 || old.Kinds != nil {
		t.Errorf("old instance read back as %+v, want nothing recorded", old)
	}
	if !st.MembersRecorded() {
		t.Error("MembersRecorded is false on a schema with the columns")
	}
}

// On a database not migrated to schema version 6 yet (a new instance
// started before `holdfast migrate` of its version), the heartbeat and the
// members' read fall back to the columns of version 5, and say so.
func TestMembersBeforeSchema6(t *testing.T) {
	st := migrated(t)
	ctx := context.Background()
	if _, err := st.db.ExecContext(ctx, "ALTER TABLE holdfast_members DROP COLUMN schema_min, DROP COLUMN schema_max, DROP COLUMN control_kinds"); err != nil {
		t.Fatal(err)
	}
	f := New(Options{Store: st, Applier: &nopApplier{}, Self: Member{ID: "a", Version: "v2", SchemaMin: 5, SchemaMax: 6},
		Log: slog.New(slog.DiscardHandler)})
	for range 2 {
		if err := f.Poll(ctx); err != nil {
			t.Fatalf("a poll on a schema before version 6: %v", err)
		}
	}
	s := f.Status()
	if len(s.Members) != 1 || s.Members[0].ID != "a" || s.Members[0].Recorded() || !s.MembersUnrecorded {
		t.Fatalf("status %+v: want one member, nothing recorded, and the schema said to be too old", s)
	}
}

// A control is in force on only part of a mixed fleet when some live
// instances do not know its kind: those that record their kinds without
// it, and those that record none when no version that recorded none knew
// it. Rows ignored here as of an unknown kind may be in force on others;
// rows ignored for a bad value are in force nowhere and not listed.
func TestNotEverywhere(t *testing.T) {
	all := KnownKinds()
	newer := append(slices.Clone(all), "quiet")
	members := []Member{
		{ID: "n1", Kinds: all, SchemaMin: 5, SchemaMax: 6},
		{ID: "n2", Kinds: newer, SchemaMin: 6, SchemaMax: 7},
		{ID: "old"}, // a version before schema 6
	}
	controls := []Control{{Tag: "checkout", Kind: KindDrain}, {Tag: "search", Kind: KindRoute}}
	ignored := []Ignored{
		{Control: Control{Tag: "cart", Kind: "quiet"}, Reason: "kind"},
		{Control: Control{Tag: "report", Kind: KindClass, Value: 9}, Reason: "class out of range"},
	}
	got := notEverywhere(controls, ignored, members)
	want := []Unapplied{{Tag: "cart", Kind: "quiet", NotBy: []string{"n1", "old"}, Live: 3}}
	if len(got) != 1 || got[0].Tag != want[0].Tag || got[0].Kind != want[0].Kind || !slices.Equal(got[0].NotBy, want[0].NotBy) || got[0].Live != 3 {
		t.Fatalf("notEverywhere = %+v, want %+v", got, want)
	}
	// A row no member knows is in force nowhere: not listed.
	if got := notEverywhere(nil, []Ignored{{Control: Control{Tag: "x", Kind: "future"}}}, members); len(got) != 0 {
		t.Errorf("a kind no member knows: %+v, want none listed", got)
	}
	// A member that records its kinds without drain cannot apply the
	// drain.
	members = append(members, Member{ID: "x", Kinds: []Kind{KindLimit}})
	got = notEverywhere(controls, nil, members)
	if len(got) != 2 || !slices.Equal(got[0].NotBy, []string{"x"}) || !slices.Equal(got[1].NotBy, []string{"x"}) {
		t.Fatalf("with a member that knows only limit: %+v", got)
	}
}

// KnownKinds is the list Validate accepts, and each instance records:
// every kind in it validates, and a kind outside it does not. The kinds
// of the versions that recorded none stay as they were.
func TestKnownKindsValidate(t *testing.T) {
	for _, k := range KnownKinds() {
		// Some value is valid: 0 (a kind without a value, a drain without
		// grace, the first class or route) or 1 (a limit, a bound).
		c := Control{Tag: "t", Kind: k}
		err := c.Validate()
		if err != nil {
			c.Value = 1
			err = c.Validate()
		}
		if err != nil {
			t.Errorf("known kind %q does not validate: %v", k, err)
		}
	}
	if err := (Control{Tag: "t", Kind: "no_such_kind"}).Validate(); err == nil {
		t.Error("an unknown kind validates")
	}
	for _, k := range UnrecordedKinds() {
		if !slices.Contains(KnownKinds(), k) {
			t.Errorf("kind %q of the versions before schema 6 is no longer known", k)
		}
	}
}
