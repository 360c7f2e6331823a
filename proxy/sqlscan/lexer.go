package sqlscan

import "bytes"

// Mode selects the server settings that change how statement text is lexed.
// The zero Mode is MySQL's default: backslash escapes in strings, and "..."
// is a string. A proxy that tracks the session's sql_mode should pass the
// matching Mode, otherwise a crafted string can make it see statement
// boundaries the server does not (for example 'a\' under
// NO_BACKSLASH_ESCAPES).
type Mode uint8

const (
	// NoBackslashEscapes is sql_mode NO_BACKSLASH_ESCAPES: a backslash in a
	// string is an ordinary byte; only a doubled quote escapes the quote.
	NoBackslashEscapes Mode = 1 << iota
	// ANSIQuotes is sql_mode ANSI_QUOTES: "..." is a quoted identifier (a
	// doubled "" escapes the quote, backslashes are ordinary), not a string.
	ANSIQuotes
)

type tokKind uint8

const (
	tEOF     tokKind = iota
	tWord            // identifier or keyword: [A-Za-z0-9_$\x80-\xff]+, not all digits
	tQuoted          // `ident`, or "ident" under ANSIQuotes
	tString          // '...', "..." or N'...'
	tNumber          // 12, 1.5, .5, 1e3
	tHex             // X'4142' or 0x4142
	tBit             // b'0101' or 0b0101
	tUserVar         // @name, @'name', @"name", @`name`, or a lone @
	tSysVar          // @@name, @@session.name, ...
	tHost            // @host right after 'user' or `user` (an account name, not a variable)
	tParam           // ?
	tAssign          // :=
	tPunct           // any other single byte, in ch
)

// token is one lexical token. start and end delimit its bytes in the source.
// It has at most four fields so the compiler keeps it in registers.
type token struct {
	kind  tokKind
	x     uint16 // tPunct: the byte; plus the xOpen and xSpace bits
	start int
	end   int
}

const (
	xOpen  = 1 << 8 // a literal, quoted identifier or variable name that runs to the end of input
	xSpace = 1 << 9 // whitespace or a comment precedes the token
)

func (t token) ch() byte    { return byte(t.x) }
func (t token) open() bool  { return t.x&xOpen != 0 }
func (t token) space() bool { return t.x&xSpace != 0 }

func (t token) is(c byte) bool { return t.kind == tPunct && byte(t.x) == c }

// Character classes.
const (
	clSpace = 1 << iota
	clIdent
	clDigit
	clHex
)

var class = func() (c [256]uint8) {
	for _, b := range []byte(" \t\n\r\v\f") {
		c[b] |= clSpace
	}
	for b := 0; b < 256; b++ {
		switch {
		case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b == '_', b == '$', b >= 0x80:
			c[b] |= clIdent
		case b >= '0' && b <= '9':
			c[b] |= clIdent | clDigit | clHex
		}
		if b >= 'a' && b <= 'f' || b >= 'A' && b <= 'F' {
			c[b] |= clHex
		}
	}
	return c
}()

func isIdent(c byte) bool { return class[c]&clIdent != 0 }
func isDigit(c byte) bool { return class[c]&clDigit != 0 }

var starSlash = []byte("*/")

// lexer splits MySQL statement text into tokens. It never modifies src and
// never allocates; copying a lexer value gives an independent cursor, which
// is how callers look ahead.
type lexer struct {
	src  []byte
	pos  int
	mode Mode
	exec bool // inside an executable comment /*! ... */ or /*M! ... */
	// unterminated is set when a comment runs to the end of input.
	unterminated bool
	prevKind     tokKind
	prevEnd      int
	// tags are the bodies of the first comments that mention the tag key
	// (see Info.TagComments); ntags counts them, and tagsNext is where
	// lexing resumes after the last of them.
	tags     [MaxTagComments]Span
	ntags    uint8
	tagsNext int
	// haltFull makes next return a tEOF token as soon as tags is full
	// (MoreTagComments wants nothing after them).
	haltFull bool
	// primaryHint: an ordinary comment holds "holdfast:primary".
	primaryHint bool
}

// tagKey is the word a comment must hold to be a tag comment (the
// attribution package decides what it says).
var tagKey = []byte("conn_tag")

// primaryHint in an ordinary comment keeps a statement on the primary
// (Info.PrimaryHint).
var primaryHint = []byte("holdfast:primary")

// noteComment records the body src[start:end] of an ordinary comment,
// after which lexing goes on at next, when it mentions the tag key.
func (l *lexer) noteComment(start, end, next int) {
	if !l.primaryHint && bytes.Contains(l.src[start:end], primaryHint) {
		l.primaryHint = true
	}
	if int(l.ntags) < len(l.tags) && bytes.Contains(l.src[start:end], tagKey) {
		l.tags[l.ntags] = Span{start, end}
		l.ntags++
		l.tagsNext = next
	}
}

// next returns the next token, skipping whitespace and comments. At the end
// of input (or, with haltFull, once tags is full) it returns a tEOF token
// whose start and end are len(src).
func (l *lexer) next() token {
	src := l.src
	var x uint16 // xSpace
skip:
	for l.pos < len(src) && !(l.haltFull && int(l.ntags) == len(l.tags)) {
		c := src[l.pos]
		if class[c]&clSpace != 0 {
			l.pos++
			x = xSpace
			continue
		}
		switch c {
		case '/':
			if l.pos+1 >= len(src) || src[l.pos+1] != '*' {
				break skip
			}
			x = xSpace
			if !l.exec {
				if n := execPrefix(src[l.pos:]); n > 0 {
					l.pos += n
					l.exec = true
					continue
				}
			}
			i := bytes.Index(src[l.pos+2:], starSlash)
			if i < 0 {
				l.pos = len(src)
				l.unterminated = true
			} else {
				if !l.exec {
					l.noteComment(l.pos+2, l.pos+2+i, l.pos+2+i+2)
				}
				l.pos += 2 + i + 2
			}
		case '*':
			if !l.exec || l.pos+1 >= len(src) || src[l.pos+1] != '/' {
				break skip
			}
			l.pos += 2
			l.exec = false
			x = xSpace
		case '#':
			l.skipLine(1)
			x = xSpace
		case '-':
			if l.pos+2 > len(src) || src[l.pos+1] != '-' ||
				l.pos+2 < len(src) && src[l.pos+2] > ' ' && src[l.pos+2] != 0x7f {
				break skip
			}
			l.skipLine(2)
			x = xSpace
		default:
			break skip
		}
	}
	start := l.pos
	if start >= len(src) || l.haltFull && int(l.ntags) == len(l.tags) {
		if l.exec {
			l.unterminated = true
		}
		return token{x: x, start: len(src), end: len(src)}
	}
	// The token is built from locals and returned as one composite literal:
	// writing its fields one by one and then copying it stalls on
	// store-to-load forwarding.
	var (
		kind tokKind
		ch   byte
		open bool
	)
	c := src[start]
	switch {
	case class[c]&(clIdent|clDigit) == clIdent && (start+1 == len(src) || src[start+1] != '\''):
		kind = tWord // the common case first
		l.ident()
	case c == '\'':
		kind = tString
		l.pos, open = l.quoted(start+1, c, l.mode&NoBackslashEscapes == 0)
	case c == '"':
		if l.mode&ANSIQuotes != 0 {
			kind = tQuoted
			l.pos, open = l.quoted(start+1, c, false)
		} else {
			kind = tString
			l.pos, open = l.quoted(start+1, c, l.mode&NoBackslashEscapes == 0)
		}
	case c == '`':
		kind = tQuoted
		l.pos, open = l.quoted(start+1, c, false)
	case isDigit(c):
		kind = l.number()
	case c == '.' && start+1 < len(src) && isDigit(src[start+1]) &&
		!(l.prevEnd == start && (l.prevKind == tWord || l.prevKind == tQuoted)):
		kind = l.number()
	case isIdent(c):
		if start+1 < len(src) && src[start+1] == '\'' {
			switch c | 0x20 {
			case 'x':
				kind = tHex
				l.pos, open = l.quoted(start+2, '\'', false)
			case 'b':
				kind = tBit
				l.pos, open = l.quoted(start+2, '\'', false)
			case 'n':
				kind = tString
				l.pos, open = l.quoted(start+2, '\'', l.mode&NoBackslashEscapes == 0)
			}
			if kind != tEOF {
				break
			}
		}
		kind = tWord
		l.ident()
	case c == '@':
		kind, open = l.variable()
	case c == '?':
		kind = tParam
		l.pos++
	case c == ':' && start+1 < len(src) && src[start+1] == '=':
		kind = tAssign
		l.pos += 2
	default:
		kind = tPunct
		ch = c
		l.pos++
	}
	l.prevKind, l.prevEnd = kind, l.pos
	if open {
		x |= xOpen
	}
	return token{kind: kind, x: x | uint16(ch), start: start, end: l.pos}
}

// execPrefix returns the length of an executable-comment opener at the start
// of b ("/*!" or "/*M!" plus up to six version digits), or 0.
func execPrefix(b []byte) int {
	n := 0
	switch {
	case len(b) >= 3 && b[2] == '!':
		n = 3
	case len(b) >= 4 && b[2] == 'M' && b[3] == '!':
		n = 4
	default:
		return 0
	}
	for d := 0; d < 6 && n < len(b) && isDigit(b[n]); d++ {
		n++
	}
	return n
}

// skipLine skips a line comment whose marker (# or --) is n bytes long.
func (l *lexer) skipLine(n int) {
	body := l.pos + n
	end := len(l.src)
	if i := bytes.IndexByte(l.src[l.pos:], '\n'); i >= 0 {
		end = l.pos + i
		l.pos += i + 1
	} else {
		l.pos = len(l.src)
	}
	if !l.exec {
		l.noteComment(min(body, end), end, l.pos)
	}
}

// quoted scans a quoted run whose body starts at i and is closed by q. A
// doubled q is an escaped q; with backslash, a backslash escapes the next
// byte. It returns the position after the closing quote, or len(src) and true
// when the quote is missing.
func (l *lexer) quoted(i int, q byte, backslash bool) (int, bool) {
	src := l.src
	for i < len(src) {
		c := src[i]
		if c == q {
			if i+1 < len(src) && src[i+1] == q {
				i += 2
				continue
			}
			return i + 1, false
		}
		if c == '\\' && backslash {
			i += 2
			continue
		}
		i++
	}
	return len(src), true
}

func (l *lexer) ident() {
	src := l.src
	i := l.pos
	for i < len(src) && class[src[i]]&clIdent != 0 {
		i++
	}
	l.pos = i
}

// number scans a numeric literal at l.pos: 0x.. and 0b.. literals, decimal
// integers, fractions and exponents. A run of digits followed by identifier
// bytes (1abc, 0xZZ, 1e) is an identifier, as in MySQL.
func (l *lexer) number() tokKind {
	src := l.src
	i := l.pos
	if src[i] == '0' && i+1 < len(src) && (src[i+1] == 'x' || src[i+1] == 'b') {
		j := i + 2
		if src[i+1] == 'x' {
			for j < len(src) && class[src[j]]&clHex != 0 {
				j++
			}
		} else {
			for j < len(src) && (src[j] == '0' || src[j] == '1') {
				j++
			}
		}
		if j > i+2 && (j == len(src) || !isIdent(src[j])) {
			l.pos = j
			if src[i+1] == 'x' {
				return tHex
			}
			return tBit
		}
	}
	j := i
	for j < len(src) && isDigit(src[j]) {
		j++
	}
	float := false
	if j < len(src) && src[j] == '.' {
		float = true
		j++
		for j < len(src) && isDigit(src[j]) {
			j++
		}
	}
	if j < len(src) && src[j]|0x20 == 'e' {
		k := j + 1
		if k < len(src) && (src[k] == '+' || src[k] == '-') {
			k++
		}
		if k < len(src) && isDigit(src[k]) {
			for k < len(src) && isDigit(src[k]) {
				k++
			}
			j = k
			float = true
		}
	}
	if !float && j < len(src) && isIdent(src[j]) {
		l.pos = j
		l.ident()
		return tWord
	}
	l.pos = j
	return tNumber
}

// variable scans @name, @'name', @"name", @`name`, @@name and @@scope.name.
// It returns the token kind and whether a quoted name runs to the end of
// input.
func (l *lexer) variable() (tokKind, bool) {
	src := l.src
	i := l.pos + 1
	if i < len(src) && src[i] == '@' {
		i++
		for i < len(src) {
			if src[i] == '`' {
				var open bool
				if i, open = l.quoted(i+1, '`', false); open {
					l.pos = i
					return tSysVar, true
				}
			} else if isIdent(src[i]) || src[i] == '.' {
				i++
			} else {
				break
			}
		}
		l.pos = i
		return tSysVar, false
	}
	// MySQL lexes '@' the same everywhere; the grammar decides. Right after a
	// quoted user name ('u'@'h', `u`@`h`) it can only be an account's host.
	kind := tUserVar
	if l.prevEnd == l.pos && (l.prevKind == tString || l.prevKind == tQuoted) {
		kind = tHost
	}
	if i < len(src) {
		switch q := src[i]; q {
		case '\'', '"':
			bs := l.mode&NoBackslashEscapes == 0 && !(q == '"' && l.mode&ANSIQuotes != 0)
			var open bool
			l.pos, open = l.quoted(i+1, q, bs)
			return kind, open
		case '`':
			var open bool
			l.pos, open = l.quoted(i+1, q, false)
			return kind, open
		}
	}
	for i < len(src) && (isIdent(src[i]) || src[i] == '.') {
		i++
	}
	l.pos = i
	return kind, false
}
