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
func (m Mode) AppendDigest(dst, sql []byte, maxLen int) []byte {
	w := digestWriter{out: dst, start: len(dst), limit: -1}
	if maxLen > 0 {
		w.limit = len(dst) + maxLen
	}
	lx := lexer{src: sql, mode: m}
	var kwbuf [maxKeyword]byte
	prevDot, prevString := false, false
	list := kwNone // the previous token was IN, VALUES or VALUE
	for !w.full {
		t := lx.next()
		if t.kind == tEOF {
			break
		}
		afterList, afterString, afterDot := list, prevString, prevDot
		list, prevString, prevDot = kwNone, false, t.is('.')
		sep := t.space() && len(w.out) > w.start
		switch t.kind {
		case tString:
			prevString = true
			if afterString {
				continue
			}
			w.literal(sep)
		case tNumber, tHex, tBit, tParam:
			w.literal(sep)
		case tWord:
			b := sql[t.start:t.end]
			if b[0] == '_' {
				q := lx
				if n := q.next(); isLiteral(sql, n) {
					lx = q
					prevString = n.kind == tString
					w.literal(sep)
					continue
				}
			}
			w.space(sep)
			if !afterDot && (t.end == len(sql) || sql[t.end] != '.') {
				if up, ok, _ := lookupKeyword(b, &kwbuf); ok {
					w.write(up)
					switch k := lookupKW(b); k {
					case kwIn, kwValues, kwValue:
						list = k
					}
					continue
				}
			}
			w.write(b)
		case tPunct:
			if t.ch() == '(' && afterList != kwNone {
				q := lx
				if literalList(sql, &q) {
					for afterList != kwIn {
						r := q
						if !r.next().is(',') || !r.next().is('(') || !literalList(sql, &r) {
							break
						}
						q = r
					}
					lx = q
					w.space(sep)
					w.write(listDigest)
					continue
				}
				if q = lx; afterList == kwIn && rowList(sql, &q) {
					lx = q
					w.space(sep)
					w.write(rowsDigest)
					continue
				}
			}
			w.space(sep)
			w.byte(t.ch())
		default: // quoted identifiers, variables, hosts, :=
			w.space(sep)
			w.write(sql[t.start:t.end])
		}
	}
	return w.finish(maxLen)
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

// literalList reports whether q, just after a '(', is at a comma-separated
// list of literals, NULL, TRUE, FALSE and '?' closed by ')', and if so leaves
// q after the ')'.
func literalList(src []byte, q *lexer) bool {
	for {
		t := q.next()
		if t.is('-') || t.is('+') {
			if t = q.next(); t.kind != tNumber {
				return false
			}
		}
		switch t.kind {
		case tNumber, tHex, tBit, tParam, tString:
		case tWord:
			switch lookupKW(src[t.start:t.end]) {
			case kwNull, kwTrue, kwFalse:
			default:
				if src[t.start] != '_' || !isLiteral(src, q.next()) {
					return false
				}
			}
		default:
			return false
		}
		t = q.next()
		for t.kind == tString {
			t = q.next()
		}
		if t.is(')') {
			return true
		}
		if !t.is(',') {
			return false
		}
	}
}

// rowList reports whether q, just after a '(', is at a comma-separated list
// of parenthesized literal lists closed by ')', as in (a, b) IN ((1, 2), (3,
// 4)), and if so leaves q after the ')'.
func rowList(src []byte, q *lexer) bool {
	for {
		if !q.next().is('(') || !literalList(src, q) {
			return false
		}
		t := q.next()
		if t.is(')') {
			return true
		}
		if !t.is(',') {
			return false
		}
	}
}

// digestWriter appends to out, keeping out within limit (when >= 0).
type digestWriter struct {
	out   []byte
	start int  // len(dst)
	limit int  // the largest len(out), or -1
	full  bool // something did not fit
}

func (w *digestWriter) write(b []byte) {
	if w.limit >= 0 && len(w.out)+len(b) > w.limit {
		w.out = append(w.out, b[:w.limit-len(w.out)]...)
		w.full = true
		return
	}
	w.out = append(w.out, b...)
}

func (w *digestWriter) byte(c byte) {
	if w.limit >= 0 && len(w.out) >= w.limit {
		w.full = true
		return
	}
	w.out = append(w.out, c)
}

func (w *digestWriter) space(sep bool) {
	if sep {
		w.byte(' ')
	}
}

func (w *digestWriter) literal(sep bool) {
	w.space(sep)
	w.byte('?')
}

func (w *digestWriter) finish(maxLen int) []byte {
	if !w.full {
		return w.out
	}
	if maxLen < 3 {
		return append(w.out[:w.start], "..."[:maxLen]...)
	}
	cut := w.start + maxLen - 3
	for i := 0; i < 3 && cut > w.start && w.out[cut]&0xc0 == 0x80; i++ {
		cut--
	}
	return append(w.out[:cut], "..."...)
}
