package proxy

import (
	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// A statement's tag comes out of the one lexing pass that classifies it
// (sqlscan, under the session's sql_mode): the pass names the comments
// that mention conn_tag, and attribution reads what they say. A comment
// inside a string literal is never one, whatever the quoting rules.
//
// A tag is the client's word unless its user has a list of the tags it
// may carry (users[].tags, see userbounds.go). The tag is decided here,
// once, for every way it arrives: statementTag for a statement's comment
// (a text statement, a prepare, a CALL holdfast.*), savedTag for a
// prepared statement's execute, connTag for the conn_tag connection
// attribute. A tag outside the list is never looked up in the recorder:
// the statement runs as if it carried none, or is refused
// (refuse_other_tags), so accounting, the on-call controls (policy.Key),
// overload classes, routing and the engine's callers all see the tag it
// runs under, never the one it claimed.

// appendStatementTag appends the tag of statement text sql, lexed under m
// into info, to dst: the first tag comment with a conn_tag pair decides.
func appendStatementTag(dst, sql []byte, info *sqlscan.Info, m sqlscan.Mode) ([]byte, bool) {
	tags := info.TagComments[:info.NTagComments]
	resume := info.TagResume
	for {
		for _, sp := range tags {
			if out, ok, decided := attribution.AppendCommentTag(dst, sql[sp.Start:sp.End]); decided {
				return out, ok
			}
		}
		if len(tags) < sqlscan.MaxTagComments {
			return dst, false
		}
		// Every comment Info kept mentions the key without a pair: the
		// pass goes on where it left them.
		tags, resume = m.MoreTagComments(sql, resume)
	}
}

// statementTag resolves the tag a statement runs under: its own, else its
// transaction's, else the connection's. tagged reports an explicit tag.
// A tag the session's user may not carry makes the statement untagged,
// or, under refuse_other_tags, refused: the caller sends the error and
// runs nothing.
func (s *session) statementTag(sql []byte, info *sqlscan.Info) (tag *attribution.Tag, tagged bool, refused *mysqlwire.SQLError) {
	tr := s.tagRules()
	if !s.srv.attr && (info.NTagComments == 0 || tr == nil && !s.srv.controlsByTag()) {
		// No accounting by tag, but the on-call controls still apply to
		// the tag a statement carries (see policy.Key), and a user's list.
		s.tagRaw = nil
		return s.connTag, false, nil
	}
	b, ok := appendStatementTag(s.tagBuf[:0], sql, info, s.scanMode())
	s.tagBuf = b[:0]
	if ok && tr != nil && !s.tagAllowed(tr, b) {
		if tr.refuse {
			s.user.entry.refused.Add(1)
			s.tagRaw = nil
			return s.defaultTag(), false, errTagRefused(s.user.Name, b, tr)
		}
		s.user.entry.defaulted.Add(1)
		ok = false
	}
	if !ok {
		s.tagRaw = nil
		if !s.srv.attr {
			return s.connTag, false, nil
		}
		return s.defaultTag(), false, nil
	}
	s.tagRaw = b // the tag as the statement carries it, for the controls (policy.Key)
	if !s.srv.attr {
		return s.connTag, false, nil
	}
	return s.srv.rec.Tag(b), true, nil
}

// savedTag is the tag an execute of cs runs under: the tag its text
// carried when prepared (allowed then: see statementTag), as long as the
// user's list in force still allows it. It is nil when the statement
// carries no tag of its own, or when accounting does not look at tags
// (the controls then still see the saved tag, see policy.Key).
func (s *session) savedTag(cs *clientStmt) (*attribution.Tag, *mysqlwire.SQLError) {
	tr := s.tagRules()
	s.tagRaw = nil
	if cs.tagName == "" {
		return nil, nil
	}
	if tr != nil && !s.tagNameAllowed(tr, cs.tagName) {
		// A reload took the tag off the user's list since the prepare.
		if tr.refuse {
			s.user.entry.refused.Add(1)
			return nil, errTagRefused(s.user.Name, []byte(cs.tagName), tr)
		}
		s.user.entry.defaulted.Add(1)
		return nil, nil
	}
	s.tagRaw = append(s.tagBuf[:0], cs.tagName...)
	s.tagBuf = s.tagRaw[:0]
	return cs.tag, nil
}

// tagRules returns the tags the session's user may carry now (nil: any).
// After a reload, the next statement decides the connection's tag again
// under the bounds in force (a changed default_tag or list).
func (s *session) tagRules() *tagRules {
	r := s.user.entry.rules.Load()
	if r != s.rules {
		s.rules, s.tagMemo = r, tagMemo{}
		ct := s.srv.connTag(s.attrs, r)
		s.mu.Lock()
		s.connTag = ct
		s.mu.Unlock()
	}
	return r.tags
}

// tagMemo is the last tag checked against a user's list, and the answer:
// a session's statements mostly carry the same few tags.
type tagMemo struct {
	rules *tagRules
	tag   string
	ok    bool
}

// tagAllowed reports whether the session's user, held to tr, may carry
// the sanitized tag b.
func (s *session) tagAllowed(tr *tagRules, b []byte) bool {
	if m := &s.tagMemo; m.rules == tr && m.tag == string(b) {
		return m.ok
	}
	ok := tr.allows(b)
	s.tagMemo = tagMemo{rules: tr, tag: string(b), ok: ok}
	return ok
}

// tagNameAllowed is tagAllowed for a tag kept as a string.
func (s *session) tagNameAllowed(tr *tagRules, name string) bool {
	if m := &s.tagMemo; m.rules == tr && m.tag == name {
		return m.ok
	}
	ok := tr.allows([]byte(name))
	s.tagMemo = tagMemo{rules: tr, tag: name, ok: ok}
	return ok
}

// attrTag appends the conn_tag connection attribute, sanitized, to dst.
func attrTag(dst []byte, attrs map[string]string) ([]byte, bool) {
	if v := attrs["conn_tag"]; v != "" {
		return attribution.AppendSanitized(dst, []byte(v))
	}
	return dst, false
}

// connTag is a session's fallback tag: the conn_tag connection attribute
// when the user's bounds r allow it, else the user's default tag, else
// untagged.
func (s *Server) connTag(attrs map[string]string, r *userRules) *attribution.Tag {
	var buf [attribution.MaxTagLen]byte
	if b, ok := attrTag(buf[:0], attrs); ok && (r.tags == nil || r.tags.allows(b)) {
		return s.rec.Tag(b)
	}
	if r.defaultTag != "" {
		if b, ok := attribution.AppendSanitized(buf[:0], []byte(r.defaultTag)); ok {
			return s.rec.Tag(b)
		}
	}
	return s.rec.TagString(attribution.Untagged)
}
