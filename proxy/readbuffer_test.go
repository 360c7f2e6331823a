package proxy

import (
	"bytes"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// TestCommandsLeftInTheSocket: a session on a TCP socket gives its read
// buffer back between commands and waits for the next one without it. Two
// commands sent in one write, the first exactly as long as the buffer, are
// both answered: when the buffer holds all of the first and nothing more,
// the second is still in the socket, and only a look at the socket (not a
// wait for a readiness event, which came before the buffer was filled and
// will not come again) finds it.
func TestCommandsLeftInTheSocket(t *testing.T) {
	p := startProxy(t)
	c := rawLogin(t, p.addr, rawmysql.Options{User: "app", Password: "app", DB: p.db})
	c.LenientSeq = true
	c.Guard = 5 * time.Second
	for range 3 {
		q := []byte("\x03SELECT 'a' /* ")
		q = append(q, bytes.Repeat([]byte{'x'}, clientReadBuffer-4-len(q)-len(" */"))...)
		q = append(q, " */"...)
		buf := rawmysql.Frame(0, q)
		if len(buf) != clientReadBuffer {
			t.Fatalf("first command is %d bytes with its header, want %d", len(buf), clientReadBuffer)
		}
		buf = append(buf, rawmysql.Frame(0, []byte("\x03SELECT 'b'"))...)
		_ = c.NC.SetWriteDeadline(time.Now().Add(c.Guard))
		if _, err := c.NC.Write(buf); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"a", "b"} {
			rs, err := c.ReadResults(false, false)
			if err != nil {
				t.Fatalf("the answer to SELECT '%s': %v", want, err)
			}
			if len(rs) != 1 || len(rs[0].Rows) != 1 || rs[0].Rows[0][0].String != want {
				t.Fatalf("SELECT '%s' answered %+v", want, rs)
			}
		}
	}
}
