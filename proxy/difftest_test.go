package proxy

// The differential test: the same statements and protocol flows run
// against MariaDB directly and through holdfast, with the capability sets
// of the major drivers, and every packet of every response is compared
// (column definitions with types, flags, charset and extended metadata;
// rows; OK packets with affected rows, insert id, status flags, warnings,
// info and session state; EOF packets; errors with code, SQLSTATE and
// text). Deliberately not compared: statement ids (each side numbers its
// own; they are mapped), and the greeting (connection id, salt and the
// capabilities offered, which are intersected instead: a capability one
// side does not offer is negotiated on neither, and the test logs which).
//
// Each side has its own databases, created alike, whose names have the
// same length; MariaDB's are rewritten to holdfast's before comparing.
// Both sides use the same backend account. holdfast runs with a pool of
// one connection, so that a second client is served by the connection the
// first one used and must not see what the first left behind.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
	"github.com/holdfast-db/holdfast/proxy/varstate"
)

// diffDriver is the handshake a driver makes: the capabilities it asks for
// (kept only where both servers offer them) and its collation.
type diffDriver struct {
	name string
	caps uint32
	ext  uint32
	coll byte
}

var diffDrivers = []diffDriver{
	{"go-sql-driver", rawmysql.CapLongPassword | rawmysql.CapLongFlag | rawmysql.CapProtocol41 | rawmysql.CapSecureConnection | rawmysql.CapTransactions |
		rawmysql.CapPluginAuthLenenc | rawmysql.CapLocalFiles | rawmysql.CapPluginAuth | rawmysql.CapMultiResults | rawmysql.CapConnectAttrs |
		rawmysql.CapDeprecateEOF | rawmysql.CapConnectWithDB, mysqlwire.ExtCacheMetadata, 45},
	{"go-sql-driver multiStatements clientFoundRows", rawmysql.CapLongPassword | rawmysql.CapLongFlag | rawmysql.CapProtocol41 |
		rawmysql.CapSecureConnection | rawmysql.CapTransactions | rawmysql.CapPluginAuthLenenc | rawmysql.CapLocalFiles | rawmysql.CapPluginAuth |
		rawmysql.CapMultiResults | rawmysql.CapConnectAttrs | rawmysql.CapDeprecateEOF | rawmysql.CapConnectWithDB | rawmysql.CapMultiStatements | rawmysql.CapFoundRows,
		mysqlwire.ExtCacheMetadata, 45},
	{"libmariadb (mariadb CLI)", rawmysql.CapLongFlag | rawmysql.CapTransactions | rawmysql.CapSecureConnection | rawmysql.CapMultiResults |
		rawmysql.CapPSMultiResults | rawmysql.CapProtocol41 | rawmysql.CapPluginAuth | rawmysql.CapPluginAuthLenenc | rawmysql.CapSessionTrack |
		rawmysql.CapConnectAttrs | rawmysql.CapMultiStatements | rawmysql.CapLocalFiles | rawmysql.CapInteractive | rawmysql.CapConnectWithDB,
		mysqlwire.ExtProgress | mysqlwire.ExtBulk | mysqlwire.ExtTypeInfo | mysqlwire.ExtCacheMetadata, 45},
	{"PyMySQL", rawmysql.CapLongPassword | rawmysql.CapLongFlag | rawmysql.CapProtocol41 | rawmysql.CapTransactions | rawmysql.CapSecureConnection |
		rawmysql.CapMultiResults | rawmysql.CapPluginAuth | rawmysql.CapPluginAuthLenenc | rawmysql.CapConnectAttrs | rawmysql.CapConnectWithDB, 0, 45},
	{"node mysql2 multipleStatements", rawmysql.CapLongPassword | rawmysql.CapFoundRows | rawmysql.CapLongFlag | rawmysql.CapConnectWithDB | rawmysql.CapODBC |
		rawmysql.CapLocalFiles | rawmysql.CapIgnoreSpace | rawmysql.CapProtocol41 | rawmysql.CapIgnoreSigpipe | rawmysql.CapTransactions | rawmysql.CapReserved |
		rawmysql.CapSecureConnection | rawmysql.CapMultiResults | rawmysql.CapSessionTrack | rawmysql.CapPluginAuth | rawmysql.CapPluginAuthLenenc |
		rawmysql.CapConnectAttrs | rawmysql.CapMultiStatements, 0, 224},
	{"Connector/J", rawmysql.CapLongPassword | rawmysql.CapFoundRows | rawmysql.CapLongFlag | rawmysql.CapProtocol41 | rawmysql.CapTransactions |
		rawmysql.CapSecureConnection | rawmysql.CapMultiResults | rawmysql.CapPSMultiResults | rawmysql.CapPluginAuth | rawmysql.CapConnectAttrs |
		rawmysql.CapPluginAuthLenenc | rawmysql.CapDeprecateEOF | rawmysql.CapSessionTrack | rawmysql.CapConnectWithDB, 0, 224},
}

// diffAllowed are the differences multiplexing makes unavoidable: step
// label -> the README sentence that tells users. The test checks that
// README.md still says it.
var diffAllowed = map[string]string{
	"last_insert_id after an explicit id": "leaves `LAST_INSERT_ID()` unchanged but the OK packet carries the",
}

const (
	sideDirect   = 0
	sideHoldfast = 1
)

var sideNames = [2]string{"MariaDB", "holdfast"}

type diffClient struct {
	name  string
	c     [2]*rawConn
	stmts map[string][2]uint32 // statement label -> id on each side
}

type diffRun struct {
	t       *testing.T
	p       *testProxy
	d       diffDriver
	caps    uint32 // negotiated on both sides
	ext     uint32
	db, db2 [2]string
	clients map[string]*diffClient
	steps   int
	diffs   int
	track   bool
	stmtIDs [2]uint32 // the statement of the current step, on each side
	idSwap  [2]string // the client's connection id on each side, in a step that names it
}

// respKind says how a command's response ends.
type respKind int

const (
	respResults   respKind = iota // OKs and result sets, up to one without MORE_RESULTS, or an ERR
	respCursor                    // as respResults, but a result set that opened a cursor ends it
	respPrepare                   // COM_STMT_PREPARE
	respFieldList                 // column definitions up to EOF
	respRows                      // COM_STMT_FETCH: rows up to EOF
	respOne                       // one packet (OK, ERR or EOF)
	respNone                      // no response
)

func TestDifferential(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for label, phrase := range diffAllowed {
		if !bytes.Contains(readme, []byte(phrase)) {
			t.Errorf("allowed difference %q: README.md no longer says %q", label, phrase)
		}
	}
	for _, d := range diffDrivers {
		t.Run(strings.NewReplacer(" ", "_", "/", "_", "(", "", ")", "").Replace(d.name), func(t *testing.T) {
			r := newDiffRun(t, d)
			diffCorpus(r)
			t.Logf("%s: %d steps compared, %d with differences; negotiated caps %#x ext %#x (asked %#x ext %#x)",
				d.name, r.steps, r.diffs, r.caps, r.ext, d.caps, d.ext)
		})
	}
}

func newDiffRun(t *testing.T, d diffDriver) *diffRun {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
	r := &diffRun{t: t, p: p, d: d, clients: map[string]*diffClient{}}
	r.db[sideHoldfast] = p.db
	r.db2[sideHoldfast] = dbtest.NewDatabase(t)
	r.db[sideDirect] = dbtest.NewDatabase(t)
	r.db2[sideDirect] = dbtest.NewDatabase(t)
	for _, db := range []string{r.db2[1], r.db[0], r.db2[0]} {
		mustExec(t, dbtest.Root(t), "GRANT ALL ON `"+db+"`.* TO '"+p.user+"'@'%'")
		if len(db) != len(p.db) {
			t.Fatalf("setup: database names %q and %q differ in length", db, p.db)
		}
	}
	hf, md := greeted(t, p.addr), greeted(t, p.cfg.Backend.Address)
	r.caps = d.caps & hf.ServerCaps & md.ServerCaps
	r.ext = d.ext & hf.ServerExt & md.ServerExt
	if lost := d.caps &^ r.caps; lost != 0 {
		t.Logf("%s asks for %#x; not offered by holdfast: %#x, by MariaDB: %#x", d.name, d.caps, d.caps&^hf.ServerCaps, d.caps&^md.ServerCaps)
	}
	if lost := d.ext &^ r.ext; lost != 0 {
		t.Logf("%s asks for extended %#x; not offered by holdfast: %#x, by MariaDB: %#x", d.name, d.ext, d.ext&^hf.ServerExt, d.ext&^md.ServerExt)
	}
	r.track = r.caps&rawmysql.CapSessionTrack != 0
	return r
}

// login connects a client on both sides and compares the OK that ends
// authentication.
func (r *diffRun) login(name string) *diffClient {
	r.t.Helper()
	dc := &diffClient{name: name, stmts: map[string][2]uint32{}}
	for side := range 2 {
		o := rawmysql.Options{Caps: r.caps, Drop: ^r.caps, Ext: r.ext, Collation: r.d.coll, DB: r.db[side]}
		addr := r.p.addr
		o.User, o.Password = "app", "app"
		if side == sideDirect {
			addr, o.User, o.Password = r.p.cfg.Backend.Address, r.p.user, r.p.user
		}
		c := rawLogin(r.t, addr, o)
		if c.Caps != r.caps || c.Ext != r.ext {
			r.t.Fatalf("%s: %s negotiated caps %#x ext %#x, want %#x ext %#x", name, sideNames[side], c.Caps, c.Ext, r.caps, r.ext)
		}
		dc.c[side] = c
	}
	r.compare(name, "login", [2][][]byte{{dc.c[0].AuthOK}, {dc.c[1].AuthOK}})
	r.clients[name] = dc
	return dc
}

// quit closes a client on both sides (COM_QUIT) and waits for the close.
func (r *diffRun) quit(dc *diffClient) {
	r.t.Helper()
	for _, c := range dc.c {
		if err := c.Command([]byte{rawmysql.ComQuit}); err != nil {
			r.t.Fatal(err)
		}
		if _, err := c.WaitClosed(); err != nil {
			r.t.Fatalf("%s: COM_QUIT: %v", dc.name, err)
		}
		c.NC.Close()
	}
	delete(r.clients, dc.name)
}

// expand fills a statement template for one side.
func (r *diffRun) expand(side int, s string) string {
	return strings.NewReplacer("{db}", r.db[side], "{db2}", r.db2[side]).Replace(s)
}

// q runs a text-protocol statement on both sides.
func (r *diffRun) q(dc *diffClient, sql string) {
	r.t.Helper()
	r.ql(dc, sql, sql)
}

// ql is q under a label of its own.
func (r *diffRun) ql(dc *diffClient, label, sql string) {
	r.t.Helper()
	if strings.Contains(sql, "{id}") {
		// Each side names the client by its own connection id; errors
		// that quote the statement quote it.
		r.idSwap = [2]string{fmt.Sprint(dc.c[sideDirect].ConnID), fmt.Sprint(dc.c[sideHoldfast].ConnID)}
		defer func() { r.idSwap = [2]string{} }()
	}
	r.exchange(dc, label, respResults, func(side int) []byte {
		q := strings.ReplaceAll(r.expand(side, sql), "{id}", fmt.Sprint(dc.c[side].ConnID))
		return append([]byte{rawmysql.ComQuery}, q...)
	})
}

// initDB sends COM_INIT_DB on both sides.
func (r *diffRun) initDB(dc *diffClient, db string) {
	r.t.Helper()
	r.exchange(dc, "COM_INIT_DB "+db, respOne, func(side int) []byte { return append([]byte{rawmysql.ComInitDB}, r.expand(side, db)...) })
}

// cmd runs any command on both sides.
func (r *diffRun) cmd(dc *diffClient, label string, kind respKind, payload []byte) {
	r.t.Helper()
	r.exchange(dc, label, kind, func(int) []byte { return payload })
}

// prepare prepares a statement on both sides under label.
func (r *diffRun) prepare(dc *diffClient, label, sql string) {
	r.t.Helper()
	resp := r.exchange(dc, "prepare "+label, respPrepare, func(side int) []byte {
		return append([]byte{rawmysql.ComStmtPrepare}, r.expand(side, sql)...)
	})
	var ids [2]uint32
	for side, ps := range resp {
		if len(ps) > 0 && ps[0][0] == 0x00 && len(ps[0]) >= 5 {
			ids[side] = binary.LittleEndian.Uint32(ps[0][1:])
		}
	}
	dc.stmts[label] = ids
}

// stmt runs a COM_STMT_* command for the statement label, built by build
// from each side's statement id.
func (r *diffRun) stmt(dc *diffClient, what, label string, kind respKind, build func(id uint32) []byte) {
	r.t.Helper()
	ids, ok := dc.stmts[label]
	if !ok {
		r.t.Fatalf("no prepared statement %q", label)
	}
	r.stmtIDs = ids
	r.exchange(dc, what+" "+label, kind, func(side int) []byte { return build(ids[side]) })
	r.stmtIDs = [2]uint32{}
}

func (r *diffRun) execute(dc *diffClient, label string, flags byte, params []rawmysql.Param, bind bool) {
	r.t.Helper()
	kind := respResults
	if flags&0x01 != 0 {
		kind = respCursor
	}
	r.stmt(dc, "execute", label, kind, func(id uint32) []byte { return rawmysql.ExecutePacket(id, flags, params, bind) })
}

// exchange sends a command to both sides, reads both responses whole, and
// compares them.
func (r *diffRun) exchange(dc *diffClient, label string, kind respKind, build func(side int) []byte) [2][][]byte {
	r.t.Helper()
	var resp [2][][]byte
	for side, c := range dc.c {
		if err := c.Command(build(side)); err != nil {
			r.t.Fatalf("%s: %s: send to %s: %v", dc.name, label, sideNames[side], err)
		}
	}
	for side, c := range dc.c {
		ps, err := readResponse(c, kind)
		if err != nil {
			r.t.Fatalf("%s: %s: %s's response: %v (read so far: %s)", dc.name, label, sideNames[side], err, hexPackets(ps))
		}
		resp[side] = ps
	}
	r.compare(dc.name, label, resp)
	return resp
}

// compare reports the first difference between the two sides' packets.
func (r *diffRun) compare(client, label string, resp [2][][]byte) {
	r.t.Helper()
	r.steps++
	var norm [2][][]byte
	for side := range resp {
		for _, p := range resp[side] {
			q := append([]byte(nil), p...)
			if side == sideDirect {
				q = bytes.ReplaceAll(q, []byte(r.db[0]), []byte(r.db[1]))
				q = bytes.ReplaceAll(q, []byte(r.db2[0]), []byte(r.db2[1]))
				if r.idSwap[0] != "" && len(q) > 0 && q[0] == 0xff {
					q = swapConnID(q, r.idSwap[0], r.idSwap[1])
				}
			}
			if r.track {
				q = sortStateVars(q)
			}
			if len(q) > 0 && q[0] == 0xff && r.stmtIDs[side] != 0 {
				// Errors name the statement by the id the client sent.
				q = bytes.ReplaceAll(q, fmt.Appendf(nil, "(%d)", r.stmtIDs[side]), []byte("(<statement id>)"))
			}
			norm[side] = append(norm[side], q)
		}
		if strings.HasPrefix(label, "prepare ") && len(norm[side]) > 0 && norm[side][0][0] == 0 && len(norm[side][0]) >= 5 {
			copy(norm[side][0][1:5], []byte{0, 0, 0, 0}) // statement ids
		}
	}
	n := max(len(norm[0]), len(norm[1]))
	for i := 0; i < n; i++ {
		var a, b []byte
		if i < len(norm[0]) {
			a = norm[0][i]
		}
		if i < len(norm[1]) {
			b = norm[1][i]
		}
		if bytes.Equal(a, b) {
			continue
		}
		r.diffs++
		msg := fmt.Sprintf("%s: %q: packet %d of %d/%d differs:\n  MariaDB:  %s\n  holdfast: %s",
			client, label, i, len(norm[0]), len(norm[1]), describePacket(a, r.track), describePacket(b, r.track))
		if phrase, ok := diffAllowed[label]; ok {
			r.t.Logf("allowed (README: %q): %s", phrase, msg)
			return
		}
		r.t.Error(msg)
		return
	}
}

// sortStateVars puts the system-variable entries of an OK packet's session
// state in one fixed order (of their bytes), each in a slot a variable
// held. MariaDB sends them in the order of its tracker's hash, which is
// keyed by the variables' addresses and so differs from one server start
// to the next: the order carries no meaning, and the test must not depend
// on it.
func sortStateVars(p []byte) []byte {
	ok, good := mysqlwire.ParseOK(p, true)
	if !good || len(p) == 0 || p[0] != mysqlwire.HeaderOK || len(ok.StateInfo) == 0 {
		return p
	}
	var entries, vars [][]byte
	var slots []int
	for info := ok.StateInfo; len(info) > 0; {
		_, n, good := mysqlwire.ReadLenEncString(info[1:])
		if !good {
			return p
		}
		if info[0] == varstate.TrackSystemVariables {
			slots = append(slots, len(entries))
			vars = append(vars, info[:1+n])
		}
		entries = append(entries, info[:1+n])
		info = info[1+n:]
	}
	slices.SortFunc(vars, bytes.Compare)
	for i, slot := range slots {
		entries[slot] = vars[i]
	}
	ok.StateInfo = bytes.Join(entries, nil)
	return mysqlwire.AppendOK(nil, ok, true)
}

// readResponse reads a whole response of the given kind, packet by packet.
func readResponse(c *rawConn, kind respKind) ([][]byte, error) {
	var out [][]byte
	read := func() ([]byte, error) {
		p, err := c.ReadPacket()
		if err == nil {
			out = append(out, p)
		}
		return p, err
	}
	track := c.Caps&rawmysql.CapSessionTrack != 0
	switch kind {
	case respNone:
		return nil, nil
	case respOne:
		_, err := read()
		return out, err
	case respPrepare:
		p, err := read()
		if err != nil || p[0] == 0xff {
			return out, err
		}
		if p[0] != 0x00 || len(p) < 12 {
			return out, fmt.Errorf("malformed prepare OK % x", p)
		}
		for _, n := range []int{int(binary.LittleEndian.Uint16(p[7:])), int(binary.LittleEndian.Uint16(p[5:]))} {
			if n == 0 {
				continue
			}
			for i := 0; i <= n; i++ {
				if _, err := read(); err != nil {
					return out, err
				}
			}
		}
		return out, nil
	case respFieldList, respRows:
		for {
			p, err := read()
			if err != nil || p[0] == 0xff || mysqlwire.IsEOF(p[0], len(p)) {
				return out, err
			}
		}
	}
	for {
		p, err := read()
		if err != nil {
			return out, err
		}
		switch p[0] {
		case 0xff:
			return out, nil
		case 0x00:
			ok, err := rawmysql.DecodeOK(p, track)
			if err != nil || ok.Status&mysqlwire.StatusMoreResults == 0 {
				return out, err
			}
			continue
		case 0xfb:
			return out, fmt.Errorf("LOCAL INFILE request")
		}
		ncols, _, null, ok := mysqlwire.ReadLenEnc(p)
		if !ok || null {
			return out, fmt.Errorf("column count % x", p)
		}
		for i := uint64(0); i < ncols; i++ {
			if _, err := read(); err != nil {
				return out, err
			}
		}
		p, err = read()
		if err != nil {
			return out, err
		}
		_, st, err := rawmysql.DecodeEOF(p)
		if err != nil {
			return out, err
		}
		if kind == respCursor && st&mysqlwire.StatusCursorExists != 0 {
			return out, nil
		}
		for {
			p, err = read()
			if err != nil {
				return out, err
			}
			if p[0] == 0xff {
				return out, nil
			}
			if mysqlwire.IsEOF(p[0], len(p)) {
				break
			}
		}
		if _, st, err = rawmysql.DecodeEOF(p); err != nil || st&mysqlwire.StatusMoreResults == 0 {
			return out, err
		}
	}
}

// describePacket renders a packet for a difference report.
// swapConnID replaces connection id from with to where ERR packet q's
// message names it: as a whole number, after the SQLSTATE. A plain
// replacement also rewrote the SQLSTATE when the id was, say, 42.
func swapConnID(q []byte, from, to string) []byte {
	head := min(len(q), 3)
	if len(q) >= 9 && q[3] == '#' {
		head = 9
	}
	re := regexp.MustCompile(`(^|[^0-9])` + regexp.QuoteMeta(from) + `([^0-9]|$)`)
	msg := re.ReplaceAll(q[head:], []byte("${1}"+to+"${2}"))
	return append(q[:head:head], msg...)
}

func describePacket(p []byte, track bool) string {
	switch {
	case p == nil:
		return "(none)"
	case p[0] == 0xff:
		if e, err := rawmysql.DecodeErr(p); err == nil {
			return e.Error()
		}
	case p[0] == 0x00 && len(p) >= 7:
		if ok, err := rawmysql.DecodeOK(p, track); err == nil {
			st, _ := rawmysql.DecodeState(ok.StateInfo)
			return fmt.Sprintf("OK %+v state %+v  [% x]", ok, st, p)
		}
	case mysqlwire.IsEOF(p[0], len(p)):
		w, st, _ := rawmysql.DecodeEOF(p)
		return fmt.Sprintf("EOF warnings %d status %#x", w, st)
	}
	if len(p) > 96 {
		return fmt.Sprintf("% x ... (%d bytes) %q", p[:96], len(p), p[:96])
	}
	return fmt.Sprintf("% x %q", p, p)
}

func hexPackets(ps [][]byte) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "[% x] ", trunc(p))
	}
	return b.String()
}

func pLongLong(v int64) rawmysql.Param { return rawmysql.IntParam(v) }

// diffCorpus is the sequence both sides run.
func diffCorpus(r *diffRun) {
	a := r.login("a")

	// Every column type, and rows of values and of NULLs.
	r.q(a, "CREATE TABLE types (id INT AUTO_INCREMENT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, "+
		"mi MEDIUMINT, ii INT UNSIGNED, bi BIGINT, de DECIMAL(12,4), fl FLOAT, dbl DOUBLE, bt BIT(10), bo BOOLEAN, "+
		"ch CHAR(5), vc VARCHAR(20) COLLATE utf8mb4_unicode_ci, l1 VARCHAR(10) CHARACTER SET latin1, bn BINARY(4), "+
		"vb VARBINARY(10), tx TEXT, bl BLOB, lb LONGBLOB, en ENUM('a','b'), st SET('x','y'), dt DATE, tm TIME(3), "+
		"dtt DATETIME(6), ts TIMESTAMP(2) NULL DEFAULT NULL, yr YEAR, js JSON, g GEOMETRY, pt POINT, u UUID, i6 INET6)")
	r.q(a, "INSERT INTO types VALUES (1, -1, 255, -32768, 8388607, 4294967295, -9223372036854775808, 12345678.1234, "+
		"1.5, 2.25, b'1010101010', TRUE, 'abc', 'ünï', 'café', 0x00ff0102, 0x0102, 'text', 0x00010203, REPEAT('x', 70000), "+
		"'b', 'x,y', '2024-02-29', '-838:59:59.999', '2024-01-02 03:04:05.678901', '2024-01-02 03:04:05.67', 2024, "+
		"'{\"a\": [1, 2, {\"b\": null}]}', ST_GeomFromText('POLYGON((0 0,1 0,1 1,0 0))'), POINT(1, 2), "+
		"'cd6d1f5e-5b55-11ee-9b7a-000000000001', '::1')")
	r.q(a, "INSERT INTO types (id) VALUES (2)")
	r.q(a, "CREATE TABLE ai (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	r.q(a, "SELECT * FROM types ORDER BY id")
	r.q(a, "SELECT id, js, JSON_EXTRACT(js, '$.a'), CAST(de AS CHAR), bt + 0, HEX(bn), ST_AsText(g), u, i6 FROM types ORDER BY id")
	r.q(a, "SELECT 1, 1.5, 'x', NULL, 1e10, CAST(1 AS UNSIGNED), DATE '2020-01-01', TIME '01:02:03', TIMESTAMP '2020-01-01 00:00:00.5'")
	r.q(a, "SELECT COUNT(*), SUM(ii), MAX(dtt), GROUP_CONCAT(ch) FROM types")
	r.q(a, "SELECT COUNT (*) FROM types") // valid only with IGNORE_SPACE (node mysql2 asks for it)
	r.q(a, "SELECT @@sql_mode")

	// Multi-statements and multiple results.
	r.q(a, "SELECT 1; SELECT 2, 'two'")
	r.q(a, "SELECT 1; SELECT * FROM nope; SELECT 3")
	r.q(a, "INSERT INTO ai (v) VALUES (1), (2); UPDATE ai SET v = v + 1; SELECT * FROM ai")
	r.q(a, "CREATE PROCEDURE sp_two() BEGIN SELECT 1 AS one; SELECT id FROM types ORDER BY id; END")
	r.q(a, "CALL sp_two()")
	r.q(a, "CREATE PROCEDURE sp_none() BEGIN DO 1; END")
	r.q(a, "CALL sp_none()")

	// Warnings and errors.
	r.q(a, "SELECT CAST('12abc' AS INT)")
	r.q(a, "SHOW WARNINGS")
	r.q(a, "INSERT IGNORE INTO types (id, ti) VALUES (11, 1000)")
	r.q(a, "SHOW WARNINGS")
	r.q(a, "SELECT @@warning_count")
	r.q(a, "INSERT INTO types (id, ti) VALUES (10, 1000)")
	r.q(a, "SELEC 1")
	r.q(a, "SELECT nope FROM types")
	r.q(a, "INSERT INTO types (id) VALUES (1)")
	r.q(a, "SELECT * FROM {db2}.nope")
	r.q(a, "UPDATE types SET ti = ti WHERE id = 1")
	r.q(a, "UPDATE types SET ti = 5 WHERE id IN (1, 2)")
	r.q(a, "DELETE FROM types WHERE id = 11")

	// SHOW statements.
	r.q(a, "SHOW TABLES")
	r.q(a, "SHOW FULL COLUMNS FROM types")
	r.q(a, "SHOW CREATE TABLE types")
	r.q(a, "SHOW INDEX FROM types")
	r.q(a, "SHOW VARIABLES LIKE 'sql_mode'")
	r.q(a, "SHOW SESSION VARIABLES LIKE 'session_track%'")
	r.q(a, "SHOW VARIABLES LIKE 'wait_timeout'")
	r.q(a, "SHOW VARIABLES LIKE 'character_set_%'")

	// USE and COM_INIT_DB.
	r.q(a, "USE {db2}")
	r.q(a, "SELECT DATABASE()")
	r.q(a, "CREATE TABLE t2 (a INT)")
	r.q(a, "SHOW TABLES")
	r.initDB(a, "{db}")
	r.q(a, "SELECT DATABASE()")
	r.initDB(a, "{db2}")
	r.initDB(a, "hf_no_such_database")
	r.q(a, "USE {db}")
	r.q(a, "SELECT DATABASE()")

	// Each restored variable, and the kept ones.
	r.q(a, "SET NAMES latin1")
	r.q(a, "SELECT 'é', vc, l1 FROM types WHERE id = 1")
	r.q(a, "SET NAMES utf8mb4 COLLATE utf8mb4_unicode_ci")
	r.q(a, "SELECT 'x', @@collation_connection")
	r.q(a, "SET character_set_results = utf8mb4")
	r.q(a, "SELECT 'y'")
	r.q(a, "SET NAMES utf8mb4")
	r.q(a, "SET time_zone = '+03:00'")
	r.q(a, "SELECT @@time_zone, ts FROM types WHERE id = 1")
	r.q(a, "SET sql_mode = 'ANSI_QUOTES'")
	r.q(a, `SELECT "ch" FROM types WHERE id = 1`)
	r.q(a, "SET sql_mode = DEFAULT")
	r.q(a, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
	r.q(a, "SELECT @@tx_isolation")
	r.q(a, "SET SESSION sql_select_limit = 1")
	r.q(a, "SELECT id FROM types ORDER BY id")
	r.q(a, "SET sql_select_limit = DEFAULT")
	r.q(a, "SET autocommit = 0")
	r.q(a, "INSERT INTO ai (v) VALUES (10)")
	r.q(a, "SELECT @@in_transaction")
	r.q(a, "ROLLBACK")
	r.q(a, "SET autocommit = 1")
	r.q(a, "SET wait_timeout = 100")
	r.q(a, "SELECT @@wait_timeout, @@session.interactive_timeout")
	r.q(a, "SHOW VARIABLES LIKE 'wait_timeout'")
	r.q(a, "SET wait_timeout = DEFAULT")
	r.q(a, "SELECT @@session_track_system_variables, @@session_track_schema, @@session_track_state_change")
	r.q(a, "SET session_track_state_change = ON")
	r.q(a, "SET time_zone = '+00:00'")
	r.q(a, "SET session_track_state_change = OFF")
	r.q(a, "SET session_track_system_variables = 'time_zone,sql_mode'")
	r.q(a, "SET sql_mode = 'NO_ENGINE_SUBSTITUTION'")
	r.q(a, "SET time_zone = '+01:00'")
	r.q(a, "SET sql_mode = DEFAULT")
	r.q(a, "SET session_track_system_variables = DEFAULT")
	r.q(a, "SET time_zone = DEFAULT")
	r.q(a, "SET session_track_schema = OFF")
	r.q(a, "USE {db2}")
	r.q(a, "USE {db}")
	r.q(a, "SET session_track_schema = DEFAULT")

	// Transactions.
	r.q(a, "BEGIN")
	r.q(a, "INSERT INTO ai (v) VALUES (30)")
	r.q(a, "SELECT COUNT(*) FROM ai")
	r.q(a, "COMMIT")
	r.q(a, "START TRANSACTION READ ONLY")
	r.q(a, "SELECT COUNT(*) FROM ai")
	r.q(a, "COMMIT")
	r.q(a, "BEGIN")
	r.q(a, "ROLLBACK")

	// Answers holdfast gives itself.
	r.q(a, "INSERT INTO ai (v) VALUES (40)")
	r.q(a, "SELECT LAST_INSERT_ID()")
	r.q(a, "SELECT LAST_INSERT_ID() AS id")
	r.q(a, "INSERT INTO ai (id, v) VALUES (100, 41)")
	r.ql(a, "last_insert_id after an explicit id", "SELECT LAST_INSERT_ID()")

	// KILL among other statements: translated and run in its place.
	r.q(a, "SELECT 1; KILL QUERY {id}; SELECT 2")
	r.q(a, "KILL QUERY {id}")
	r.q(a, "KILL 4000000000; SELECT 1")
	r.q(a, "DO 1; KILL QUERY 4000000000; SELECT 2")
	r.q(a, "SELECT 1 AS one; DO 2; KILL CONNECTION 4000000000")

	// One variable changed alone, then a switch of clients on the one
	// backend connection and back: the other variables stay as each
	// client has them.
	b := r.login("b")
	for _, step := range []struct{ set, check string }{
		{"SET character_set_results = cp1251", "SELECT 'привет' AS n, @@character_set_client, @@character_set_connection, @@collation_connection"},
		{"SET character_set_results = DEFAULT", "SELECT 'привет' AS n, @@character_set_results"},
		{"SET character_set_client = latin1", "SELECT 'é' AS n, @@character_set_results, @@collation_connection"},
		{"SET character_set_client = DEFAULT", "SELECT 'é' AS n"},
		{"SET collation_connection = utf8mb4_bin", "SELECT 'a' = 'A', @@character_set_connection, @@character_set_results"},
		{"SET character_set_connection = latin1", "SELECT 'a' = 'A', @@collation_connection, @@character_set_client"},
		{"SET NAMES utf8mb4", "SELECT @@collation_connection"},
		{"SET time_zone = '-02:00'", "SELECT @@time_zone, @@sql_mode"},
		{"SET time_zone = DEFAULT", "SELECT @@time_zone"},
		{"SET sql_mode = 'PIPES_AS_CONCAT'", "SELECT 'a' || 'b', @@time_zone"},
		{"SET sql_mode = DEFAULT", "SELECT 'a' || 'b'"},
	} {
		r.q(a, step.set)
		r.q(b, "SELECT 'b', @@character_set_client, @@character_set_results, @@collation_connection, @@time_zone, @@sql_mode")
		r.q(a, step.check)
		r.q(b, "SELECT 'b again', @@character_set_results, @@collation_connection")
	}
	r.quit(b)

	// Binary protocol.
	r.prepare(a, "by id", "SELECT * FROM types WHERE id = ?")
	r.execute(a, "by id", 0, []rawmysql.Param{pLongLong(1)}, true)
	r.execute(a, "by id", 0, []rawmysql.Param{pLongLong(2)}, false)
	r.prepare(a, "params", "SELECT ?, ?, ?, ? + 1")
	r.execute(a, "params", 0, []rawmysql.Param{rawmysql.StrParam("s"), rawmysql.NullParam(), rawmysql.IntParam(7), rawmysql.IntParam(-3)}, true)
	r.prepare(a, "insert", "INSERT INTO types (id, vc, bl) VALUES (?, ?, ?)")
	r.stmt(a, "long data", "insert", respNone, func(id uint32) []byte {
		return append(binary.LittleEndian.AppendUint16(binary.LittleEndian.AppendUint32([]byte{rawmysql.ComStmtSendLongData}, id), 2), bytes.Repeat([]byte{7}, 5000)...)
	})
	r.execute(a, "insert", 0, []rawmysql.Param{rawmysql.IntParam(50), rawmysql.StrParam("long"), rawmysql.LongParam()}, true)
	r.q(a, "SELECT id, vc, LENGTH(bl) FROM types WHERE id = 50")
	r.prepare(a, "bad", "SELECT nope FROM types")
	r.prepare(a, "call", "CALL sp_two()")
	r.execute(a, "call", 0, nil, false)
	r.prepare(a, "cursor", "SELECT id, ch FROM types ORDER BY id")
	r.execute(a, "cursor", 0x01, nil, false)
	r.stmt(a, "fetch", "cursor", respRows, func(id uint32) []byte {
		return binary.LittleEndian.AppendUint32(rawmysql.StmtCmd(rawmysql.ComStmtFetch, id), 1)
	})
	r.stmt(a, "fetch rest", "cursor", respRows, func(id uint32) []byte {
		return binary.LittleEndian.AppendUint32(rawmysql.StmtCmd(rawmysql.ComStmtFetch, id), 100)
	})
	r.stmt(a, "reset", "cursor", respOne, func(id uint32) []byte { return rawmysql.StmtCmd(rawmysql.ComStmtReset, id) })
	r.stmt(a, "close", "params", respNone, func(id uint32) []byte { return rawmysql.StmtCmd(rawmysql.ComStmtClose, id) })
	r.stmt(a, "execute closed", "params", respResults, func(id uint32) []byte { return rawmysql.ExecutePacket(id, 0, nil, false) })
	r.prepare(a, "last id", "SELECT LAST_INSERT_ID()")
	r.execute(a, "last id", 0, nil, false)

	// Other commands.
	r.cmd(a, "COM_PING", respOne, []byte{rawmysql.ComPing})
	r.cmd(a, "COM_FIELD_LIST", respFieldList, append(append([]byte{rawmysql.ComFieldList}, "types"...), 0))
	r.cmd(a, "COM_SET_OPTION off", respOne, []byte{rawmysql.ComSetOption, 1, 0})
	r.q(a, "SELECT 1; SELECT 2")
	r.cmd(a, "COM_SET_OPTION on", respOne, []byte{rawmysql.ComSetOption, 0, 0})
	r.q(a, "SELECT 1; SELECT 2")
	diffLocalInfile(r, a)
	r.q(a, "SET @v = 1")
	r.cmd(a, "COM_RESET_CONNECTION", respOne, []byte{rawmysql.ComResetConnection})
	r.q(a, "SELECT @v, DATABASE()")
	r.quit(a)

	// Two clients in turn: the second must not see what the first left.
	for _, seq := range []struct {
		name   string
		first  []string
		second []string
	}{
		{"user variable", []string{"SET @q = 1"}, []string{"SELECT @q"}},
		{"temporary table", []string{"CREATE TEMPORARY TABLE tt (x INT)"}, []string{"SELECT * FROM tt"}},
		{"sql prepare", []string{"PREPARE s1 FROM 'SELECT 1'"}, []string{"EXECUTE s1"}},
		{"session variables", []string{"SET NAMES latin1", "SET time_zone = '+05:00'", "SET sql_mode = 'ANSI'", "SET SESSION TRANSACTION ISOLATION LEVEL SERIALIZABLE"},
			[]string{"SELECT @@time_zone, @@sql_mode, @@character_set_client, @@collation_connection, @@tx_isolation", "SELECT 'é'"}},
		{"open transaction", []string{"BEGIN", "INSERT INTO ai (v) VALUES (60)"}, []string{"SELECT COUNT(*) FROM ai WHERE v = 60"}},
		{"kept variables", []string{"SET wait_timeout = 5", "SET session_track_state_change = ON"}, []string{"SELECT @@wait_timeout, @@session_track_state_change", "SET time_zone = '+01:00'"}},
		{"locks", []string{"SELECT GET_LOCK('{db}', 0)", "LOCK TABLES ai READ"}, []string{"SELECT IS_FREE_LOCK('{db}')", "INSERT INTO ai (v) VALUES (61)"}},
		{"sql_select_limit", []string{"SET sql_select_limit = 1", "SET @x = 1"}, []string{"SELECT id FROM types ORDER BY id"}},
		{"function in a select", []string{
			"CREATE FUNCTION set_tz() RETURNS INT DETERMINISTIC BEGIN SET @@session.time_zone = '+05:00'; RETURN 1; END",
			"SELECT set_tz()", "SELECT @@time_zone", "SET time_zone = '+06:00'", "SELECT @@time_zone"},
			[]string{"SELECT @@time_zone", "SET time_zone = '+07:00'"}},
		{"set statement", []string{"SET STATEMENT sort_buffer_size = 100000 FOR SELECT @@sort_buffer_size", "SELECT @@sort_buffer_size",
			"SET STATEMENT time_zone = '+08:00' FOR SELECT @@time_zone", "SET STATEMENT max_statement_time = 10 FOR SET time_zone = '+09:00'"},
			[]string{"SET time_zone = '+10:00'", "SELECT @@time_zone, @@sort_buffer_size"}},
	} {
		first := r.login("first " + seq.name)
		for _, q := range seq.first {
			r.q(first, q)
		}
		r.quit(first)
		second := r.login("second " + seq.name)
		for _, q := range seq.second {
			r.q(second, q)
		}
		r.quit(second)
	}
	// Options and statements left behind at the protocol level.
	first := r.login("first options")
	r.cmd(first, "COM_SET_OPTION off", respOne, []byte{rawmysql.ComSetOption, 1, 0})
	r.q(first, "SET @pin = 1")
	r.prepare(first, "left open", "SELECT 1")
	r.quit(first)
	second := r.login("second options")
	r.q(second, "SELECT 1; SELECT 2")
	r.prepare(second, "own", "SELECT 2")
	r.execute(second, "own", 0, nil, false)
	r.quit(second)

	diffKeptVars(r)
}

// keptVarSets are the session variables holdfast keeps for a client or
// restores on each connection it uses, each set to a value that is not
// its default, and read back with it.
var keptVarSets = []struct{ name, set, value string }{
	{"wait_timeout", "SET SESSION wait_timeout = 1234", "7"},
	{"interactive_timeout", "SET SESSION interactive_timeout = 2345", "8"},
	{"session_track_system_variables", "SET SESSION session_track_system_variables = 'time_zone,autocommit'", "'sql_mode'"},
	{"session_track_schema", "SET SESSION session_track_schema = OFF", "ON"},
	{"session_track_state_change", "SET SESSION session_track_state_change = ON", "OFF"},
	{"time_zone", "SET SESSION time_zone = '+04:00'", "'+05:00'"},
	{"sql_select_limit", "SET SESSION sql_select_limit = 3", "4"},
}

// diffKeptVars reads each kept and each restored variable after a SET
// SESSION of it, in text and as a prepared statement, on a connection
// borrowed for the statement (the first execute, which prepares it), on
// one shared with other statements (a pipe: the later executes and plain
// reads), and on the connection of a transaction, and sets it with a
// prepared SET too. The pipelined path must have been taken.
func diffKeptVars(r *diffRun) {
	r.t.Helper()
	pipelined := r.p.srv.Stats().Pipelined
	k := r.login("kept")
	for _, v := range keptVarSets {
		read := "SELECT @@" + v.name + ", ?"
		r.q(k, v.set)
		r.q(k, "SELECT @@"+v.name)
		r.q(k, "SELECT @@session."+v.name+" AS v")
		r.q(k, "SHOW SESSION VARIABLES LIKE '"+v.name+"'")
		r.prepare(k, "read "+v.name, read)
		for range 3 { // borrowed (and prepared) first, then on a pipe
			r.execute(k, "read "+v.name, 0, []rawmysql.Param{pLongLong(1)}, true)
		}
		r.prepare(k, "show "+v.name, "SHOW SESSION VARIABLES LIKE '"+v.name+"'")
		r.execute(k, "show "+v.name, 0, nil, false)
		r.execute(k, "show "+v.name, 0, nil, false)
		r.q(k, "BEGIN")
		r.q(k, "SELECT 1")
		r.execute(k, "read "+v.name, 0, []rawmysql.Param{pLongLong(2)}, true)
		r.q(k, "SELECT @@"+v.name)
		r.q(k, "COMMIT")
		r.prepare(k, "set "+v.name, "SET SESSION "+v.name+" = "+v.value)
		r.execute(k, "set "+v.name, 0, nil, false)
		r.q(k, "SELECT @@"+v.name)
		r.execute(k, "read "+v.name, 0, []rawmysql.Param{pLongLong(3)}, true)
		r.execute(k, "read "+v.name, 0, []rawmysql.Param{pLongLong(4)}, true)
		r.q(k, "SET SESSION "+v.name+" = DEFAULT")
		r.execute(k, "read "+v.name, 0, []rawmysql.Param{pLongLong(5)}, true)
		r.q(k, "SELECT @@"+v.name)
	}
	r.quit(k)
	// The next client on the same backend connection has the defaults.
	n := r.login("after kept")
	for _, v := range keptVarSets {
		r.q(n, "SELECT @@"+v.name)
	}
	r.quit(n)
	if r.p.srv.Stats().Pipelined == pipelined {
		r.t.Errorf("no statement of the kept variables' steps was pipelined")
	}
}

// TestSwapConnID: an id that is also part of the SQLSTATE or of a longer
// number is replaced only where the message names it.
func TestSwapConnID(t *testing.T) {
	p := append([]byte{0xff, 0x28, 0x04, '#'}, "42000You have an error near 'KILL QUERY 42; SELECT 420'"...)
	want := append([]byte{0xff, 0x28, 0x04, '#'}, "42000You have an error near 'KILL QUERY 10001; SELECT 420'"...)
	if got := swapConnID(p, "42", "10001"); !bytes.Equal(got, want) {
		t.Fatalf("swapConnID = %q, want %q", got, want)
	}
}
