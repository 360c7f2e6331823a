package proxy

// Fuzz targets for every parser of bytes that come from outside: session
// state information, the connection phase, and whole client commands
// against a running proxy. The packet codecs' own targets are in
// mysqlwire. Seed corpora are in testdata/fuzz/<Name>/.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// FuzzParseStateInfo: AddStateInfo never panics; what it accepts, encoded
// again by an independent encoder, parses to the same report; and whatever
// the strict independent decoder accepts, it accepts too, with each
// variable recorded as its class says and the same schema.
func FuzzParseStateInfo(f *testing.F) {
	f.Fuzz(func(t *testing.T, info []byte) {
		var sc varstate.Report
		good := sc.AddStateInfo(info)
		if es, err := rawmysql.DecodeState(info); err == nil {
			if !good {
				t.Fatalf("AddStateInfo rejects well-formed state % x (%+v)", info, es)
			}
			var schema string
			var schemaSet bool
			for _, e := range es {
				switch e.Type {
				case 0:
					if !hasVar(sc, e.Name, e.Value) {
						t.Fatalf("state % x: variable %s=%q missing from %+v", info, e.Name, e.Value, sc)
					}
				case 1:
					schema, schemaSet = e.Value, true
				}
			}
			if sc.Schema != schema || sc.SchemaSet != schemaSet {
				t.Fatalf("state % x: schema %q (%v), want %q", info, sc.Schema, sc.SchemaSet, schema)
			}
		}
		if !good {
			return
		}
		enc := encodeState(sc)
		var again varstate.Report
		if !again.AddStateInfo(enc) {
			t.Fatalf("re-encoded state % x rejected", enc)
		}
		if !reflect.DeepEqual(again, sc) {
			t.Fatalf("state % x parsed as %+v; re-encoded % x parsed as %+v", info, sc, enc, again)
		}
	})
}

// hasVar reports whether sc recorded variable name=value as its class says:
// among the restored ones, as last_gtid, or as a pin.
func hasVar(sc varstate.Report, name, value string) bool {
	n := lower(name)
	switch varstate.Classify(n) {
	case varstate.Record:
		return sc.LastGTID != ""
	case varstate.Pin:
		return sc.PinVar != ""
	}
	for _, x := range sc.Vars {
		if x.Value == value && x.Name == n {
			return true
		}
	}
	return false
}

func lower(s string) string { return string(bytes.ToLower([]byte(s))) }

// lenEncStrings encodes each of ss as a length-encoded string.
func lenEncStrings(ss ...string) []byte {
	var b []byte
	for _, s := range ss {
		b = mysqlwire.AppendLenEncString(b, []byte(s))
	}
	return b
}

// encodeState writes session state information in the wire format.
func encodeState(sc varstate.Report) []byte {
	var b []byte
	entry := func(typ byte, data []byte) {
		b = append(b, typ)
		b = mysqlwire.AppendLenEncString(b, data)
	}
	for _, v := range sc.Vars {
		entry(0, lenEncStrings(v.Name, v.Value))
	}
	if sc.LastGTID != "" {
		entry(0, lenEncStrings("last_gtid", sc.LastGTID))
	}
	if sc.PinVar != "" {
		entry(0, lenEncStrings(sc.PinVar, "OFF"))
	}
	if sc.SchemaSet {
		entry(1, lenEncStrings(sc.Schema))
	}
	if sc.Changed {
		entry(2, []byte("1"))
	}
	return b
}

// FuzzHandshake: whatever a client sends during the connection phase
// (handshake responses, SSLRequests, authentication switch responses,
// truncated or oversized packets), connect answers or fails without a
// panic, and succeeds only for a configured user with the right
// password. The salt is fixed so that seeds with valid scrambles reach the
// success paths.
func FuzzHandshake(f *testing.F) {
	cfg := config.Default()
	cfg.Users = []config.User{
		{Name: "app", Password: "app"},
		{Name: "empty"},
		{Name: "sha", Password: "sha-secret", AuthPlugin: "caching_sha2_password"},
	}
	cfg.Auth.FailureDelay = 0 // every input checked at once
	srv, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		f.Fatal(err)
	}
	salt := []byte("0123456789abcdefghij")
	srv.salt = func() []byte { return append([]byte(nil), salt...) }
	hello := func(caps uint32, user string, auth []byte, plugin string, rest ...byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, caps)
		b = binary.LittleEndian.AppendUint32(b, 1<<24)
		b = append(b, 45)
		b = append(b, make([]byte, 23)...)
		b = append(b, user...)
		b = append(b, 0, byte(len(auth)))
		b = append(b, auth...)
		b = append(b, plugin...)
		b = append(b, 0)
		return append(b, rest...)
	}
	pkts := func(ps ...[]byte) []byte {
		var out []byte
		for i, p := range ps {
			out = append(out, rawmysql.Frame(uint8(i+1), p)...)
		}
		return out
	}
	caps := rawmysql.DefaultCaps | rawmysql.CapConnectWithDB
	f.Add(pkts(hello(rawmysql.DefaultCaps, "app", rawmysql.ScrambleNative(salt, []byte("app")), "mysql_native_password")))
	f.Add(pkts(hello(rawmysql.DefaultCaps, "empty", []byte("not-empty"), "mysql_native_password")))
	f.Add(pkts(hello(rawmysql.DefaultCaps, "empty", nil, "mysql_native_password")))
	f.Add(pkts(hello(rawmysql.DefaultCaps, "sha", rawmysql.ScrambleNative(salt, []byte("x")), "mysql_native_password"), rawmysql.ScrambleSHA2(salt, []byte("sha-secret"))))
	f.Add(pkts(hello(rawmysql.DefaultCaps, "sha", rawmysql.ScrambleSHA2(salt, []byte("sha-secret")), "caching_sha2_password")))
	f.Add(pkts(hello(caps|rawmysql.CapConnectAttrs, "app", rawmysql.ScrambleNative(salt, []byte("app")), "mysql_native_password", 5, 1, 'k', 2, 'v', 'v')))
	f.Add(pkts(append(binaryID(rawmysql.DefaultCaps|rawmysql.CapSSL), make([]byte, 28)...)))
	f.Add(pkts(hello(rawmysql.DefaultCaps&^rawmysql.CapProtocol41, "app", nil, "")))
	f.Add(pkts([]byte{1, 2, 3}))
	f.Add([]byte{0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		server, client := net.Pipe()
		defer client.Close()
		go func() {
			_, _ = io.Copy(io.Discard, client)
		}()
		go func() {
			_ = client.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = client.Write(data)
			_ = client.Close()
		}()
		_ = server.SetDeadline(time.Now().Add(2 * time.Second))
		hang := time.AfterFunc(5*time.Second, func() { panic("connect hangs") })
		h, _, _, err := srv.connect(server, 1, nil)
		hang.Stop()
		server.Close()
		if err == nil {
			u, ok := srv.users.get(h.User)
			if !ok {
				t.Fatalf("unknown user %q logged in", h.User)
			}
			if u.Password != "" && len(h.AuthResp) == 0 {
				t.Fatalf("user %q logged in without a password", h.User)
			}
		}
	})
}

// fuzzProxy is the one proxy FuzzClientCommand uses for a whole run (one per
// fuzzing worker process).
type fuzzProxy struct {
	p     *testProxy
	watch *logWatch
}

func startFuzzProxy(f *testing.F) *fuzzProxy {
	w := &logWatch{}
	f.Cleanup(func() { w.check(f) }) // after the server closed
	log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// Inputs that fail a COM_CHANGE_USER are checked at once, not slowed.
	p := newTestProxy(f, log, func(c *config.Config) { c.Auth.FailureDelay = 0 })
	mustExec(f, p.direct(f), "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))")
	mustExec(f, p.direct(f), "INSERT INTO t VALUES (1, 'one'), (2, NULL)")
	return &fuzzProxy{p: p, watch: w}
}

// FuzzClientCommand sends each input as one command packet on a fresh
// connection: holdfast must answer with well-formed packets or close the
// connection within the hang guard, never panic, and serve the next client.
func FuzzClientCommand(f *testing.F) {
	fp := startFuzzProxy(f)
	f.Fuzz(func(t *testing.T, cmd []byte) {
		if len(cmd) > 1<<16 {
			t.Skip()
		}
		if err := fp.exchange(cmd); err != nil {
			t.Fatalf("command % x: %v", trunc(cmd), err)
		}
		c, err := rawDial(fp.p.addr, rawmysql.Options{User: "app", Password: "app", DB: fp.p.db})
		if err != nil {
			t.Fatalf("after command % x: the next client cannot log in: %v", trunc(cmd), err)
		}
		defer c.NC.Close()
		rs, err := c.Results("SELECT 'next'")
		if err != nil || len(rs) != 1 || rs[0].Cell(0, 0) != "next" {
			t.Fatalf("after command % x: the next client's query: %+v, %v", trunc(cmd), rs, err)
		}
		fp.watch.mu.Lock()
		panics := append([]string(nil), fp.watch.panics...)
		fp.watch.mu.Unlock()
		if len(panics) > 0 {
			t.Fatalf("command % x: the server recovered from a panic: %s", trunc(cmd), panics[0])
		}
	})
}

// exchange runs one command and judges the answer. Inputs of odd length
// run on a connection with multi-statements and session tracking.
func (fp *fuzzProxy) exchange(cmd []byte) error {
	o := rawmysql.Options{User: "app", Password: "app", DB: fp.p.db}
	if len(cmd)%2 == 1 {
		o.Caps = rawmysql.CapMultiStatements | rawmysql.CapSessionTrack
	}
	c, err := rawDial(fp.p.addr, o)
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	defer c.NC.Close()
	c.Guard = 20 * time.Second // hang guard
	if err := c.Command(cmd); err != nil {
		return err
	}
	closed := func(err error) error {
		if rawmysql.IsClosed(err) {
			return nil
		}
		return err
	}
	var first byte
	if len(cmd) > 0 {
		first = cmd[0]
	}
	switch {
	case len(cmd) == 0:
		if _, err := c.ReadAnyResponse(0); err != nil {
			return closed(err)
		}
	case first == rawmysql.ComQuit:
		rest, err := c.WaitClosed()
		if err != nil || len(rest) != 0 {
			return fmt.Errorf("COM_QUIT answered % x, %v", trunc(rest), err)
		}
		return nil
	case first == rawmysql.ComStmtSendLongData || first == rawmysql.ComStmtClose:
		// No reply; the ping below must be the first answer.
	default:
		sw, err := c.ReadAnyResponse(first)
		if err != nil {
			return closed(err)
		}
		if sw {
			// Authentication switch: answer wrongly; expect ERR 1045.
			if err := c.WritePacket(make([]byte, 20)); err != nil {
				return closed(err)
			}
			p, err := c.ReadPacket()
			if err != nil {
				return closed(err)
			}
			if e, err := rawmysql.DecodeErr(p); err != nil || e.Code != 1045 {
				return fmt.Errorf("after a wrong auth switch response: % x", trunc(p))
			}
			return closed(expectNothing(c))
		}
	}
	p, err := c.RoundTrip([]byte{rawmysql.ComPing})
	if err != nil {
		return closed(err)
	}
	if _, err := rawmysql.DecodeOK(p, c.Caps&rawmysql.CapSessionTrack != 0); err != nil {
		return fmt.Errorf("COM_PING after the command: %w", err)
	}
	return nil
}

// expectNothing checks that the server closes without sending more.
func expectNothing(c *rawConn) error {
	rest, err := c.WaitClosed()
	if err == nil && len(rest) != 0 {
		return fmt.Errorf("unexpected bytes % x", trunc(rest))
	}
	return err
}
