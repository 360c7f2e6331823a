package reservation_test

import (
	"context"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/reservation"
)

// No log line holds a reservation token (which authorises claim and
// release on its own): a claim after expiry, which the engine logs, names
// the reservation by its TokenRef, and the SQL the TokenRef documents
// finds the reservation from it.
func TestLogsNameTokensByRef(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(3101, 1, 10)
	ctx := context.Background()
	tok, err := reserve(ctx, v.eng, "log-ref", 600, 3101, 2, 1)
	if err != nil {
		t.Fatal(err)
	}
	v.expireAll()
	if rows := v.mustCall("claim", tok); rows[0][1] != "late" {
		t.Fatalf("claim after expiry answered %v, want late", rows)
	}
	logs := v.logs.String()
	ref := reservation.TokenRef(tok)
	if !strings.Contains(logs, "claim after expiry") || !strings.Contains(logs, ref) {
		t.Fatalf("the late claim was not logged with %s:\n%s", ref, logs)
	}
	if strings.Contains(logs, tok) || strings.Contains(logs, "rsv_") {
		t.Fatalf("a log line holds a reservation token:\n%s", logs)
	}
	digits := strings.TrimPrefix(ref, "ref_")
	n := v.scalar("SELECT COUNT(*) FROM reservations WHERE LEFT(SHA2(CONCAT('rsv_', LPAD(LOWER(HEX(reservation_id)), 16, '0')), 256), 12) = ?", digits)
	if n != 1 {
		t.Fatalf("the documented query finds %d reservations for %s, want 1", n, ref)
	}
	if got := reservation.RedactTokens("holdfast.release: unknown reservation token " + tok + "."); got != "holdfast.release: unknown reservation token "+ref+"." {
		t.Fatalf("RedactTokens = %q", got)
	}
}
