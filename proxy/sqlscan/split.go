package sqlscan

// Span is one statement of a text: text[Start:End], from just after the
// ';' that ends the statement before it (or the start of the text) up to
// its own ';' (or the end of the text), comments and whitespace included.
type Span struct{ Start, End int }

// Split appends to dst the non-empty statements of sql, lexed under m,
// and returns them. Statements are separated by ';' outside literals and
// comments, as Scan counts them: len(spans) is Info.Statements. Split cuts
// at every ';', also inside a compound statement, so compound reports
// whether the text holds one whose body a cut would break: a statement
// that begins one (BEGIN NOT ATOMIC, IF, CASE, WHILE, LOOP, REPEAT, FOR,
// DECLARE, a label, CREATE ... PROCEDURE / FUNCTION / TRIGGER / EVENT /
// PACKAGE), or a ';' inside an executable comment. Callers that run the
// statements one by one must not split such a text. Split is for the rare
// text that needs it (a KILL among other statements); Scan does not call it.
func (m Mode) Split(sql []byte, dst []Span) (spans []Span, compound bool) {
	lx := lexer{src: sql, mode: m}
	start := 0
	head := true // the next token starts a statement
	nonEmpty := false
	for {
		t := lx.next()
		if t.kind == tEOF {
			if nonEmpty {
				dst = append(dst, Span{start, len(sql)})
			}
			return dst, compound
		}
		if t.is(';') {
			if lx.exec {
				compound = true
			}
			if nonEmpty {
				dst = append(dst, Span{start, t.start})
			}
			start, head, nonEmpty = t.end, true, false
			continue
		}
		nonEmpty = true
		if head {
			head = false
			if startsCompound(lx, t) {
				compound = true
			}
		}
	}
}

// startsCompound reports whether the statement whose first token is t (p
// being the lexer just after it) begins a compound statement or a stored
// program.
func startsCompound(p lexer, t token) bool {
	if t.kind != tWord {
		return false
	}
	word := func(t token) []byte {
		if t.kind != tWord {
			return nil
		}
		return p.src[t.start:t.end]
	}
	w := word(t)
	switch {
	case eqFold(w, "if"), eqFold(w, "case"), eqFold(w, "while"), eqFold(w, "loop"), eqFold(w, "repeat"),
		eqFold(w, "for"), eqFold(w, "declare"), eqFold(w, "end"), eqFold(w, "elseif"), eqFold(w, "else"),
		eqFold(w, "until"), eqFold(w, "when"):
		return true
	case eqFold(w, "begin"):
		return eqFold(word(p.next()), "not")
	case eqFold(w, "create"):
		// CREATE [OR REPLACE] [DEFINER = ...] [AGGREGATE] {PROCEDURE | FUNCTION | TRIGGER | EVENT | PACKAGE}
		for i := 0; i < 12; i++ {
			n := p.next()
			nw := word(n)
			switch {
			case n.kind == tEOF || n.is(';'):
				return false
			case eqFold(nw, "procedure"), eqFold(nw, "function"), eqFold(nw, "trigger"), eqFold(nw, "event"), eqFold(nw, "package"):
				return true
			case eqFold(nw, "table"), eqFold(nw, "index"), eqFold(nw, "view"), eqFold(nw, "database"), eqFold(nw, "schema"),
				eqFold(nw, "user"), eqFold(nw, "role"), eqFold(nw, "temporary"), eqFold(nw, "sequence"), eqFold(nw, "server"):
				return false
			}
		}
		return false
	}
	return p.next().is(':') // a label: lbl: BEGIN ... END
}
