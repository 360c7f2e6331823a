package reservation

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"strings"
)

// TokenRef is how a log line names a reservation token: a token
// authorises claim, release and extend on its own, so no log line holds
// one. It is "ref_" and the first 12 hexadecimal digits of the token's
// SHA-256, the same in every process and version; the reservation it
// names is found with
//
//	SELECT reservation_id FROM reservations
//	WHERE LEFT(SHA2(CONCAT('rsv_', LPAD(LOWER(HEX(reservation_id)), 16, '0')), 256), 12) = '<digits>'
//
// (or by hashing a token at hand the same way).
func TokenRef(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "ref_" + hex.EncodeToString(sum[:6])
}

// tokenPattern matches reservation tokens in text.
var tokenPattern = regexp.MustCompile(tokenPrefix + `[0-9A-Fa-f]{16}`)

// RedactTokens returns s with each reservation token in it replaced by its
// TokenRef: for error text that is logged (an engine error names the
// token it was given).
func RedactTokens(s string) string {
	if !strings.Contains(s, tokenPrefix) {
		return s
	}
	return tokenPattern.ReplaceAllStringFunc(s, TokenRef)
}
