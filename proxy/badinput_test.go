package proxy

// Bad input from clients: each case must get a proper MySQL error (code,
// SQLSTATE, clear text) or a closed connection, never a panic or a hang,
// while a well-behaved client keeps working on the same server.

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gsd "github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// logWatch scans the server's log for server.handle's recovered-panic line.
type logWatch struct {
	mu     sync.Mutex
	panics []string
}

func (w *logWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("panic in client session")) {
		w.mu.Lock()
		w.panics = append(w.panics, string(p))
		w.mu.Unlock()
	}
	return len(p), nil
}

func (w *logWatch) check(t testing.TB) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.panics {
		t.Errorf("the server recovered from a panic in a client session: %s", p)
	}
}

// startWatchedProxy starts a proxy whose log goes to the test log and is
// checked, after the server closed, for recovered panics.
func startWatchedProxy(t *testing.T, mutate ...func(*config.Config)) *testProxy {
	t.Helper()
	w := &logWatch{}
	t.Cleanup(func() { w.check(t) }) // runs after the server closed
	log := slog.New(slog.NewTextHandler(ioTee{newTestWriter(t), w}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return newTestProxy(t, log, mutate...)
}

type ioTee [2]interface{ Write([]byte) (int, error) }

func (m ioTee) Write(p []byte) (int, error) {
	for _, w := range m {
		_, _ = w.Write(p)
	}
	return len(p), nil
}

// bystander is a well-behaved go-sql-driver client running transactions
// alongside the bad input.
type bystander struct {
	stop chan struct{}
	done chan struct{}
	n    atomic.Int64
	err  error // set before done closes
}

func startBystander(t *testing.T, p *testProxy) *bystander {
	t.Helper()
	db := p.open(t)
	db.SetMaxOpenConns(2)
	mustExec(t, db, "CREATE TABLE bystander (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	b := &bystander{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(b.done)
		for i := 0; i < 100000; i++ {
			select {
			case <-b.stop:
				return
			default:
			}
			if err := b.once(db, i); err != nil {
				b.err = fmt.Errorf("bystander iteration %d: %w", i, err)
				return
			}
			b.n.Add(1)
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { b.finish(t) }) // before the proxy closes
	return b
}

func (b *bystander) once(db *sql.DB, i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second) // hang guard
	defer cancel()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO bystander (v) VALUES (?)", i); err != nil {
		return err
	}
	var v int
	if err := tx.QueryRowContext(ctx, "SELECT v FROM bystander WHERE id = LAST_INSERT_ID()").Scan(&v); err != nil {
		return err
	}
	if v != i {
		return fmt.Errorf("read back %d, want %d", v, i)
	}
	return tx.Commit()
}

func (b *bystander) finish(t *testing.T) {
	select {
	case <-b.stop:
	default:
		close(b.stop)
	}
	<-b.done
	if b.err != nil {
		t.Errorf("a well-behaved client failed: %v", b.err)
	}
}

// served waits until the bystander has completed a few more transactions
// and a new client can log in and query.
func (b *bystander) served(t *testing.T, p *testProxy) {
	t.Helper()
	start := b.n.Load()
	deadline := time.Now().Add(15 * time.Second) // hang guard
	for b.n.Load() < start+3 {
		select {
		case <-b.done:
			t.Fatalf("the well-behaved client stopped: %v", b.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the well-behaved client made no progress (%d transactions)", b.n.Load())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := p.raw(t, rawmysql.Options{})
	if v := c.value("SELECT 'fresh client'"); v != "fresh client" {
		t.Fatal(v)
	}
	c.NC.Close()
}

// expectErrThenClose reads what the server sends until it closes: exactly
// one well-formed ERR packet with code and state.
func expectErrThenClose(t *testing.T, c *rawConn, code uint16, state string) *mysqlwire.SQLError {
	t.Helper()
	c.LenientSeq = true
	p, err := c.ReadPacket()
	if err != nil {
		t.Fatalf("want ERR %d, got %v", code, err)
	}
	e, err := rawmysql.DecodeErr(p)
	if err != nil || e.Code != code || e.State != state || e.Msg == "" {
		t.Fatalf("got % x (%v), want ERR %d (%s) with a message", trunc(p), err, code, state)
	}
	if rest, err := c.WaitClosed(); err != nil || len(rest) != 0 {
		t.Fatalf("after ERR %d: % x, %v; want the connection closed", code, trunc(rest), err)
	}
	return e
}

func TestBadTruncatedPacket(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)

	// A header claiming 100 bytes, 10 bytes, then the client goes away.
	c := p.raw(t, rawmysql.Options{})
	if err := c.WriteFrame(100, 0, []byte("\x03SELECT 1 ")); err != nil {
		t.Fatal(err)
	}
	_ = c.NC.(*net.TCPConn).CloseWrite()
	if rest, err := c.WaitClosed(); err != nil || len(rest) != 0 {
		t.Fatalf("truncated packet, then EOF: server sent % x, %v", trunc(rest), err)
	}
	by.served(t, p)

	// The same, but the client stays: the server waits for the rest
	// without holding up anyone else, then answers.
	c = p.raw(t, rawmysql.Options{})
	q := "\x03SELECT 'whole' /*"
	q += strings.Repeat("-", 100-len(q)-2) + "*/"
	if err := c.WriteFrame(100, 0, []byte(q[:10])); err != nil {
		t.Fatal(err)
	}
	by.served(t, p)
	if _, err := c.NC.Write([]byte(q[10:])); err != nil {
		t.Fatal(err)
	}
	c.SetSeq(1)
	rs, err := c.ReadResults(false, false)
	if err != nil || len(rs) != 1 || rs[0].Cell(0, 0) != "whole" {
		t.Fatalf("after the rest of the packet arrived: %+v, %v", rs, err)
	}
	by.served(t, p)
}

func TestBadOversizedPacket(t *testing.T) {
	const limit = 1 << 20
	p := startWatchedProxy(t, func(c *config.Config) { c.MaxAllowedPacket = limit })
	by := startBystander(t, p)
	c := p.raw(t, rawmysql.Options{})
	// Only the header: the server must refuse on the length alone.
	if err := c.WriteFrame(limit+1, 0, nil); err != nil {
		t.Fatal(err)
	}
	e := expectErrThenClose(t, c, 1153, "08S01")
	if !strings.Contains(e.Msg, "max_allowed_packet") {
		t.Fatalf("error text %q does not name max_allowed_packet", e.Msg)
	}
	// A command of exactly max_allowed_packet bytes is allowed.
	c = p.raw(t, rawmysql.Options{})
	q := "\x03SELECT LENGTH('"
	q += strings.Repeat("x", limit-len(q)-2) + "')"
	rs, err := c.Results(q[1:])
	if err != nil || rs[0].Cell(0, 0) != fmt.Sprint(limit-len("\x03SELECT LENGTH('')")) {
		t.Fatalf("a command of exactly max_allowed_packet bytes: %+v, %v", rs, err)
	}
	by.served(t, p)
}

func TestBadLogin(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	for _, tc := range []struct{ name, user, pass, using string }{
		{"wrong_password", "app", "wrong", "YES"},
		{"no_password", "app", "", "NO"},
		{"unknown_user", "nobody", "secret", "YES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, err := sql.Open("mysql", p.dsn(tc.user, tc.pass))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			err = db.Ping()
			var me *gsd.MySQLError
			if !errors.As(err, &me) || me.Number != 1045 || string(me.SQLState[:]) != "28000" ||
				!strings.Contains(me.Message, "Access denied for user '"+tc.user+"'") ||
				!strings.Contains(me.Message, "(using password: "+tc.using+")") {
				t.Fatalf("go-sql-driver login as %s: %v, want ERR 1045 (28000) Access denied ... (using password: %s)", tc.user, err, tc.using)
			}
			// The raw client sees the connection closed after the error.
			_, err = rawDial(p.addr, rawmysql.Options{User: tc.user, Password: tc.pass})
			var re *mysqlwire.SQLError
			if !errors.As(err, &re) || re.Code != 1045 {
				t.Fatalf("raw login as %s: %v, want ERR 1045", tc.user, err)
			}
		})
	}
	by.served(t, p)
}

func TestBadUnknownCommand(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	c := p.raw(t, rawmysql.Options{})
	// Unknown bytes, and real commands holdfast must not pass to the
	// backend (create/drop database, shutdown, debug, replication, MariaDB
	// bulk execute).
	for _, cmd := range []byte{0x63, 0x00, 0x05, 0x06, 0x08, 0x0d, 0x12, 0x15, 0x1d, 0xfa, 0xff} {
		e := c.mustErr([]byte{cmd, 'x', 0, 1}, 1047, "08S01")
		if !strings.Contains(strings.ToLower(e.Msg), "unknown command") {
			t.Errorf("command 0x%02x: error text %q", cmd, e.Msg)
		}
		if v := c.value("SELECT 'usable'"); v != "usable" {
			t.Fatal(v)
		}
	}
	by.served(t, p)
}

func TestBadOutOfOrderSequence(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	c := p.raw(t, rawmysql.Options{})
	if err := c.WriteFrame(9, 5, []byte("\x03SELECT 1")); err != nil {
		t.Fatal(err)
	}
	expectErrThenClose(t, c, 1156, "08S01")
	by.served(t, p)
}

func TestBadEmptyPacket(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	c := p.raw(t, rawmysql.Options{})
	if err := c.WriteFrame(0, 0, nil); err != nil {
		t.Fatal(err)
	}
	c.SetSeq(1)
	pk, err := c.ReadPacket()
	if err != nil {
		t.Fatalf("empty command packet: %v, want an ERR", err)
	}
	if e, err := rawmysql.DecodeErr(pk); err != nil || e.Msg == "" {
		t.Fatalf("empty command packet: % x (%v), want an ERR with a message", pk, err)
	}
	// Closed, or still usable: both are fine, a hang is not.
	if err := c.Command([]byte{rawmysql.ComPing}); err == nil {
		if pk, err := c.ReadPacket(); err != nil && !rawmysql.IsClosed(err) {
			t.Fatalf("after the empty packet: %v", err)
		} else if err == nil {
			if _, err := rawmysql.DecodeOK(pk, false); err != nil {
				t.Fatalf("COM_PING after the empty packet: % x", pk)
			}
		}
	}
	by.served(t, p)
}

func TestBadStatementCommands(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	c := p.raw(t, rawmysql.Options{})
	// Unknown statement ids, including MariaDB's "last statement" with
	// none prepared.
	for _, id := range []uint32{7, rawmysql.LastStmt} {
		c.mustErr(rawmysql.ExecutePacket(id, 0, nil, true), 1243, "HY000")
		c.mustErr(append(rawmysql.StmtCmd(rawmysql.ComStmtFetch, id), 1, 0, 0, 0), 1243, "HY000")
		c.mustErr(rawmysql.StmtCmd(rawmysql.ComStmtReset, id), 1243, "HY000")
		// No reply is defined for these two.
		if err := c.SendLongData(id, 0, []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := c.StmtClose(id); err != nil {
			t.Fatal(err)
		}
		if st := c.ping(); st&stFlagsCompared != mysqlwire.StatusAutocommit {
			t.Fatalf("status %#x", st)
		}
	}
	st := c.mustPrepare("SELECT ? + 1, CONCAT(?, '')")
	id := binaryID(st.ID)
	head := append(append([]byte{rawmysql.ComStmtExecute}, id...), 0, 1, 0, 0, 0)
	for _, tc := range []struct {
		name    string
		payload []byte
		code    uint16
	}{
		{"no statement id", []byte{rawmysql.ComStmtExecute, 1, 0}, 1835},
		{"no flags", append([]byte{rawmysql.ComStmtExecute}, id...), 1835},
		{"no iteration count", append(append([]byte{rawmysql.ComStmtExecute}, id...), 0, 1), 1835},
		{"no null bitmap", head, 1835},
		{"no new-params-bound flag", append(head[:len(head):len(head)], 0), 1835},
		{"types truncated", append(head[:len(head):len(head)], 0, 1, rawmysql.TypeLongLong, 0, rawmysql.TypeVarString), 1835},
		{"types never sent", append(head[:len(head):len(head)], 0, 0), 1210},
		{"fetch without row count", append([]byte{rawmysql.ComStmtFetch}, id...), 0},
		{"reset without id", []byte{rawmysql.ComStmtReset, 1}, 1835},
	} {
		pk, err := c.RoundTrip(tc.payload)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		e, err := rawmysql.DecodeErr(pk)
		if err != nil || e.Msg == "" || (tc.code != 0 && e.Code != tc.code) {
			t.Fatalf("%s: % x (%v), want ERR %d", tc.name, trunc(pk), err, tc.code)
		}
	}
	// Values shorter than the types say: whatever the backend answers, an
	// ERR, and the connection still works.
	short := append(head[:len(head):len(head)], 0, 1, rawmysql.TypeLongLong, 0, rawmysql.TypeVarString, 0, 1, 2, 3)
	if err := c.Command(short); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ReadResults(true, false); err != nil && errCode(err) <= 0 {
		t.Fatalf("short values: %v", err)
	}
	r := c.mustExecute(st, []rawmysql.Param{rawmysql.IntParam(1), rawmysql.StrParam("ok")}, true)
	if r.Cell(0, 0) != "2" || r.Cell(0, 1) != "ok" {
		t.Fatalf("statement after bad executes: %v", r.Rows)
	}
	by.served(t, p)
}

func binaryID(id uint32) []byte {
	return []byte{byte(id), byte(id >> 8), byte(id >> 16), byte(id >> 24)}
}

func TestBadProcessKill(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	c := p.raw(t, rawmysql.Options{})
	for _, payload := range [][]byte{{rawmysql.ComProcessKill}, {rawmysql.ComProcessKill, 1, 2}, {rawmysql.ComProcessKill, 1, 2, 3}} {
		c.mustErr(payload, 1835, "HY000")
	}
	c.mustErr([]byte{rawmysql.ComProcessKill, 0xff, 0xff, 0xff, 0x7f}, 1094, "HY000")
	if v := c.value("SELECT 'usable'"); v != "usable" {
		t.Fatal(v)
	}
	by.served(t, p)
}

// greeted dials the proxy and reads its greeting.
func greeted(t *testing.T, addr string) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	c := newRawConn(t, nc)
	if err := c.ReadGreeting(); err != nil {
		t.Fatal(err)
	}
	return c
}

// expectErrOrClose accepts, from a server refusing a handshake, one
// well-formed ERR packet and then a close, or just a close.
func expectErrOrClose(t *testing.T, c *rawConn, what string) {
	t.Helper()
	rest, err := c.WaitClosed()
	if err != nil {
		t.Fatalf("%s: the server neither answered nor closed: %v", what, err)
	}
	if len(rest) == 0 {
		return
	}
	if len(rest) < 4 || int(rest[0])|int(rest[1])<<8|int(rest[2])<<16 != len(rest)-4 {
		t.Fatalf("%s: server sent % x, want one ERR packet", what, trunc(rest))
	}
	e := rest[4:]
	if _, err := rawmysql.DecodeErr(e); err != nil {
		// A client that did not claim CLIENT_PROTOCOL_41 gets the old
		// format, without SQLSTATE.
		if len(e) < 4 || e[0] != 0xff || e[3] == '#' {
			t.Fatalf("%s: %v", what, err)
		}
	}
}

func TestBadHandshake(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	rng := rand.New(rand.NewPCG(7, 11))
	for i := 0; i < 40; i++ {
		c := greeted(t, p.addr)
		junk := make([]byte, 1+rng.IntN(200))
		for j := range junk {
			junk[j] = byte(rng.Uint32())
		}
		if i%2 == 0 {
			// A well-framed packet of garbage.
			if err := c.WriteFrame(len(junk), 1, junk); err != nil {
				t.Fatal(err)
			}
		} else {
			// Garbage framing too; then the client stops sending.
			if _, err := c.NC.Write(junk); err != nil {
				t.Fatal(err)
			}
			_ = c.NC.(*net.TCPConn).CloseWrite()
		}
		expectErrOrClose(t, c, fmt.Sprintf("garbage %d (% x)", i, trunc(junk)))
	}
	// An SSLRequest although the greeting did not offer TLS.
	c := greeted(t, p.addr)
	if c.ServerCaps&rawmysql.CapSSL != 0 {
		t.Fatal("setup: TLS offered")
	}
	ssl := append(binaryID(rawmysql.DefaultCaps|rawmysql.CapSSL), 0, 0, 0, 1, rawmysql.DefaultCollation)
	ssl = append(ssl, make([]byte, 23)...)
	if err := c.WriteFrame(len(ssl), 1, ssl); err != nil {
		t.Fatal(err)
	}
	expectErrOrClose(t, c, "SSLRequest without TLS")
	by.served(t, p)
	if st := p.srv.Stats(); st.HandshakeFailures < 41 {
		t.Errorf("%d handshake failures counted, want at least 41", st.HandshakeFailures)
	}
}

// Clients that connect and never answer the greeting must not keep others
// from logging in; the server drops them after its handshake timeout.
func TestBadSilentHandshake(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	silent := make([]*rawConn, maxHandshakes)
	for i := range silent {
		silent[i] = greeted(t, p.addr)
	}
	login := make(chan error, 1)
	go func() {
		c, err := rawDial(p.addr, rawmysql.Options{User: "app", Password: "app"})
		if err == nil {
			c.NC.Close()
		}
		login <- err
	}()
	select {
	case err := <-login:
		if err != nil {
			t.Fatalf("login while %d clients sit in the handshake: %v", len(silent), err)
		}
	case <-time.After(60 * time.Second): // hang guard
		t.Fatal("login never completed")
	}
	open := 0
	for _, c := range silent {
		_ = c.NC.SetReadDeadline(time.Now().Add(time.Millisecond))
		if _, err := c.Buffered().ReadByte(); rawmysql.IsTimeout(err) {
			open++
		}
	}
	if open != len(silent) {
		t.Errorf("a new client could log in only after the server dropped %d of %d silent clients", len(silent)-open, len(silent))
	}
	for i, c := range silent {
		c.Guard = 60 * time.Second // hang guard; the server's timeout is shorter
		if rest, err := c.WaitClosed(); err != nil {
			t.Fatalf("silent client %d never dropped: % x, %v", i, trunc(rest), err)
		}
	}
	by.served(t, p)
}

// LOAD DATA LOCAL names a file on the client's machine: holdfast never
// opens one of its own. A client without CLIENT_LOCAL_FILES gets the
// backend's refusal (MariaDB: 4166); one that allows it is asked for the
// file, and loads nothing by sending none.
func TestBadLoadDataLocal(t *testing.T) {
	p := startWatchedProxy(t)
	by := startBystander(t, p)
	mustExec(t, p.direct(t), "CREATE TABLE ld (a TEXT)")
	c := p.raw(t, rawmysql.Options{Caps: rawmysql.CapMultiStatements, Drop: rawmysql.CapLocalFiles})
	allows := p.raw(t, rawmysql.Options{Caps: rawmysql.CapMultiStatements})
	for _, q := range []string{
		"LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE ld",
		"load data low_priority local infile '/etc/hosts' into table ld",
		"/* tag */ LOAD XML LOCAL INFILE '/etc/hosts' INTO TABLE ld",
		"DO 1; LOAD DATA LOCAL INFILE '/etc/passwd' INTO TABLE ld",
	} {
		_, err := c.Results(q)
		var e *mysqlwire.SQLError
		if !errors.As(err, &e) || e.Code != 4166 || e.Msg == "" {
			t.Errorf("%s: %v, want the backend's ERR 4166", q, err)
		}
		if err := allows.Command(append([]byte{rawmysql.ComQuery}, q...)); err != nil {
			t.Fatal(err)
		}
		for {
			p, err := allows.ReadPacket()
			if err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			if p[0] == 0xfb {
				break
			}
		}
		if err := allows.WritePacket(nil); err != nil { // no file
			t.Fatal(err)
		}
		if _, err := allows.ReadResults(false, false); err != nil {
			t.Fatalf("%s with no file sent: %v", q, err)
		}
		if v := c.value("SELECT COUNT(*) FROM ld"); v != "0" {
			t.Fatalf("%s loaded %s rows", q, v)
		}
	}
	by.served(t, p)
}
