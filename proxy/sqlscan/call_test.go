package sqlscan

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func str(s string) Arg       { return Arg{Kind: ArgString, Text: s} }
func num(s string) Arg       { return Arg{Kind: ArgInt, Text: s} }
func dec(s string) Arg       { return Arg{Kind: ArgDecimal, Text: s} }
func param(i int) Arg        { return Arg{Kind: ArgParam, Index: i} }
func call(a ...Arg) []Arg    { return a }
func null() Arg              { return Arg{Kind: ArgNull} }
func named(s, n string) Call { return Call{Schema: s, Name: n} }

func TestParseCall(t *testing.T) {
	tests := []struct {
		sql  string
		want Call
	}{
		{"CALL holdfast.reserve(1, 'key-1', '[{\"item\":1}]', 600)",
			Call{"holdfast", "reserve", call(num("1"), str("key-1"), str(`[{"item":1}]`), num("600"))}},
		{"call `holdfast`.`reserve`(?, ?, ?)", Call{"holdfast", "reserve", call(param(0), param(1), param(2))}},
		{"CALL `my``db`.`Proc Name`()", named("my`db", "Proc Name")},
		{"CALL p", named("", "p")},
		{"CALL p;", named("", "p")},
		{"CALL p()", named("", "p")},
		{"CALL MyProc ( ) ;", named("", "MyProc")},
		{"  /* c */ CALL /* d */ db . p ( /* e */ 1 /* f */ ) ; -- done", Call{"db", "p", call(num("1"))}},
		{"CALL p(1) # comment", Call{"", "p", call(num("1"))}},
		{"CALL p(-5, - 7, +3, 0, 007)", Call{"", "p", call(num("-5"), num("-7"), num("3"), num("0"), num("007"))}},
		{"CALL p(1.50, -.5, 1e3, 2.5E-3, 1.)", Call{"", "p", call(dec("1.50"), dec("-.5"), dec("1e3"), dec("2.5E-3"), dec("1."))}},
		{"CALL p(99999999999999999999999)", Call{"", "p", call(num("99999999999999999999999"))}},
		{"CALL p(NULL, null, TRUE, false)", Call{"", "p", call(null(), null(), num("1"), num("0"))}},
		{`CALL p('a\0b\'c\"d\be\nf\rg\th\Zi\\j\%k\_l\qm')`,
			Call{"", "p", call(str("a\x00b'c\"d\be\nf\rg\th\x1ai\\j\\%k\\_lqm"))}},
		{`CALL p('it''s', "say ""hi""", "it's", 'say "hi"')`,
			Call{"", "p", call(str("it's"), str(`say "hi"`), str("it's"), str(`say "hi"`))}},
		{`CALL p('a' 'b' "c", '')`, Call{"", "p", call(str("abc"), str(""))}},
		{"CALL p(X'4142', x'', 0x4142, 0x141, b'01000001', B'1000001', 0b1, b'')",
			Call{"", "p", call(str("AB"), str(""), str("AB"), str("\x01\x41"), str("A"), str("A"), str("\x01"), str(""))}},
		{"CALL p(_utf8mb4'x', _binary 'y' 'z', N'n', _latin1 X'41', _binary 0x42)",
			Call{"", "p", call(str("x"), str("yz"), str("n"), str("A"), str("B"))}},
		{"CALL p('héllo', 'ü\xff')", Call{"", "p", call(str("héllo"), str("ü\xff"))}},
		{"CALL p(?, 1, ?)", Call{"", "p", call(param(0), num("1"), param(1))}},
		{"/*!CALL p(1)*/", Call{"", "p", call(num("1"))}},
	}
	for _, tt := range tests {
		got, err := ParseCall([]byte(tt.sql))
		if err != nil {
			t.Errorf("ParseCall(%q): %v", tt.sql, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseCall(%q) =\n%#v\nwant\n%#v", tt.sql, got, tt.want)
		}
	}
}

func TestParseCallNoBackslashEscapes(t *testing.T) {
	got, err := NoBackslashEscapes.ParseCall([]byte(`CALL p('a\n''b', 'c\')`))
	if err != nil {
		t.Fatal(err)
	}
	if want := call(str(`a\n'b`), str(`c\`)); !reflect.DeepEqual(got.Args, want) {
		t.Errorf("args = %#v, want %#v", got.Args, want)
	}
	got, err = ANSIQuotes.ParseCall([]byte(`CALL "my db"."p"('x')`))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Call{"my db", "p", call(str("x"))}); !reflect.DeepEqual(got, want) {
		t.Errorf("ANSI_QUOTES: %#v, want %#v", got, want)
	}
}

func TestParseCallErrors(t *testing.T) {
	tests := []struct {
		sql    string
		target error
		arg    int
		offset int
		msg    string // a substring of the message
	}{
		{"CALL p('abc", ErrSyntax, 1, 7, "unterminated string"},
		{"CALL p(1, 'a' 'b", ErrSyntax, 2, 14, "unterminated string"},
		{"CALL p(@x)", ErrNotLiteral, 1, 7, "argument 1 is not a literal"},
		{"CALL p(1, @`x`)", ErrNotLiteral, 2, 10, "user variable"},
		{"CALL p(@@x)", ErrNotLiteral, 1, 7, "system variable"},
		{"CALL p(1+1)", ErrNotLiteral, 1, 7, "expression"},
		{"CALL p(1, 2 * 3)", ErrNotLiteral, 2, 10, "argument 2"},
		{"CALL p(-x)", ErrNotLiteral, 1, 7, "expression"},
		{"CALL p(--1)", ErrNotLiteral, 1, 7, "expression"},
		{"CALL p((1))", ErrNotLiteral, 1, 7, "expression"},
		{"CALL p(NOW())", ErrNotLiteral, 1, 7, "function call"},
		{"CALL p(1, 'a', CONCAT('a', 'b'))", ErrNotLiteral, 3, 15, "argument 3"},
		{"CALL p(col)", ErrNotLiteral, 1, 7, "identifier"},
		{"CALL p(DEFAULT)", ErrNotLiteral, 1, 7, "identifier"},
		{"CALL p('a' COLLATE utf8mb4_bin)", ErrNotLiteral, 1, 7, "expression"},
		{"CALL p(DATE '2020-01-01')", ErrNotLiteral, 1, 7, "identifier"},
		{"CALL p(1,)", ErrSyntax, 2, 9, "empty argument"},
		{"CALL p(,1)", ErrSyntax, 1, 7, "empty argument"},
		{"CALL p(1,,2)", ErrSyntax, 2, 9, "empty argument"},
		{"CALL p(1) extra", ErrSyntax, 0, 10, "unexpected text"},
		{"CALL p(1);;", ErrSyntax, 0, 10, "unexpected text"},
		{"CALL p(1); SELECT 1", ErrSyntax, 0, 11, "unexpected text"},
		{"CALL p(1", ErrSyntax, 1, 8, "missing ')'"},
		{"CALL p(1;", ErrSyntax, 1, 8, "missing ')'"},
		{"CALL p(", ErrSyntax, 1, 7, "missing ')'"},
		{"CALL p(1 2)", ErrSyntax, 1, 9, "expected ','"},
		{"CALL p(X'414')", ErrSyntax, 1, 7, "hexadecimal"},
		{"CALL p(X'4G')", ErrSyntax, 1, 7, "hexadecimal"},
		{"CALL p(b'012')", ErrSyntax, 1, 7, "bit"},
		{"CALL p(1) /* open", ErrSyntax, 0, 17, "unterminated comment"},
		{"CALL `p", ErrSyntax, 0, 5, "unterminated quoted identifier"},
		{"CALL", ErrSyntax, 0, 4, "procedure name"},
		{"CALL 'p'()", ErrSyntax, 0, 5, "procedure name"},
		{"CALL db.(1)", ErrSyntax, 0, 8, "procedure name"},
		{"SELECT 1", ErrSyntax, 0, 0, "not a CALL"},
		{"", ErrSyntax, 0, 0, "not a CALL"},
		{"(CALL p())", ErrSyntax, 0, 0, "not a CALL"},
	}
	for _, tt := range tests {
		_, err := ParseCall([]byte(tt.sql))
		if err == nil {
			t.Errorf("ParseCall(%q): no error", tt.sql)
			continue
		}
		var ce *CallError
		if !errors.Is(err, tt.target) || !errors.As(err, &ce) {
			t.Errorf("ParseCall(%q) = %v, want %v", tt.sql, err, tt.target)
			continue
		}
		msg := err.Error()
		if ce.Arg != tt.arg || ce.Offset != tt.offset || !strings.Contains(msg, tt.msg) || !strings.HasPrefix(msg, "sqlscan: ") {
			t.Errorf("ParseCall(%q) = %q (arg %d, offset %d), want arg %d, offset %d, containing %q",
				tt.sql, msg, ce.Arg, ce.Offset, tt.arg, tt.offset, tt.msg)
		}
	}
}

func TestCallErrorMessage(t *testing.T) {
	_, err := ParseCall([]byte("CALL p(1, @x)"))
	if got, want := err.Error(), "sqlscan: CALL argument 2 is not a literal at offset 10: user variable"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	_, err = ParseCall([]byte("CALL p(1, 'x"))
	if got, want := err.Error(), "sqlscan: syntax error in CALL argument 2 at offset 10: unterminated string literal"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
