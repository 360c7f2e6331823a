package sqlscan

// AppendDigest appends the digest of sql, lexed with MySQL's default
// sql_mode, to dst. See Mode.AppendDigest.
func AppendDigest(dst, sql []byte, maxLen int) []byte {
	return Mode(0).AppendDigest(dst, sql, maxLen)
}

// AppendDigest appends a normalized form of sql to dst and returns the
// extended slice, for grouping statements on dashboards:
//
//   - comments are removed, except that executable comments (/*! ... */,
//     /*M! ... */) are code and their contents are kept;
//   - the spacing is the tokens', never the text's: one space between two
//     tokens, except none after '(', '.' or a unary operator, none before
//     ')', ',', ';' or '.', none before the '(' of a call or a column list
//     (after a name that is not a reserved word: "NOW()", "t(a, b)",
//     but "IN (", "VALUES ("), and none inside an operator of several
//     characters ("<=", "->>"); so "a=1", "a = 1" and "a =1" are all
//     "a = ?", and "SLEEP( 0 )" is "SLEEP(?)";
//   - string, number, hex and bit literals, with any character set
//     introducer or a unary sign, become '?' ("= -1" is "= ?"); adjacent
//     strings ('a' 'b') become one '?';
//   - a parenthesized list of only literals, NULL, TRUE, FALSE and '?'
//     after IN, VALUES or VALUE becomes "(?+)", and after VALUES or VALUE
//     all following such rows are folded into it: "IN (?+)", "VALUES (?+)";
//     after IN, a list of such rows becomes "((?+))";
//   - keywords are upper-cased, unless next to a '.'; identifiers, quoted
//     identifiers and variables are kept as written.
//
// When maxLen > 0 at most maxLen bytes are appended: a digest longer than
// that is cut at a UTF-8 boundary to at most maxLen-3 bytes and "..." is
// appended (when maxLen < 3, only the first maxLen bytes of "..."). When
// maxLen <= 0 the length is not limited. AppendDigest does not allocate when
// cap(dst)-len(dst) >= maxLen, never modifies sql, and runs in linear time.
//
// The whole digest (maxLen <= 0), hashed, is the statement's shape: see
// Info.Shape and ShapeOf.
func (m Mode) AppendDigest(dst, sql []byte, maxLen int) []byte {
	d := digester{src: sql, out: digestOut{buf: dst, start: len(dst), limit: -1}}
	if maxLen > 0 {
		d.out.limit = len(dst) + maxLen
	}
	lx := lexer{src: sql, mode: m}
	for {
		t := lx.next()
		if t.kind == tEOF {
			break
		}
		d.feed(t)
		if d.out.full && !d.speculating() {
			break
		}
	}
	return d.out.finish(maxLen)
}

// ShapeOf returns the shape of sql lexed under m: what Scan reports as
// Info.Shape, for a text that is not scanned otherwise.
func (m Mode) ShapeOf(sql []byte) uint64 {
	d := digester{src: sql, out: digestOut{hashing: true, h: fnvOffset}}
	lx := lexer{src: sql, mode: m}
	for t := lx.next(); t.kind != tEOF; t = lx.next() {
		d.feed(t)
	}
	return d.out.h
}

var (
	listDigest = []byte("(?+)")
	rowsDigest = []byte("((?+))")
)

// isLiteral reports whether t is a string (without N), hex or bit literal:
// what may follow a character set introducer.
func isLiteral(src []byte, t token) bool {
	switch t.kind {
	case tString:
		return src[t.start] == '\'' || src[t.start] == '"'
	case tHex, tBit:
		return true
	}
	return false
}

// digester is the digest's normalization, fed one token at a time, so that
// Scan can hash it in its own lexing pass (Info.Shape) and AppendDigest
// write it. Where a token's form depends on tokens after it (an introducer
// before a literal, a list of literals), the digester writes the tokens as
// they are and, once it knows, goes back to a mark and writes the folded
// form instead: the output is the same as if it had looked ahead.
type digester struct {
	src []byte
	out digestOut

	prevDot, prevString bool
	list                kw // the previous token was IN, VALUES or VALUE

	// What the output ends with, which the spacing depends on: the class
	// of its last token; that token's span when it is a word (wordIdent:
	// an identifier for sure, next to a '.'); the operator it is, when one
	// (op[:opLen], to glue "<" and "=" into "<=").
	last      lastClass
	wordStart int
	wordEnd   int
	wordIdent bool
	op        [3]byte
	opLen     uint8

	// sign: the last tokens written are unary signs, from signAt (signSep:
	// after a space); followed by a number, they become one '?'.
	sign    bool
	signSep bool
	signAt  outMark

	// intro: the previous token was a word starting with '_', written at
	// introAt (introSep: after a space); followed by a literal, the two
	// become one '?'.
	intro    bool
	introSep bool
	introAt  outMark

	// ls is where a list after IN, VALUES or VALUE is (lsOff: none is
	// being read): begun at lsAt (lsSep: after a space), of what kind, in
	// which context (ctx), and, for VALUES rows, where the folded form
	// ended (foldAt).
	ls     listState
	ctx    listCtx
	lsKind kw
	lsSep  bool
	lsAt   outMark
	foldAt outMark
}

type listState uint8

const (
	lsOff       listState = iota
	lsFirst               // just after the '('
	lsElem                // a literal must follow
	lsSign                // after a sign: a number must follow
	lsIntro               // after an introducer: a literal must follow
	lsAfter               // after a literal: more strings, ',' or ')'
	lsRowAfter            // IN ((...) ...: after a row's ')': ',' or ')'
	lsRowOpen             // IN ((...), ...: after ',': '('
	lsFoldComma           // VALUES (?+) ...: ',' goes on to another row
	lsFoldOpen            // VALUES (?+), ...: '(' opens it
)

type listCtx uint8

const (
	ctxList listCtx = iota // the list right after IN, VALUES or VALUE
	ctxRow                 // a row of IN's list of rows
	ctxFold                // a row after VALUES (?+), to fold into it
)

// speculating reports whether output written so far may still be taken
// back.
func (d *digester) speculating() bool { return d.intro || d.sign || d.ls != lsOff }

// lastClass is what kind of token the digest ends with.
type lastClass uint8

const (
	lastNone    lastClass = iota // nothing written yet
	lastOpen                     // '('
	lastDot                      // '.'
	lastUnary                    // a unary operator: '-', '+', '!' or '~' before an operand
	lastPunct                    // ',', ';', a binary operator, := or other punctuation
	lastWord                     // a keyword or an identifier (wordStart..wordEnd)
	lastQuoted                   // a quoted identifier
	lastOperand                  // a literal, '?', a variable, ')'
)

// multiOps are MySQL's operators of several characters, which the lexer
// returns one character at a time.
var multiOps = [...]string{"<=>", "<=", ">=", "<>", "!=", "<<", ">>", "&&", "||", "->", "->>"}

// glues reports whether punctuation c, right after the operator written
// last with nothing between them in the text, goes on the same operator.
func (d *digester) glues(t token) bool {
	if (d.last != lastPunct && d.last != lastUnary) || d.opLen == 0 || d.opLen == 3 || t.space() {
		return false
	}
	c := t.ch()
	for _, op := range multiOps {
		if len(op) > int(d.opLen) && op[d.opLen] == c && op[:d.opLen] == string(d.op[:d.opLen]) {
			return true
		}
	}
	return false
}

// reservedWord reports whether the word written last is a reserved word
// that is not a value (NULL, TRUE, CURRENT_TIMESTAMP, ...): what comes
// after it starts an operand.
func (d *digester) reservedWord() bool {
	if d.wordIdent {
		return false
	}
	e, ok := keyword(d.src[d.wordStart:d.wordEnd])
	return ok && e.reserved && !valueWord(e.upper)
}

// valueWord reports whether reserved word w (in upper case) is a value.
func valueWord(w string) bool {
	switch w {
	case "NULL", "TRUE", "FALSE", "CURRENT_DATE", "CURRENT_TIME", "CURRENT_TIMESTAMP", "CURRENT_USER",
		"CURRENT_ROLE", "LOCALTIME", "LOCALTIMESTAMP", "UTC_DATE", "UTC_TIME", "UTC_TIMESTAMP", "MAXVALUE", "DUAL":
		return true
	}
	return false
}

// operandEnds reports whether the digest ends with an operand, so that a
// '-' or '+' next is binary.
func (d *digester) operandEnds() bool {
	switch d.last {
	case lastOperand, lastQuoted:
		return true
	case lastWord:
		return !d.reservedWord()
	}
	return false
}

// spaceBefore reports whether t is written after a space: a matter of the
// tokens alone (see AppendDigest).
func (d *digester) spaceBefore(t token) bool {
	switch d.last {
	case lastNone, lastOpen, lastDot, lastUnary:
		return false
	}
	switch t.kind {
	case tHost:
		return false
	case tPunct:
		switch t.ch() {
		case ')', ',', ';', '.':
			return false
		case '(':
			switch d.last {
			case lastQuoted:
				return false
			case lastWord:
				return d.reservedWord()
			}
		}
		return !d.glues(t)
	}
	return true
}

// feed digests the next token.
func (d *digester) feed(t token) {
	if d.ls != lsOff && d.listStep(t) {
		return
	}
	afterList, afterString, afterDot := d.list, d.prevString, d.prevDot
	d.list, d.prevString, d.prevDot = kwNone, false, t.is('.')
	if d.intro {
		d.intro = false
		if isLiteral(d.src, t) {
			d.out.reset(d.introAt)
			d.out.literal(d.introSep)
			d.last = lastOperand
			d.prevString = t.kind == tString
			return
		}
	}
	if d.sign {
		if t.kind == tNumber {
			d.sign = false
			d.out.reset(d.signAt)
			d.out.literal(d.signSep)
			d.last = lastOperand
			return
		}
		if !t.is('-') && !t.is('+') {
			d.sign = false
		}
	}
	sep := d.spaceBefore(t)
	switch t.kind {
	case tString:
		d.prevString = true
		if afterString {
			return
		}
		d.out.literal(sep)
		d.last = lastOperand
	case tNumber, tHex, tBit, tParam:
		d.out.literal(sep)
		d.last = lastOperand
	case tWord:
		b := d.src[t.start:t.end]
		if b[0] == '_' {
			d.intro, d.introSep, d.introAt = true, sep, d.out.mark()
		}
		d.out.space(sep)
		next := t.end < len(d.src) && d.src[t.end] == '.'
		d.last, d.wordStart, d.wordEnd, d.wordIdent = lastWord, t.start, t.end, afterDot || next
		if !afterDot && !next {
			if d.out.hashing && noLower(b) {
				// Written as it is, keyword or not: no lookup needed.
				d.out.write(b)
				d.list = listKeyword(b)
				return
			}
			if e, ok := keyword(b); ok {
				d.out.writeString(e.upper)
				switch k := lookupKW(b); k {
				case kwIn, kwValues, kwValue:
					d.list = k
				}
				return
			}
		}
		d.out.write(b)
	case tPunct:
		d.punct(t, sep, afterList)
	case tQuoted:
		d.out.space(sep)
		d.out.write(d.src[t.start:t.end])
		d.last = lastQuoted
	case tAssign:
		d.out.space(sep)
		d.out.write(d.src[t.start:t.end])
		d.last, d.opLen = lastPunct, 0
	default: // variables, hosts
		d.out.space(sep)
		d.out.write(d.src[t.start:t.end])
		d.last = lastOperand
	}
}

// punct digests punctuation t, written after a space when sep.
func (d *digester) punct(t token, sep bool, afterList kw) {
	c := t.ch()
	if d.glues(t) {
		d.op[d.opLen] = c
		d.opLen++
		d.out.byte(c)
		d.last, d.sign = lastPunct, false // "!=": binary after all
		return
	}
	switch c {
	case '(':
		if afterList != kwNone {
			d.ls, d.ctx, d.lsKind, d.lsSep, d.lsAt = lsFirst, ctxList, afterList, sep, d.out.mark()
		}
		d.last = lastOpen
	case ')':
		d.last = lastOperand
	case '.':
		d.last = lastDot
	case '-', '+':
		if d.operandEnds() {
			d.last = lastPunct
			break
		}
		if !d.sign {
			d.sign, d.signSep, d.signAt = true, sep, d.out.mark()
		}
		d.last = lastUnary
	case '!', '~':
		d.last = lastUnary
	default:
		d.last = lastPunct
	}
	d.op[0], d.opLen = c, 1
	d.out.space(sep)
	d.out.byte(c)
}

// listStep moves the list being read on by t. It reports whether t ended a
// list that was folded (t is consumed: the folded form is written).
func (d *digester) listStep(t token) bool {
	switch d.ls {
	case lsFirst:
		if t.is('(') && d.lsKind == kwIn {
			d.ls, d.ctx = lsElem, ctxRow
			return false
		}
		d.elem(t)
	case lsElem:
		d.elem(t)
	case lsSign:
		d.ls = lsOff
		if t.kind == tNumber {
			d.ls = lsAfter
		}
	case lsIntro:
		d.ls = lsOff
		if isLiteral(d.src, t) {
			d.ls = lsAfter
		}
	case lsAfter:
		switch {
		case t.kind == tString:
		case t.is(','):
			d.ls = lsElem
		case t.is(')'):
			return d.closeRow()
		default:
			d.ls = lsOff
		}
	case lsRowAfter:
		switch {
		case t.is(','):
			d.ls = lsRowOpen
		case t.is(')'):
			d.fold(d.lsAt, d.lsSep, rowsDigest)
			d.ls = lsOff
			return true
		default:
			d.ls = lsOff
		}
	case lsRowOpen:
		d.ls = lsOff
		if t.is('(') {
			d.ls = lsElem
		}
	case lsFoldComma:
		d.ls = lsOff
		if t.is(',') {
			d.ls = lsFoldOpen
		}
	case lsFoldOpen:
		d.ls = lsOff
		if t.is('(') {
			d.ls, d.ctx = lsElem, ctxFold
		}
	}
	return false
}

// elem reads t where a list's element must start.
func (d *digester) elem(t token) {
	d.ls = lsOff
	switch t.kind {
	case tNumber, tHex, tBit, tParam, tString:
		d.ls = lsAfter
	case tPunct:
		if t.is('-') || t.is('+') {
			d.ls = lsSign
		}
	case tWord:
		switch lookupKW(d.src[t.start:t.end]) {
		case kwNull, kwTrue, kwFalse:
			d.ls = lsAfter
		default:
			if d.src[t.start] == '_' {
				d.ls = lsIntro
			}
		}
	}
}

// closeRow ends a list of literals at its ')'.
func (d *digester) closeRow() bool {
	switch d.ctx {
	case ctxRow:
		d.ls = lsRowAfter
		return false
	case ctxFold:
		d.out.reset(d.foldAt)
		d.after()
	default:
		d.fold(d.lsAt, d.lsSep, listDigest)
		if d.lsKind == kwIn {
			d.ls = lsOff
			return true
		}
		d.foldAt = d.out.mark()
	}
	d.ls = lsFoldComma
	return true
}

// fold takes back what was written since at and writes folded there.
func (d *digester) fold(at outMark, sep bool, folded []byte) {
	d.out.reset(at)
	d.out.space(sep)
	d.out.write(folded)
	d.after()
}

// after sets the state that follows a folded list.
func (d *digester) after() {
	d.list, d.prevString, d.prevDot, d.intro, d.sign = kwNone, false, false, false, false
	d.last = lastOperand
}

// FNV-1a, 64 bits: a shape must hash alike in every process of a fleet.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// digestOut is where a digester writes: appended to buf, kept within limit
// (when >= 0), or, with hashing, only hashed into h.
type digestOut struct {
	hashing bool
	h       uint64
	n       int // bytes written (or hashed) so far

	buf   []byte
	start int  // len(dst)
	limit int  // the largest len(buf), or -1
	full  bool // something did not fit
}

// outMark is a digestOut's state, to go back to.
type outMark struct {
	h    uint64
	n    int
	full bool
}

func (w *digestOut) mark() outMark { return outMark{h: w.h, n: w.n, full: w.full} }

func (w *digestOut) reset(m outMark) {
	w.h, w.full = m.h, m.full
	if !w.hashing {
		w.buf = w.buf[:min(len(w.buf), w.start+m.n)]
	}
	w.n = m.n
}

// noLower reports whether b has no lower-case ASCII letter.
func noLower(b []byte) bool {
	for _, c := range b {
		if c >= 'a' && c <= 'z' {
			return false
		}
	}
	return true
}

// listKeyword is the keyword b is when it is IN, VALUES or VALUE, spelt in
// upper case, and kwNone otherwise.
func listKeyword(b []byte) kw {
	switch string(b) {
	case "IN":
		return kwIn
	case "VALUES":
		return kwValues
	case "VALUE":
		return kwValue
	}
	return kwNone
}

func (w *digestOut) write(b []byte) {
	w.n += len(b)
	if w.hashing {
		h := w.h
		for _, c := range b {
			h = (h ^ uint64(c)) * fnvPrime
		}
		w.h = h
		return
	}
	if w.limit >= 0 && len(w.buf)+len(b) > w.limit {
		w.buf = append(w.buf, b[:max(0, w.limit-len(w.buf))]...)
		w.full = true
		return
	}
	w.buf = append(w.buf, b...)
}

func (w *digestOut) writeString(s string) {
	if w.hashing {
		w.n += len(s)
		h := w.h
		for i := 0; i < len(s); i++ {
			h = (h ^ uint64(s[i])) * fnvPrime
		}
		w.h = h
		return
	}
	w.write([]byte(s))
}

func (w *digestOut) byte(c byte) {
	w.n++
	if w.hashing {
		w.h = (w.h ^ uint64(c)) * fnvPrime
		return
	}
	if w.limit >= 0 && len(w.buf) >= w.limit {
		w.full = true
		return
	}
	w.buf = append(w.buf, c)
}

func (w *digestOut) space(sep bool) {
	if sep {
		w.byte(' ')
	}
}

func (w *digestOut) literal(sep bool) {
	w.space(sep)
	w.byte('?')
}

func (w *digestOut) finish(maxLen int) []byte {
	if !w.full {
		return w.buf
	}
	if maxLen < 3 {
		return append(w.buf[:w.start], "..."[:maxLen]...)
	}
	cut := w.start + maxLen - 3
	for i := 0; i < 3 && cut > w.start && w.buf[cut]&0xc0 == 0x80; i++ {
		cut--
	}
	return append(w.buf[:cut], "..."...)
}
