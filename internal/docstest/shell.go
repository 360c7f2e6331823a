package docstest

import (
	"fmt"
	"regexp"
	"strings"
)

// Command is one command line of a shell block (continuation lines
// joined).
type Command struct {
	Index int    // 0-based line in the block where it starts
	Text  string // as written, comments included
}

// Commands splits a shell block into command lines: a line ending in a
// backslash goes on on the next; blank and comment-only lines are left
// out.
func Commands(b *Block) []Command {
	var out []Command
	var cur *Command
	for i, l := range b.Lines {
		if cur == nil {
			if t := strings.TrimSpace(l); t == "" || strings.HasPrefix(t, "#") {
				continue
			}
			cur = &Command{Index: i}
		} else {
			cur.Text += "\n"
		}
		cur.Text += l
		if !strings.HasSuffix(strings.TrimRight(l, " \t"), `\`) {
			out = append(out, *cur)
			cur = nil
		}
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

// SkipFor returns the marker that skips c in b, if any.
func (b *Block) SkipFor(c Command) (Skip, bool) {
	if s, ok := b.Whole(); ok {
		return s, true
	}
	for _, s := range b.Skips {
		if c.Text == s.Command || strings.HasPrefix(c.Text, s.Command+" ") || strings.HasPrefix(c.Text, s.Command+"\t") {
			return s, true
		}
	}
	return Skip{}, false
}

// StaleSkips lists the command markers of a shell block that match none of
// its commands.
func StaleSkips(b *Block) []Skip {
	var stale []Skip
	for _, s := range b.Skips {
		if s.Command == "" {
			continue
		}
		hit := false
		for _, c := range Commands(b) {
			if got, ok := b.SkipFor(c); ok && got == s {
				hit = true
			}
		}
		if !hit {
			stale = append(stale, s)
		}
	}
	return stale
}

// Rewrites are the test's private replacements for the defaults the docs
// use. Only these are rewritten.
type Rewrites struct {
	Listen   string // for 127.0.0.1:6033 and -P 6033
	Admin    string // for 127.0.0.1:6034
	Database string // for the database test on a mariadb command line
}

var portFlagRe = regexp.MustCompile(`(-P\s*|--port[= ])6033\b`)

// Rewrite applies r to a command line.
func (r Rewrites) Rewrite(cmd string) string {
	_, port, _ := strings.Cut(r.Listen, ":")
	cmd = strings.ReplaceAll(cmd, "127.0.0.1:6033", r.Listen)
	cmd = strings.ReplaceAll(cmd, "127.0.0.1:6034", r.Admin)
	cmd = strings.ReplaceAll(cmd, "localhost:6034", r.Admin)
	cmd = portFlagRe.ReplaceAllString(cmd, "${1}"+port)
	return r.rewriteDatabase(cmd)
}

// clientArgOpts are the mariadb client's options whose value is the next
// word.
var clientArgOpts = map[string]bool{"-h": true, "-P": true, "-u": true, "-e": true, "-D": true, "-S": true,
	"--host": true, "--port": true, "--user": true, "--execute": true, "--database": true, "--socket": true}

// rewriteDatabase replaces the database test named on a mariadb (or
// mysql) command line: the positional argument, -D test or
// --database=test. Nothing else on the line changes.
func (r Rewrites) rewriteDatabase(cmd string) string {
	words := shellWords(cmd)
	if len(words) == 0 || (words[0].text != "mariadb" && words[0].text != "mysql") {
		return cmd
	}
	var b strings.Builder
	last := 0
	replace := func(w word, with string) {
		b.WriteString(cmd[last:w.start])
		b.WriteString(with)
		last = w.end
	}
	for i := 1; i < len(words); i++ {
		w := words[i]
		switch {
		case clientArgOpts[w.text] && i+1 < len(words):
			if (w.text == "-D" || w.text == "--database") && words[i+1].text == "test" {
				replace(words[i+1], r.Database)
			}
			i++
		case w.text == "--database=test" || w.text == "-Dtest":
			replace(w, strings.TrimSuffix(w.text, "test")+r.Database)
		case w.text == "test":
			replace(w, r.Database)
		}
	}
	b.WriteString(cmd[last:])
	return b.String()
}

// word is one word of a command line: its text as written (quotes
// included) and its span.
type word struct {
	text       string
	start, end int
}

// shellWords splits a command line into words at unquoted blanks,
// stopping at a comment or at the end of the first simple command (|, ;,
// &, <, >).
func shellWords(s string) []word {
	var out []word
	start := -1
	var quote byte
	for i := 0; i <= len(s); i++ {
		var c byte
		if i < len(s) {
			c = s[i]
		}
		switch {
		case quote != 0:
			if c == quote || i == len(s) {
				quote = 0
			}
			continue
		case c == '\'' || c == '"':
			quote = c
			if start < 0 {
				start = i
			}
			continue
		case i < len(s) && !strings.ContainsRune(" \t\n\\|;&<>", rune(c)) && !(c == '#' && start < 0):
			if start < 0 {
				start = i
			}
			continue
		}
		if start >= 0 {
			out = append(out, word{text: s[start:i], start: start, end: i})
			start = -1
		}
		if i < len(s) && strings.ContainsRune("|;&<>#", rune(c)) {
			break
		}
	}
	return out
}

// testNameRe finds the tests a marker's reason names ("see TestTopOnce").
var testNameRe = regexp.MustCompile(`\b(Test[A-Z0-9_]\w*)`)

// NamedTests returns the test names a marker's reason mentions.
func (s Skip) NamedTests() []string {
	var out []string
	for _, m := range testNameRe.FindAllStringSubmatch(s.Reason, -1) {
		out = append(out, m[1])
	}
	return out
}

// String is the marker as a doc writer would look for it.
func (s Skip) String() string {
	if s.Command == "" {
		return fmt.Sprintf("skip (%s)", s.Reason)
	}
	return fmt.Sprintf("skip `%s` (%s)", s.Command, s.Reason)
}
