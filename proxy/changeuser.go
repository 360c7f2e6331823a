package proxy

import (
	"bytes"
	"crypto/subtle"
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
		s.writeErr(s.accessDenied(name, true))
		return false
	}
	salt := mysql.RandomBuf(20)
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
	var want []byte
	if u.AuthPlugin == mysql.AUTH_CACHING_SHA2_PASSWORD {
		want = mysql.CalcCachingSha2Password(salt, []byte(u.Password))
	} else {
		want = mysql.CalcNativePassword(salt, []byte(u.Password))
	}
	if subtle.ConstantTimeCompare(want, reply) != 1 {
		s.writeErr(s.accessDenied(name, len(reply) > 0))
		return false
	}
	if u.AuthPlugin == mysql.AUTH_CACHING_SHA2_PASSWORD {
		s.writePacket([]byte{0x01, 0x03}) // fast authentication succeeded
	}
	s.resetSession()
	if db == "" {
		db = s.srv.config().Backend.Database
	}
	s.user, s.db, s.coll = u, db, coll
	s.writeOK(0, 0)
	return true
}

func (s *session) accessDenied(user string, withPassword bool) *sqlError {
	using := "NO"
	if withPassword {
		using = "YES"
	}
	host, _, _ := splitHost(s.remote)
	return newErr(codeAccessDenied, "28000", "Access denied for user '%s'@'%s' (using password: %s)", user, host, using)
}

func splitHost(addr string) (string, string, bool) {
	i := bytes.LastIndexByte([]byte(addr), ':')
	if i < 0 {
		return addr, "", false
	}
	return addr[:i], addr[i+1:], true
}
