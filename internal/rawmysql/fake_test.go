package rawmysql

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// A fake server on the other end of a net.Pipe, its packets built with
// mysqlwire's Append functions: the client's login, commands and reading
// of replies with no database.

const fakeCaps = DefaultCaps | CapConnectWithDB | CapDeprecateEOF | CapSessionTrack | CapConnectAttrs

var fakeSalt = []byte("abcdefghijklmnopqrst")

type fakeServer struct {
	t  testing.TB
	nc net.Conn
	r  mysqlwire.Reader
	w  mysqlwire.Writer
}

// newFake returns a server end and the client's connection, not logged in.
func newFake(t testing.TB, guard time.Duration) (*fakeServer, *Conn) {
	srv, cli := net.Pipe()
	t.Cleanup(func() { srv.Close(); cli.Close() })
	s := &fakeServer{t: t, nc: srv}
	s.r.Buf = bufio.NewReader(srv)
	s.w.Buf = bufio.NewWriter(srv)
	return s, NewConn(cli, Options{Guard: guard})
}

// send writes payloads as consecutive packets of the current exchange.
func (s *fakeServer) send(payloads ...[]byte) error {
	s.w.Seq = s.r.Seq
	for _, p := range payloads {
		if err := s.w.WritePacket(p); err != nil {
			return err
		}
	}
	if err := s.w.Flush(); err != nil {
		return err
	}
	s.r.Seq = s.w.Seq
	return nil
}

// read reads one packet; a command (sequence 0) starts a new exchange.
func (s *fakeServer) read() ([]byte, error) {
	if h, err := s.r.Buf.Peek(4); err == nil && h[3] == 0 {
		s.r.Seq = 0
	}
	return s.r.ReadPacket(nil, 0)
}

// serve runs f on its own goroutine; wait returns its error.
func serve(f func() error) (wait func() error) {
	done := make(chan error, 1)
	go func() { done <- f() }()
	return func() error { return <-done }
}

func greeting(caps uint32) []byte {
	return mysqlwire.AppendGreeting(nil, &mysqlwire.Greeting{
		Version: "11.4.0-fake", ConnID: 42, Salt: fakeSalt, Caps: caps, Collation: 45,
		Status: mysqlwire.StatusAutocommit, Plugin: pluginNative,
	})
}

func okPacket(o mysqlwire.OK) []byte { return mysqlwire.AppendOK(nil, o, false) }

// login runs the client's handshake against a server that offers caps and
// accepts the native scramble of "pw".
func (s *fakeServer) login(c *Conn, o Options, caps uint32) {
	s.t.Helper()
	wait := serve(func() error {
		if err := s.send(greeting(caps)); err != nil {
			return err
		}
		if _, err := s.read(); err != nil {
			return err
		}
		return s.send(okPacket(mysqlwire.OK{Status: mysqlwire.StatusAutocommit}))
	})
	if err := c.Handshake(o); err != nil {
		s.t.Fatal(err)
	}
	if err := wait(); err != nil {
		s.t.Fatal(err)
	}
}

func TestHandshakeFake(t *testing.T) {
	s, c := newFake(t, 5*time.Second)
	var got *mysqlwire.HandshakeResponse
	var switched []byte
	wait := serve(func() error {
		if err := s.send(greeting(fakeCaps)); err != nil {
			return err
		}
		p, err := s.read()
		if err != nil {
			return err
		}
		if got, err = mysqlwire.ParseHandshakeResponse(p); err != nil {
			return err
		}
		// Switch to caching_sha2_password, take the fast path.
		salt2 := []byte("ABCDEFGHIJKLMNOPQRST")
		if err := s.send(mysqlwire.AppendAuthSwitch(nil, pluginSHA2, salt2)); err != nil {
			return err
		}
		if switched, err = s.read(); err != nil {
			return err
		}
		if !bytes.Equal(switched, ScrambleSHA2(salt2, []byte("pw"))) {
			return errors.New("fake: wrong caching_sha2_password scramble")
		}
		return s.send([]byte{0x01, 0x03}, okPacket(mysqlwire.OK{Status: mysqlwire.StatusAutocommit}))
	})
	err := c.Handshake(Options{User: "u", Password: "pw", DB: "d", Caps: CapConnectAttrs})
	if werr := wait(); werr != nil {
		t.Fatal(werr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if c.ConnID != 42 || c.Version != "11.4.0-fake" || !bytes.Equal(c.Salt, fakeSalt) || c.AuthOK == nil {
		t.Fatalf("greeting as read: id %d version %q salt %q, auth OK % x", c.ConnID, c.Version, c.Salt, c.AuthOK)
	}
	wantCaps := (DefaultCaps | CapConnectAttrs | CapConnectWithDB) & fakeCaps
	if got.Caps != wantCaps || c.Caps != wantCaps {
		t.Errorf("capabilities sent %#x (kept %#x), want %#x", got.Caps, c.Caps, wantCaps)
	}
	if got.User != "u" || got.DB != "d" || got.Plugin != pluginNative || got.Collation != DefaultCollation ||
		got.Attrs["_client_name"] != "rawclient" {
		t.Errorf("handshake response %+v", got)
	}
	if !bytes.Equal(got.AuthResp, ScrambleNative(fakeSalt, []byte("pw"))) {
		t.Errorf("native scramble % x", got.AuthResp)
	}
}

// callReply is a CALL's answer: a result set of (id, v) rows, then the OK
// that ends the CALL. With deprecateEOF the result set ends in an OK
// packet with the EOF header, else in EOF packets.
func callReply(deprecateEOF bool, rows ...[]any) [][]byte {
	cols := []mysqlwire.Column{{Name: "id", Type: TypeLongLong}, {Name: "v", Type: TypeVarString}}
	out := [][]byte{mysqlwire.AppendLenEnc(nil, uint64(len(cols)))}
	for _, c := range cols {
		out = append(out, mysqlwire.AppendColumnDef(nil, c, false))
	}
	more := mysqlwire.StatusAutocommit | mysqlwire.StatusMoreResults
	if !deprecateEOF {
		out = append(out, mysqlwire.AppendEOF(nil, 0, more))
	}
	for _, r := range rows {
		out = append(out, mysqlwire.AppendTextRow(nil, r))
	}
	if deprecateEOF {
		end := okPacket(mysqlwire.OK{Status: more})
		end[0] = mysqlwire.HeaderEOF
		out = append(out, end)
	} else {
		out = append(out, mysqlwire.AppendEOF(nil, 0, more))
	}
	return append(out, okPacket(mysqlwire.OK{Status: mysqlwire.StatusAutocommit}))
}

func TestExecFake(t *testing.T) {
	for _, deprecateEOF := range []bool{false, true} {
		s, c := newFake(t, 5*time.Second)
		caps := fakeCaps
		if !deprecateEOF {
			caps &^= CapDeprecateEOF
		}
		s.login(c, lean, caps)
		answer := func(reply ...[]byte) func() error {
			return func() error {
				p, err := s.read()
				if err != nil {
					return err
				}
				if p[0] != ComQuery {
					return errors.New("fake: not COM_QUERY")
				}
				return s.send(reply...)
			}
		}

		// Every result set is read, and the rows' values reach the callback.
		wait := serve(answer(callReply(deprecateEOF, []any{int64(1), "a"}, []any{int64(2), nil}, []any{int64(3), "c"})...))
		var got []string
		r, err := c.Exec("CALL p()", func(cols [][]byte) error {
			v := "NULL"
			if cols[1] != nil {
				v = string(cols[1])
			}
			got = append(got, string(cols[0])+"="+v)
			return nil
		})
		if werr := wait(); werr != nil {
			t.Fatal(werr)
		}
		if err != nil || r.Rows != 3 || r.Affected != 0 || !slices.Equal(got, []string{"1=a", "2=NULL", "3=c"}) {
			t.Fatalf("deprecateEOF %v: CALL: %+v, %v, rows %v", deprecateEOF, r, err, got)
		}

		// A callback's error comes back after the whole reply: the
		// connection stays usable.
		stop := errors.New("stop")
		wait = serve(answer(callReply(deprecateEOF, []any{int64(1), "a"}, []any{int64(2), "b"})...))
		calls := 0
		_, err = c.Exec("CALL p()", func([][]byte) error { calls++; return stop })
		if werr := wait(); werr != nil {
			t.Fatal(werr)
		}
		if !errors.Is(err, stop) || calls != 1 {
			t.Fatalf("callback error: %v after %d calls", err, calls)
		}

		// An ERR is a *mysqlwire.SQLError; an OK reports affected rows.
		wait = serve(answer(mysqlwire.AppendErr(nil, &mysqlwire.SQLError{Code: 1146, State: "42S02", Msg: "no table"})))
		_, err = c.Exec("SELECT * FROM nope", nil)
		var se *mysqlwire.SQLError
		if werr := wait(); werr != nil {
			t.Fatal(werr)
		}
		if !errors.As(err, &se) || se.Code != 1146 || se.State != "42S02" {
			t.Fatalf("ERR reply: %v", err)
		}
		wait = serve(answer(okPacket(mysqlwire.OK{AffectedRows: 300, Status: mysqlwire.StatusAutocommit})))
		r, err = c.Exec("UPDATE t SET v = 1", nil)
		if werr := wait(); werr != nil {
			t.Fatal(werr)
		}
		if err != nil || r.Affected != 300 || r.Rows != 0 {
			t.Fatalf("UPDATE: %+v, %v", r, err)
		}
	}
}

// replyLoop answers every command with reply (whole packets, sequence 1
// on) until the connection closes, allocating nothing once its buffer
// has grown.
func (s *fakeServer) replyLoop(payloads [][]byte) {
	var reply []byte
	for i, p := range payloads {
		reply = append(reply, byte(len(p)), byte(len(p)>>8), byte(len(p)>>16), byte(i+1))
		reply = append(reply, p...)
	}
	go func() {
		var buf []byte
		for {
			var err error
			s.r.Seq = 0
			if buf, err = s.r.ReadPacket(buf, 0); err != nil {
				return
			}
			if _, err := s.nc.Write(reply); err != nil {
				return
			}
		}
	}()
}

// TestExecAllocatesNothing: once its buffers have grown, a statement and
// its reply cost the client no allocation (the fake server allocates
// nothing either: its reply is written as it was built).
func TestExecAllocatesNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	s, c := newFake(t, 0)
	s.login(c, lean, fakeCaps)
	s.replyLoop(callReply(true, []any{int64(1), "a"}, []any{int64(2), nil}))
	row := func(cols [][]byte) error { return nil }
	n := testing.AllocsPerRun(200, func() {
		if r, err := c.Exec("CALL p()", row); err != nil || r.Rows != 2 {
			t.Fatalf("%+v, %v", r, err)
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per statement, want 0", n)
	}
}

// BenchmarkExec is the benchmarks' statement path: a CALL's two result
// sets, rows to a callback, against a server that answers at once.
func BenchmarkExec(b *testing.B) {
	s, c := newFake(b, 0)
	s.login(c, lean, fakeCaps)
	s.replyLoop(callReply(true, []any{int64(1), "a"}, []any{int64(2), nil}))
	row := func(cols [][]byte) error { return nil }
	b.ReportAllocs()
	for b.Loop() {
		if r, err := c.Exec("CALL p()", row); err != nil || r.Rows != 2 {
			b.Fatalf("%+v, %v", r, err)
		}
	}
}

// TestLenientSeq: a reply that starts at sequence 0 (a server's
// unsolicited ERR) is out of order, unless the connection is lenient.
func TestLenientSeq(t *testing.T) {
	for _, lenient := range []bool{false, true} {
		s, c := newFake(t, 5*time.Second)
		s.login(c, lean, fakeCaps)
		c.LenientSeq = lenient
		wait := serve(func() error {
			if _, err := s.read(); err != nil {
				return err
			}
			s.r.Seq = 0
			return s.send(mysqlwire.AppendErr(nil, &mysqlwire.SQLError{Code: 1927, State: "70100", Msg: "killed"}))
		})
		_, err := c.Exec("SELECT 1", nil)
		if werr := wait(); werr != nil {
			t.Fatal(werr)
		}
		var se *mysqlwire.SQLError
		if lenient && (!errors.As(err, &se) || se.Code != 1927) {
			t.Fatalf("lenient: %v, want ERR 1927", err)
		}
		if !lenient && !errors.Is(err, mysqlwire.ErrOutOfOrder) {
			t.Fatalf("strict: %v, want ErrOutOfOrder", err)
		}
	}
}

// TestWritePacketSplits: a payload of MaxPayload bytes or more goes out
// in continuation packets, read back whole.
func TestWritePacketSplits(t *testing.T) {
	s, c := newFake(t, 30*time.Second)
	payload := bytes.Repeat([]byte{'x'}, mysqlwire.MaxPayload+10)
	payload[0] = ComQuery
	var got []byte
	wait := serve(func() error {
		var err error
		got, err = s.read()
		return err
	})
	if err := c.Command(payload); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("read back %d bytes, sent %d", len(got), len(payload))
	}
}

func TestDecodeStrict(t *testing.T) {
	st := mysqlwire.AppendLenEncString(nil, []byte("\x00\x05\x04abcd")) // any bytes: not decoded here
	good := mysqlwire.AppendOK(nil, mysqlwire.OK{AffectedRows: 1, Status: mysqlwire.StatusSessionChanged, Info: []byte("i"), StateInfo: st}, true)
	ok, err := DecodeOK(good, true)
	if err != nil || ok.AffectedRows != 1 || string(ok.Info) != "i" || !bytes.Equal(ok.StateInfo, st) {
		t.Fatalf("DecodeOK(% x) = %+v, %v", good, ok, err)
	}
	if ok, err := DecodeOK(append(slices.Clone(good), 'z'), false); err != nil || string(ok.Info[len(ok.Info)-1:]) != "z" {
		t.Fatalf("without session tracking the info runs to the end: %+v, %v", ok, err)
	}
	flagOnly := mysqlwire.AppendOK(nil, mysqlwire.OK{}, true)
	mysqlwire.SetOKStatus(flagOnly, mysqlwire.StatusSessionChanged)
	for name, p := range map[string][]byte{
		"trailing byte":            append(slices.Clone(good), 'z'),
		"state flag without state": flagOnly,
		"EOF header":               append([]byte{mysqlwire.HeaderEOF}, good[1:]...),
		"NULL affected rows":       append([]byte{0, 0xfb}, good[2:]...),
		"short":                    {0, 0, 0},
	} {
		if _, err := DecodeOK(p, true); !errors.Is(err, ErrProtocol) {
			t.Errorf("DecodeOK %s (% x): %v, want ErrProtocol", name, p, err)
		}
	}

	e := mysqlwire.AppendErr(nil, &mysqlwire.SQLError{Code: 1064, State: "42000", Msg: "syntax"})
	if got, err := DecodeErr(e); err != nil || got.Code != 1064 || got.State != "42000" || got.Msg != "syntax" {
		t.Fatalf("DecodeErr = %+v, %v", got, err)
	}
	for name, p := range map[string][]byte{
		"no SQLSTATE marker": {0xff, 0x28, 0x04, 'n', 'o', ' ', 's', 't', 'a', 't', 'e'},
		"lowercase SQLSTATE": append([]byte{0xff, 0x28, 0x04, '#'}, "42x00msg"...),
		"short":              {0xff, 0x28},
	} {
		if _, err := DecodeErr(p); !errors.Is(err, ErrProtocol) {
			t.Errorf("DecodeErr %s: %v, want ErrProtocol", name, err)
		}
	}
	if _, _, err := DecodeEOF(append(mysqlwire.AppendEOF(nil, 0, 2), 0)); !errors.Is(err, ErrProtocol) {
		t.Errorf("DecodeEOF of 6 bytes: %v, want ErrProtocol", err)
	}
}
