package sqlscan

import (
	"errors"
	"strconv"
)

// Call is a parsed CALL statement: CALL [schema.]name[(arg, ...)].
type Call struct {
	// Schema is the qualifier, "" when the name is not qualified. Schema and
	// Name keep their case; backticks are removed.
	Schema string
	Name   string
	// Args are the arguments in order; nil for CALL p and CALL p().
	Args []Arg
}

// ArgKind is the kind of a CALL argument.
type ArgKind uint8

// Argument kinds.
const (
	ArgNull    ArgKind = iota // NULL
	ArgInt                    // an integer literal; TRUE is "1", FALSE is "0"
	ArgDecimal                // a number with a '.' or an exponent (1.50, .5, 1e3)
	ArgString                 // a string, hex or bit literal, decoded
	ArgParam                  // a '?' placeholder
)

var argKindNames = [...]string{"null", "int", "decimal", "string", "param"}

func (k ArgKind) String() string {
	if int(k) < len(argKindNames) {
		return argKindNames[k]
	}
	return "ArgKind(" + strconv.Itoa(int(k)) + ")"
}

// Arg is one CALL argument.
type Arg struct {
	Kind ArgKind
	// Text is, for ArgInt and ArgDecimal, the literal as written, with a
	// leading '-' when negative ("-5", "1.50", "1e3"; it may exceed 64 bits).
	// For ArgString it is the decoded value: the escapes \0 \' \" \b \n \r \t
	// \Z \\ and doubled quotes are decoded, \% and \_ stay two bytes as in
	// MySQL, any other backslash is dropped; adjacent literals 'a' 'b' are
	// concatenated; X'4142', 0x4142, b'01000001' and 0b01000001 are decoded
	// to bytes; an introducer (_utf8mb4'x', _binary 0x41, N'x') is accepted
	// and dropped, the bytes are not converted. It is "" for ArgNull and
	// ArgParam.
	Text string
	// Index is, for ArgParam, the 0-based position among the statement's
	// '?' placeholders; 0 otherwise.
	Index int
}

// Errors returned by ParseCall, wrapped in a *CallError.
var (
	// ErrSyntax: the text is not a well-formed CALL statement.
	ErrSyntax = errors.New("sqlscan: syntax error")
	// ErrNotLiteral: an argument is well-formed SQL but not a literal, NULL,
	// TRUE, FALSE or '?' (a variable, a function call, an expression).
	ErrNotLiteral = errors.New("sqlscan: CALL argument is not a literal")
)

// CallError is the error ParseCall returns. errors.Is(err, ErrSyntax) or
// errors.Is(err, ErrNotLiteral) tells which kind it is.
type CallError struct {
	Err    error  // ErrSyntax or ErrNotLiteral
	Arg    int    // 1-based argument position; 0 outside the argument list
	Offset int    // byte offset in the statement text
	Reason string // short and human-readable
}

func (e *CallError) Error() string {
	s := e.Err.Error()
	if e.Err == ErrNotLiteral {
		s = "sqlscan: CALL argument " + strconv.Itoa(e.Arg) + " is not a literal"
	} else if e.Arg > 0 {
		s += " in CALL argument " + strconv.Itoa(e.Arg)
	}
	s += " at offset " + strconv.Itoa(e.Offset)
	if e.Reason != "" {
		s += ": " + e.Reason
	}
	return s
}

func (e *CallError) Unwrap() error { return e.Err }

// ParseCall parses a CALL statement, lexed with MySQL's default sql_mode.
// See Mode.ParseCall.
func ParseCall(sql []byte) (Call, error) { return Mode(0).ParseCall(sql) }

// ParseCall parses a CALL statement whose arguments are literals, NULL,
// TRUE, FALSE or '?' placeholders, with an optional trailing ';' and
// comments. Any other argument returns a *CallError wrapping ErrNotLiteral
// that names its 1-based position; malformed text (an unterminated string or
// comment, a missing ')', an empty argument, trailing text) returns a
// *CallError wrapping ErrSyntax with a reason and byte offset. The first
// problem from the left is reported. It never modifies sql.
func (m Mode) ParseCall(sql []byte) (Call, error) {
	p := callParser{lx: lexer{src: sql, mode: m}}
	return p.parse()
}

type callParser struct {
	lx     lexer
	arg    int // the current argument's 1-based position
	params int // '?' placeholders so far
}

func (p *callParser) syntax(off int, reason string) error {
	return &CallError{Err: ErrSyntax, Arg: p.arg, Offset: off, Reason: reason}
}

func (p *callParser) notLiteral(off int, reason string) error {
	return &CallError{Err: ErrNotLiteral, Arg: p.arg, Offset: off, Reason: reason}
}

func (p *callParser) parse() (Call, error) {
	var c Call
	src := p.lx.src
	t := p.lx.next()
	if t.kind != tWord || lookupKW(src[t.start:t.end]) != kwCall {
		return Call{}, p.syntax(t.start, "not a CALL statement")
	}
	name, err := p.ident(p.lx.next())
	if err != nil {
		return Call{}, err
	}
	t = p.lx.next()
	if t.is('.') {
		c.Schema = name
		if name, err = p.ident(p.lx.next()); err != nil {
			return Call{}, err
		}
		t = p.lx.next()
	}
	c.Name = name
	if t.is('(') {
		if c.Args, err = p.args(); err != nil {
			return Call{}, err
		}
		p.arg = 0
		t = p.lx.next()
	}
	if t.is(';') {
		t = p.lx.next()
	}
	if t.kind != tEOF {
		return Call{}, p.syntax(t.start, "unexpected text after the CALL statement")
	}
	if p.lx.unterminated {
		return Call{}, p.syntax(t.start, "unterminated comment")
	}
	return c, nil
}

// ident returns the procedure or schema name in t.
func (p *callParser) ident(t token) (string, error) {
	switch {
	case t.kind == tWord:
		return string(p.lx.src[t.start:t.end]), nil
	case t.kind == tQuoted && t.open():
		return "", p.syntax(t.start, "unterminated quoted identifier")
	case t.kind == tQuoted && t.end-t.start > 2:
		return unquoteIdent(p.lx.src[t.start:t.end]), nil
	}
	return "", p.syntax(t.start, "expected a procedure name")
}

// args parses the argument list after '(' up to and including ')'.
func (p *callParser) args() ([]Arg, error) {
	t := p.lx.next()
	if t.is(')') {
		return nil, nil
	}
	var args []Arg
	for {
		p.arg++
		start := t.start
		a, err := p.argument(t)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
		t = p.lx.next()
		switch {
		case t.is(')'):
			return args, nil
		case t.is(','):
			t = p.lx.next()
			continue
		case t.kind == tEOF, t.is(';'):
			return nil, p.syntax(t.start, "missing ')'")
		case t.kind == tPunct, t.kind == tWord, t.kind == tAssign:
			return nil, p.notLiteral(start, "expression")
		}
		return nil, p.syntax(t.start, "expected ',' or ')'")
	}
}

// argument parses the argument starting at t.
func (p *callParser) argument(t token) (Arg, error) {
	src := p.lx.src
	switch t.kind {
	case tEOF:
		return Arg{}, p.syntax(t.start, "missing ')'")
	case tParam:
		p.params++
		return Arg{Kind: ArgParam, Index: p.params - 1}, nil
	case tNumber:
		return number("", src[t.start:t.end]), nil
	case tString, tHex, tBit:
		return p.literal(t)
	case tUserVar, tHost:
		if t.open() {
			return Arg{}, p.syntax(t.start, "unterminated quoted variable name")
		}
		return Arg{}, p.notLiteral(t.start, "user variable")
	case tSysVar:
		return Arg{}, p.notLiteral(t.start, "system variable")
	case tQuoted:
		if t.open() {
			return Arg{}, p.syntax(t.start, "unterminated quoted identifier")
		}
		return Arg{}, p.notLiteral(t.start, "identifier")
	case tWord:
		switch lookupKW(src[t.start:t.end]) {
		case kwNull:
			return Arg{Kind: ArgNull}, nil
		case kwTrue:
			return Arg{Kind: ArgInt, Text: "1"}, nil
		case kwFalse:
			return Arg{Kind: ArgInt, Text: "0"}, nil
		}
		q := p.lx
		n := q.next()
		if src[t.start] == '_' && (n.kind == tString && src[n.start] != 'N' && src[n.start] != 'n' ||
			n.kind == tHex || n.kind == tBit) {
			p.lx = q // a character set introducer
			return p.literal(n)
		}
		if n.is('(') {
			return Arg{}, p.notLiteral(t.start, "function call")
		}
		return Arg{}, p.notLiteral(t.start, "identifier")
	case tPunct:
		switch t.ch() {
		case ',', ')':
			return Arg{}, p.syntax(t.start, "empty argument")
		case ';':
			return Arg{}, p.syntax(t.start, "missing ')'")
		case '-', '+':
			q := p.lx
			if n := q.next(); n.kind == tNumber {
				p.lx = q
				sign := ""
				if t.ch() == '-' {
					sign = "-"
				}
				return number(sign, src[n.start:n.end]), nil
			}
		}
	}
	return Arg{}, p.notLiteral(t.start, "expression")
}

func number(sign string, b []byte) Arg {
	k := ArgInt
	for _, c := range b {
		if c == '.' || c == 'e' || c == 'E' {
			k = ArgDecimal
		}
	}
	return Arg{Kind: k, Text: sign + string(b)}
}

// literal decodes a string, hex or bit literal token, and for a string the
// string literals directly after it.
func (p *callParser) literal(t token) (Arg, error) {
	src := p.lx.src
	b := src[t.start:t.end]
	if t.open() {
		return Arg{}, p.syntax(t.start, "unterminated string literal")
	}
	switch t.kind {
	case tHex:
		v, ok := decodeHex(b)
		if !ok {
			return Arg{}, p.syntax(t.start, "malformed hexadecimal literal")
		}
		return Arg{Kind: ArgString, Text: string(v)}, nil
	case tBit:
		v, ok := decodeBits(b)
		if !ok {
			return Arg{}, p.syntax(t.start, "malformed bit literal")
		}
		return Arg{Kind: ArgString, Text: string(v)}, nil
	}
	v := appendString(nil, b, p.lx.mode)
	for {
		q := p.lx
		n := q.next()
		if n.kind != tString || src[n.start] == 'N' || src[n.start] == 'n' {
			break
		}
		if n.open() {
			return Arg{}, p.syntax(n.start, "unterminated string literal")
		}
		v = appendString(v, src[n.start:n.end], p.lx.mode)
		p.lx = q
	}
	return Arg{Kind: ArgString, Text: string(v)}, nil
}

// appendString appends the value of the terminated string literal b
// ('...', "..." or N'...') to dst.
func appendString(dst, b []byte, mode Mode) []byte {
	if b[0] == 'N' || b[0] == 'n' {
		b = b[1:]
	}
	q := b[0]
	body := b[1 : len(b)-1]
	backslash := mode&NoBackslashEscapes == 0
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == q && i+1 < len(body) && body[i+1] == q:
			i++
		case c == '\\' && backslash && i+1 < len(body):
			i++
			switch c = body[i]; c {
			case '0':
				c = 0
			case 'b':
				c = '\b'
			case 'n':
				c = '\n'
			case 'r':
				c = '\r'
			case 't':
				c = '\t'
			case 'Z':
				c = 0x1a
			case '%', '_':
				dst = append(dst, '\\')
			}
		}
		dst = append(dst, c)
	}
	return dst
}

// unquoteIdent returns the name in the terminated quoted identifier b.
func unquoteIdent(b []byte) string {
	q := b[0]
	body := b[1 : len(b)-1]
	out := make([]byte, 0, len(body))
	for i := 0; i < len(body); i++ {
		if body[i] == q && i+1 < len(body) && body[i+1] == q {
			i++
		}
		out = append(out, body[i])
	}
	return string(out)
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10
	}
	return 0xff
}

// literalDigits returns the digits of a hexadecimal or bit literal: those
// after 0x or 0b, or those between the quotes of X'...' or b'...' (quoted
// true).
func literalDigits(b []byte) (d []byte, quoted bool) {
	if b[0] == '0' {
		return b[2:], false
	}
	return b[2 : len(b)-1], true
}

// decodeHex decodes X'4142' (an even number of digits) or 0x4142 (an odd
// number is padded with a leading zero).
func decodeHex(b []byte) ([]byte, bool) {
	d, quoted := literalDigits(b)
	if quoted && len(d)%2 != 0 {
		return nil, false
	}
	out := make([]byte, 0, (len(d)+1)/2)
	i := 0
	if len(d)%2 != 0 {
		v := unhex(d[0])
		if v > 15 {
			return nil, false
		}
		out = append(out, v)
		i = 1
	}
	for ; i < len(d); i += 2 {
		hi, lo := unhex(d[i]), unhex(d[i+1])
		if hi > 15 || lo > 15 {
			return nil, false
		}
		out = append(out, hi<<4|lo)
	}
	return out, true
}

// decodeBits decodes b'0101' or 0b0101, padding with leading zero bits to
// whole bytes.
func decodeBits(b []byte) ([]byte, bool) {
	d, _ := literalDigits(b)
	out := make([]byte, 0, (len(d)+7)/8)
	var v byte
	n := (8 - len(d)%8) % 8 // leading zero bits
	for _, c := range d {
		if c != '0' && c != '1' {
			return nil, false
		}
		v = v<<1 | (c - '0')
		if n++; n == 8 {
			out = append(out, v)
			v, n = 0, 0
		}
	}
	return out, true
}
