package sqlscan

import (
	"bytes"
	"testing"
)

func TestAppendConnectionID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT CONNECTION_ID()", "SELECT CAST(7 AS UNSIGNED) AS `CONNECTION_ID()`"},
		{"select connection_id() id", "select CAST(7 AS UNSIGNED) id"},
		{"SELECT CONNECTION_ID() AS c, 1", "SELECT CAST(7 AS UNSIGNED) AS c, 1"},
		{"SELECT CONNECTION_ID() 'c'", "SELECT CAST(7 AS UNSIGNED) 'c'"},
		{"SELECT CONNECTION_ID() + 1 FROM t", "SELECT CAST(7 AS UNSIGNED) + 1 AS `CONNECTION_ID() + 1` FROM t"},
		{"SELECT a, CONNECTION_ID()+0 FROM t WHERE b = CONNECTION_ID()", "SELECT a, CAST(7 AS UNSIGNED)+0 AS `CONNECTION_ID()+0` FROM t WHERE b = CAST(7 AS UNSIGNED)"},
		{"SELECT DISTINCT CONNECTION_ID(), CONNECTION_ID ( )", "SELECT DISTINCT CAST(7 AS UNSIGNED) AS `CONNECTION_ID()`, CAST(7 AS UNSIGNED) AS `CONNECTION_ID ( )`"},
		{"SELECT (SELECT CONNECTION_ID()) AS x", "SELECT (SELECT CAST(7 AS UNSIGNED) AS `CONNECTION_ID()`) AS x"},
		{"INSERT INTO t VALUES (CONNECTION_ID())", "INSERT INTO t VALUES (CAST(7 AS UNSIGNED))"},
		{"SELECT `a``b`, IF(CONNECTION_ID() > 0, 'y', 'n') FROM t;", "SELECT `a``b`, IF(CAST(7 AS UNSIGNED) > 0, 'y', 'n') AS `IF(CONNECTION_ID() > 0, 'y', 'n')` FROM t;"},
		{"SELECT CONCAT('`', CONNECTION_ID())", "SELECT CONCAT('`', CAST(7 AS UNSIGNED)) AS `CONCAT('``', CONNECTION_ID())`"},
		{"/* CONNECTION_ID() */ SELECT 'CONNECTION_ID()', x.connection_id()", ""},
		{"SELECT 1", ""},
	} {
		in := []byte(tc.in)
		got, ok := Mode(0).AppendConnectionID(nil, in, 7)
		if string(in) != tc.in {
			t.Fatalf("%q: input modified", tc.in)
		}
		if tc.want == "" {
			if ok || got != nil {
				t.Errorf("%q: rewritten to %q, want no change", tc.in, got)
			}
			continue
		}
		if !ok || string(got) != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if info := Scan(in); info.Features&FeatConnectionID == 0 {
			t.Errorf("%q: Scan reports no FeatConnectionID", tc.in)
		}
	}
	if c := Scan([]byte("select connection_id() AS `id`")).ConnectionIDColumn; c != "id" {
		t.Errorf("ConnectionIDColumn %q", c)
	}
	if c := Scan([]byte("SELECT CONNECTION_ID();")).ConnectionIDColumn; c != "CONNECTION_ID()" {
		t.Errorf("ConnectionIDColumn %q", c)
	}
}

// FuzzAppendConnectionID: never panics, never modifies its input, and
// changes a text only where the lexer sees a CONNECTION_ID( call.
func FuzzAppendConnectionID(f *testing.F) {
	for _, s := range []string{"SELECT CONNECTION_ID()", "SELECT CONNECTION_ID() + 1, 'x' FROM t", "select (select connection_id()) a", "/*!SELECT*/ CONNECTION_ID()"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		in := []byte(s)
		out, ok := Mode(0).AppendConnectionID([]byte("pre"), in, 12345)
		if string(in) != s {
			t.Fatal("input modified")
		}
		if !bytes.HasPrefix(out, []byte("pre")) {
			t.Fatal("dst prefix lost")
		}
		if ok != (Scan(in).Features&FeatConnectionID != 0) && ok {
			t.Fatalf("%q rewritten without FeatConnectionID", s)
		}
		if !ok && string(out) != "pre" {
			t.Fatalf("%q: not rewritten, yet dst changed", s)
		}
	})
}

func TestSetVariables(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"SET a = 1, SESSION b = 2, @@c = 3, @@session.d = 4", []string{"a", "b", "c", "d"}},
		{"set Wait_Timeout=5", []string{"wait_timeout"}},
		{"SET GLOBAL wait_timeout = 5, SESSION x = f(1, 2), @@global.y = 1, @u = 2", []string{"x"}},
		{"SET NAMES latin1, time_zone = '+00:00';", []string{"time_zone"}},
		{"SET session_track_system_variables = 'a,b', session_track_state_change = ON", []string{"session_track_system_variables", "session_track_state_change"}},
		{"SELECT 1", nil},
		{"SET a = 1; SET b = 2", nil},
	} {
		got := Mode(0).SetVariables([]byte(tc.in))
		if len(got) != len(tc.want) {
			t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%q: %q, want %q", tc.in, got, tc.want)
			}
		}
	}
}
