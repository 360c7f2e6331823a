package sqlscan

import (
	"testing"
	"unicode/utf8"
)

func TestAppendDigest(t *testing.T) {
	tests := []struct{ sql, want string }{
		{"SELECT * FROM t WHERE id = 1", "SELECT * FROM t WHERE id = ?"},
		{"select a,b from t where x in (1, 2, -3) and y = 'z'", "SELECT a,b FROM t WHERE x IN (?+) AND y = ?"},
		{"SELECT * FROM t WHERE x IN(?)", "SELECT * FROM t WHERE x IN(?+)"},
		{"INSERT INTO t (a, b) VALUES (1, 'x'), (2, 'y'),(3,NULL)", "INSERT INTO t (a, b) VALUES (?+)"},
		{"insert into t values (?, ?)", "INSERT INTO t VALUES (?+)"},
		{"INSERT INTO t VALUES (1, NOW()), (2, NOW())", "INSERT INTO t VALUES (?, NOW()), (?, NOW())"},
		{"INSERT INTO t VALUES (1), (2, NOW())", "INSERT INTO t VALUES (?+), (?, NOW())"},
		{"SELECT * FROM t WHERE a IN (SELECT b FROM u)", "SELECT * FROM t WHERE a IN (SELECT b FROM u)"},
		{"SELECT * FROM t WHERE a IN (1, b)", "SELECT * FROM t WHERE a IN (?, b)"},
		{"SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, 4))", "SELECT * FROM t WHERE (a, b) IN ((?+))"},
		{"SELECT * FROM t WHERE (a, b) IN ((1, 2), (3, c))", "SELECT * FROM t WHERE (a, b) IN ((?, ?), (?, c))"},
		{"  SELECT  /* c */ 1\n\t-- x\n", "SELECT ?"},
		{"SELECT/**/1", "SELECT ?"},
		{"/*!40101 SET @saved_cs_client = @@character_set_client */;", "SET @saved_cs_client = @@character_set_client ;"},
		{"SELECT x'41', 0x41, b'1', 1.5e3, -2, _utf8mb4'a' 'b', N'c'", "SELECT ?, ?, ?, ?, -?, ?, ?"},
		{"SELECT t.status, status FROM `order` o WHERE o.`select` = ?", "SELECT t.status, STATUS FROM `order` o WHERE o.`select` = ?"},
		{"SELECT 1; select 2;", "SELECT ?; SELECT ?;"},
		{"SELECT a<=>b, c:=1, @v, d->>'$.x' FROM t", "SELECT a<=>b, c:=?, @v, d->>? FROM t"},
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

func TestShape(t *testing.T) {
	same := [][]string{
		{
			"SELECT * FROM t WHERE id IN (1, 2, 3) AND s = 'x'",
			"select * from t where id in (4) and s = 'a much longer string' /* conn_tag:report */",
			"/* conn_tag:checkout */ SELECT  *  FROM t\n WHERE id IN (?, ?) AND s = _utf8mb4'y'",
		},
		{
			"INSERT INTO t (a, b) VALUES (1, 'x')",
			"insert into t (a, b) values (2, 'y'), (3, 'z'), (4, NULL)",
		},
	}
	seen := map[uint64]string{}
	for _, group := range same {
		want := Scan([]byte(group[0])).Shape
		if prev, ok := seen[want]; ok {
			t.Errorf("%q has the shape of %q", group[0], prev)
		}
		seen[want] = group[0]
		for _, sql := range group {
			info := Scan([]byte(sql))
			if info.Shape != want {
				t.Errorf("Scan(%q).Shape = %016x, want %016x (the shape of %q)", sql, info.Shape, want, group[0])
			}
			if h := fnvHash(AppendDigest(nil, []byte(sql), 0)); info.Shape != h {
				t.Errorf("Scan(%q).Shape = %016x, the hash of its digest is %016x", sql, info.Shape, h)
			}
		}
	}
	for _, sql := range []string{"SELECT * FROM u WHERE id IN (1)", "SELECT * FROM t WHERE id = 1 AND s = 'x'", "SELECT `T`.* FROM t"} {
		if prev, ok := seen[Scan([]byte(sql)).Shape]; ok {
			t.Errorf("%q has the shape of %q", sql, prev)
		}
	}
	// Every instance of a fleet must compute the same shape, whatever its
	// version: a change here breaks shape controls across an upgrade. (The
	// value is FNV-1a 64 of "SELECT c FROM sbtest1 WHERE id=?".)
	if got, want := Scan([]byte("SELECT c FROM sbtest1 WHERE id=42")).Shape, uint64(0xbe86e8d6561eaf20); got != want {
		t.Errorf("the shape of a fixed statement changed: %016x, was %016x", got, want)
	}
}
