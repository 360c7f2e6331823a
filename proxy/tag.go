package proxy

import (
	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/proxy/sqlscan"
)

// A statement's tag comes out of the one lexing pass that classifies it
// (sqlscan, under the session's sql_mode): the pass names the comments
// that mention conn_tag, and attribution reads what they say. A comment
// inside a string literal is never one, whatever the quoting rules.

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
func (s *session) statementTag(sql []byte, info *sqlscan.Info) (tag *attribution.Tag, tagged bool) {
	if !s.srv.attr {
		// No accounting by tag, but the on-call controls still apply to
		// the tag a statement carries (see gateKey).
		s.tagRaw = nil
		if s.srv.controlsByTag() && info.NTagComments > 0 {
			if b, ok := appendStatementTag(s.tagBuf[:0], sql, info, s.scanMode()); ok {
				s.tagBuf, s.tagRaw = b[:0], b
			}
		}
		return s.connTag, false
	}
	b, ok := appendStatementTag(s.tagBuf[:0], sql, info, s.scanMode())
	s.tagBuf = b[:0]
	if ok {
		s.tagRaw = b // the tag as the statement carries it, for the controls (gateKey)
		return s.srv.rec.Tag(b), true
	}
	s.tagRaw = nil
	return s.defaultTag(), false
}
