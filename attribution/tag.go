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

// AppendCommentTag reads the body of one comment (the text between /* and
// */, or after # or -- to the end of its line) as words and key:value,
// key=value or key='quoted value' pairs. When it holds a conn_tag pair,
// decided is true: the first such pair's value is decoded, sanitized and
// appended to dst, and ok says whether anything was left of it (an empty
// value, or a quoted one left unterminated, is no tag). When it holds none,
// decided is false and dst comes back as it was: the statement's next
// comment may carry the tag. Finding a statement's comments (outside
// literals, executable comments excluded, under the session's sql_mode) is
// the lexer's work; the first comment that decides is the tag.
//
// It never modifies body, never panics and runs in O(len(body)); it
// allocates nothing when dst has MaxTagLen bytes of spare capacity. Safe
// for concurrent use.
func AppendCommentTag(dst, body []byte) (out []byte, ok, decided bool) {
	if !bytes.Contains(body, tagKeyBytes) {
		return dst, false, false
	}
	switch v, quoted, st := findTag(body); st {
	case tagFound:
		out, ok = appendValue(dst, v, quoted)
		return out, ok, true
	case tagBad:
		return dst, false, true
	}
	return dst, false, false
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
