package reservation_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/reservation/restest"
)

// TestBadArguments: every malformed call gets its documented code, SQLSTATE
// and a message naming the argument (and line) at fault, and changes
// nothing in any table.
func TestBadArguments(t *testing.T) {
	v := newEnv(t, envOpts{})
	v.receive(1001, 1, 50)
	v.receive(1001, 2, 50)
	if _, err := reserve(t.Context(), v.eng, "existing", 600, 1001, 2, 1); err != nil {
		t.Fatal(err)
	}
	var huge strings.Builder
	huge.WriteString("[")
	for i := 0; i < 10000; i++ {
		if i > 0 {
			huge.WriteString(",")
		}
		fmt.Fprintf(&huge, `{"item":%d,"qty":1,"locations":[1]}`, i+1)
	}
	huge.WriteString("]")
	ok := restest.LinesJSON(1001, 1, 1)

	cases := []struct {
		name string
		proc string
		args []any
		code uint16
		msg  string
	}{
		{"shop not a number", "reserve", []any{"abc", "k", ok, int64(60)}, 9105, "holdfast.reserve: argument 1 (shop_id) must be a positive integer, got 'abc'"},
		{"shop negative", "reserve", []any{int64(-1), "k", ok, int64(60)}, 9105, "argument 1 (shop_id) must be a positive integer, got -1"},
		{"shop NULL", "reserve", []any{nil, "k", ok, int64(60)}, 9105, "argument 1 (shop_id) must be a positive integer, got NULL"},
		{"shop fractional", "reserve", []any{1.5, "k", ok, int64(60)}, 9105, "argument 1 (shop_id) must be a positive integer, got 1.5"},
		{"key NULL", "reserve", []any{int64(1), nil, ok, int64(60)}, 9105, "argument 2 (idempotency_key) must be a string, got NULL"},
		{"key empty", "reserve", []any{int64(1), "", ok, int64(60)}, 9105, "argument 2 (idempotency_key) must not be empty"},
		{"key too long", "reserve", []any{int64(1), strings.Repeat("k", 256), ok, int64(60)}, 9105, "argument 2 (idempotency_key) is 256 bytes; at most 255 are allowed"},
		{"lines not a string", "reserve", []any{int64(1), "k", int64(5), int64(60)}, 9105, "argument 3 (lines_json) must be a JSON string, got 5"},
		{"malformed JSON", "reserve", []any{int64(1), "k", `[{"item":1001,`, int64(60)}, 9105, "argument 3 (lines_json) is not a JSON array of lines"},
		{"object not array", "reserve", []any{int64(1), "k", `{"item":1001}`, int64(60)}, 9105, "argument 3 (lines_json) is not a JSON array"},
		{"trailing data", "reserve", []any{int64(1), "k", ok + "]", int64(60)}, 9105, "argument 3 (lines_json) has data after the JSON array"},
		{"no lines", "reserve", []any{int64(1), "k", `[]`, int64(60)}, 9105, "argument 3 (lines_json) must list at least one line"},
		{"negative qty", "reserve", []any{int64(1), "k", restest.LinesJSON(1001, -2, 1), int64(60)}, 9105, "argument 3 (lines_json) line 1: \"qty\" must be a positive integer, got -2"},
		{"zero qty", "reserve", []any{int64(1), "k", restest.LinesJSON(1001, 0, 1), int64(60)}, 9105, "line 1: \"qty\" must be a positive integer, got 0"},
		{"fractional qty", "reserve", []any{int64(1), "k", `[{"item":1001,"qty":1.5,"locations":[1]}]`, int64(60)}, 9105, "line 1: \"qty\" must be a positive integer, got 1.5"},
		{"qty over cap", "reserve", []any{int64(1), "k", restest.LinesJSON(1001, 1001, 1), int64(60)}, 9105, "line 1: \"qty\" 1001 exceeds the pool cap 1000"},
		{"item a string", "reserve", []any{int64(1), "k", `[{"item":"x","qty":1,"locations":[1]}]`, int64(60)}, 9105, "argument 3 (lines_json)"},
		{"missing item", "reserve", []any{int64(1), "k", `[{"qty":1,"locations":[1]}]`, int64(60)}, 9105, "line 1: missing \"item\""},
		{"unknown field", "reserve", []any{int64(1), "k", `[{"item":1001,"qty":1,"locations":[1],"colour":"red"}]`, int64(60)}, 9105, "unknown field \"colour\""},
		{"no locations", "reserve", []any{int64(1), "k", `[{"item":1001,"qty":1,"locations":[]}]`, int64(60)}, 9105, "line 1: \"locations\" must list at least one inventory_group_id"},
		{"location twice", "reserve", []any{int64(1), "k", restest.LinesJSON(1001, 1, 2, 2), int64(60)}, 9105, "line 1: location 2 is listed twice"},
		{"item twice", "reserve", []any{int64(1), "k", `[{"item":1001,"qty":1,"locations":[1]},{"item":1001,"qty":1,"locations":[2]}]`, int64(60)}, 9105, "line 2: item 1001 is already on line 1"},
		{"10,000 lines", "reserve", []any{int64(1), "k", huge.String(), int64(60)}, 9105, "argument 3 (lines_json) has 10000 lines; at most 100 are allowed"},
		{"unknown location", "reserve", []any{int64(1), "k", restest.LinesJSON(1001, 1, 77), int64(60)}, 9105, "argument 3 (lines_json) line 1: location 77 is unknown for item 1001"},
		{"unknown item", "reserve", []any{int64(1), "k", restest.LinesJSON(555, 1, 1), int64(60)}, 9105, "line 1: location 1 is unknown for item 555"},
		{"ttl not a number", "reserve", []any{int64(1), "k", ok, "abc"}, 9105, "holdfast.reserve: argument 4 (ttl_seconds) must be a positive integer, got 'abc'"},
		{"ttl zero", "reserve", []any{int64(1), "k", ok, int64(0)}, 9105, "argument 4 (ttl_seconds) must be a positive integer, got 0"},
		{"ttl too long", "reserve", []any{int64(1), "k", ok, int64(100000)}, 9105, "argument 4 (ttl_seconds) is 100000; at most 86400 (max_ttl) is allowed"},
		{"claim bad token", "claim", []any{"nope"}, 9105, "holdfast.claim: argument 1 (token) is not a holdfast reservation token (rsv_ and 16 hex digits), got 'nope'"},
		{"claim NULL", "claim", []any{nil}, 9105, "argument 1 (token) is not a holdfast reservation token"},
		{"claim unknown", "claim", []any{"rsv_0000000000000001"}, 9103, "holdfast.claim: unknown reservation token rsv_0000000000000001"},
		{"release unknown", "release", []any{"rsv_0000000000000001"}, 9103, "holdfast.release: unknown reservation token"},
		{"extend NULL ttl", "extend", []any{"rsv_0000000000000001", nil}, 9105, "argument 2 (ttl_seconds) must be a positive integer, got NULL"},
		{"extend unknown", "extend", []any{"rsv_0000000000000001", int64(60)}, 9103, "holdfast.extend: unknown reservation token"},
		{"receive zero", "receive", []any{int64(1), int64(1001), int64(1), int64(0)}, 9105, "holdfast.receive: argument 4 (quantity) must be a positive integer, got 0"},
		{"receive huge", "receive", []any{int64(1), int64(1001), int64(1), int64(1e15)}, 9105, "argument 4 (quantity) must be between"},
		{"set_on_hand negative", "set_on_hand", []any{int64(1), int64(1001), int64(1), int64(-1)}, 9105, "argument 4 (on_hand) must be a non-negative integer, got -1"},
		{"set_on_hand below reserved", "set_on_hand", []any{int64(1), int64(1001), int64(1), int64(1)}, 9106, "below the 2 units held by live reservations"},
		{"adjust zero", "adjust", []any{int64(1), int64(1001), int64(1), int64(0)}, 9105, "argument 4 (delta) must not be 0"},
		{"adjust below zero", "adjust", []any{int64(1), int64(1001), int64(2), int64(-51)}, 9106, "would be -1; it cannot go below 0"},
		{"availability bad item", "availability", []any{int64(1), "x"}, 9105, "holdfast.availability: argument 2 (inventory_item_id) must be a positive integer, got 'x'"},
		{"unknown procedure", "reserve_all", []any{}, 1305, "PROCEDURE holdfast.reserve_all does not exist"},
		{"too few arguments", "reserve", []any{int64(1)}, 1318, "Incorrect number of arguments for PROCEDURE holdfast.reserve; expected 4, got 1"},
	}
	wantState := map[uint16]string{9101: "45000", 9102: "45000", 9103: "45000", 9104: "45000", 9105: "22023", 9106: "45000", 1305: "42000", 1318: "42000"}
	before := restest.Snapshot(t, v.db)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := v.call(c.proc, c.args...)
			var me interface {
				MySQLError() (uint16, string, string)
			}
			if err == nil || !asMySQL(err, &me) {
				t.Fatalf("got %v, want error %d", err, c.code)
			}
			gotCode, state, msg := me.MySQLError()
			if gotCode != c.code || state != wantState[c.code] || !strings.Contains(msg, c.msg) {
				t.Errorf("got %d %s %q\nwant %d %s containing %q", gotCode, state, msg, c.code, wantState[c.code], c.msg)
			}
		})
	}
	if after := restest.Snapshot(t, v.db); !reflect.DeepEqual(before, after) {
		t.Errorf("bad calls changed the tables")
	}

	// Integers may arrive as strings (prepared-statement parameters).
	if _, _, err := v.call("reserve", "1", "str-args", ok, "120"); err != nil {
		t.Errorf("integer arguments as strings: %v", err)
	}
}

func asMySQL(err error, target *interface {
	MySQLError() (uint16, string, string)
}) bool {
	m, ok := err.(interface {
		MySQLError() (uint16, string, string)
	})
	if ok {
		*target = m
	}
	return ok
}
