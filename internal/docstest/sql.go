package docstest

import (
	"fmt"
	"regexp"
	"strings"
)

// Statement is one SQL statement of a block.
type Statement struct {
	Index int    // 0-based line in the block where it starts
	Text  string // without the terminating ';'; block comments kept
}

// Statements splits an SQL block at the semicolons outside quotes and
// comments. Line comments (-- and #) before a statement are left out, so
// a comment after one statement's ';' is not sent with the next.
func Statements(b *Block) []Statement {
	src := strings.Join(b.Lines, "\n")
	var (
		out   []Statement
		cur   strings.Builder
		start = -1 // line of cur's first character; -1 while cur is empty
		line  = 0
	)
	flush := func() {
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, Statement{Index: start, Text: t})
		}
		cur.Reset()
		start = -1
	}
	add := func(s string) {
		if start < 0 {
			if strings.TrimSpace(s) == "" {
				line += strings.Count(s, "\n")
				return
			}
			start = line
		}
		cur.WriteString(s)
		line += strings.Count(s, "\n")
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ';':
			flush()
			i++
		case c == '\'' || c == '"' || c == '`':
			j := i + 1
			for j < len(src) {
				if src[j] == '\\' && c != '`' {
					j += 2
					continue
				}
				if src[j] == c {
					if j+1 < len(src) && src[j+1] == c { // doubled quote
						j += 2
						continue
					}
					break
				}
				j++
			}
			j = min(j+1, len(src))
			add(src[i:j])
			i = j
		case c == '#' || (c == '-' && strings.HasPrefix(src[i:], "--") && (i+2 == len(src) || strings.ContainsRune(" \t\n", rune(src[i+2])))):
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = len(src) - i
			}
			if start >= 0 {
				add(src[i : i+j])
			}
			i += j
		case c == '/' && strings.HasPrefix(src[i:], "/*"):
			j := strings.Index(src[i+2:], "*/")
			if j < 0 {
				j = len(src) - i
			} else {
				j += 4
			}
			add(src[i : i+j])
			i += j
		default:
			add(src[i : i+1])
			i++
		}
	}
	flush()
	return out
}

// Table is a result as the mariadb client prints it.
type Table struct {
	Columns []string
	Rows    [][]string
}

// ParseTable reads a table in the mariadb client's form:
//
//	+----+------+
//	| id | name |
//	+----+------+
//	|  1 | a    |
//	+----+------+
func ParseTable(b *Block) (Table, error) {
	var t Table
	for i, l := range b.Lines {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || strings.HasPrefix(l, "+"):
		case strings.HasPrefix(l, "|") && strings.HasSuffix(l, "|"):
			cells := strings.Split(l[1:len(l)-1], "|")
			for j := range cells {
				cells[j] = strings.TrimSpace(cells[j])
			}
			if t.Columns == nil {
				t.Columns = cells
			} else if len(cells) != len(t.Columns) {
				return t, fmt.Errorf("%s: %d cells, the header has %d", b.Where(i), len(cells), len(t.Columns))
			} else {
				t.Rows = append(t.Rows, cells)
			}
		default:
			return t, fmt.Errorf("%s: not a line of a mariadb table: %q", b.Where(i), l)
		}
	}
	if t.Columns == nil {
		return t, fmt.Errorf("%s: a shown output with no header row", b.Where(0))
	}
	return t, nil
}

// String renders t in the mariadb client's form.
func (t Table) String() string {
	w := make([]int, len(t.Columns))
	for _, r := range append([][]string{t.Columns}, t.Rows...) {
		for j, c := range r {
			w[j] = max(w[j], len(c))
		}
	}
	var b strings.Builder
	rule := func() {
		for _, n := range w {
			b.WriteString("+" + strings.Repeat("-", n+2))
		}
		b.WriteString("+\n")
	}
	row := func(r []string) {
		for j, c := range r {
			fmt.Fprintf(&b, "| %-*s ", w[j], c)
		}
		b.WriteString("|\n")
	}
	rule()
	row(t.Columns)
	rule()
	for _, r := range t.Rows {
		row(r)
	}
	rule()
	return b.String()
}

var (
	tokenRe = regexp.MustCompile(`\brsv_[0-9a-f]{16}\b`)
	timeRe  = regexp.MustCompile(`^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?$`)
)

// Tokens maps the placeholder tokens a doc shows to the tokens of the
// run: the n-th distinct token the doc mentions is the n-th distinct token
// the run returned.
type Tokens struct {
	doc, run []string
	seen     map[string]bool // tokens in run
	docAt    map[string]int  // index in doc
}

// Observe records the tokens in a value the run returned.
func (k *Tokens) Observe(v string) {
	if k.seen == nil {
		k.seen, k.docAt = map[string]bool{}, map[string]int{}
	}
	for _, tok := range tokenRe.FindAllString(v, -1) {
		if !k.seen[tok] {
			k.seen[tok] = true
			k.run = append(k.run, tok)
		}
	}
}

// Map replaces the placeholder tokens in s with the run's.
func (k *Tokens) Map(s string) (string, error) {
	if k.docAt == nil {
		k.seen, k.docAt = map[string]bool{}, map[string]int{}
	}
	var err error
	out := tokenRe.ReplaceAllStringFunc(s, func(tok string) string {
		i, ok := k.docAt[tok]
		if !ok {
			i = len(k.doc)
			k.docAt[tok] = i
			k.doc = append(k.doc, tok)
		}
		if i >= len(k.run) {
			if err == nil {
				err = fmt.Errorf("%s is token %d of the doc, but the run has returned %d so far", tok, i+1, len(k.run))
			}
			return tok
		}
		return k.run[i]
	})
	return out, err
}

// Compare checks a shown table against the run's result: the same
// columns, the same number of rows, and equal values, with placeholder
// tokens mapped and a shown timestamp matching any timestamp.
func Compare(shown, got Table, k *Tokens) error {
	if strings.Join(shown.Columns, "|") != strings.Join(got.Columns, "|") {
		return fmt.Errorf("columns %q, the doc shows %q", got.Columns, shown.Columns)
	}
	if len(shown.Rows) != len(got.Rows) {
		return fmt.Errorf("%d rows, the doc shows %d", len(got.Rows), len(shown.Rows))
	}
	for i, r := range shown.Rows {
		for j, want := range r {
			v := got.Rows[i][j]
			if timeRe.MatchString(want) && timeRe.MatchString(v) {
				continue
			}
			mapped, err := k.Map(want)
			if err != nil {
				return fmt.Errorf("row %d, %s: %w", i+1, shown.Columns[j], err)
			}
			if mapped != v {
				return fmt.Errorf("row %d, %s: %q, the doc shows %q", i+1, shown.Columns[j], v, want)
			}
		}
	}
	return nil
}
