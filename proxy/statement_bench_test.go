package proxy

import (
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// BenchmarkStatement is the statement path as a client sees it: a command
// packet in, holdfast routes it to a pooled backend connection, relays the
// reply out. The client reads with buffers it reuses, so allocs/op is
// holdfast's (server and session side) per statement; a rise is a
// regression. The backend is the test MariaDB over loopback.
//
//	go test ./proxy -run '^$' -bench Statement -benchmem
func BenchmarkStatement(b *testing.B) {
	p := startProxy(b, func(c *config.Config) { c.Pool.Min, c.Pool.Max = 1, 1 })
	p.srv.ProtectTables(p.db, holdfastTables) // as cmd/holdfast does
	d := p.direct(b)
	mustExec(b, d, "CREATE TABLE bench_t (id INT PRIMARY KEY, c CHAR(120) NOT NULL)")
	for i := range 100 {
		mustExec(b, d, "INSERT INTO bench_t VALUES (?, REPEAT('x', 120))", i+1)
	}
	c := rawLogin(b, p.addr, rawmysql.Options{User: "app", Password: "app", DB: p.db})
	r := benchReader{c: c}

	b.Run("text point select", func(b *testing.B) {
		frames := make([][]byte, 100)
		for i := range frames {
			frames[i] = rawmysql.Frame(0, fmt.Appendf([]byte{comQuery}, "SELECT c FROM bench_t WHERE id = %d", i+1))
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := c.NC.Write(frames[i%len(frames)]); err != nil {
				b.Fatal(err)
			}
			r.resultSet(b)
		}
	})

	b.Run("prepared point select", func(b *testing.B) {
		if _, err := c.NC.Write(rawmysql.Frame(0, append([]byte{comStmtPrepare}, "SELECT c FROM bench_t WHERE id = ?"...))); err != nil {
			b.Fatal(err)
		}
		ok := r.packet(b)
		if ok[0] != 0 {
			b.Fatalf("prepare answered %x", ok)
		}
		id := binary.LittleEndian.Uint32(ok[1:])
		cols, params := binary.LittleEndian.Uint16(ok[5:]), binary.LittleEndian.Uint16(ok[7:])
		for range params {
			r.packet(b)
		}
		r.eof(b)
		for range cols {
			r.packet(b)
		}
		r.eof(b)
		exec := []byte{comStmtExecute, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(exec[1:], id)
		f := rawmysql.Frame(0, exec)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			binary.LittleEndian.PutUint64(f[4+14:], uint64(i%100+1))
			if _, err := c.NC.Write(f); err != nil {
				b.Fatal(err)
			}
			r.resultSet(b)
		}
	})
}

// maxStatementAllocs bounds the allocations of one pipelined text
// statement (BenchmarkStatement measures none today; the bound leaves
// room for what the process's other goroutines allocate meanwhile):
// TestStatementAllocs fails above it, so the statement path does not grow
// allocations unnoticed. Garbage per statement is what makes the collector
// run under steady load, and its cycles are the proxy's tail latency with
// one P. Raise it only for a reason worth its cost.
const maxStatementAllocs = 1

// TestStatementAllocs counts allocations per statement over many (the
// whole process's: holdfast's session and server, and the reader, which
// allocates nothing per statement).
func TestStatementAllocs(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max = 1, 1 })
	p.srv.ProtectTables(p.db, holdfastTables) // as cmd/holdfast does
	c := rawLogin(t, p.addr, rawmysql.Options{User: "app", Password: "app", DB: p.db})
	r := benchReader{c: c}
	f := rawmysql.Frame(0, append([]byte{comQuery}, "SELECT 1, 'abc'"...))
	run := func() {
		if _, err := c.NC.Write(f); err != nil {
			t.Fatal(err)
		}
		r.resultSet(t)
	}
	for range 50 {
		run() // warm: pool, buffers, session state
	}
	if n := testing.AllocsPerRun(500, run); n > maxStatementAllocs {
		t.Fatalf("%.1f allocations per statement, more than %d", n, maxStatementAllocs)
	}
}

// benchReader reads replies into one reused buffer. It renews the
// connection's hang guard every few thousand packets: the guard is a
// deadline, and a long benchmark outlives one set at login.
type benchReader struct {
	c     *rawConn
	hdr   [4]byte
	buf   []byte
	reads int
}

func (r *benchReader) packet(b testing.TB) []byte {
	if r.reads%4096 == 0 {
		_ = r.c.NC.SetDeadline(time.Now().Add(r.c.Guard))
	}
	r.reads++
	if _, err := io.ReadFull(r.c.Buffered(), r.hdr[:]); err != nil {
		b.Fatal(err)
	}
	n := int(r.hdr[0]) | int(r.hdr[1])<<8 | int(r.hdr[2])<<16
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	r.buf = r.buf[:n]
	if _, err := io.ReadFull(r.c.Buffered(), r.buf); err != nil {
		b.Fatal(err)
	}
	if n > 0 && r.buf[0] == 0xff {
		b.Fatalf("server error: %s", r.buf[1:])
	}
	return r.buf
}

func (r *benchReader) eof(b testing.TB) {
	if p := r.packet(b); p[0] != 0xfe || len(p) >= 9 {
		b.Fatalf("want EOF, got %x", p)
	}
}

// resultSet reads a whole result set: column count, definitions, EOF,
// rows, EOF (holdfast does not offer CLIENT_DEPRECATE_EOF).
func (r *benchReader) resultSet(b testing.TB) {
	n := int(r.packet(b)[0])
	for range n {
		r.packet(b)
	}
	r.eof(b)
	for {
		if p := r.packet(b); p[0] == 0xfe && len(p) < 9 {
			return
		}
	}
}
