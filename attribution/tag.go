package attribution

import (
	"bytes"
	"slices"
)

// MaxTagLen is the longest tag kept, in bytes; longer values are truncated.
const MaxTagLen = 64

// Untagged is the tag of statements that carry no tag anywhere; Other is the
// tag new names fold into once Names is full (see Names).
const (
	Untagged = "untagged"
	Other    = "other"
)

const (
	// tagKey is the only key recognised, case-sensitively.
	tagKey = "conn_tag"
	// reservedPrefix marks holdfast's own work. A client tag that starts with
	// it has the colon rewritten to '_' (see the package comment).
	reservedPrefix = "holdfast:"
)

var (
	tagKeyBytes         = []byte(tagKey)
	reservedPrefixBytes = []byte(reservedPrefix)
	commentEnd          = []byte("*/")
)

// tagByte reports the bytes a sanitized tag may contain: [A-Za-z0-9_.:-].
var tagByte = func() (t [256]bool) {
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for _, c := range []byte("_.:-") {
		t[c] = true
	}
	return t
}()

// lexSpecial marks the bytes that may change the lexer's state outside
// strings and comments ('*' only inside an executable comment).
var lexSpecial = func() (t [256]bool) {
	for _, c := range []byte("'\"`#-/*") {
		t[c] = true
	}
	return t
}()

// AppendTag finds the conn_tag in sql, decodes and sanitizes it, appends it to
// dst and returns (dst, true). When sql has no tag it returns (dst, false).
//
// It never modifies sql, never panics and runs in O(len(sql)). It allocates
// nothing on a statement without a tag, and nothing on a tagged one when dst
// has MaxTagLen bytes of spare capacity. If several comments carry conn_tag,
// the first one decides. The accepted forms and the sanitization rules are in
// the package comment. Safe for concurrent use.
func AppendTag(dst, sql []byte) ([]byte, bool) {
	// Fast path: most statements do not mention the key at all.
	next := bytes.Index(sql, tagKeyBytes)
	if next < 0 {
		return dst, false
	}
	// next is the first occurrence of tagKey at or after i, or it is
	// recomputed once the lexer has passed it. Comments that cannot contain
	// it are skipped unread, and lexing stops after the last occurrence.
	//
	// inExec is set inside an executable comment, whose text the server
	// lexes as SQL: strings and comments in it are skipped like any others,
	// its comments are not tags, and the first "*/" outside them ends it.
	inExec := false
	for i := 0; i < len(sql); {
		for i < len(sql) && !lexSpecial[sql[i]] {
			i++
		}
		if i == len(sql) {
			break
		}
		if next < i {
			j := bytes.Index(sql[i:], tagKeyBytes)
			if j < 0 {
				return dst, false
			}
			next = i + j
		}
		var body []byte // comment text, nil outside a comment
		bodyStart := 0
		switch sql[i] {
		case '\'', '"':
			i = skipQuoted(sql, i+1, sql[i], true)
			continue
		case '`':
			i = skipQuoted(sql, i+1, '`', false)
			continue
		case '*':
			if inExec && i+1 < len(sql) && sql[i+1] == '/' {
				inExec = false
				i += 2
			} else {
				i++
			}
			continue
		case '#':
			bodyStart = i + 1
			body, i = lineComment(sql, bodyStart)
		case '-':
			// "--" starts a comment only when followed by whitespace, a
			// control byte or the end of input, as in MySQL.
			if i+1 >= len(sql) || sql[i+1] != '-' || (i+2 < len(sql) && sql[i+2] > ' ' && sql[i+2] != 0x7f) {
				i++
				continue
			}
			bodyStart = i + 2
			body, i = lineComment(sql, bodyStart)
		case '/':
			if i+1 >= len(sql) || sql[i+1] != '*' {
				i++
				continue
			}
			bodyStart = i + 2
			if n := execOpener(sql[bodyStart:]); n > 0 {
				inExec = true
				i = bodyStart + n
				continue
			}
			end := bytes.Index(sql[bodyStart:], commentEnd)
			if end < 0 {
				// An unterminated comment runs to the end of input and is
				// not a tag.
				return dst, false
			}
			body = sql[bodyStart : bodyStart+end]
			i = bodyStart + end + 2
		}
		if inExec || next+len(tagKey) > bodyStart+len(body) {
			continue // not a tag, or no occurrence of the key in this comment
		}
		switch v, quoted, st := findTag(body); st {
		case tagFound:
			return appendValue(dst, v, quoted)
		case tagBad:
			return dst, false
		}
	}
	return dst, false
}

// skipQuoted returns the index just past the string or quoted identifier that
// starts at i (just past its opening quote q), or len(sql) when it is
// unterminated. A doubled quote stands for itself; when backslash is set, so
// does any byte after a backslash.
func skipQuoted(sql []byte, i int, q byte, backslash bool) int {
	for i < len(sql) {
		switch c := sql[i]; {
		case c == q:
			if i+1 < len(sql) && sql[i+1] == q {
				i += 2
				continue
			}
			return i + 1
		case c == '\\' && backslash:
			i += 2
		default:
			i++
		}
	}
	return len(sql)
}

// lineComment returns the text of the line comment whose body starts at i,
// and the index just past it.
func lineComment(sql []byte, i int) (body []byte, next int) {
	end := bytes.IndexByte(sql[i:], '\n')
	if end < 0 {
		return sql[i:], len(sql)
	}
	return sql[i : i+end], i + end + 1
}

// execOpener returns the length of the marker that makes a block comment
// starting just before rest executable: "!" (MySQL, /*! ... */) or "M!"
// (MariaDB, /*M! ... */). It returns 0 for an ordinary comment.
func execOpener(rest []byte) int {
	switch {
	case len(rest) > 0 && rest[0] == '!':
		return 1
	case len(rest) > 1 && rest[0] == 'M' && rest[1] == '!':
		return 2
	}
	return 0
}

type tagStatus uint8

const (
	tagNone  tagStatus = iota // the comment has no conn_tag key
	tagFound                  // the first conn_tag key and its raw value
	tagBad                    // the first conn_tag key has an unterminated quoted value
)

// findTag reads a comment body as a sequence of words and key:value,
// key=value or key='quoted value' pairs separated by commas or whitespace, and
// returns the raw value of the first pair whose key is exactly tagKey.
func findTag(b []byte) (value []byte, quoted bool, st tagStatus) {
	for i := 0; i < len(b); {
		if isSpace(b[i]) || b[i] == ',' {
			i++
			continue
		}
		// A key, or a free-text word. It is empty only when b[i] is ':'
		// or '=', which the pair branch below consumes.
		ks := i
		for i < len(b) && !isSpace(b[i]) && b[i] != ',' && b[i] != ':' && b[i] != '=' {
			i++
		}
		isKey := string(b[ks:i]) == tagKey
		j := skipSpace(b, i)
		if j == len(b) || (b[j] != ':' && b[j] != '=') {
			i = j // a word, not a pair
			continue
		}
		j = skipSpace(b, j+1)
		if j < len(b) && b[j] == '\'' {
			end := j + 1
			for end < len(b) && b[end] != '\'' {
				if b[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(b) {
				// Unterminated: the rest of the comment is this value.
				if isKey {
					return nil, false, tagBad
				}
				return nil, false, tagNone
			}
			if isKey {
				return b[j+1 : end], true, tagFound
			}
			i = end + 1
			continue
		}
		vs := j
		for j < len(b) && !isSpace(b[j]) && b[j] != ',' {
			j++
		}
		if isKey {
			return b[vs:j], false, tagFound
		}
		i = j
	}
	return nil, false, tagNone
}

// appendValue decodes raw (backslash escapes, then percent-encoding, when
// quoted), trims surrounding whitespace, rewrites the reserved prefix,
// sanitizes and truncates it, and appends the result to dst. It reports false,
// with dst unchanged, when nothing is left after trimming.
func appendValue(dst, raw []byte, quoted bool) ([]byte, bool) {
	if !quoted || bytes.IndexByte(raw, '\\') < 0 && bytes.IndexByte(raw, '%') < 0 {
		return appendLiteral(dst, raw)
	}
	orig, start := dst, len(dst)
	dst = slices.Grow(dst, min(len(raw), MaxTagLen))
	// Whitespace after the first kept byte is held back until a non-space
	// byte follows, so trailing whitespace is never written.
	n, pending := 0, 0
	for i := 0; i < len(raw) && n < MaxTagLen; {
		var c byte
		c, i = decodeAt(raw, i)
		if isSpace(c) {
			if n > 0 {
				pending++
			}
			continue
		}
		for ; pending > 0 && n < MaxTagLen; pending-- {
			dst = append(dst, '_')
			n++
		}
		if n == MaxTagLen {
			break
		}
		if !tagByte[c] {
			c = '_'
		}
		dst = append(dst, c)
		n++
	}
	if n == 0 {
		return orig, false
	}
	// Sanitizing never produces ':' or letters, so the sanitized tag starts
	// with the prefix exactly when the decoded value does.
	if bytes.HasPrefix(dst[start:], reservedPrefixBytes) {
		dst[start+len(reservedPrefix)-1] = '_'
	}
	return dst, true
}

// appendLiteral is appendValue for a value with nothing to decode.
func appendLiteral(dst, v []byte) ([]byte, bool) {
	for len(v) > 0 && isSpace(v[0]) {
		v = v[1:]
	}
	for len(v) > 0 && isSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	if len(v) == 0 {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, v[:min(len(v), MaxTagLen)]...)
	tag := dst[start:]
	for i, c := range tag {
		if !tagByte[c] {
			tag[i] = '_'
		}
	}
	if bytes.HasPrefix(tag, reservedPrefixBytes) {
		tag[len(reservedPrefix)-1] = '_'
	}
	return dst, true
}

// decodeAt returns the decoded byte at raw[i] of a quoted (sqlcommenter)
// value, and the index of the next one. It undoes the backslash escaping of
// meta characters first, then percent-encoding; a '%' not followed by two hex
// digits stands for itself.
func decodeAt(raw []byte, i int) (byte, int) {
	c, j := unescapeAt(raw, i)
	if c != '%' || j >= len(raw) {
		return c, j
	}
	h, k := unescapeAt(raw, j)
	if k >= len(raw) {
		return c, j
	}
	l, m := unescapeAt(raw, k)
	hi, ok1 := unhex(h)
	lo, ok2 := unhex(l)
	if !ok1 || !ok2 {
		return c, j
	}
	return hi<<4 | lo, m
}

// unescapeAt returns the byte at raw[i] with a backslash escape undone, and
// the index of the next one. i must be < len(raw).
func unescapeAt(raw []byte, i int) (byte, int) {
	if raw[i] == '\\' && i+1 < len(raw) {
		return raw[i+1], i + 2
	}
	return raw[i], i + 1
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}
