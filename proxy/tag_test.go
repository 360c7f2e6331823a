package proxy

// The statement-level rules of tags: which comment of a statement carries
// its tag, as the one lexing pass (sqlscan) finds comments and attribution
// reads them. No database is needed.

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

const maxTagLen = attribution.MaxTagLen

// tagOf lexes sql under m and returns its tag, as comQuery finds it.
func tagOf(dst, sql []byte, m sqlscan.Mode) ([]byte, bool) {
	info := m.Scan(sql)
	return appendStatementTag(dst, sql, &info, m)
}

// isSanitizedTag reports whether b could be a tag: 1..MaxTagLen bytes of
// [A-Za-z0-9_.:-].
func isSanitizedTag(b []byte) bool {
	if len(b) == 0 || len(b) > maxTagLen {
		return false
	}
	for _, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.:-", c) >= 0) {
			return false
		}
	}
	return true
}

// appendTagChecked finds sql's tag with a non-empty dst and checks the
// properties every call must have: sql is byte-identical afterwards, dst's
// prefix is kept, the tag is non-empty, sanitized and at most MaxTagLen
// bytes when found, and a second call gives the same answer.
func appendTagChecked(t testing.TB, sql []byte) (string, bool) {
	t.Helper()
	before := bytes.Clone(sql)
	const prefix = "prefix|"
	got, ok := tagOf([]byte(prefix), sql, 0)
	if !bytes.Equal(sql, before) {
		t.Fatalf("tagOf modified its input %q: now %q", before, sql)
	}
	if !bytes.HasPrefix(got, []byte(prefix)) {
		t.Fatalf("tagOf(%q) clobbered dst: %q", sql, got)
	}
	tag := got[len(prefix):]
	if !ok && len(tag) != 0 {
		t.Fatalf("tagOf(%q) = %q, false: appended without a tag", sql, tag)
	}
	if ok && !isSanitizedTag(tag) {
		t.Fatalf("tagOf(%q) = %q: not a sanitized tag of 1..%d bytes", sql, tag, maxTagLen)
	}
	again, ok2 := tagOf(nil, sql, 0)
	if ok2 != ok || !bytes.Equal(again, tag) {
		t.Fatalf("tagOf(%q) not deterministic: %q,%v then %q,%v", sql, tag, ok, again, ok2)
	}
	return string(tag), ok
}

type tagCase struct {
	name string
	sql  string
	want string // "" means no tag
}

func runTagCases(t *testing.T, cases []tagCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := appendTagChecked(t, []byte(tc.sql))
			if ok != (tc.want != "") || got != tc.want {
				t.Errorf("tagOf(%q) = %q, %v; want %q, %v", tc.sql, got, ok, tc.want, tc.want != "")
			}
		})
	}
}

func TestStatementTagForms(t *testing.T) {
	runTagCases(t, []tagCase{
		// marginalia
		{"leading", "/* conn_tag:checkout_completion */ SELECT 1", "checkout_completion"},
		{"trailing", "SELECT 1 /* conn_tag:checkout_completion */", "checkout_completion"},
		{"no spaces, code adjacent", "SELECT 1/*conn_tag:x*/FROM t", "x"},
		{"among pairs", "/*application:shop,conn_tag:checkout,controller:orders*/ SELECT 1", "checkout"},
		{"last pair", "SELECT 1 /*application:shop,controller:orders,conn_tag:checkout*/", "checkout"},
		{"spaces around tokens", "/* application : shop , conn_tag : checkout , controller:orders */ SELECT 1", "checkout"},
		{"tabs and newlines", "SELECT 1 /*\n\tconn_tag:\tcheckout\n*/", "checkout"},
		{"equals sign", "SELECT 1 /* conn_tag=checkout */", "checkout"},
		{"value with colons", "SELECT 1 /* conn_tag:Admin::Users */", "Admin::Users"},
		{"value ends at whitespace", "SELECT 1 /* conn_tag:checkout see JIRA-1 */", "checkout"},
		{"free text before", "SELECT 1 /* called from conn_tag:checkout */", "checkout"},
		{"word conn_tag then tag", "/* see conn_tag docs */ SELECT 1 /* conn_tag:b */", "b"},
		{"star in value", "SELECT 1 /* conn_tag:a*b */", "a_b"},
		{"inner comment opener", "SELECT 1 /* /* conn_tag:x */ */", "x"},
		{"optimizer hint is a comment", "SELECT /*+ conn_tag:x */ 1", "x"},
		{"multi-statement", "SELECT 1; SELECT 2 /* conn_tag:x */", "x"},

		// sqlcommenter
		{"sqlcommenter trailing", "SELECT 1 /*conn_tag='checkout%20v2',traceparent='00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'*/", "checkout_v2"},
		{"sqlcommenter among pairs", "SELECT 1 /*action='index',conn_tag='cart',framework='django%3A4.2'*/", "cart"},
		{"sqlcommenter leading", "/*conn_tag='cart'*/ SELECT 1", "cart"},
		{"quoted after colon", "SELECT 1 /* conn_tag : 'cart' */", "cart"},
		{"percent colon", "SELECT 1 /*conn_tag='a%3Ab'*/", "a:b"},
		{"percent lowercase hex", "SELECT 1 /*conn_tag='a%2db%2e'*/", "a-b."},
		{"percent slash", "SELECT 1 /*conn_tag='a%2Fb'*/", "a_b"},
		{"percent invalid hex", "SELECT 1 /*conn_tag='a%zzb'*/", "a_zzb"},
		{"percent truncated", "SELECT 1 /*conn_tag='a%4'*/", "a_4"},
		{"percent alone", "SELECT 1 /*conn_tag='%'*/", "_"},
		{"plus is not space", "SELECT 1 /*conn_tag='a+b'*/", "a_b"},
		{"percent UTF-8", "SELECT 1 /*conn_tag='caf%C3%A9'*/", "caf__"},
		{"escaped quote", `SELECT 1 /*conn_tag='it\'s',route='x'*/`, "it_s"},
		{"escaped backslash", `SELECT 1 /*conn_tag='a\\b'*/`, "a_b"},
		{"escape before percent", `SELECT 1 /*conn_tag='\%41\%4a'*/`, "AJ"},
		{"escaped percent digits", `SELECT 1 /*conn_tag='%\41'*/`, "A"},
		{"encoded spaces trimmed", "SELECT 1 /*conn_tag='%20%09x%20y%20'*/", "x_y"},
		{"quoted spaces trimmed", "SELECT 1 /*conn_tag='  x  '*/", "x"},
		{"other key's value mentions conn_tag", "SELECT 1 /*note=' conn_tag:evil',conn_tag='good'*/", "good"},
		{"other key's value has comma", "SELECT 1 /*note='a,conn_tag:evil',conn_tag='good'*/", "good"},

		// several tags: the first decides
		{"first comment wins", "/* conn_tag:a */ SELECT 1 /* conn_tag:b */", "a"},
		{"first pair wins", "SELECT 1 /* conn_tag:a, conn_tag:b */", "a"},
		{"line before block", "-- conn_tag:a\nSELECT 1 /* conn_tag:b */", "a"},
		{"untagged comment first", "/* app:x */ SELECT 1 /* conn_tag:b */", "b"},
		{"empty first decides", "/* conn_tag: */ SELECT 1 /* conn_tag:b */", ""},

		// line comments
		{"dash trailing", "SELECT 1 -- conn_tag:checkout", "checkout"},
		{"dash with newline", "SELECT 1 -- conn_tag:checkout\n", "checkout"},
		{"dash CRLF", "SELECT 1 -- conn_tag:checkout\r\n", "checkout"},
		{"dash leading", "-- conn_tag:checkout\nSELECT 1", "checkout"},
		{"dash tab", "SELECT 1 --\tconn_tag:checkout", "checkout"},
		{"dash free text", "SELECT 1 -- conn_tag:checkout see JIRA-1", "checkout"},
		{"dash needs whitespace", "SELECT 1 --conn_tag:checkout", ""},
		{"dash then block", "SELECT 1 -- note\n/* conn_tag:y */", "y"},
		{"dash ends at newline", "SELECT 1 -- note\nconn_tag:y", ""},
		{"dash sqlcommenter", "SELECT 1 -- conn_tag='a%20b'", "a_b"},
		{"hash", "SELECT 1 # conn_tag:checkout", "checkout"},
		{"hash no space", "SELECT 1 #conn_tag:checkout", "checkout"},
		{"hash leading", "# conn_tag:checkout\nSELECT 1", "checkout"},

		// keys are exactly conn_tag
		{"uppercase key", "SELECT 1 /* CONN_TAG:x */", ""},
		{"mixed-case key", "SELECT 1 /* Conn_Tag:x */", ""},
		{"prefixed key", "SELECT 1 /* my_conn_tag:x */", ""},
		{"prefixed key in pairs", "SELECT 1 /*app:a,my_conn_tag:x*/", ""},
		{"suffixed key", "SELECT 1 /* conn_tag_v2:x */", ""},
		{"plural key", "SELECT 1 /* conn_tags:x */", ""},
		{"dotted key", "SELECT 1 /* a.conn_tag:x */", ""},
		{"key without value", "SELECT 1 /* conn_tag */", ""},

		// not in a comment
		{"column named conn_tag", "SELECT conn_tag FROM t", ""},
		{"code looks like tag", "SELECT 1 FROM t WHERE conn_tag:x", ""},
		{"assignment", "UPDATE t SET conn_tag='x'", ""},

		// inside strings and identifiers
		{"single-quoted", "SELECT '/* conn_tag:evil */'", ""},
		{"double-quoted", `SELECT "/* conn_tag:evil */"`, ""},
		{"backticks", "SELECT `/* conn_tag:evil */`", ""},
		{"doubled single quote", "SELECT 'it''s /* conn_tag:x */'", ""},
		{"escaped double quote", `SELECT "\" /* conn_tag:x */"`, ""},
		{"escaped single quote", `SELECT 'a\' /* conn_tag:x */'`, ""},
		{"escaped backslash then close", `SELECT 'a\\' /* conn_tag:x */`, "x"},
		{"doubled backtick", "SELECT `a``/* conn_tag:x */`", ""},
		{"backslash in backticks", "SELECT `a\\` /* conn_tag:x */", "x"},
		{"dash comment in string", "SELECT '-- conn_tag:x'", ""},
		{"hash comment in string", "SELECT '# conn_tag:x'", ""},
		{"string then tag", "SELECT '/* conn_tag:evil */' /* conn_tag:good */", "good"},
		{"charset introducer", "SELECT _utf8mb4'/* conn_tag:evil */' /* conn_tag:good */", "good"},
		{"quote in comment is not a string", "SELECT 1 /* it's */ /* conn_tag:x */", "x"},
		{"comment opener in line comment", "SELECT 1 -- /* \n/* conn_tag:x */", "x"},

		// executable comments
		{"executable", "/*!50000 conn_tag:x */ SELECT 1", ""},
		{"executable no version", "SELECT 1 /*! conn_tag:x */", ""},
		{"mariadb executable", "SELECT 1 /*M!100100 conn_tag:x */", ""},
		{"executable then tag", "/*!40101 SET NAMES utf8 */ SELECT 1 /* conn_tag:y */", "y"},
		{"executable with newer version", "SELECT 1 /*!99999 conn_tag:x */ /* conn_tag:y */", "y"},
		{"comment end in executable string", "SELECT 1 /*! + length('*/') */ /* conn_tag:x */", "x"},
		{"comment end in executable string hides tag", "SELECT 1 /*! + length('*/ /* conn_tag:x */') */", ""},
		{"comment nested in executable", "/*! + 1 /* conn_tag:x */ */ SELECT 1", ""},
		{"line comment in executable", "SELECT 1 /*! + 1 -- */ conn_tag:x\n */ /* conn_tag:y */", "y"},
		{"executable ends before tag", "SELECT 1 /*! + 1 */ * 2 /* conn_tag:x */", "x"},
		{"star slash outside executable", "SELECT 1 */ /* conn_tag:x */", "x"},

		// sanitization
		{"reserved prefix", "SELECT 1 /* conn_tag:holdfast:reserve */", "holdfast_reserve"},
		{"reserved prefix encoded", "SELECT 1 /*conn_tag='holdfast%3Areserve'*/", "holdfast_reserve"},
		{"reserved prefix after trim", "SELECT 1 /*conn_tag='%20holdfast:x'*/", "holdfast_x"},
		{"reserved prefix alone", "SELECT 1 /* conn_tag:holdfast: */", "holdfast_"},
		{"not reserved", "SELECT 1 /* conn_tag:holdfastx */", "holdfastx"},
		{"not reserved uppercase", "SELECT 1 /* conn_tag:HOLDFAST:x */", "HOLDFAST:x"},
		{"UTF-8", "SELECT 1 /* conn_tag:café */", "caf__"},
		{"allowed punctuation", "SELECT 1 /* conn_tag:a_b.c:d-e */", "a_b.c:d-e"},
		{"quotes in bare value", `SELECT 1 /* conn_tag:"x" */`, "_x_"},
		{"control bytes", "SELECT 1 /* conn_tag:\x01x\x7f */", "_x_"},
		{"exactly maxTagLen", "SELECT 1 /* conn_tag:" + strings.Repeat("a", maxTagLen) + " */", strings.Repeat("a", maxTagLen)},
		{"longer than maxTagLen", "SELECT 1 /* conn_tag:" + strings.Repeat("b", maxTagLen+1) + " */", strings.Repeat("b", maxTagLen)},
		{"truncated after inner space", "SELECT 1 /*conn_tag='" + strings.Repeat("c", maxTagLen-1) + "%20%20d'*/", strings.Repeat("c", maxTagLen-1) + "_"},
		{"trailing spaces past maxTagLen", "SELECT 1 /*conn_tag='" + strings.Repeat("c", maxTagLen-1) + "%20%20'*/", strings.Repeat("c", maxTagLen-1)},

		// empty values
		{"empty bare", "SELECT 1 /* conn_tag: */", ""},
		{"empty bare before pair", "SELECT 1 /* conn_tag:,a:b */", ""},
		{"empty quoted", "SELECT 1 /*conn_tag=''*/", ""},
		{"spaces only", "SELECT 1 /*conn_tag='%20 %09'*/", ""},
		{"empty line comment value", "SELECT 1 -- conn_tag:", ""},
	})
}

func TestStatementTagHostile(t *testing.T) {
	const mib = 1 << 20
	runTagCases(t, []tagCase{
		{"1 MiB comment then tag", "/* " + strings.Repeat("a", mib) + " */ SELECT 1 /* conn_tag:x */", "x"},
		{"tag after 1 MiB of whitespace", "SELECT 1 /*" + strings.Repeat(" ", mib) + "conn_tag:x */", "x"},
		{"1 MiB bare value", "SELECT 1 /* conn_tag:" + strings.Repeat("a", mib) + " */", strings.Repeat("a", maxTagLen)},
		{"1 MiB quoted value", "SELECT 1 /*conn_tag='" + strings.Repeat("%20", mib/3) + "x'*/", "x"},
		{"1 MiB of interior spaces", "SELECT 1 /*conn_tag='x" + strings.Repeat("%20", mib/3) + "y'*/", "x" + strings.Repeat("_", maxTagLen-1)},
		{"1 MiB of keys", "SELECT 1 /* " + strings.Repeat("conn_tag", mib/8) + " */", ""},
		{"1 MiB of key words", "SELECT 1 /* " + strings.Repeat("conn_tag ", mib/9) + " */", ""},
		{"many comments", strings.Repeat("/* conn_tag */", mib/14) + "/* conn_tag:x */", "x"},
		{"1 MiB string", "SELECT '" + strings.Repeat("/* conn_tag:x */", mib/16) + "' /* conn_tag:y */", "y"},
		{"1 MiB of backslashes", "SELECT '" + strings.Repeat(`\`, mib) + "' /* conn_tag:y */", "y"},
		{"1 MiB unterminated comment", "SELECT 1 /* conn_tag:x " + strings.Repeat("a", mib), ""},

		{"unterminated comment", "SELECT 1 /* conn_tag:x", ""},
		{"unterminated executable", "SELECT 1 /*! + 1 /* conn_tag:x */", ""},
		{"unterminated executable opener", "/*M!", ""},
		{"unterminated comment start", "/*", ""},
		{"unterminated comment key", "/*conn_tag", ""},
		{"comment hides later tag", "SELECT 1 /* x /* conn_tag:y", ""},
		{"unterminated single", "SELECT '/* conn_tag:x */", ""},
		{"unterminated double", `SELECT "/* conn_tag:x */`, ""},
		{"unterminated backtick", "SELECT `/* conn_tag:x */", ""},
		{"unterminated escape", "SELECT '\\", ""},
		{"unterminated quoted value", "SELECT 1 /*conn_tag='abc*/ /* conn_tag:y */", ""},
		{"unterminated escaped quote", `SELECT 1 /*conn_tag='abc\'*/`, ""},
		{"unterminated other value", "SELECT 1 /*a='x, conn_tag:y*/ /* conn_tag:z */", "z"},
		{"lone key", "conn_tag", ""},
		{"key colon", "conn_tag:", ""},
		{"comment key colon", "/*conn_tag:", ""},
		{"comment key quote", "/*conn_tag='", ""},
		{"line key quote", "--\tconn_tag='", ""},
		{"line key backslash", "# conn_tag='\\", ""},

		{"SQL in block value", "SELECT 1 /* conn_tag:x'; DROP TABLE t; -- */", "x__"},
		{"SQL in line value", "SELECT 1 -- conn_tag:x'; DROP TABLE t; --", "x__"},
		{"SQL in quoted value", `SELECT 1 /*conn_tag='x\'; DROP TABLE t; --'*/`, "x___DROP_TABLE_t__--"},
		{"SQL in encoded value", "SELECT 1 /*conn_tag='x%27%3B%20DROP%20TABLE%20t%3B%20--'*/", "x___DROP_TABLE_t__--"},
		{"comment close in value", "SELECT 1 /*conn_tag='x%2A%2F'*/", "x__"},

		{"NUL in value", "SELECT 1 /* conn_tag:a\x00b */", "a_b"},
		{"NUL encoded", "SELECT 1 /*conn_tag='a%00b'*/", "a_b"},
		{"NUL only", "SELECT 1 /* conn_tag:\x00 */", "_"},
		{"NUL before comment", "\x00/* conn_tag:x */", "x"},
		{"NUL in code", "SELECT \x00 conn_tag", ""},
		{"NUL in key", "SELECT 1 /* conn\x00_tag:x */", ""},

		{"non-UTF-8 value", "SELECT 1 /* conn_tag:\xff\xfe */", "__"},
		{"non-UTF-8 around comment", "\xff/* conn_tag:x */\xfe", "x"},
		{"non-UTF-8 glued to key", "SELECT 1 /*\xffconn_tag:x*/", ""},
		{"non-UTF-8 after value", "SELECT 1 /* conn_tag:x\xc0 */", "x_"},
		{"overlong encoding", "SELECT 1 /*conn_tag='%C0%AF'*/", "__"},
		{"truncated UTF-8", "SELECT 1 /* conn_tag:caf\xc3 */", "caf_"},
	})
}

func FuzzStatementTag(f *testing.F) {
	for _, s := range []string{
		"SELECT 1 /* conn_tag:checkout_completion */",
		"/*application:shop,conn_tag:checkout,controller:orders*/ SELECT 1",
		"SELECT 1 /*conn_tag='checkout%20v2',traceparent='00-4bf9-01'*/",
		"SELECT 1 -- conn_tag:x\n",
		"SELECT '/* conn_tag:evil */' /* conn_tag:good */",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, sql []byte) {
		tag, ok := appendTagChecked(t, sql)
		// The lexer has no state at a space outside strings and comments,
		// so plain code in front of a statement cannot change its tag.
		tag2, ok2 := appendTagChecked(t, append([]byte("SELECT 1 "), sql...))
		if tag2 != tag || ok2 != ok {
			t.Fatalf("tagOf(%q) = %q, %v but with a prefix %q, %v", sql, tag, ok, tag2, ok2)
		}
	})
}

func TestStatementTagAllocs(t *testing.T) {
	dst := make([]byte, 0, maxTagLen)
	for _, tc := range []struct {
		name string
		sql  string
	}{
		{"untagged", "SELECT id, name FROM products WHERE shop_id = 42 AND sku = 'abc' ORDER BY id LIMIT 10"},
		{"key in string", "SELECT '/* conn_tag:x */' FROM t"},
		{"key in other comment", "SELECT 1 /* my_conn_tag:x */"},
		{"leading", "/* conn_tag:checkout_completion */ SELECT 1"},
		{"trailing sqlcommenter", "SELECT 1 /*conn_tag='checkout%20v2',traceparent='00-4bf9-01'*/"},
		{"line", "SELECT 1 -- conn_tag:checkout"},
		{"long value", "SELECT 1 /* conn_tag:" + strings.Repeat("a", 1000) + " */"},
		{"1 MiB", bigStatement(1 << 20)},
	} {
		sql := []byte(tc.sql)
		allocs := testing.AllocsPerRun(100, func() { tagOf(dst[:0], sql, 0) })
		if allocs != 0 {
			t.Errorf("%s: %v allocations per tagOf, want 0", tc.name, allocs)
		}
	}
}

// bigStatement returns a multi-row INSERT of about size bytes with a trailing
// sqlcommenter tag.
func bigStatement(size int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO reservation_units (shop_id, inventory_item_id, note) VALUES ")
	for b.Len() < size-100 {
		b.WriteString("(1, 2, 'it''s -- not /* a */ comment'),")
	}
	b.WriteString("(1, 2, '') /*conn_tag='holdfast%3Arefill',traceparent='00-4bf9-01'*/")
	return b.String()
}

var (
	benchSink   int
	tagKeyBytes = []byte("conn_tag")
)

// BenchmarkStatementTag reports, next to ns/op, the ratio to a bytes.Index for
// the key over the same statement measured in the same run (x-index): the
// fast path's cost floor.
func BenchmarkStatementTag(b *testing.B) {
	for _, bc := range []struct {
		name string
		sql  string
	}{
		{"untagged-100B", "SELECT id, name, price FROM products WHERE shop_id = 42 AND sku = 'abc-123' ORDER BY id LIMIT 10"},
		{"leading", "/* conn_tag:checkout_completion */ SELECT id, name FROM products WHERE shop_id = 42 LIMIT 10"},
		{"trailing-sqlcommenter", "SELECT id, name FROM products WHERE shop_id = 42 LIMIT 10 /*conn_tag='checkout%20v2',traceparent='00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'*/"},
		{"1MiB-tagged", bigStatement(1 << 20)},
		{"1MiB-untagged", strings.Repeat("SELECT 1 UNION ALL ", (1<<20)/19)},
	} {
		sql := []byte(bc.sql)
		b.Run(bc.name, func(b *testing.B) {
			dst := make([]byte, 0, maxTagLen)
			b.SetBytes(int64(len(sql)))
			b.ReportAllocs()
			for b.Loop() {
				tagOf(dst[:0], sql, 0)
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			start := time.Now()
			for range b.N {
				benchSink += bytes.Index(sql, tagKeyBytes)
			}
			basePerOp := float64(time.Since(start).Nanoseconds()) / float64(b.N)
			b.ReportMetric(perOp/basePerOp, "x-index")
		})
	}
}

// Under the session's sql_mode, a comment inside a string literal is no
// tag: the statement is counted under (and gated by) the tag it carries.
func TestStatementTagUnderSQLMode(t *testing.T) {
	for _, tc := range []struct {
		mode sqlscan.Mode
		sql  string
		want string
	}{
		{sqlscan.NoBackslashEscapes, `SELECT 'x\', '/* conn_tag:evil */' FROM dual /* conn_tag:real */`, "real"},
		{sqlscan.NoBackslashEscapes | sqlscan.ANSIQuotes, `SELECT "x\", "/* conn_tag:evil */" FROM dual /* conn_tag:real */`, "real"},
		{sqlscan.ANSIQuotes, `SELECT "/* conn_tag:evil */" FROM t /* conn_tag:real */`, "real"},
		// By default the backslash escapes the quote, and the first
		// comment is outside the literal: MariaDB reads it so too.
		{0, `SELECT 'x\', '/* conn_tag:evil */' FROM dual /* conn_tag:real */`, "evil"},
		{0, `SELECT 'x\'', '/* conn_tag:a */' /* conn_tag:b */`, "b"},
		{sqlscan.NoBackslashEscapes, `SELECT 'x\'', '/* conn_tag:a */' /* conn_tag:b */`, "a"},
	} {
		got, ok := tagOf(nil, []byte(tc.sql), tc.mode)
		if !ok || string(got) != tc.want {
			t.Errorf("mode %d: %s: tag %q (%v), want %q", tc.mode, tc.sql, got, ok, tc.want)
		}
	}
}

// More tag comments than an Info keeps: the pass goes on after them.
func TestStatementTagAfterManyComments(t *testing.T) {
	sql := strings.Repeat("/* conn_tag */ ", 3*sqlscan.MaxTagComments) + "SELECT 1 /* conn_tag:late */"
	if got, ok := tagOf(nil, []byte(sql), 0); !ok || string(got) != "late" {
		t.Fatalf("tag %q, %v; want late", got, ok)
	}
}
