package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gsd "github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

func countRows(t *testing.T, p *testProxy, table string) int {
	t.Helper()
	n, err := strconv.Atoi(queryString(t, p.direct(t), "SELECT COUNT(*) FROM "+table))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// go-sql-driver through holdfast: LOAD DATA LOCAL INFILE from a registered
// file and from a reader handler, outside and inside a transaction. A file
// the client does not allow gets the driver's own error (the backend is
// sent an empty file, as by a direct client) and one for a missing table
// the backend's; the connection serves the next statement either way.
func TestLoadDataLocal(t *testing.T) {
	p := startProxy(t)
	ctx := context.Background()
	mustExec(t, p.direct(t), "CREATE TABLE ld (id INT PRIMARY KEY, v VARCHAR(40))")
	path := filepath.Join(t.TempDir(), "rows.csv")
	if err := os.WriteFile(path, []byte("1,one\n2,two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gsd.RegisterLocalFile(path)
	t.Cleanup(func() { gsd.DeregisterLocalFile(path) })
	reader := "hf_" + t.Name()
	next := 3
	gsd.RegisterReaderHandler(reader, func() io.Reader {
		r := strings.NewReader(fmt.Sprintf("%d,r%d\n%d,r%d\n", next, next, next+1, next+1))
		next += 2
		return r
	})
	t.Cleanup(func() { gsd.DeregisterReaderHandler(reader) })
	fromFile := "LOAD DATA LOCAL INFILE '" + path + "' INTO TABLE ld FIELDS TERMINATED BY ','"
	fromReader := "LOAD DATA LOCAL INFILE 'Reader::" + reader + "' INTO TABLE ld FIELDS TERMINATED BY ','"

	db := p.open(t)
	db.SetMaxOpenConns(1) // one client connection, so its next statements show it is in step
	if n, _ := mustExec(t, db, fromFile).RowsAffected(); n != 2 || countRows(t, p, "ld") != 2 {
		t.Fatalf("autocommit load from a file: %d rows affected, %d in the table", n, countRows(t, p, "ld"))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, fromReader)
	if n := queryString(t, tx, "SELECT COUNT(*) FROM ld"); n != "4" {
		t.Fatalf("inside the transaction: %s rows, want 4", n)
	}
	if n := countRows(t, p, "ld"); n != 2 {
		t.Fatalf("another connection sees %d rows before COMMIT, want 2", n)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, p, "ld"); n != 2 {
		t.Fatalf("%d rows after ROLLBACK, want 2", n)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustExec(t, tx, fromReader)
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := countRows(t, p, "ld"); n != 4 {
		t.Fatalf("%d rows after COMMIT, want 4", n)
	}

	// Refused by the client: its own error, and the connection goes on.
	_, err = db.ExecContext(ctx, "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE ld")
	var me *gsd.MySQLError
	if err == nil || errors.As(err, &me) || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("an unregistered file: %v, want go-sql-driver's own error", err)
	}
	if n := queryString(t, db, "SELECT COUNT(*) FROM ld"); n != "4" {
		t.Fatalf("after a refused file: %s rows", n)
	}
	// The backend's error, before any file is asked for.
	_, err = db.ExecContext(ctx, "LOAD DATA LOCAL INFILE '"+path+"' INTO TABLE no_such_table")
	if !errors.As(err, &me) || me.Number != 1146 {
		t.Fatalf("a missing table: %v, want 1146", err)
	}
	if v := queryString(t, db, "SELECT 'in step'"); v != "in step" {
		t.Fatal(v)
	}

	// A file of many packets, through a pool of several connections.
	big := "hf_big_" + t.Name()
	gsd.RegisterReaderHandler(big, func() io.Reader {
		var b bytes.Buffer
		for i := 1000; i < 21000; i++ {
			fmt.Fprintf(&b, "%d,%s\n", i, strings.Repeat("x", 30))
		}
		return &b
	})
	t.Cleanup(func() { gsd.DeregisterReaderHandler(big) })
	if n, _ := mustExec(t, p.open(t), "LOAD DATA LOCAL INFILE 'Reader::"+big+"' INTO TABLE ld FIELDS TERMINATED BY ','").RowsAffected(); n != 20000 {
		t.Fatalf("a 700 KB file: %d rows", n)
	}
}

// The mariadb command-line client with --local-infile loads through
// holdfast; without it, the client refuses the file itself.
func TestLoadDataLocalCLI(t *testing.T) {
	if _, err := exec.LookPath("mariadb"); err != nil {
		t.Fatal("the mariadb client is required (make test installs it): ", err)
	}
	p := startProxy(t)
	mustExec(t, p.direct(t), "CREATE TABLE ld (id INT PRIMARY KEY, v VARCHAR(40))")
	path := filepath.Join(t.TempDir(), "rows.tsv")
	if err := os.WriteFile(path, []byte("1\tone\n2\ttwo\n3\tthree\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := p.cli(t, "LOAD DATA LOCAL INFILE '"+path+"' INTO TABLE ld;\nSELECT COUNT(*) AS n FROM ld;\n", "--local-infile=1")
	if err != nil || out != "n\n3\n" {
		t.Fatalf("mariadb --local-infile: %v\n%s", err, out)
	}
	out, err = p.cli(t, "LOAD DATA LOCAL INFILE '"+path+"' INTO TABLE ld;\n", "--local-infile=0")
	if err == nil || !strings.Contains(out, "ERROR") {
		t.Fatalf("mariadb --local-infile=0 loaded: %v\n%s", err, out)
	}
	if n := countRows(t, p, "ld"); n != 3 {
		t.Fatalf("%d rows", n)
	}
}

// loadStart sends a LOAD DATA LOCAL statement on a raw connection and
// reads the file request.
func loadStart(t *testing.T, c *rawConn, sql string) {
	t.Helper()
	if err := c.Command(append([]byte{rawmysql.ComQuery}, sql...)); err != nil {
		t.Fatal(err)
	}
	p, err := c.ReadPacket()
	if err != nil || p[0] != 0xfb {
		t.Fatalf("%s: % x, %v, want a file request", sql, trunc(p), err)
	}
}

// Within a multi-statement text the file request comes where the statement
// does; and a client that fails while sending its file (a packet over
// max_allowed_packet, a disconnect) leaves nothing loaded, and holdfast
// closes the backend connection that holds part of the file instead of
// lending it on.
func TestLoadDataLocalRaw(t *testing.T) {
	p := startWatchedProxy(t, func(c *config.Config) { c.MaxAllowedPacket = 64 << 10 })
	by := startBystander(t, p)
	mustExec(t, p.direct(t), "CREATE TABLE ld (id INT PRIMARY KEY)")
	opts := rawmysql.Options{Caps: rawmysql.CapMultiStatements}

	c := p.raw(t, opts)
	if err := c.Command(append([]byte{rawmysql.ComQuery}, "DO 1; LOAD DATA LOCAL INFILE 'f' INTO TABLE ld; SELECT COUNT(*) FROM ld"...)); err != nil {
		t.Fatal(err)
	}
	if p, err := c.ReadPacket(); err != nil || p[0] != 0x00 {
		t.Fatalf("DO 1: % x, %v", p, err)
	}
	if p, err := c.ReadPacket(); err != nil || p[0] != 0xfb || string(p[1:]) != "f" {
		t.Fatalf("file request: % x, %v", p, err)
	}
	for _, chunk := range []string{"1\n2", "\n3\n"} { // a row across two packets
		if err := c.WritePacket([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.WritePacket(nil); err != nil {
		t.Fatal(err)
	}
	res, err := c.ReadResults(false, false)
	if err != nil || len(res) != 2 || res[0].OK == nil || res[0].OK.AffectedRows != 3 || res[1].Cell(0, 0) != "3" {
		t.Fatalf("the rest of the multi-statement: %+v, %v", res, err)
	}

	closedBefore := p.srv.Stats().Pool.Closed
	// A packet over holdfast's max_allowed_packet: 1153, nothing loaded.
	c = p.raw(t, opts)
	loadStart(t, c, "LOAD DATA LOCAL INFILE 'f' INTO TABLE ld")
	var file bytes.Buffer
	for i := 100; file.Len() < 80<<10; i++ {
		fmt.Fprintf(&file, "%d\n", i)
	}
	if err := c.WritePacket([]byte("10\n11\n")); err != nil {
		t.Fatal(err)
	}
	_ = c.WritePacket(file.Bytes())
	if p, err := c.ReadPacket(); err != nil || p[0] != 0xff || errCode(rawmysql.ErrPacket(p)) != 1153 {
		t.Fatalf("an oversized file packet: % x, %v, want ERR 1153", trunc(p), err)
	}
	if rest, err := c.WaitClosed(); err != nil {
		t.Fatalf("not closed after 1153: % x, %v", trunc(rest), err)
	}
	// A client gone after part of its file.
	c = p.raw(t, opts)
	loadStart(t, c, "LOAD DATA LOCAL INFILE 'f' INTO TABLE ld")
	if err := c.WritePacket([]byte("20\n21\n22\n")); err != nil {
		t.Fatal(err)
	}
	c.NC.Close()
	waitFor(t, "both backend connections closed", func() bool {
		return p.srv.Stats().Pool.Closed[0]-closedBefore[0] == 2 // broken
	})
	if n := countRows(t, p, "ld"); n != 3 {
		t.Fatalf("%d rows: a failed client's partial file was loaded", n)
	}
	by.served(t, p)
}

// A client without CLIENT_LOCAL_FILES gets the backend's own refusal.
func TestLoadDataLocalNotNegotiated(t *testing.T) {
	p := startProxy(t)
	mustExec(t, p.direct(t), "CREATE TABLE ld (id INT)")
	q := append([]byte{rawmysql.ComQuery}, "LOAD DATA LOCAL INFILE '/etc/hostname' INTO TABLE ld"...)
	direct := rawLogin(t, p.cfg.Backend.Address, rawmysql.Options{User: p.user, Password: p.user, DB: p.db, Drop: rawmysql.CapLocalFiles})
	want, err := direct.RoundTrip(q)
	if err != nil || want[0] != 0xff {
		t.Fatalf("MariaDB directly: % x, %v", want, err)
	}
	got, err := p.raw(t, rawmysql.Options{Drop: rawmysql.CapLocalFiles}).RoundTrip(q)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("through holdfast: % x, %v\nMariaDB directly: % x", got, err, want)
	}
}

// diffLocalInfile is the differential corpus's LOAD DATA LOCAL flows, for
// drivers that negotiate CLIENT_LOCAL_FILES and those that do not (whom
// the backend refuses).
func diffLocalInfile(r *diffRun, dc *diffClient) {
	r.q(dc, "CREATE TABLE ldl (id INT PRIMARY KEY, v VARCHAR(20))")
	r.loadLocal(dc, "LOAD DATA LOCAL INFILE 'rows.csv' INTO TABLE ldl FIELDS TERMINATED BY ','", "1,one\n2,two\n2,dup\n3")
	r.loadLocal(dc, "LOAD DATA LOCAL INFILE 'none' INTO TABLE ldl", "") // the client has no such file
	r.loadLocal(dc, "LOAD DATA LOCAL INFILE 'x' INTO TABLE no_such_table", "")
	r.q(dc, "BEGIN")
	r.loadLocal(dc, "LOAD DATA LOCAL INFILE 'more' REPLACE INTO TABLE ldl FIELDS TERMINATED BY ','", "3,three\n4,four\n")
	r.q(dc, "ROLLBACK")
	r.q(dc, "SHOW WARNINGS")
	r.q(dc, "SELECT * FROM ldl ORDER BY id")
}

// loadLocal runs a LOAD DATA LOCAL statement on both sides, answering a
// file request with file (two packets, then the empty one) and comparing
// every packet.
func (r *diffRun) loadLocal(dc *diffClient, sql, file string) {
	r.t.Helper()
	var resp [2][][]byte
	for side, c := range dc.c {
		if err := c.Command(append([]byte{rawmysql.ComQuery}, sql...)); err != nil {
			r.t.Fatal(err)
		}
		p, err := c.ReadPacket()
		if err != nil {
			r.t.Fatalf("%s: %s: %v", sideNames[side], sql, err)
		}
		resp[side] = append(resp[side], p)
		if p[0] != 0xfb {
			continue
		}
		half := len(file) / 2
		for _, chunk := range []string{file[:half], file[half:]} {
			if chunk == "" {
				continue
			}
			if err := c.WritePacket([]byte(chunk)); err != nil {
				r.t.Fatal(err)
			}
		}
		if err := c.WritePacket(nil); err != nil {
			r.t.Fatal(err)
		}
		if p, err = c.ReadPacket(); err != nil {
			r.t.Fatalf("%s: %s: %v", sideNames[side], sql, err)
		}
		resp[side] = append(resp[side], p)
	}
	r.compare(dc.name, sql, resp)
}

// waitFor polls cond until it holds, failing the test after a hang guard.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
	}
}

// A bound or a KILL ends an upload that the client keeps feeding (a packet
// every 10 ms, for far longer than the bound): the client is told why
// (9005, or 1317 for the kill), its connection is closed,
// nothing of the file is loaded, and the backend connection holding part
// of it is closed instead of lent on.
func TestLoadDataLocalEndedMidFile(t *testing.T) {
	p := startWatchedProxy(t, func(c *config.Config) { c.Sessions.MaxTransactionTime = 300 * time.Millisecond })
	by := startBystander(t, p)
	mustExec(t, p.direct(t), "CREATE TABLE ld (id INT PRIMARY KEY)")
	killer := p.open(t)
	for _, tc := range []struct {
		name  string
		begin bool // in a transaction: max_transaction_time applies
		kill  bool // KILL QUERY from another client once the file flows
		code  uint16
	}{
		{"max_transaction_time", true, false, codeTxnTooLong},
		{"KILL QUERY", false, true, codeQueryInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			closedBefore := p.srv.Stats().Pool.Closed[0]
			c := p.raw(t, rawmysql.Options{})
			if tc.begin {
				if _, err := c.Results("BEGIN"); err != nil {
					t.Fatal(err)
				}
			}
			loadStart(t, c, "LOAD DATA LOCAL INFILE 'f' INTO TABLE ld")
			ended := false
			for i := 0; i < 500 && !ended; i++ { // 5 s of file at the most
				if i == 10 && tc.kill {
					mustExec(t, killer, fmt.Sprintf("KILL QUERY %d", c.ConnID))
				}
				ended = c.WritePacket(fmt.Appendf(nil, "%d\n", i)) != nil
				time.Sleep(10 * time.Millisecond)
			}
			if !ended {
				ended = c.WritePacket(nil) != nil
			}
			c.LenientSeq = true // a bound's error is unsolicited: sequence 0
			pk, err := c.ReadPacket()
			switch {
			case err != nil:
				t.Fatalf("no answer (%v), want ERR %d", err, tc.code)
			case pk[0] == 0x00:
				t.Fatalf("the whole file was taken: % x", trunc(pk))
			case pk[0] != 0xff || errCode(rawmysql.ErrPacket(pk)) != int(tc.code):
				t.Fatalf("ended with % x, want ERR %d", trunc(pk), tc.code)
			}
			t.Logf("writes failed: %v; answer: % x (%v)", ended, trunc(pk), err)
			if rest, err := c.WaitClosed(); err != nil {
				t.Fatalf("not closed: % x, %v", trunc(rest), err)
			}
			waitFor(t, "the backend connection with part of the file closed", func() bool {
				return p.srv.Stats().Pool.Closed[0] > closedBefore
			})
			if n := countRows(t, p, "ld"); n != 0 {
				t.Fatalf("%d rows: an ended upload was loaded", n)
			}
		})
	}
	by.served(t, p)
}
