package chaos

import (
	"context"
	"strings"
	"testing"
)

// raceEnabled: the test binary is built with -race, so the holdfast the
// short scenario runs is built with it too.
var raceEnabled bool

// testWriter sends the harness's report to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestShortBackendKills runs the backend scenario for a few seconds with
// a few clients: the real holdfast (built with -race when the test is)
// against a private MariaDB whose holdfast backend connections are killed
// every 100 ms. Every answer must be true and every unit accounted for.
func TestShortBackendKills(t *testing.T) {
	o := ShortOptions(KillBackend)
	o.Repo, o.Race, o.Out = "../..", raceEnabled, testWriter{t}
	results, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(results) != 1 {
		t.Fatalf("%d results, want 1", len(results))
	}
	r := results[0]
	for _, v := range r.Violations {
		t.Errorf("violation: %s", v)
	}
	switch {
	case r.Calls[procReserve] == 0 || r.Calls[procClaim] == 0 || r.Calls[procRelease] == 0:
		t.Errorf("calls %v: want reserves, claims and releases", r.Calls)
	case r.Faults == 0:
		t.Error("no backend connection was killed")
	case r.ClaimedUnits == 0:
		t.Error("nothing was claimed")
	case r.Reservable != 2*o.Items:
		t.Errorf("%d pools found reservable after expiry, want %d", r.Reservable, 2*o.Items)
	}
}
