package attribution

import (
	"bytes"
	"strings"
	"testing"
)

func TestAppendCommentTag(t *testing.T) {
	for _, tc := range []struct {
		body    string
		want    string
		decided bool
	}{
		{" conn_tag:checkout ", "checkout", true},
		{"application:shop,conn_tag:checkout,controller:orders", "checkout", true},
		{"conn_tag='checkout%20v2',traceparent='00-4bf9-01'", "checkout_v2", true},
		{" conn_tag: ", "", true},          // an empty value decides: no tag
		{"conn_tag='abc", "", true},        // unterminated quoted value: no tag, look no further
		{" see conn_tag docs ", "", false}, // the key as a word: the next comment may tell
		{" app:x ", "", false},             // no key
		{"a='x, conn_tag:y", "", false},    // inside another key's unterminated value
		{" CONN_TAG:x ", "", false},        // keys are case-sensitive
		{" conn_tag:holdfast:x ", "holdfast_x", true},
	} {
		dst := []byte("p|")
		out, ok, decided := AppendCommentTag(dst, []byte(tc.body))
		if decided != tc.decided || ok != (tc.want != "") || string(out[2:]) != tc.want || string(out[:2]) != "p|" {
			t.Errorf("AppendCommentTag(%q) = %q, %v, %v; want %q, decided %v", tc.body, out, ok, decided, tc.want, tc.decided)
		}
		if ok && !isTag(out[2:]) {
			t.Errorf("AppendCommentTag(%q) = %q: not a sanitized tag", tc.body, out[2:])
		}
	}
	dst := make([]byte, 0, MaxTagLen)
	body := []byte("conn_tag='checkout%20v2',traceparent='00-4bf9-01'")
	if n := testing.AllocsPerRun(100, func() { AppendCommentTag(dst[:0], body) }); n != 0 {
		t.Errorf("%v allocations per AppendCommentTag, want 0", n)
	}
}

// refValue is a direct, allocating rendering of the value rules in the
// package comment, to check appendValue against.
func refValue(raw []byte, quoted bool) (string, bool) {
	v := raw
	if quoted {
		var u []byte
		for i := 0; i < len(raw); i++ {
			if raw[i] == '\\' && i+1 < len(raw) {
				i++
			}
			u = append(u, raw[i])
		}
		var d []byte
		for i := 0; i < len(u); i++ {
			hi, ok1 := byte(0), false
			lo, ok2 := byte(0), false
			if u[i] == '%' && i+2 < len(u) {
				hi, ok1 = unhex(u[i+1])
				lo, ok2 = unhex(u[i+2])
			}
			if ok1 && ok2 {
				d = append(d, hi<<4|lo)
				i += 2
				continue
			}
			d = append(d, u[i])
		}
		v = d
	}
	v = bytes.Trim(v, " \t\n\v\f\r")
	if len(v) == 0 {
		return "", false
	}
	s := bytes.Clone(v)
	if bytes.HasPrefix(s, []byte("holdfast:")) {
		s[len("holdfast")] = '_'
	}
	for i, c := range s {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("_.:-", c) >= 0) {
			s[i] = '_'
		}
	}
	return string(s[:min(len(s), MaxTagLen)]), true
}

func FuzzAppendValue(f *testing.F) {
	for _, s := range []string{"", "x", " x ", "%20x%20", `it\'s`, `\%41`, `%\41`, "%", "%4", "%zz",
		"holdfast:x", "%20holdfast%3Ax", "\xff\x00", strings.Repeat("a ", 40), `\`, `a\`} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, raw []byte, quoted bool) {
		got, ok := appendValue(nil, raw, quoted)
		want, wantOK := refValue(raw, quoted)
		if string(got) != want || ok != wantOK {
			t.Fatalf("appendValue(%q, %v) = %q, %v; want %q, %v", raw, quoted, got, ok, want, wantOK)
		}
	})
}
