package docstest

import (
	"fmt"
	"regexp"
	"strings"
)

// Block is one fenced code block of a Markdown file.
type Block struct {
	File  string   // as given to Parse, for messages
	Line  int      // 1-based line of the opening fence
	Lang  string   // first word of the info string, lower case; "" for none
	Lines []string // content, without the fences; Lines[i] is on line Line+1+i
	Skips []Skip   // markers on the lines right before the opening fence
	// Output is the ```text block that follows an ```sql block with only
	// blank lines between: the shown output of its last statement. nil
	// for none, and always nil for other languages.
	Output *Block
}

// Skip is one docs-test marker.
type Skip struct {
	Line    int    // the marker's line
	Command string // skip the lines that start with it; "" skips the whole block
	Reason  string // never empty
}

// Where is file:line of the block's line i of content (0-based).
func (b *Block) Where(i int) string { return fmt.Sprintf("%s:%d", b.File, b.Line+1+i) }

// Whole reports whether a marker skips the whole block.
func (b *Block) Whole() (Skip, bool) {
	for _, s := range b.Skips {
		if s.Command == "" {
			return s, true
		}
	}
	return Skip{}, false
}

var (
	fenceRe  = regexp.MustCompile("^( {0,3})(`{3,}|~{3,})\\s*([^`]*)$")
	markerRe = regexp.MustCompile("^\\s*<!--\\s*docs-test:\\s*skip\\s*(?:`([^`]+)`\\s*)?\\((.*)\\)\\s*-->\\s*$")
)

// Parse returns the fenced blocks of a Markdown text, with their markers
// and shown outputs. A marker that is malformed, has no reason or is not
// followed by a block is an error naming its line.
func Parse(file, text string) ([]*Block, error) {
	lines := strings.Split(text, "\n")
	var (
		blocks  []*Block
		pending []Skip // markers waiting for the next fence
		lastSQL *Block // an sql block that a text block may still follow
	)
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.Contains(line, "docs-test:") {
			m := markerRe.FindStringSubmatch(line)
			if m == nil {
				return nil, fmt.Errorf("%s:%d: malformed marker: want <!-- docs-test: skip (reason) --> or <!-- docs-test: skip `command` (reason) -->", file, i+1)
			}
			if strings.TrimSpace(m[2]) == "" {
				return nil, fmt.Errorf("%s:%d: a docs-test marker needs a reason in parentheses", file, i+1)
			}
			pending = append(pending, Skip{Line: i + 1, Command: strings.TrimSpace(m[1]), Reason: strings.TrimSpace(m[2])})
			continue
		}
		m := fenceRe.FindStringSubmatch(line)
		if m == nil {
			if len(pending) > 0 {
				return nil, fmt.Errorf("%s:%d: docs-test marker not on the line right before a fenced block", file, pending[0].Line)
			}
			if strings.TrimSpace(line) != "" {
				lastSQL = nil
			}
			continue
		}
		indent, fence := len(m[1]), m[2]
		b := &Block{File: file, Line: i + 1, Skips: pending}
		pending = nil
		if f := strings.Fields(m[3]); len(f) > 0 {
			b.Lang = strings.ToLower(f[0])
		}
		closed := false
		for i++; i < len(lines); i++ {
			l := lines[i]
			if t := strings.TrimSpace(l); strings.HasPrefix(t, fence[:1]) && strings.Trim(t, fence[:1]) == "" && len(t) >= len(fence) {
				closed = true
				break
			}
			b.Lines = append(b.Lines, trimIndent(l, indent))
		}
		if !closed {
			return nil, fmt.Errorf("%s:%d: fenced block never closed", file, b.Line)
		}
		if b.Lang == "text" && lastSQL != nil && len(b.Skips) == 0 {
			lastSQL.Output = b
			lastSQL = nil
			continue
		}
		lastSQL = nil
		if b.Lang == "sql" {
			lastSQL = b
		}
		blocks = append(blocks, b)
	}
	if len(pending) > 0 {
		return nil, fmt.Errorf("%s:%d: docs-test marker not on the line right before a fenced block", file, pending[0].Line)
	}
	return blocks, nil
}

// trimIndent removes up to n leading spaces (a fence indented inside a
// list item indents its content as much).
func trimIndent(s string, n int) string {
	for n > 0 && strings.HasPrefix(s, " ") {
		s, n = s[1:], n-1
	}
	return s
}
