package sqlscan

import (
	"slices"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		sql      string
		want     []string
		compound bool
	}{
		{"", nil, false},
		{"SELECT 1", []string{"SELECT 1"}, false},
		{"SELECT 1;", []string{"SELECT 1"}, false},
		{"SELECT 1; KILL 5;SELECT ';' /* ; */", []string{"SELECT 1", " KILL 5", "SELECT ';' /* ; */"}, false},
		{" ; ;SELECT 1;; -- x\n", []string{"SELECT 1"}, false},
		{"/* conn_tag:a */ SELECT 1; KILL QUERY 2", []string{"/* conn_tag:a */ SELECT 1", " KILL QUERY 2"}, false},
		{"SELECT `a;b`, \"c;d\"; DO 1", []string{"SELECT `a;b`, \"c;d\"", " DO 1"}, false},
		{"BEGIN NOT ATOMIC KILL 5; END", []string{"BEGIN NOT ATOMIC KILL 5", " END"}, true},
		{"BEGIN; KILL 5; COMMIT", []string{"BEGIN", " KILL 5", " COMMIT"}, false},
		{"IF 1 THEN KILL 5; END IF", []string{"IF 1 THEN KILL 5", " END IF"}, true},
		{"lbl: LOOP KILL 5; END LOOP", []string{"lbl: LOOP KILL 5", " END LOOP"}, true},
		{"CREATE DEFINER = CURRENT_USER PROCEDURE p() KILL 5", []string{"CREATE DEFINER = CURRENT_USER PROCEDURE p() KILL 5"}, true},
		{"CREATE TABLE t (a INT); KILL 5", []string{"CREATE TABLE t (a INT)", " KILL 5"}, false},
		{"/*!40101 SET a = 1; SET b = 2 */", []string{"/*!40101 SET a = 1", " SET b = 2 */"}, true},
	} {
		spans, compound := Mode(0).Split([]byte(tc.sql), nil)
		var got []string
		for _, sp := range spans {
			got = append(got, tc.sql[sp.Start:sp.End])
		}
		if !slices.Equal(got, tc.want) || compound != tc.compound {
			t.Errorf("Split(%q) = %q compound %v, want %q compound %v", tc.sql, got, compound, tc.want, tc.compound)
		}
		if n := Scan([]byte(tc.sql)).Statements; n != len(spans) {
			t.Errorf("Split(%q): %d statements, Scan counts %d", tc.sql, len(spans), n)
		}
	}
	// sql_mode changes where a string ends.
	q := []byte(`SELECT 'a\'; KILL 5`)
	if spans, _ := NoBackslashEscapes.Split(q, nil); len(spans) != 2 {
		t.Errorf("under NO_BACKSLASH_ESCAPES %q is two statements, got %d", q, len(spans))
	}
	if spans, _ := Mode(0).Split(q, nil); len(spans) != 1 {
		t.Errorf("by default %q is one statement, got %d", q, len(spans))
	}
}

func TestStatementVariables(t *testing.T) {
	for sql, want := range map[string][]string{
		"SET STATEMENT max_statement_time = 1 FOR SELECT 1":                    {"max_statement_time"},
		"set statement Sort_Buffer_Size=100000, `time_zone`='+01:00' for do 1": {"sort_buffer_size", "time_zone"},
		"SET STATEMENT a = (SELECT 1, 2), b = f(1, 2) FOR SELECT 1":            {"a", "b"},
		"SET time_zone = '+01:00'":                                             nil,
		"SELECT 1":                                                             nil,
	} {
		if got := Mode(0).StatementVariables([]byte(sql)); !slices.Equal(got, want) {
			t.Errorf("StatementVariables(%q) = %q, want %q", sql, got, want)
		}
	}
}
