package proxy

import (
	"bytes"
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// comChangeUser implements COM_CHANGE_USER: re-authenticate as another
// user, through the same steps as a login (see login.go: the delay after
// failures, a configured user or one from the backend), and start a fresh
// session (as COM_RESET_CONNECTION does) on the given database and
// character set, on the new user's backend account. holdfast always
// answers with an authentication switch carrying a fresh scramble, so it
// never needs the scramble of the original handshake. The new user's
// max_clients and tags apply from then on; a refusal (1040, 9012) closes
// the connection, as a failed change of user does.
func (s *session) comChangeUser(p []byte) bool {
	rest := p[1:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		s.writeErr(errMalformedPacket("COM_CHANGE_USER: user name not terminated"))
		return false
	}
	name := string(rest[:i])
	rest = rest[i+1:]
	if s.caps&mysql.CLIENT_SECURE_CONNECTION != 0 {
		if len(rest) < 1 || len(rest) < 1+int(rest[0]) {
			s.writeErr(errMalformedPacket("COM_CHANGE_USER: auth data truncated"))
			return false
		}
		rest = rest[1+int(rest[0]):]
	} else if j := bytes.IndexByte(rest, 0); j >= 0 {
		rest = rest[j+1:]
	}
	db := ""
	if j := bytes.IndexByte(rest, 0); j >= 0 {
		db = string(rest[:j])
		rest = rest[j+1:]
	}
	coll := s.coll
	if len(rest) >= 2 {
		if c := binary.LittleEndian.Uint16(rest); c > 0 && c < 256 {
			coll = uint8(c)
		}
	}

	// Whatever the outcome, the session's transaction and state end here:
	// give the backend connection back before waiting or asking the
	// backend who the user is.
	s.returnBackend()
	remote := s.nc.RemoteAddr()
	if err := s.srv.loginWait(loginKey(name, remote), nil); err != nil {
		s.writeErr(s.srv.loginRefused(name, remote, true))
		return false
	}
	u, why, se := s.srv.resolveUser(name, remote)
	if se != nil {
		s.writeErr(se)
		return false
	}
	salt := newSalt()
	s.out = mysqlwire.AppendAuthSwitch(s.out[:0], u.AuthPlugin, salt)
	s.writePacket(s.out)
	if err := s.w.FlushTurn(&s.r); err != nil {
		return false
	}
	reply, err := s.r.ReadPacket(nil, 4096)
	if err != nil {
		return false
	}
	s.w.Seq = s.r.Seq
	hash1, ok := u.verify(salt, reply)
	u, se = s.srv.loginDone(u, why, hash1, ok, remote, len(reply) > 0)
	if se != nil {
		s.writeErr(se)
		return false
	}
	// The new user's bounds apply: its max_clients (the session counts
	// as one of its clients, no longer as one of the old user's) and its
	// tags, to the connection's conn_tag attribute too.
	if u.Name == s.user.Name {
		u.entry = s.user.entry
		se = s.srv.loginTag(u.entry, s.attrs)
	} else {
		u, se = s.srv.admitUser(u, s.attrs)
	}
	if se != nil {
		s.writeErr(se)
		return false
	}
	if u.AuthPlugin == pluginSHA2 && !emptyAuth(reply) {
		s.writePacket([]byte{0x01, 0x03}) // fast authentication succeeded
	}
	s.resetSession()
	if db == "" {
		db = s.srv.config().Backend.Database
	}
	old := s.user.entry
	s.rules = u.entry.rules.Load()
	ct := s.srv.connTag(s.attrs, s.rules)
	s.mu.Lock()
	s.user = u // read by other sessions' KILLs
	s.connTag = ct
	s.mu.Unlock()
	if old != u.entry {
		old.release()
	}
	s.tagMemo = tagMemo{}
	s.variant = s.variant.withAccount(u.account)
	s.srv.useKey(s.variant)
	s.state.DB, s.coll = db, coll
	s.writeOK(0, 0)
	return true
}
