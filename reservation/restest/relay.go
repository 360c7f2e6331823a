package restest

import (
	"database/sql"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Relay is a TCP relay on 127.0.0.1 that delays every chunk of bytes by a
// fixed time in each direction, standing in for network latency on machines
// without netem. Throughput is not limited: chunks are queued with their due
// time and written in order.
type Relay struct {
	Addr string // host:port to dial instead of the target

	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup

	mu    sync.Mutex // guards conns
	conns []net.Conn
}

// NewRelay starts a relay to target adding delay each way; it stops when t
// ends.
func NewRelay(t testing.TB, target string, delay time.Duration) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{Addr: ln.Addr().String(), ln: ln, target: target, delay: delay}
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.Close)
	return r
}

// Close stops accepting, closes every relayed connection and waits.
func (r *Relay) Close() {
	r.ln.Close()
	r.mu.Lock()
	conns := r.conns
	r.conns = nil
	r.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	r.wg.Wait()
}

func (r *Relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, b)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pipe(c, b)
		go r.pipe(b, c)
	}
}

type chunk struct {
	due  time.Time
	data []byte
}

// pipe copies src to dst, each chunk delivered delay after it was read.
func (r *Relay) pipe(src, dst net.Conn) {
	defer r.wg.Done()
	q := make(chan chunk, 4096)
	done := make(chan struct{})
	go func() {
		defer close(done)
		sl := newSleeper()
		defer sl.close()
		for ch := range q {
			if d := time.Until(ch.due); d > 0 {
				sl.sleep(d)
			}
			if _, err := dst.Write(ch.data); err != nil {
				src.Close()
				for range q {
				}
				return
			}
		}
		dst.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			q <- chunk{time.Now().Add(r.delay), append([]byte(nil), buf[:n]...)}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			break
		}
	}
	close(q)
	<-done
}

// OpenVia opens a pool of at most maxConns connections to database name
// through addr (a Relay's), closed when t ends.
func OpenVia(t testing.TB, name, addr string, maxConns int) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr, cfg.Net, cfg.DBName = addr, "tcp", name
	cfg.MultiStatements = true
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	return db
}

// Target returns the server address of the test DSN.
func Target(t testing.TB) string {
	cfg, err := mysql.ParseDSN(DSN())
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Addr
}
