package proxy

// Fuzz targets for every parser of bytes that come from outside: backend OK
// packets and their session state, the greeting holdfast patches, the
// handshake reader, and whole client commands against a running proxy.
// Seed corpora are in testdata/fuzz/<Name>/.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzParseOK: parseOK never panics, and a packet it accepts survives
// appendOK (as holdfast writes OKs to session-tracking clients): the
// re-encoded packet parses to the same fields, and an independent decoder
// (rawclient_test.go) accepts it. appendOK drops SESSION_STATE_CHANGED
// when there is no state information to send; that is the one field
// allowed to change.
func FuzzParseOK(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte, track bool) {
		in := append([]byte(nil), p...)
		ok, good := parseOK(p, track)
		if !bytes.Equal(in, p) {
			t.Fatal("parseOK modified its input")
		}
		for _, st := range []bool{false, true} {
			_ = appendOK(nil, ok, st)
		}
		if !good {
			return
		}
		want := ok
		if len(want.stateInfo) == 0 {
			want.status &^= statusSessionChanged
		}
		enc := appendOK(nil, ok, true)
		got, good := parseOK(enc, true)
		if !good {
			t.Fatalf("appendOK(%+v) = % x, which parseOK rejects", ok, enc)
		}
		if !sameOK(got, want) {
			t.Fatalf("round trip of % x (track %v):\nparsed   %+v\nencoded  % x\nreparsed %+v", p, track, ok, enc, got)
		}
		raw, err := decodeOK(enc, true)
		if err != nil {
			t.Fatalf("appendOK(%+v) = % x: %v", ok, enc, err)
		}
		if raw.affected != ok.affectedRows || raw.insertID != ok.insertID || raw.status != want.status ||
			raw.warnings != ok.warnings || raw.info != string(ok.info) || !bytes.Equal(raw.state, ok.stateInfo) {
			t.Fatalf("appendOK(%+v) = % x decodes independently as %+v", ok, enc, raw)
		}
		// Without session tracking: no state, no flag, info to the end.
		enc = appendOK(nil, ok, false)
		raw, err = decodeOK(enc, false)
		if err != nil || raw.status&stStateChanged != 0 || raw.status != ok.status&^statusSessionChanged || raw.info != string(ok.info) {
			t.Fatalf("appendOK(%+v, false) = % x decodes as %+v, %v", ok, enc, raw, err)
		}
	})
}

func sameOK(a, b okPacket) bool {
	return a.affectedRows == b.affectedRows && a.insertID == b.insertID && a.status == b.status &&
		a.warnings == b.warnings && bytes.Equal(a.info, b.info) && bytes.Equal(a.stateInfo, b.stateInfo)
}

// FuzzParseStateInfo: parseStateInfo never panics; what it accepts,
// encoded again by an independent encoder, parses to the same changes; and
// whatever the strict independent decoder accepts, it accepts too, with
// the same variables and schema.
func FuzzParseStateInfo(f *testing.F) {
	f.Fuzz(func(t *testing.T, info []byte) {
		var sc stateChanges
		good := parseStateInfo(info, &sc)
		if es, err := decodeState(info); err == nil {
			if !good {
				t.Fatalf("parseStateInfo rejects well-formed state % x (%+v)", info, es)
			}
			var want stateChanges
			for _, e := range es {
				switch e.typ {
				case 0:
					want.vars = append(want.vars, varChange{e.name, e.value})
				case 1:
					want.schema, want.schemaS = e.value, true
				}
			}
			for _, v := range want.vars {
				if !hasVar(sc, v) {
					t.Fatalf("state % x: variable %s=%q missing from %+v", info, v.name, v.value, sc)
				}
			}
			if sc.schema != want.schema || sc.schemaS != want.schemaS {
				t.Fatalf("state % x: schema %q (%v), want %q", info, sc.schema, sc.schemaS, want.schema)
			}
		}
		if !good {
			return
		}
		enc := encodeState(sc)
		var again stateChanges
		if !parseStateInfo(enc, &again) {
			t.Fatalf("re-encoded state % x rejected", enc)
		}
		if !reflect.DeepEqual(again, sc) {
			t.Fatalf("state % x parsed as %+v; re-encoded % x parsed as %+v", info, sc, enc, again)
		}
	})
}

// hasVar reports whether sc recorded v (lower-cased, or as a pin).
func hasVar(sc stateChanges, v varChange) bool {
	if strings.HasPrefix(lower(v.name), "session_track_") {
		return sc.pinVar != "" // the last one of them
	}
	for _, x := range sc.vars {
		if x.value == v.value && x.name == lower(v.name) {
			return true
		}
	}
	return sc.pinVar != "" && sc.pinVar == lower(v.name)
}

func lower(s string) string { return string(bytes.ToLower([]byte(s))) }

// encodeState writes session state information in the wire format.
func encodeState(sc stateChanges) []byte {
	var b []byte
	entry := func(typ byte, data []byte) {
		b = append(b, typ)
		b = putLenEncStr(b, string(data))
	}
	for _, v := range sc.vars {
		entry(0, putLenEncStr(putLenEncStr(nil, v.name), v.value))
	}
	if sc.pinVar != "" {
		entry(0, putLenEncStr(putLenEncStr(nil, sc.pinVar), "OFF"))
	}
	if sc.schemaS {
		entry(1, putLenEncStr(nil, sc.schema))
	}
	if sc.changed {
		entry(2, []byte("1"))
	}
	return b
}

// FuzzPatchGreeting: patchGreeting never panics, never changes a packet's
// length, and on a protocol-10 greeting changes exactly the capability and
// status fields: capabilities gain advertisedCaps, status is AUTOCOMMIT.
func FuzzPatchGreeting(f *testing.F) {
	f.Fuzz(func(t *testing.T, g []byte) {
		in := append([]byte(nil), g...)
		out := patchGreeting(append([]byte(nil), g...))
		if len(out) != len(in) {
			t.Fatalf("length %d, want %d", len(out), len(in))
		}
		pos := -1
		if len(in) >= 6 && in[4] == 10 {
			if nul := bytes.IndexByte(in[5:], 0); nul >= 0 && len(in) >= 5+nul+1+13+7 {
				pos = 5 + nul + 1 + 13
			}
		}
		if pos < 0 {
			if !bytes.Equal(out, in) {
				t.Fatalf("not a greeting, yet changed: % x -> % x", in, out)
			}
			return
		}
		for i := range in {
			field := i >= pos && i < pos+2 || i >= pos+3 && i < pos+7
			if !field && out[i] != in[i] {
				t.Fatalf("byte %d changed (%#x -> %#x); caps start at %d", i, in[i], out[i], pos)
			}
		}
		caps := func(b []byte) uint32 {
			return uint32(binary.LittleEndian.Uint16(b[pos:])) | uint32(binary.LittleEndian.Uint16(b[pos+5:]))<<16
		}
		if caps(out) != caps(in)|advertisedCaps {
			t.Fatalf("capabilities %#x, want %#x", caps(out), caps(in)|advertisedCaps)
		}
		if st := binary.LittleEndian.Uint16(out[pos+3:]); st != stAutocommit {
			t.Fatalf("status %#x", st)
		}
		if again := patchGreeting(append([]byte(nil), out...)); !bytes.Equal(again, out) {
			t.Fatal("patching twice changed the greeting again")
		}
		// The independent client reads what it can of it.
		c := &rawConn{br: bufioReader(nil), guard: time.Second}
		c.back = out[4:]
		if len(out) > 4 && c.readGreeting() == nil && c.srvCaps&advertisedCaps != advertisedCaps {
			t.Fatalf("client sees capabilities %#x", c.srvCaps)
		}
	})
}

// scriptConn is a net.Conn whose reads come from data in chunks whose
// sizes come from sizes, and which counts what it handed out.
type scriptConn struct {
	net.Conn
	data     []byte
	sizes    []byte
	i        int
	consumed int
}

func (s *scriptConn) Read(p []byte) (int, error) {
	if s.consumed == len(s.data) {
		return 0, io.EOF
	}
	n := len(p)
	if len(s.sizes) > 0 {
		n = min(n, 1+int(s.sizes[s.i%len(s.sizes)]))
		s.i++
	}
	n = copy(p[:n], s.data[s.consumed:])
	s.consumed += n
	return n, nil
}

// FuzzHandshakeConnRead: whatever the client sends and however the kernel
// splits it, handshakeConn returns the stream unchanged, reads nothing
// ahead of what it returns, and (until an SSLRequest hands the stream to
// TLS) never returns bytes of two packets from one Read.
func FuzzHandshakeConnRead(f *testing.F) {
	f.Fuzz(func(t *testing.T, data, sizes []byte) {
		// Packet ends, computed independently, up to the TLS switch.
		var ends []int
		rawFrom := len(data) + 1
		for off, k := 0, 0; off+4 <= len(data); k++ {
			n := int(data[off]) | int(data[off+1])<<8 | int(data[off+2])<<16
			off += 4 + n
			ends = append(ends, off)
			if k == 0 && n == 32 {
				rawFrom = off
				break
			}
		}
		sc := &scriptConn{data: data, sizes: sizes}
		h := &handshakeConn{Conn: sc}
		var got []byte
		buf := make([]byte, 300)
		for i := 0; ; i++ {
			if i > 2*len(data)+10 {
				t.Fatalf("no progress after %d reads (%d of %d bytes)", i, len(got), len(data))
			}
			want := 1 + i%len(buf)
			if len(sizes) > 0 {
				want = 1 + int(sizes[(i+7)%len(sizes)])
			}
			n, err := h.Read(buf[:want])
			if n < 0 || n > want {
				t.Fatalf("Read(%d bytes) = %d", want, n)
			}
			start := len(got)
			got = append(got, buf[:n]...)
			if sc.consumed != len(got) {
				t.Fatalf("after %d bytes returned, %d were read from the connection", len(got), sc.consumed)
			}
			if start < rawFrom {
				for _, e := range ends {
					if start < e && len(got) > e && e <= rawFrom {
						t.Fatalf("one Read returned bytes %d..%d across the packet end at %d", start, len(got), e)
					}
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("stream changed: got % x, want % x", got, data)
		}
		if rawFrom <= len(data) && !h.raw {
			t.Fatalf("no pass-through after a 32-byte first packet")
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
	p := newTestProxy(f, log)
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
		c, err := rawDial(fp.p.addr, rawOpts{user: "app", pass: "app", db: fp.p.db})
		if err != nil {
			t.Fatalf("after command % x: the next client cannot log in: %v", trunc(cmd), err)
		}
		defer c.nc.Close()
		rs, err := c.query("SELECT 'next'")
		if err != nil || len(rs) != 1 || rs[0].cell(0, 0) != "next" {
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
	o := rawOpts{user: "app", pass: "app", db: fp.p.db}
	if len(cmd)%2 == 1 {
		o.caps = capMultiStatements | capSessionTrack
	}
	c, err := rawDial(fp.p.addr, o)
	if err != nil {
		return fmt.Errorf("login: %w", err)
	}
	defer c.nc.Close()
	c.guard = 20 * time.Second // hang guard
	if err := c.command(cmd); err != nil {
		return err
	}
	closed := func(err error) error {
		if isClosed(err) {
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
		if _, err := c.readAnyResponse(0); err != nil {
			return closed(err)
		}
	case first == rcQuit:
		rest, err := c.waitClosed()
		if err != nil || len(rest) != 0 {
			return fmt.Errorf("COM_QUIT answered % x, %v", trunc(rest), err)
		}
		return nil
	case first == rcStmtSendLong || first == rcStmtClose:
		// No reply; the ping below must be the first answer.
	default:
		sw, err := c.readAnyResponse(first)
		if err != nil {
			return closed(err)
		}
		if sw {
			// Authentication switch: answer wrongly; expect ERR 1045.
			if err := c.writePacket(make([]byte, 20)); err != nil {
				return closed(err)
			}
			p, err := c.readPacket()
			if err != nil {
				return closed(err)
			}
			if e, err := decodeErr(p); err != nil || e.Code != 1045 {
				return fmt.Errorf("after a wrong auth switch response: % x", trunc(p))
			}
			return closed(expectNothing(c))
		}
	}
	p, err := c.roundTrip([]byte{rcPing})
	if err != nil {
		return closed(err)
	}
	if _, err := decodeOK(p, c.caps&capSessionTrack != 0); err != nil {
		return fmt.Errorf("COM_PING after the command: %w", err)
	}
	return nil
}

// expectNothing checks that the server closes without sending more.
func expectNothing(c *rawConn) error {
	rest, err := c.waitClosed()
	if err == nil && len(rest) != 0 {
		return fmt.Errorf("unexpected bytes % x", trunc(rest))
	}
	return err
}
