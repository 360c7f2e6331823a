package sqlscan

import "strings"

// Dynamic is an EXECUTE IMMEDIATE or a PREPARE ... FROM statement: the
// statement text it has the server run or prepare.
type Dynamic struct {
	// Prepare is set for PREPARE name FROM ..., clear for EXECUTE
	// IMMEDIATE.
	Prepare bool
	// Literal is set when the text is a literal holdfast reads: one string
	// literal, or adjacent ones (which the server joins), with an
	// optional introducer of an ASCII-compatible character set (_utf8mb4,
	// _latin1, _binary, ...); or a hexadecimal or bit literal. Text is then
	// the statement text, unescaped under the Mode.
	Literal bool
	Text    []byte
	// Parts, when the text is an expression (CONCAT(...), a variable,
	// ...), are the values of the literals in it, in order.
	Parts [][]byte
	// Using is set for EXECUTE IMMEDIATE ... USING.
	Using bool
	// Whole is set when the statement is the whole text, apart from
	// comments and one trailing ';'.
	Whole bool
}

// AppendDynamic appends to dst each EXECUTE IMMEDIATE and PREPARE name
// FROM of sql, lexed under m, anywhere in it (inside compound statements
// too), and returns them. It is for the rare texts Scan marks with
// FeatExecImmediate or FeatSQLPrepare; it allocates.
func (m Mode) AppendDynamic(dst []Dynamic, sql []byte) []Dynamic {
	lx := lexer{src: sql, mode: m}
	prevDot := false
	for first := true; ; first = false {
		t := lx.next()
		if t.kind == tEOF {
			return dst
		}
		afterDot := prevDot
		prevDot = t.is('.')
		if t.kind != tWord || afterDot {
			continue
		}
		if d, ok := m.dynamicAt(t, lx); ok {
			d.Whole = d.Whole && first
			dst = append(dst, d)
		}
	}
}

// dynamicAt reads the dynamic statement that word t starts, lx being just
// after t, if it is EXECUTE IMMEDIATE or PREPARE name FROM.
func (m Mode) dynamicAt(t token, lx lexer) (Dynamic, bool) {
	src := lx.src
	var d Dynamic
	switch w := src[t.start:t.end]; {
	case eqFold(w, "execute"):
		if n := lx.next(); n.kind != tWord || !eqFold(src[n.start:n.end], "immediate") {
			return d, false
		}
	case eqFold(w, "prepare"):
		if n := lx.next(); n.kind != tWord && n.kind != tQuoted {
			return d, false
		}
		if lookupPWTok(&lx, lx.next()) != pwFrom {
			return d, false
		}
		d.Prepare = true
	default:
		return d, false
	}
	m.dynamicArg(&d, lx)
	return d, true
}

// asciiCharsets are the character set introducers whose literals
// AppendDynamic reads as they are.
var asciiCharsets = map[string]bool{
	"_utf8": true, "_utf8mb3": true, "_utf8mb4": true, "_latin1": true, "_ascii": true, "_binary": true,
}

// dynamicArg reads the argument of a dynamic statement; q is just before
// it.
func (m Mode) dynamicArg(d *Dynamic, q lexer) {
	src := q.src
	start := q
	t := q.next()
	if t.kind == tWord && src[t.start] == '_' {
		if !asciiCharsets[strings.ToLower(string(src[t.start:t.end]))] {
			m.dynamicParts(d, start)
			return
		}
		t = q.next()
		if t.kind != tString {
			m.dynamicParts(d, start)
			return
		}
	}
	var text []byte
	switch {
	case t.open():
	case t.kind == tString:
		text = appendString([]byte{}, src[t.start:t.end], m)
		for {
			r := q
			n := r.next()
			if n.kind != tString || n.open() || src[n.start]|0x20 == 'n' {
				break
			}
			text = appendString(text, src[n.start:n.end], m)
			q = r
		}
	case t.kind == tHex:
		text, _ = decodeHex(src[t.start:t.end])
	case t.kind == tBit:
		text, _ = decodeBits(src[t.start:t.end])
	}
	if text == nil {
		m.dynamicParts(d, start)
		return
	}
	n := q.next()
	switch {
	case n.kind == tWord && eqFold(src[n.start:n.end], "using") && !d.Prepare:
		d.Using = true
	case n.is(';'):
		d.Whole = q.next().kind == tEOF && !q.unterminated
	case n.kind == tEOF:
		d.Whole = !q.unterminated
	default:
		m.dynamicParts(d, start)
		return
	}
	d.Literal, d.Text = true, text
}

// dynamicParts reads an argument that is an expression, from q to the end
// of its statement (or USING at its depth).
func (m Mode) dynamicParts(d *Dynamic, q lexer) {
	src := q.src
	depth := 0
	for {
		t := q.next()
		switch {
		case t.kind == tEOF, t.is(';') && depth == 0:
			return
		case t.is('('):
			depth++
		case t.is(')'):
			depth--
		case t.kind == tWord && depth == 0 && eqFold(src[t.start:t.end], "using") && !d.Prepare:
			d.Using = true
			return
		case t.open():
		case t.kind == tString:
			d.Parts = append(d.Parts, appendString(nil, src[t.start:t.end], m))
		case t.kind == tHex:
			if v, ok := decodeHex(src[t.start:t.end]); ok {
				d.Parts = append(d.Parts, v)
			}
		case t.kind == tBit:
			if v, ok := decodeBits(src[t.start:t.end]); ok {
				d.Parts = append(d.Parts, v)
			}
		}
	}
}
