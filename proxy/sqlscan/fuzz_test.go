package sqlscan

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"
)

// The seed corpora are in testdata/fuzz/<FuzzName>/.

// FuzzScan checks that Scan does not panic, is deterministic, leaves its
// input alone and returns a consistent Info.
func FuzzScan(f *testing.F) {
	for _, s := range typical {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, sql []byte, mode uint8) {
		m := Mode(mode) & (NoBackslashEscapes | ANSIQuotes)
		orig := bytes.Clone(sql)
		info := m.Scan(sql)
		if !bytes.Equal(sql, orig) {
			t.Fatalf("input modified")
		}
		if again := m.Scan(sql); again != info {
			t.Fatalf("not deterministic: %+v then %+v", info, again)
		}
		if info.Statements < 0 || info.Statements > bytes.Count(sql, []byte(";"))+1 {
			t.Errorf("Statements = %d for %d ';'", info.Statements, bytes.Count(sql, []byte(";")))
		}
		if info.Statements == 0 && (info.Kind != KindOther || info.Features != 0) {
			t.Errorf("no statements but %+v", info)
		}
		if info.Kill != (Kill{}) && info.Kind != KindKill {
			t.Errorf("Kill %+v with kind %v", info.Kill, info.Kind)
		}
		if info.Kill.OK && info.Statements != 1 {
			t.Errorf("Kill.OK with %d statements", info.Statements)
		}
		if info.LastInsertIDColumn != "" && (info.Kind != KindSelect || info.Statements != 1 ||
			info.Features != FeatLastInsertID) {
			t.Errorf("LastInsertIDColumn %q with %+v", info.LastInsertIDColumn, info)
		}
		if info.RowCountColumn != "" && (info.Kind != KindSelect || info.Statements != 1 ||
			info.Features != FeatRowCount || info.LastInsertIDColumn != "") {
			t.Errorf("RowCountColumn %q with %+v", info.RowCountColumn, info)
		}
		if info.LastInsertIDVar && info.LastInsertIDColumn == "" || info.NamesProtected {
			t.Errorf("LastInsertIDVar or NamesProtected in %+v", info)
		}
		// Split agrees with Scan's count, and its spans are in order,
		// inside the text, and apart.
		spans, _ := m.Split(sql, nil)
		if len(spans) != info.Statements {
			t.Errorf("Split gives %d statements, Scan %d", len(spans), info.Statements)
		}
		end := 0
		for _, sp := range spans {
			if sp.Start < end || sp.End < sp.Start || sp.End > len(sql) {
				t.Fatalf("span %+v after %d in %d bytes", sp, end, len(sql))
			}
			end = sp.End
		}
		if !bytes.Equal(sql, orig) {
			t.Fatalf("input modified by Split")
		}
	})
}

// FuzzParseCall checks that ParseCall does not panic, leaves its input
// alone, and returns either a sane Call or a sane *CallError.
func FuzzParseCall(f *testing.F) {
	f.Add([]byte("CALL holdfast.reserve(1, 'key-1', '[{\"item\":1}]', 600)"))
	f.Fuzz(func(t *testing.T, sql []byte) {
		orig := bytes.Clone(sql)
		c, err := ParseCall(sql)
		if !bytes.Equal(sql, orig) {
			t.Fatalf("input modified")
		}
		if err != nil {
			var ce *CallError
			if !errors.As(err, &ce) || !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrNotLiteral) {
				t.Fatalf("error %v is not a *CallError of a known kind", err)
			}
			if ce.Offset < 0 || ce.Offset > len(sql) || ce.Arg < 0 || !strings.HasPrefix(err.Error(), "sqlscan: ") {
				t.Fatalf("bad error %q (arg %d, offset %d) for %d bytes", err, ce.Arg, ce.Offset, len(sql))
			}
			return
		}
		if c.Name == "" && !bytes.Contains(sql, []byte("``")) && !bytes.Contains(sql, []byte(`""`)) {
			t.Errorf("empty name")
		}
		params := 0
		for _, a := range c.Args {
			switch a.Kind {
			case ArgParam:
				if a.Index != params || a.Text != "" {
					t.Errorf("param %+v, want index %d", a, params)
				}
				params++
			case ArgInt, ArgDecimal:
				if a.Text == "" || !bytes.Contains(sql, []byte(strings.TrimPrefix(a.Text, "-"))) && a.Text != "1" && a.Text != "0" {
					t.Errorf("number %q not in the input", a.Text)
				}
			case ArgNull:
				if a.Text != "" {
					t.Errorf("NULL with text %q", a.Text)
				}
			}
		}
		if sc := Scan(sql); sc.Kind != KindCall || sc.Statements != 1 {
			t.Errorf("ParseCall accepted text Scan calls %v with %d statements", sc.Kind, sc.Statements)
		}
	})
}

// FuzzAppendDigest checks that AppendDigest does not panic, leaves its input
// and dst alone, respects maxLen (at most maxLen bytes appended when
// maxLen > 0), keeps valid UTF-8 valid, and that a limited digest is the
// unlimited one or a prefix of it followed by "...".
func FuzzAppendDigest(f *testing.F) {
	f.Add([]byte("SELECT * FROM t WHERE id IN (1, 2, 3)"), 16)
	f.Fuzz(func(t *testing.T, sql []byte, maxLen int) {
		maxLen %= 4096
		orig := bytes.Clone(sql)
		full := AppendDigest(nil, sql, 0)
		if h := fnvHash(full); Scan(sql).Shape != h || Mode(0).ShapeOf(sql) != h {
			t.Fatalf("shape %x (ShapeOf %x) is not the hash of the digest %q, %x", Scan(sql).Shape, Mode(0).ShapeOf(sql), full, h)
		}
		out := AppendDigest([]byte("dst:"), sql, maxLen)
		if !bytes.Equal(sql, orig) {
			t.Fatalf("input modified")
		}
		if !bytes.HasPrefix(out, []byte("dst:")) {
			t.Fatalf("dst not preserved: %q", out)
		}
		d := out[4:]
		if maxLen > 0 && len(d) > maxLen {
			t.Fatalf("digest of %d bytes exceeds maxLen %d", len(d), maxLen)
		}
		if utf8.Valid(sql) && !utf8.Valid(d) {
			t.Fatalf("invalid UTF-8 digest %q of valid input", d)
		}
		if maxLen <= 0 || len(full) <= maxLen {
			if !bytes.Equal(d, full) {
				t.Fatalf("digest %q, want %q", d, full)
			}
			return
		}
		if maxLen >= 3 && (!bytes.HasSuffix(d, []byte("...")) || !bytes.HasPrefix(full, d[:len(d)-3])) {
			t.Fatalf("truncated digest %q is not a prefix of %q plus ...", d, full)
		}
		if again := AppendDigest(nil, sql, 0); !bytes.Equal(again, full) {
			t.Fatalf("not deterministic")
		}
	})
}
