package docstest

import (
	"strings"
	"testing"
)

const sample = "# t\n" + // 1
	"\n" + // 2
	"<!-- docs-test: skip `tool top` (refreshes; see TestTop) -->\n" + // 3
	"```sh\n" + // 4
	"tool top\n" + // 5
	"tool tags   # totals\n" + // 6
	"\n" + // 7
	"tool drain \\\n" + // 8
	"  checkout\n" + // 9
	"```\n" + // 10
	"\n" + // 11
	"```sql\n" + // 12
	"CALL p(1, 'a;b');   -- first; not split\n" + // 13
	"-- a comment line\n" + // 14
	"SELECT /* conn_tag:x */ 1\n" + // 15
	"  FROM t;\n" + // 16
	"```\n" + // 17
	"\n" + // 18
	"```text\n" + // 19
	"+---+\n" + // 20
	"| 1 |\n" + // 21
	"+---+\n" + // 22
	"| 1 | 2 |\n" + // 23
	"```\n" + // 24
	"\n" + // 25
	"<!-- docs-test: skip (a server) -->\n" + // 26
	"```sh\n" + // 27
	"serve\n" + // 28
	"```\n" // 29

func TestParse(t *testing.T) {
	blocks, err := Parse("x.md", sample)
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) != 3 {
		t.Fatalf("%d blocks, want 3 (the text block is the sql block's output)", len(blocks))
	}
	sh, sq, srv := blocks[0], blocks[1], blocks[2]
	if sh.Lang != "sh" || sh.Line != 4 || len(sh.Skips) != 1 || sh.Skips[0] != (Skip{Line: 3, Command: "tool top", Reason: "refreshes; see TestTop"}) {
		t.Errorf("sh block %+v", sh)
	}
	cmds := Commands(sh)
	var got []string
	for _, c := range cmds {
		_, skip := sh.SkipFor(c)
		got = append(got, sh.Where(c.Index)+" "+strings.ReplaceAll(c.Text, "\n", "|")+map[bool]string{true: " (skipped)"}[skip])
	}
	want := []string{"x.md:5 tool top (skipped)", "x.md:6 tool tags   # totals", "x.md:8 tool drain \\|  checkout"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("commands:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if s := StaleSkips(sh); len(s) != 0 {
		t.Errorf("stale %v", s)
	}
	if n := sh.Skips[0].NamedTests(); len(n) != 1 || n[0] != "TestTop" {
		t.Errorf("named tests %q", n)
	}

	if sq.Lang != "sql" || sq.Output == nil || sq.Output.Line != 19 {
		t.Fatalf("sql block %+v, output %+v", sq, sq.Output)
	}
	stmts := Statements(sq)
	got = nil
	for _, s := range stmts {
		got = append(got, sq.Where(s.Index)+" "+strings.ReplaceAll(s.Text, "\n", "|"))
	}
	want = []string{"x.md:13 CALL p(1, 'a;b')", "x.md:15 SELECT /* conn_tag:x */ 1|  FROM t"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("statements:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	tab, err := ParseTable(sq.Output)
	if err == nil || !strings.Contains(err.Error(), "x.md:23") {
		t.Errorf("ParseTable of a row wider than its header: %v, %+v", err, tab)
	}

	if w, ok := srv.Whole(); !ok || w.Reason != "a server" {
		t.Errorf("whole-block marker %+v", srv.Skips)
	}
}

func TestParseRefusesBadMarkers(t *testing.T) {
	for _, c := range []struct{ name, md, want string }{
		{"no reason", "<!-- docs-test: skip () -->\n```sh\nx\n```\n", "x.md:1: a docs-test marker needs a reason"},
		{"no parentheses", "<!-- docs-test: skip long-running -->\n```sh\nx\n```\n", "x.md:1: malformed marker"},
		{"unknown verb", "<!-- docs-test: run (why) -->\n```sh\nx\n```\n", "x.md:1: malformed marker"},
		{"not before a block", "<!-- docs-test: skip (why) -->\n\n```sh\nx\n```\n", "x.md:1: docs-test marker not on the line right before"},
		{"at the end", "text\n<!-- docs-test: skip (why) -->\n", "x.md:2: docs-test marker not on the line right before"},
		{"unclosed", "```sh\nx\n", "x.md:1: fenced block never closed"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("x.md", c.md)
			if err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("error %v, want %q...", err, c.want)
			}
		})
	}
}

func TestStaleSkips(t *testing.T) {
	blocks, err := Parse("x.md", "<!-- docs-test: skip `tool top` (why) -->\n```sh\ntool topology\n```\n")
	if err != nil {
		t.Fatal(err)
	}
	if s := StaleSkips(blocks[0]); len(s) != 1 {
		t.Errorf("a marker for `tool top` matched `tool topology`: stale %v", s)
	}
}

func TestRewrite(t *testing.T) {
	rw := Rewrites{Listen: "127.0.0.1:4001", Admin: "127.0.0.1:4002", Database: "hf_x"}
	for in, want := range map[string]string{
		"mariadb -c -h 127.0.0.1 -P 6033 -u app -papp test":            "mariadb -c -h 127.0.0.1 -P 4001 -u app -papp hf_x",
		"mariadb -h 127.0.0.1 --port=6033 test   # a comment":          "mariadb -h 127.0.0.1 --port=4001 hf_x   # a comment",
		"curl -s http://127.0.0.1:6034/api/tags":                       "curl -s http://127.0.0.1:4002/api/tags",
		"go tool pprof http://127.0.0.1:6034/debug/pprof/profile":      "go tool pprof http://127.0.0.1:4002/debug/pprof/profile",
		"holdfastctl drain test":                                       "holdfastctl drain test", // not a database
		"mariadb -h 127.0.0.1 -P 60330 test_other":                     "mariadb -h 127.0.0.1 -P 60330 test_other",
		"sysbench --mysql-host=127.0.0.1 --mysql-port=3306 run":        "sysbench --mysql-host=127.0.0.1 --mysql-port=3306 run",
		"mariadb -h 127.0.0.1 -P 6033 -u app -papp test -e 'SELECT 1'": "mariadb -h 127.0.0.1 -P 4001 -u app -papp hf_x -e 'SELECT 1'",
		"mariadb -h 127.0.0.1 -P 6033 -e \"SELECT 'test'\" -D test":    "mariadb -h 127.0.0.1 -P 4001 -e \"SELECT 'test'\" -D hf_x",
		"mariadb -u test --database=test -e 'SELECT 1' | grep test":    "mariadb -u test --database=hf_x -e 'SELECT 1' | grep test",
	} {
		if got := rw.Rewrite(in); got != want {
			t.Errorf("Rewrite(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCompare(t *testing.T) {
	shown := Table{Columns: []string{"token", "expires_at", "qty"}, Rows: [][]string{
		{"rsv_1dfbc72013cd5e30", "2025-01-01 00:20:00.000000", "2"},
		{"rsv_5a0f2b8c9d1e3f47", "2025-01-01 00:20:00.000000", "1"},
	}}
	run := Table{Columns: []string{"token", "expires_at", "qty"}, Rows: [][]string{
		{"rsv_0000000000000aaa", "2026-12-01 11:29:45.416276", "2"},
		{"rsv_0000000000000bbb", "2026-12-01 11:29:45.416276", "1"},
	}}
	observe := func(k *Tokens, tab Table) {
		for _, r := range tab.Rows {
			for _, v := range r {
				k.Observe(v)
			}
		}
	}
	var k Tokens
	observe(&k, run)
	if err := Compare(shown, run, &k); err != nil {
		t.Fatalf("equal tables: %v", err)
	}
	if q, err := k.Map("CALL holdfast.claim('rsv_5a0f2b8c9d1e3f47')"); err != nil || q != "CALL holdfast.claim('rsv_0000000000000bbb')" {
		t.Errorf("Map: %q, %v", q, err)
	}

	for _, c := range []struct {
		name string
		edit func(*Table)
		want string
	}{
		{"value", func(t *Table) { t.Rows[1][2] = "3" }, `row 2, qty: "1", the doc shows "3"`},
		{"column", func(t *Table) { t.Columns[2] = "quantity" }, "columns"},
		{"rows", func(t *Table) { t.Rows = t.Rows[:1] }, "2 rows, the doc shows 1"},
		{"one token for two", func(t *Table) { t.Rows[1][0] = t.Rows[0][0] }, "row 2, token"},
		{"not a timestamp", func(t *Table) { t.Rows[0][1] = "soon" }, "row 1, expires_at"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Table{Columns: append([]string(nil), shown.Columns...)}
			for _, r := range shown.Rows {
				s.Rows = append(s.Rows, append([]string(nil), r...))
			}
			c.edit(&s)
			var k Tokens
			observe(&k, run)
			if err := Compare(s, run, &k); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want %q", err, c.want)
			}
		})
	}

	var empty Tokens
	if _, err := empty.Map("CALL holdfast.claim('rsv_1dfbc72013cd5e30')"); err == nil ||
		!strings.Contains(err.Error(), "token 1 of the doc, but the run has returned 0") {
		t.Errorf("a placeholder before any token was returned: %v", err)
	}
}
