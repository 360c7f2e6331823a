package restest

import (
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/reservation"
)

// What the engine's tests and the legacy router's tests both use.

// Config is reservation.DefaultConfig with the TTL rule's payment side
// zeroed and a one-minute default TTL, so tests may use TTLs of a second.
func Config() reservation.Config {
	c := reservation.DefaultConfig()
	c.PaymentTimeout, c.CallbackRetryWindow, c.ClockSkew = 0, 0, 0
	c.DefaultTTL = time.Minute
	return c
}

// Logger logs at info and above, as text, to w (a dbtest.SyncBuffer the
// test reads back).
func Logger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// Scalar runs q on db and returns the one integer it answers; NULL is 0.
func Scalar(t testing.TB, db *sql.DB, q string, args ...any) int64 {
	t.Helper()
	var n sql.NullInt64
	if err := db.QueryRow(q, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n.Int64
}

// Pool reads k's on_hand, pool rows and reserved quantity (every line
// present, expired or not) in one statement: one consistent snapshot.
func Pool(t testing.TB, db *sql.DB, k reservation.PoolKey) (onHand, pooled, reserved int64) {
	t.Helper()
	w := k.WhereSQL()
	if err := db.QueryRow("SELECT (SELECT on_hand FROM inventory_ledger WHERE "+w+"), (SELECT COUNT(*) FROM reservation_units WHERE "+w+
		"), (SELECT COALESCE(SUM(quantity), 0) FROM reserved_quantities WHERE "+w+")").Scan(&onHand, &pooled, &reserved); err != nil {
		t.Fatalf("restest: pool %s: %v", k, err)
	}
	return onHand, pooled, reserved
}

// LinesJSON is reserve's lines_json for one line: qty of item, from the
// first of locs that has it.
func LinesJSON(item, qty int64, locs ...int64) string {
	l := make([]string, len(locs))
	for i, g := range locs {
		l[i] = fmt.Sprint(g)
	}
	return fmt.Sprintf(`[{"item":%d,"qty":%d,"locations":[%s]}]`, item, qty, strings.Join(l, ","))
}

// Code returns the MySQL error code err carries, 0 if none.
func Code(err error) uint16 {
	var m interface {
		MySQLError() (uint16, string, string)
	}
	if errors.As(err, &m) {
		c, _, _ := m.MySQLError()
		return c
	}
	return 0
}
