package sqlscan

import (
	"bytes"
	"strconv"
)

// AppendConnectionID appends to dst the statement sql with every
// CONNECTION_ID() call outside literals and comments replaced by
// CAST(id AS UNSIGNED): a proxy's connection id, where the server would
// answer with the id of whichever backend thread runs the statement. A
// select-list item whose text changes and that has no alias is given its
// original text as alias, so that the column keeps the name the server
// would give it (SELECT CONNECTION_ID() + 1 still names its column
// "CONNECTION_ID() + 1"). It reports whether anything was replaced; when
// not, dst is returned unchanged. It never modifies sql.
//
// The replacement has CONNECTION_ID()'s type (an unsigned integer) but not
// its display width.
func (m Mode) AppendConnectionID(dst, sql []byte, id uint64) ([]byte, bool) {
	toks := m.tokens(sql)
	var calls []int // index of each call's CONNECTION_ID token; the call spans 3 tokens
	for i := 0; i+2 < len(toks); i++ {
		t := toks[i]
		if t.kind == tWord && eqFold(sql[t.start:t.end], kwWords[kwConnectionID]) &&
			(i == 0 || !toks[i-1].is('.')) && toks[i+1].is('(') && toks[i+2].is(')') {
			calls = append(calls, i)
		}
	}
	if len(calls) == 0 {
		return dst, false
	}
	aliases := selectItemsToName(sql, toks, calls)
	repl := "CAST(" + strconv.FormatUint(id, 10) + " AS UNSIGNED)"
	pos, ci := 0, 0
	for i := 0; i < len(toks); i++ {
		if ci < len(calls) && calls[ci] == i {
			dst = append(dst, sql[pos:toks[i].start]...)
			dst = append(dst, repl...)
			pos = toks[i+2].end
			i += 2
			ci++
		}
		if name, ok := aliases[i]; ok {
			dst = append(dst, sql[pos:toks[i].end]...)
			dst = append(dst, " AS `"...)
			dst = append(dst, bytes.ReplaceAll(name, []byte("`"), []byte("``"))...)
			dst = append(dst, '`')
			pos = toks[i].end
		}
	}
	return append(dst, sql[pos:]...), true
}

// tokens lexes sql whole.
func (m Mode) tokens(sql []byte) []token {
	lx := lexer{src: sql, mode: m}
	var toks []token
	for t := lx.next(); t.kind != tEOF; t = lx.next() {
		toks = append(toks, t)
	}
	return toks
}

// selectItemsToName finds the select-list items, at any depth, that hold
// one of calls and have no alias: it maps the index of each such item's
// last token to the item's text.
func selectItemsToName(src []byte, toks []token, calls []int) map[int][]byte {
	out := map[int][]byte{}
	hasCall := func(from, to int) bool {
		for _, c := range calls {
			if c >= from && c < to {
				return true
			}
		}
		return false
	}
	// nameItem names the item toks[from:to] if it needs a name.
	nameItem := func(from, to int) {
		if to > from && hasCall(from, to) && !hasAlias(src, toks[from:to]) {
			out[to-1] = itemText(src, toks[from], toks[to-1])
		}
	}
	word := func(i int) []byte {
		if i < 0 || i >= len(toks) || toks[i].kind != tWord || (i > 0 && toks[i-1].is('.')) {
			return nil
		}
		return src[toks[i].start:toks[i].end]
	}
	for i := range toks {
		if !eqFold(word(i), "select") {
			continue
		}
		// The list starts after the modifiers and runs, at this depth, to a
		// clause keyword, a ')' that closes the depth, or ';'.
		j := i + 1
		for j < len(toks) && isSelectModifier(word(j)) {
			j++
		}
		depth, start := 0, j
		for ; j <= len(toks); j++ {
			end := j == len(toks)
			if !end {
				t := toks[j]
				switch {
				case t.is('('):
					depth++
					continue
				case t.is(')'):
					if depth > 0 {
						depth--
						continue
					}
					end = true
				case t.is(';'):
					end = true
				case depth == 0 && isClauseWord(word(j)):
					end = true
				case depth == 0 && t.is(','):
					nameItem(start, j)
					start = j + 1
					continue
				default:
					continue
				}
			}
			if end {
				nameItem(start, j)
				break
			}
		}
	}
	return out
}

func itemText(src []byte, first, last token) []byte { return src[first.start:last.end] }

// hasAlias reports whether a select item ends in an alias: AS name, or a
// name (or a string) right after an operand.
func hasAlias(src []byte, item []token) bool {
	n := len(item)
	if n < 2 {
		return false
	}
	last, prev := item[n-1], item[n-2]
	if prev.kind == tWord && eqFold(src[prev.start:prev.end], "as") {
		return true
	}
	switch last.kind {
	case tWord:
		var buf [maxKeyword]byte
		if _, _, reserved := lookupKeyword(src[last.start:last.end], &buf); reserved {
			return false
		}
	case tQuoted, tString:
	default:
		return false
	}
	switch {
	case prev.is(')'), prev.kind == tWord, prev.kind == tQuoted, prev.kind == tNumber:
		return true
	case prev.kind == tString:
		return last.kind != tString // 'a' 'b' is one string
	}
	return false
}

func isSelectModifier(w []byte) bool {
	for _, m := range [...]string{"all", "distinct", "distinctrow", "high_priority", "straight_join",
		"sql_small_result", "sql_big_result", "sql_buffer_result", "sql_no_cache", "sql_cache", "sql_calc_found_rows"} {
		if eqFold(w, m) {
			return true
		}
	}
	return false
}

func isClauseWord(w []byte) bool {
	for _, k := range [...]string{"from", "into", "where", "group", "having", "order", "limit", "window",
		"for", "lock", "union", "except", "intersect", "procedure", "returning", "offset", "fetch"} {
		if eqFold(w, k) {
			return true
		}
	}
	return false
}

// SetVariables returns the system variables a SET statement text assigns
// in session scope, lower-cased and without @@ or scope prefixes, in
// order: "SET a = 1, SESSION b = 2, @@c = 3, @@session.d = 4" gives a, b,
// c, d. Assignments in GLOBAL or PERSIST scope, user variables, SET NAMES
// and SET CHARACTER SET are left out; a text that is not one SET
// statement gives nil.
func (m Mode) SetVariables(sql []byte) []string {
	toks := m.tokens(sql)
	if len(toks) == 0 || toks[0].kind != tWord || !eqFold(sql[toks[0].start:toks[0].end], "set") {
		return nil
	}
	var out []string
	global := false
	depth := 0
	expect := true
	for i := 1; i < len(toks); i++ {
		t := toks[i]
		switch {
		case t.is('('):
			depth++
			continue
		case t.is(')'):
			depth--
			continue
		case t.is(';'):
			if i != len(toks)-1 {
				return nil // a second statement
			}
			continue
		case depth > 0:
			continue
		case t.is(','):
			expect = true
			continue
		case !expect:
			continue
		}
		w := sql[t.start:t.end]
		switch t.kind {
		case tWord:
			switch {
			case eqFold(w, "global"), eqFold(w, "persist"), eqFold(w, "persist_only"):
				global = true
				continue
			case eqFold(w, "session"), eqFold(w, "local"):
				global = false
				continue
			case eqFold(w, "names"), eqFold(w, "character"), eqFold(w, "charset"), eqFold(w, "transaction"), eqFold(w, "statement"):
				expect = false
				continue
			}
			if !global {
				out = append(out, string(bytes.ToLower(w)))
			}
		case tSysVar:
			name := bytes.ToLower(w[2:])
			scopeGlobal := global
			if dot := bytes.IndexByte(name, '.'); dot >= 0 {
				switch string(name[:dot]) {
				case "global", "persist", "persist_only":
					scopeGlobal = true
				default:
					scopeGlobal = false
				}
				name = name[dot+1:]
			}
			if !scopeGlobal {
				out = append(out, string(name))
			}
		}
		expect = false
	}
	return out
}

// StatementVariables returns the variables a SET STATEMENT text assigns for
// its one statement, lower-cased, in order: "SET STATEMENT a = 1, b = 2 FOR
// SELECT ..." gives a, b. A text that does not start SET STATEMENT gives nil.
func (m Mode) StatementVariables(sql []byte) []string {
	toks := m.tokens(sql)
	if len(toks) < 2 || toks[0].kind != tWord || !eqFold(sql[toks[0].start:toks[0].end], "set") ||
		toks[1].kind != tWord || !eqFold(sql[toks[1].start:toks[1].end], "statement") {
		return nil
	}
	var out []string
	depth := 0
	expect := true
	for _, t := range toks[2:] {
		switch {
		case t.is('('):
			depth++
		case t.is(')'):
			depth--
		case depth > 0:
		case t.is(','):
			expect = true
		case t.kind == tWord && eqFold(sql[t.start:t.end], "for") && !expect:
			return out
		case expect && (t.kind == tWord || t.kind == tQuoted):
			name := sql[t.start:t.end]
			if t.kind == tQuoted {
				name = []byte(unquoteIdent(name))
			}
			out = append(out, string(bytes.ToLower(name)))
			expect = false
		default:
			expect = false
		}
	}
	return out
}
