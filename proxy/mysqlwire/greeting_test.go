package mysqlwire

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/go-mysql-org/go-mysql/mysql"
)

const testCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION |
	mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_TRANSACTIONS | mysql.CLIENT_SESSION_TRACK

// greetingBytes is a greeting as MySQL 8 sends it: version 8.0.36,
// connection 7, caps testCaps, collation 255, status autocommit.
var greetingBytes = []byte("\x0a8.0.36\x00\x07\x00\x00\x0001234567\x00" +
	"\x01\xa2\xff\x02\x00\x88\x00\x15\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00" +
	"89abcdefghij\x00caching_sha2_password\x00")

func TestGreetingBytes(t *testing.T) {
	g, ok := ParseGreeting(greetingBytes)
	want := Greeting{Version: "8.0.36", ConnID: 7, Salt: []byte("0123456789abcdefghij"), Caps: testCaps,
		Collation: 255, Status: StatusAutocommit, Plugin: "caching_sha2_password"}
	if !ok || !reflect.DeepEqual(g, want) {
		t.Fatalf("ParseGreeting = %+v, %v\nwant %+v", g, ok, want)
	}
	if enc := AppendGreeting(nil, &g); !bytes.Equal(enc, greetingBytes) {
		t.Fatalf("AppendGreeting = %q\nwant %q", enc, greetingBytes)
	}
	if &g.Salt[0] == &greetingBytes[16] {
		t.Fatal("the salt aliases the packet")
	}
}

// TestGreetingMariaDB: without CLIENT_LONG_PASSWORD the reserved bytes
// are MariaDB's extended capabilities.
func TestGreetingMariaDB(t *testing.T) {
	g := Greeting{Version: "5.5.5-10.11.6-MariaDB", ConnID: 1 << 20, Salt: []byte("ABCDEFGHIJKLMNOPQRST"),
		Caps: testCaps &^ mysql.CLIENT_LONG_PASSWORD, Collation: 45, Status: StatusAutocommit,
		ExtCaps: ExtTypeInfo | ExtBulk, Plugin: "mysql_native_password"}
	back, ok := ParseGreeting(AppendGreeting(nil, &g))
	if !ok || !reflect.DeepEqual(back, g) {
		t.Fatalf("round trip: %+v, %v\nwant %+v", back, ok, g)
	}
	g.Caps |= mysql.CLIENT_LONG_PASSWORD
	if back, _ := ParseGreeting(AppendGreeting(nil, &g)); back.ExtCaps != 0 {
		t.Fatalf("extended capabilities read from a MySQL greeting: %#x", back.ExtCaps)
	}
}

func TestGreetingMalformed(t *testing.T) {
	for _, p := range [][]byte{nil, {9}, {10}, []byte("\x0a8.0"), greetingBytes[:20], greetingBytes[:35]} {
		if g, ok := ParseGreeting(p); ok || !reflect.DeepEqual(g, Greeting{}) {
			t.Errorf("ParseGreeting(%q) = %+v, %v", p, g, ok)
		}
	}
	// Without the scramble's second part: the first 8 bytes, no plugin.
	g, ok := ParseGreeting(greetingBytes[:36+10])
	if !ok || string(g.Salt) != "01234567" || g.Plugin != "" {
		t.Fatalf("truncated after the reserved bytes: %+v, %v", g, ok)
	}
}

var helloCaps = mysql.CLIENT_LONG_PASSWORD | mysql.CLIENT_PROTOCOL_41 | mysql.CLIENT_SECURE_CONNECTION |
	mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_CONNECT_WITH_DB | mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA |
	mysql.CLIENT_CONNECT_ATTRS

// helloBytes is a handshake response: user app, a 3-byte scramble, database
// shop, mysql_native_password, one attribute.
var helloBytes = []byte("\x09\x82\x38\x00\x00\x00\x00\x01\x2d" + string(make([]byte, 23)) +
	"app\x00\x03abcshop\x00mysql_native_password\x00\x06\x02_k\x02_v")

func TestHandshakeResponseBytes(t *testing.T) {
	h, err := ParseHandshakeResponse(helloBytes)
	want := &HandshakeResponse{Caps: helloCaps, MaxPacket: 1 << 24, Collation: 45, User: "app", AuthResp: []byte("abc"),
		DB: "shop", Plugin: "mysql_native_password", Attrs: map[string]string{"_k": "_v"}}
	if err != nil || !reflect.DeepEqual(h, want) {
		t.Fatalf("ParseHandshakeResponse = %+v, %v\nwant %+v", h, err, want)
	}
	if enc := AppendHandshakeResponse(nil, h); !bytes.Equal(enc, helloBytes) {
		t.Fatalf("AppendHandshakeResponse = %q\nwant %q", enc, helloBytes)
	}
	// The other two forms of the scramble, and no plugin named.
	for _, caps := range []uint32{helloCaps &^ mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA,
		helloCaps &^ (mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA | mysql.CLIENT_SECURE_CONNECTION)} {
		h := &HandshakeResponse{Caps: caps &^ (mysql.CLIENT_PLUGIN_AUTH | mysql.CLIENT_CONNECT_ATTRS), User: "u", AuthResp: []byte("xyz"), DB: "d"}
		back, err := ParseHandshakeResponse(AppendHandshakeResponse(nil, h))
		h.Plugin = "mysql_native_password"
		if err != nil || !reflect.DeepEqual(back, h) {
			t.Errorf("caps %#x: %+v, %v\nwant %+v", caps, back, err, h)
		}
	}
	// A plugin name the client did not terminate.
	p := bytes.Clone(helloBytes[:bytes.Index(helloBytes, []byte("_password"))+9])
	binaryCaps := helloCaps &^ mysql.CLIENT_CONNECT_ATTRS
	p[0], p[1] = byte(binaryCaps), byte(binaryCaps>>8)
	if h, err := ParseHandshakeResponse(p); err != nil || h.Plugin != "mysql_native_password" {
		t.Fatalf("unterminated plugin: %+v, %v", h, err)
	}
}

// TestResponseInPlace: the scramble and the capabilities of a response a
// client wrote are rewritten in place, as holdfast does to go-mysql's
// response to a backend, and read back as written.
func TestResponseInPlace(t *testing.T) {
	for _, caps := range []uint32{helloCaps, helloCaps &^ mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA} {
		h := &HandshakeResponse{Caps: caps, MaxPacket: 1 << 24, Collation: 45, User: "app",
			AuthResp: bytes.Repeat([]byte{1}, 20), DB: "shop", Plugin: "mysql_native_password"}
		p := AppendHandshakeResponse(nil, h)
		auth, plugin, ok := ResponseAuth(p)
		if !ok || plugin != "mysql_native_password" || !bytes.Equal(auth, h.AuthResp) {
			t.Fatalf("caps %#x: ResponseAuth = % x, %q, %v", caps, auth, plugin, ok)
		}
		copy(auth, bytes.Repeat([]byte{2}, 20))
		SetResponseCaps(p, caps&^mysql.CLIENT_LONG_PASSWORD, ExtTypeInfo)
		back, err := ParseHandshakeResponse(p)
		if err != nil || !bytes.Equal(back.AuthResp, bytes.Repeat([]byte{2}, 20)) || back.User != "app" || back.DB != "shop" ||
			back.Caps != caps&^mysql.CLIENT_LONG_PASSWORD || back.ExtCaps != ExtTypeInfo {
			t.Errorf("caps %#x: after the rewrite %+v, %v", caps, back, err)
		}
	}
	if _, _, ok := ResponseAuth(helloBytes[:38]); ok {
		t.Error("ResponseAuth accepted a truncated response")
	}
	short := []byte{1, 2, 3}
	SetResponseCaps(short, 0xffffffff, 1) // too short: left alone
	if !bytes.Equal(short, []byte{1, 2, 3}) {
		t.Errorf("a short response was written: % x", short)
	}
}

func TestHandshakeResponseMalformed(t *testing.T) {
	if _, err := ParseHandshakeResponse(helloBytes[:31]); !errors.Is(err, ErrHandshake) {
		t.Errorf("31 bytes: %v", err)
	}
	old := bytes.Clone(helloBytes)
	old[1] &^= byte(mysql.CLIENT_PROTOCOL_41 >> 8)
	if _, err := ParseHandshakeResponse(old); !errors.Is(err, ErrNoProtocol41) {
		t.Errorf("protocol 4.0: %v", err)
	}
	for _, n := range []int{32, 35, 36, 38, 41} { // in the user, the scramble, the database
		if h, err := ParseHandshakeResponse(helloBytes[:n]); !errors.Is(err, ErrHandshake) {
			t.Errorf("cut at %d: %+v, %v", n, h, err)
		}
	}
	// A broken attribute block: the pairs before the fault.
	p := append(bytes.Clone(helloBytes[:len(helloBytes)-7]), 0x09, 0x02, '_', 'k', 0x02, '_', 'v', 0x05, 'x')
	if h, err := ParseHandshakeResponse(p); err != nil || h.Attrs != nil {
		t.Errorf("attributes longer than the packet: %+v, %v", h, err)
	}
	p[len(p)-9] = 0x07
	if h, err := ParseHandshakeResponse(p); err != nil || !reflect.DeepEqual(h.Attrs, map[string]string{"_k": "_v"}) {
		t.Errorf("attributes with a truncated pair: %+v, %v", h, err)
	}
}

func TestSSLRequest(t *testing.T) {
	p := AppendHandshakeResponse(nil, &HandshakeResponse{Caps: helloCaps | mysql.CLIENT_SSL})[:32]
	if !IsSSLRequest(p) || IsSSLRequest(helloBytes[:32]) || IsSSLRequest(append(p, 0)) {
		t.Fatal("an SSLRequest is 32 bytes with CLIENT_SSL, and nothing else is")
	}
}

func TestAuthSwitch(t *testing.T) {
	p := AppendAuthSwitch(nil, "caching_sha2_password", []byte("0123456789abcdefghij"))
	want := []byte("\xfecaching_sha2_password\x000123456789abcdefghij\x00")
	if !bytes.Equal(p, want) {
		t.Fatalf("AppendAuthSwitch = %q, want %q", p, want)
	}
	plugin, data, ok := ParseAuthSwitch(p)
	if !ok || plugin != "caching_sha2_password" || string(data) != "0123456789abcdefghij" {
		t.Fatalf("ParseAuthSwitch = %q, %q, %v", plugin, data, ok)
	}
	for _, p := range [][]byte{nil, {0xfe}, []byte("\xfeplugin"), []byte("\x00x\x00")} {
		if _, _, ok := ParseAuthSwitch(p); ok {
			t.Errorf("ParseAuthSwitch(%q) accepted", p)
		}
	}
}

// FuzzParseGreeting: ParseGreeting never panics; a greeting it accepts
// is written again by AppendGreeting as one that parses to the same
// fields (when its scramble was whole).
func FuzzParseGreeting(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte) {
		g, ok := ParseGreeting(p)
		if !ok {
			if !reflect.DeepEqual(g, Greeting{}) {
				t.Fatalf("rejected, yet %+v", g)
			}
			return
		}
		if len(g.Salt) != 8 && len(g.Salt) != 20 {
			t.Fatalf("a salt of %d bytes", len(g.Salt))
		}
		if len(g.Salt) != 20 || bytes.IndexByte(g.Salt, 0) >= 0 || bytes.IndexByte([]byte(g.Plugin), 0) >= 0 {
			return // AppendGreeting writes a whole, NUL-free scramble only
		}
		back, ok := ParseGreeting(AppendGreeting(nil, &g))
		if g.Plugin == "" && g.Caps&mysql.CLIENT_PLUGIN_AUTH == 0 {
			back.Plugin = ""
		}
		if !ok || !reflect.DeepEqual(back, g) {
			t.Fatalf("% x parses as %+v, written and read back as %+v (%v)", p, g, back, ok)
		}
	})
}

// FuzzParseHandshakeResponse: ParseHandshakeResponse never panics and
// leaves its input alone; a response it accepts, written again by
// AppendHandshakeResponse, parses to the same fields.
func FuzzParseHandshakeResponse(f *testing.F) {
	f.Fuzz(func(t *testing.T, p []byte) {
		in := bytes.Clone(p)
		h, err := ParseHandshakeResponse(p)
		if !bytes.Equal(in, p) {
			t.Fatal("ParseHandshakeResponse modified its input")
		}
		_ = IsSSLRequest(p)
		_, _, _ = ParseAuthSwitch(p)
		if err != nil {
			if h != nil || !errors.Is(err, ErrHandshake) && !errors.Is(err, ErrNoProtocol41) {
				t.Fatalf("%+v, %v", h, err)
			}
			return
		}
		if !writable(h) {
			return
		}
		back, err := ParseHandshakeResponse(AppendHandshakeResponse(nil, h))
		if err != nil || !reflect.DeepEqual(back, h) {
			t.Fatalf("% x parses as %+v, written and read back as %+v, %v", p, h, back, err)
		}
	})
}

// writable reports whether AppendHandshakeResponse can write h so that it
// reads back the same: names without NULs, a scramble its form can carry,
// and fields the capabilities leave out empty.
func writable(h *HandshakeResponse) bool {
	nul := func(s string) bool { return bytes.IndexByte([]byte(s), 0) >= 0 }
	if nul(h.User) || nul(h.DB) || nul(h.Plugin) {
		return false
	}
	switch {
	case h.Caps&mysql.CLIENT_PLUGIN_AUTH_LENENC_CLIENT_DATA != 0:
	case h.Caps&mysql.CLIENT_SECURE_CONNECTION != 0:
		if len(h.AuthResp) > 255 {
			return false
		}
	default:
		if bytes.IndexByte(h.AuthResp, 0) >= 0 {
			return false
		}
	}
	if h.Caps&mysql.CLIENT_PLUGIN_AUTH == 0 && h.Plugin != pluginNative {
		return false
	}
	// An empty block reads back as an empty map, a broken one as none.
	return h.Caps&mysql.CLIENT_CONNECT_ATTRS == 0 || len(h.Attrs) > 0
}
