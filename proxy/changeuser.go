package proxy

import (
	"bytes"
	"encoding/binary"

	"github.com/go-mysql-org/go-mysql/mysql"
)

// comChangeUser implements COM_CHANGE_USER: re-authenticate as another
// configured user and start a fresh session (as COM_RESET_CONNECTION does)
// on the given database and character set. holdfast always answers with an
// authentication switch carrying a fresh scramble, so it never needs the
// scramble of the original handshake.
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

	u, ok := s.srv.users.get(name)
	if !ok {
		// As at login: the same answer as a wrong password.
		u = User{Name: name, Password: unknownUserPassword, AuthPlugin: pluginNative}
	}
	salt := newSalt()
	sw := append(s.out[:0], hdrEOF)
	sw = append(sw, u.AuthPlugin...)
	sw = append(sw, 0)
	sw = append(sw, salt...)
	sw = append(sw, 0)
	s.out = sw
	s.writePacket(sw)
	if err := s.w.flush(); err != nil {
		return false
	}
	s.r.seq = s.w.seq
	reply, err := s.r.readPacket(nil, 4096)
	if err != nil {
		return false
	}
	s.w.seq = s.r.seq
	if !ok || !checkScramble(u.AuthPlugin, u.Password, salt, reply) {
		s.writeErr(accessDenied(name, s.nc.RemoteAddr(), len(reply) > 0))
		return false
	}
	if u.AuthPlugin == pluginSHA2 && !emptyAuth(reply) {
		s.writePacket([]byte{0x01, 0x03}) // fast authentication succeeded
	}
	s.resetSession()
	if db == "" {
		db = s.srv.config().Backend.Database
	}
	s.mu.Lock()
	s.user = u // read by other sessions' KILLs
	s.mu.Unlock()
	s.db, s.coll = db, coll
	s.writeOK(0, 0)
	return true
}
