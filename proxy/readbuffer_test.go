package proxy

import (
	"bytes"
	"testing"
	"time"
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
	c := rawLogin(t, p.addr, rawOpts{user: "app", pass: "app", db: p.db})
	c.lenientSeq = true
	c.guard = 5 * time.Second
	for range 3 {
		q := []byte("\x03SELECT 'a' /* ")
		q = append(q, bytes.Repeat([]byte{'x'}, clientReadBuffer-4-len(q)-len(" */"))...)
		q = append(q, " */"...)
		buf := frame(0, q)
		if len(buf) != clientReadBuffer {
			t.Fatalf("first command is %d bytes with its header, want %d", len(buf), clientReadBuffer)
		}
		buf = append(buf, frame(0, []byte("\x03SELECT 'b'"))...)
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.guard))
		if _, err := c.nc.Write(buf); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"a", "b"} {
			rs, err := c.readResults(false, false)
			if err != nil {
				t.Fatalf("the answer to SELECT '%s': %v", want, err)
			}
			if len(rs) != 1 || len(rs[0].rows) != 1 || rs[0].rows[0][0].String != want {
				t.Fatalf("SELECT '%s' answered %+v", want, rs)
			}
		}
	}
}
