package ctl

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// column is one column of a table.
type column struct {
	name  string
	right bool // right-aligned (numbers)
}

// table renders rows under a header, columns two spaces apart, widths
// measured in runes (wide East Asian characters count as one column; tags are
// ASCII by holdfast's rules and user names and statements are cut anyway).
// Cells must already be clean. The zero value is not usable: set cols.
type table struct {
	cols []column
	rows [][]string
}

func (t *table) add(cells ...string) {
	if len(cells) != len(t.cols) {
		panic(fmt.Sprintf("ctl: table row has %d cells, want %d", len(cells), len(t.cols)))
	}
	t.rows = append(t.rows, cells)
}

// write prints the table. When width > 0 the last column, left-aligned,
// is cut so that each line fits in width runes, but never to fewer than
// minLast runes.
func (t *table) write(w io.Writer, width int) error {
	const sep, minLast = 2, 20
	widths := make([]int, len(t.cols))
	for i, c := range t.cols {
		widths[i] = runes(c.name)
	}
	for _, r := range t.rows {
		for i, cell := range r {
			widths[i] = max(widths[i], runes(cell))
		}
	}
	last := len(t.cols) - 1
	if width > 0 {
		used := 0
		for _, wd := range widths[:last] {
			used += wd + sep
		}
		widths[last] = min(widths[last], max(width-used, minLast))
	}
	names := make([]string, len(t.cols))
	for i, c := range t.cols {
		names[i] = c.name
	}
	var b strings.Builder
	for _, r := range append([][]string{names}, t.rows...) {
		var ln strings.Builder
		for i, cell := range r {
			if i > 0 {
				ln.WriteString(strings.Repeat(" ", sep))
			}
			cell = truncate(cell, widths[i])
			pad := strings.Repeat(" ", widths[i]-runes(cell))
			if t.cols[i].right {
				ln.WriteString(pad + cell)
			} else {
				ln.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(ln.String(), " "))
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func runes(s string) int { return utf8.RuneCountInString(s) }

// truncate cuts s to at most n runes, the last of them an ellipsis when
// something was cut.
func truncate(s string, n int) string {
	if runes(s) <= n {
		return s
	}
	if n <= 0 {
		return ""
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// clean makes text from the server safe and tidy for one table cell or
// message line: whitespace runs (newlines in a statement) become one space,
// control characters (ANSI escapes included), invalid UTF-8 and
// non-printable runes become '?', and the ends are trimmed.
func clean(s string) string {
	var b strings.Builder
	space := false
	for _, r := range s {
		switch {
		case unicode.IsSpace(r):
			space = true
			continue
		case r == utf8.RuneError || !unicode.IsPrint(r):
			r = '?'
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteRune(r)
	}
	return b.String()
}

// plural is "1 connection" or "n connections".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fmtSeconds formats a total of seconds with the precision its size needs.
func fmtSeconds(v float64) string { return fmtSteps(v, step{0.01, 3}, step{10, 2}, step{100000, 1}) }

// fmtRate formats a per-second rate or an average count.
func fmtRate(v float64) string { return fmtSteps(v, step{100, 2}, step{1000, 1}) }

// fmtPerSec formats a rate of events per second.
func fmtPerSec(v float64) string { return fmtSteps(v, step{10, 1}) }

// A step of fmtSteps: a value whose magnitude is below below gets decimals
// digits after the point.
type step struct {
	below    float64
	decimals int
}

// fmtSteps formats v with the decimals of the first of steps (in rising
// order of below) its magnitude is below, none past the last; zero is "0".
func fmtSteps(v float64, steps ...step) string {
	if v == 0 {
		return "0"
	}
	decimals := 0
	for _, s := range steps {
		if math.Abs(v) < s.below {
			decimals = s.decimals
			break
		}
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

// fmtPct is part as a whole-number percentage of whole, "-" when whole is 0.
func fmtPct(part, whole float64) string {
	if whole <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", 100*part/whole)
}

// fmtHeld formats how long a connection has been held: 250ms, 4.2s, 3m05s, 2h01m.
func fmtHeld(sec float64) string {
	switch {
	case sec < 0:
		return "-"
	case sec < 0.9995:
		return fmt.Sprintf("%.0fms", sec*1000)
	case sec < 10:
		return fmt.Sprintf("%.2fs", sec)
	case sec < 60:
		return fmt.Sprintf("%.1fs", sec)
	case sec < 3600:
		s := int64(sec)
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	}
	m := int64(sec) / 60
	return fmt.Sprintf("%dh%02dm", m/60, m%60)
}

// state is a tag's controls: "drained", "limit N", both, or "-".
func state(drained bool, limit int) string {
	var s []string
	if drained {
		s = append(s, "drained")
	}
	if limit > 0 {
		s = append(s, fmt.Sprintf("limit %d", limit))
	}
	if len(s) == 0 {
		return "-"
	}
	return strings.Join(s, ", ")
}
