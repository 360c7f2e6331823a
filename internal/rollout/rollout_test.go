package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// testWriter sends the harness's report to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// short runs the short rollout with o changed by change; it skips the
// test when the repository's history lacks the base commit (a shallow
// clone).
func short(t *testing.T, change func(*Options)) *Result {
	t.Helper()
	o := ShortOptions()
	o.Repo, o.Out = "../..", testWriter{t}
	if change != nil {
		change(&o)
	}
	res, err := Run(context.Background(), o)
	if errors.Is(err, ErrNoBase) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// A fleet of three instances of the release before is replaced, one
// instance at a time, by three of this version, under checkout and engine
// traffic with a drain and a fleet-wide cap in force: no client of a
// ready instance gets an error the controls do not dictate, the drain and
// the cap hold throughout on both versions, every engine answer is true
// and the stock is whole.
func TestRollingUpgrade(t *testing.T) {
	res := short(t, nil)
	for _, v := range res.Violations {
		t.Errorf("violation: %s", v)
	}
	if len(res.Steps) != 3 || res.Committed == 0 || res.Units[2] == 0 {
		t.Errorf("steps %d, checkout commits %d, units claimed %d: want 3 steps, commits and claims", len(res.Steps), res.Committed, res.Units[2])
	}
}

// A migration that renames a column the earlier version reads (here
// reservations.claimed_by, which its claim writes) breaks the instances
// of that version still running; the harness reports it.
func TestRollingUpgradeFailsOnBadMigration(t *testing.T) {
	res := short(t, func(o *Options) {
		o.Dir = t.TempDir() // removed after the test: its violations are wanted
		o.BadStep = []string{"ALTER TABLE reservations RENAME COLUMN claimed_by TO claimed_by_call"}
	})
	t.Logf("%d violations, as wanted", len(res.Violations))
	found := false
	for _, v := range res.Violations {
		if strings.HasPrefix(v, checkErrors) && strings.Contains(v, "claim") {
			found = true
		}
	}
	if !found {
		t.Errorf("the harness did not report the claims the bad migration broke; violations: %q", res.Violations)
	}
}
