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
//   - each run of whitespace and comments between two tokens becomes one
//     space; none is added where the text had none ("a=1" stays "a=?");
//   - string, number, hex and bit literals, with any character set
//     introducer, become '?'; adjacent strings ('a' 'b') become one '?';
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
func (d *digester) speculating() bool { return d.intro || d.ls != lsOff }

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
			d.prevString = t.kind == tString
			return
		}
	}
	sep := t.space() && d.out.n > 0
	switch t.kind {
	case tString:
		d.prevString = true
		if afterString {
			return
		}
		d.out.literal(sep)
	case tNumber, tHex, tBit, tParam:
		d.out.literal(sep)
	case tWord:
		b := d.src[t.start:t.end]
		if b[0] == '_' {
			d.intro, d.introSep, d.introAt = true, sep, d.out.mark()
		}
		d.out.space(sep)
		if !afterDot && (t.end == len(d.src) || d.src[t.end] != '.') {
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
		if t.ch() == '(' && afterList != kwNone {
			d.ls, d.ctx, d.lsKind, d.lsSep, d.lsAt = lsFirst, ctxList, afterList, sep, d.out.mark()
		}
		d.out.space(sep)
		d.out.byte(t.ch())
	default: // quoted identifiers, variables, hosts, :=
		d.out.space(sep)
		d.out.write(d.src[t.start:t.end])
	}
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
	d.list, d.prevString, d.prevDot, d.intro = kwNone, false, false, false
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
