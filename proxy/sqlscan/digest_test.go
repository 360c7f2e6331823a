package sqlscan

import (
	"testing"
	"unicode/utf8"
)

func TestAppendDigest(t *testing.T) {
	tests := []struct{ sql, want string }{
		{"SELECT * FROM t WHERE id = 1", "SELECT * FROM t WHERE id = ?"},
		{"select a,b from t where x in (1, 2, -3) and y = 'z'", "SELECT a, b FROM t WHERE x IN (?+) AND y = ?"},
		{"SELECT * FROM t WHERE x IN(?)", "SELECT * FROM t WHERE x IN (?+)"},
		{"INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y'),(3,NULL)", "INSERT INTO t(a, b) VALUES (?+)"},
		{"insert into t values (?, ?)", "INSERT INTO t VALUES (?+)"},
		{"INSERT INTO t VALUES (1, NOW()), (2, NOW())", "INSERT INTO t VALUES (?, NOW()), (?, NOW())"},
		{"INSERT INTO t VALUES (1), (2, NOW())", "INSERT INTO t VALUES (?+), (?, NOW())"},
		{"SELECT * FROM t WHERE a IN (SELECT b FROM u)", "SELECT * FROM t WHERE a IN (SELECT b FROM u)"},
		{"SELECT * FROM t WHERE a IN (1, b)", "SELECT * FROM t WHERE a IN (?, b)"},
		{"SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, 4))", "SELECT * FROM t WHERE (a, b) IN ((?+))"},
		{"SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, c))", "SELECT * FROM t WHERE (a, b) IN ((?, ?), (?, c))"},
		{"  SELECT  /* c */ 1\n\t-- x\n", "SELECT ?"},
		{"SELECT/**/1", "SELECT ?"},
		{"/*!40101 SET @saved_cs_client = @@character_set_client */;", "SET @saved_cs_client = @@character_set_client;"},
		{"SELECT x'41', 0x41, b'1', 1.5e3, -2, _utf8mb4'a' 'b', N'c'", "SELECT ?, ?, ?, ?, ?, ?, ?"},
		{"SELECT t.status, status FROM `order` o WHERE o.`select` = ?", "SELECT t.status, STATUS FROM `order` o WHERE o.`select` = ?"},
		{"SELECT 1; select 2;", "SELECT ?; SELECT ?;"},
		{"SELECT 1 ;select 2", "SELECT ?; SELECT ?"},
		{"SELECT a<=>b, c:=1, @v, d->>'$.x' FROM t", "SELECT a <=> b, c := ?, @v, d ->> ? FROM t"},
		{"SELECT a-1, a -1, a - -1, -a, - 1, NOT -1 FROM t WHERE b!=2 AND c<>-3", "SELECT a - ?, a - ?, a - ?, -a, ?, NOT ? FROM t WHERE b != ? AND c <> ?"},
		{"SELECT COUNT( * ),NOW( ),IF(a,1,2),t . c FROM t", "SELECT COUNT(*), NOW(), IF (a, ?, ?), t.c FROM t"},
		{"SELECT CURRENT_TIMESTAMP - INTERVAL 1 DAY, 'u'@'h', ~a, !b", "SELECT CURRENT_TIMESTAMP - INTERVAL ? DAY, ?@'h', ~a, !b"},
		{"CALL holdfast.reserve(1, 'key-1', '[{\"item\":1}]', 600)", "CALL holdfast.reserve(?, ?, ?, ?)"},
		{"SELECT 'unterminated", "SELECT ?"},
		{"", ""},
		{"/* only */", ""},
	}
	for _, tt := range tests {
		if got := string(AppendDigest(nil, []byte(tt.sql), 0)); got != tt.want {
			t.Errorf("AppendDigest(%q) =\n %q\nwant\n %q", tt.sql, got, tt.want)
		}
	}
}

func TestAppendDigestTruncates(t *testing.T) {
	tests := []struct {
		sql    string
		maxLen int
		want   string
	}{
		{"SELECT 1", 8, "SELECT ?"},
		{"SELECT 1", 7, "SELE..."},
		{"SELECT 1", 100, "SELECT ?"},
		{"SELECT 1", 3, "..."},
		{"SELECT 1", 2, ".."},
		{"SELECT 1", 0, "SELECT ?"},
		{"SELECT 1", -1, "SELECT ?"},
		{"SELECT `héllo`", 13, "SELECT `h..."},
		{"SELECT `héllo`", 12, "SELECT `h..."},
		{"SELECT `héllo`", 14, "SELECT `hé..."},
		{"SELECT `héllo`", 15, "SELECT `héllo`"},
	}
	for _, tt := range tests {
		got := AppendDigest([]byte("x:"), []byte(tt.sql), tt.maxLen)
		if string(got) != "x:"+tt.want {
			t.Errorf("AppendDigest(%q, %d) = %q, want %q", tt.sql, tt.maxLen, got, "x:"+tt.want)
		}
		if tt.maxLen > 0 && len(got)-2 > tt.maxLen || !utf8.Valid(got) {
			t.Errorf("AppendDigest(%q, %d) = %q: too long or invalid UTF-8", tt.sql, tt.maxLen, got)
		}
	}
}

func TestAppendDigestDoesNotAllocate(t *testing.T) {
	dst := make([]byte, 0, 256)
	for _, sql := range typical {
		b := []byte(sql)
		for _, max := range []int{256, 40} {
			if n := testing.AllocsPerRun(100, func() { AppendDigest(dst[:0], b, max) }); n != 0 {
				t.Errorf("AppendDigest(%q, %d) allocates %v times", sql, max, n)
			}
		}
	}
}

func fnvHash(b []byte) uint64 {
	h := uint64(fnvOffset)
	for _, c := range b {
		h = (h ^ uint64(c)) * fnvPrime
	}
	return h
}

// The README's promise, claim by claim: statements that differ only in
// their literals, comments (tags included), spacing, keyword case and the
// length of IN (...) and VALUES (...), (...) lists of literals have the
// same shape; statements that differ in anything else do not.
func TestShape(t *testing.T) {
	same := []struct{ why, a, b string }{
		// Spacing.
		{"spacing around an operator", "SELECT * FROM t WHERE 1=1", "SELECT * FROM t WHERE 1 = 1"},
		{"spacing on one side", "SELECT * FROM t WHERE a= 1", "SELECT * FROM t WHERE a =1"},
		{"spacing inside parentheses", "SELECT SLEEP(0)", "SELECT SLEEP( 0 )"},
		{"spacing before a call's parenthesis", "SELECT SLEEP (0)", "SELECT SLEEP(0)"},
		{"spacing around commas", "SELECT a,b,c FROM t", "SELECT a , b ,c FROM t"},
		{"runs of whitespace and newlines", "SELECT a\n\tFROM   t\r\nWHERE a = ?", "SELECT a FROM t WHERE a = ?"},
		{"spacing around a dot", "SELECT t.a FROM db.t", "SELECT t . a FROM db . t"},
		{"spacing around a multi-character operator", "SELECT * FROM t WHERE a>=1 AND b<=>c", "SELECT * FROM t WHERE a >= 1 AND b <=> c"},
		{"spacing around a JSON operator", "SELECT d->>'$.x' FROM t", "SELECT d ->> '$.y' FROM t"},
		{"spacing before a semicolon", "SELECT 1;SELECT 2", "SELECT 1 ; SELECT 2"},
		{"spacing around :=", "SELECT @v:=1", "SELECT @v := 2"},
		{"binary minus spaced three ways", "SELECT a-1 FROM t", "SELECT a -1 FROM t"},
		{"spacing after IN", "SELECT * FROM t WHERE id IN(1,2)", "SELECT * FROM t WHERE id IN ( 3 )"},
		// Keyword case.
		{"keyword case", "select * from t where id = 1", "SELECT * FROM t WHERE id = 2"},
		{"mixed keyword case", "Select Count(*) From t Where a Is Null", "SELECT COUNT(*) FROM t WHERE a IS NULL"},
		// Comments, tags included.
		{"a tag comment", "/* conn_tag:checkout */ SELECT * FROM t WHERE id = 1", "SELECT * FROM t WHERE id = 1"},
		{"the sqlcommenter form", "SELECT * FROM t WHERE id = 1 /*conn_tag='report',traceparent='00-a'*/", "SELECT * FROM t WHERE id = 7"},
		{"line comments", "SELECT a -- the first column\nFROM t # the table\n", "SELECT a FROM t"},
		{"a comment between tokens", "SELECT a/* x */FROM t", "SELECT a FROM t"},
		{"an optimizer hint", "SELECT /*+ MAX_EXECUTION_TIME(100) */ a FROM t", "SELECT a FROM t"},
		// Literals.
		{"numbers", "SELECT * FROM t WHERE id = 1 AND x > 2.5", "SELECT * FROM t WHERE id = 123 AND x > 1e3"},
		{"strings", "SELECT * FROM t WHERE s = 'a'", "SELECT * FROM t WHERE s = \"a much longer string\""},
		{"a string and a placeholder", "SELECT * FROM t WHERE s = 'a'", "SELECT * FROM t WHERE s = ?"},
		{"hex, bit and introduced literals", "SELECT x'41', b'1', _utf8mb4'a', N'b'", "SELECT 0x42, 0b0, 'c', 'd'"},
		{"negative numbers", "SELECT * FROM t WHERE a = -1 AND b > - 2", "SELECT * FROM t WHERE a = 1 AND b > 2"},
		{"adjacent strings", "SELECT 'a' 'b'", "SELECT 'ab'"},
		{"NULL in a list", "SELECT * FROM t WHERE id IN (1, NULL)", "SELECT * FROM t WHERE id IN (2)"},
		// IN and VALUES lists.
		{"IN list lengths", "SELECT * FROM t WHERE id IN (1, 2, 3)", "SELECT * FROM t WHERE id IN (4)"},
		{"IN lists of rows", "SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, 4))", "SELECT * FROM t WHERE (a,b) IN ((5,6))"},
		{"VALUES lists", "INSERT INTO t (a, b) VALUES (1, 'x')", "insert into t(a,b) values (2, 'y'), (3, 'z'), (4, NULL)"},
		{"VALUE", "INSERT INTO t VALUE (1)", "INSERT INTO t VALUE (1, 2), (3, 4)"},
		{"all at once", "SELECT * FROM t WHERE id IN (1, 2, 3) AND s = 'x'",
			"/* conn_tag:checkout */ select  *  from t\n WHERE id in (?, ?) and s=_utf8mb4'y'"},
	}
	differ := []struct{ why, a, b string }{
		{"another table", "SELECT * FROM t WHERE id = 1", "SELECT * FROM u WHERE id = 1"},
		{"another column", "SELECT a FROM t", "SELECT b FROM t"},
		{"the case of an identifier", "SELECT * FROM t", "SELECT * FROM T"},
		{"a quoted identifier", "SELECT `a` FROM t", "SELECT a FROM t"},
		{"another operator", "SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE a <> 1"},
		{"an operator in two pieces", "SELECT * FROM t WHERE a <= 1", "SELECT * FROM t WHERE a < = 1"},
		{"a column for a literal", "SELECT * FROM t WHERE a = 1", "SELECT * FROM t WHERE a = b"},
		{"a column in a list of literals", "SELECT * FROM t WHERE a IN (1, 2)", "SELECT * FROM t WHERE a IN (1, b)"},
		{"a subquery for a list", "SELECT * FROM t WHERE a IN (1)", "SELECT * FROM t WHERE a IN (SELECT b FROM u)"},
		{"more columns", "SELECT a FROM t", "SELECT a, b FROM t"},
		{"a LIMIT", "SELECT a FROM t", "SELECT a FROM t LIMIT 1"},
		{"IS NULL and IS NOT NULL", "SELECT * FROM t WHERE a IS NULL", "SELECT * FROM t WHERE a IS NOT NULL"},
		{"a variable for a literal", "SELECT * FROM t WHERE a = @v", "SELECT * FROM t WHERE a = 1"},
		{"-> and ->>", "SELECT d->'$.x' FROM t", "SELECT d->>'$.x' FROM t"},
		{"a row not of literals", "INSERT INTO t VALUES (1, NOW())", "INSERT INTO t VALUES (1, 2)"},
		{"a keyword next to a dot is a name", "SELECT t.status FROM t", "SELECT t.STATUS FROM t"},
	}
	for _, p := range same {
		a, b := Scan([]byte(p.a)), Scan([]byte(p.b))
		if a.Shape != b.Shape {
			t.Errorf("%s: %q and %q have shapes %016x and %016x (digests %q, %q), want one",
				p.why, p.a, p.b, a.Shape, b.Shape, AppendDigest(nil, []byte(p.a), 0), AppendDigest(nil, []byte(p.b), 0))
		}
	}
	for _, p := range differ {
		if a, b := Scan([]byte(p.a)), Scan([]byte(p.b)); a.Shape == b.Shape {
			t.Errorf("%s: %q and %q have the same shape %016x (digest %q)", p.why, p.a, p.b, a.Shape, AppendDigest(nil, []byte(p.a), 0))
		}
	}
	// The shape is the hash of the digest, in Scan's pass and ShapeOf's.
	for _, p := range append(same, differ...) {
		for _, sql := range []string{p.a, p.b} {
			info := Scan([]byte(sql))
			if h := fnvHash(AppendDigest(nil, []byte(sql), 0)); info.Shape != h || Mode(0).ShapeOf([]byte(sql)) != h {
				t.Errorf("Scan(%q).Shape = %016x, ShapeOf %016x, the hash of its digest is %016x", sql, info.Shape, Mode(0).ShapeOf([]byte(sql)), h)
			}
		}
	}
	// Every instance of a fleet must compute the same shape: a change of
	// the digest changes shapes, and a shape control set by the shape an
	// instance of one digest version shows applies only on the instances
	// of that version (the README says so). This is digest version 2; the
	// value is FNV-1a 64 of "SELECT c FROM sbtest1 WHERE id = ?".
	if got, want := Scan([]byte("SELECT c FROM sbtest1 WHERE id=42")).Shape, fnvHash([]byte("SELECT c FROM sbtest1 WHERE id = ?")); got != want || got != 0x6ed4f28c61f3bc26 {
		t.Errorf("the shape of a fixed statement changed: %016x, was %016x", got, uint64(0x6ed4f28c61f3bc26))
	}
}
