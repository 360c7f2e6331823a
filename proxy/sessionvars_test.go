package proxy

// Session state in production's shape: a server with binary logging on,
// and many clients sharing few backend connections. Each test compares
// what a client sees through holdfast with what the same client sees
// straight from MariaDB.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// On a server with binary logging on, every commit's OK reports last_gtid,
// a read-only variable: it must never be set on a pooled connection (SET
// last_gtid fails with 1238, which once failed every statement after the
// first write).
func TestBinlogWritesKeepThePool(t *testing.T) {
	srv := dbtest.StartPrivate(t) // binary logging on, ROW format
	root := srv.Open("")
	defer root.Close()
	mustExec(t, root, "CREATE DATABASE hf")
	mustExec(t, root, "CREATE TABLE hf.t (id INT AUTO_INCREMENT PRIMARY KEY, v INT)")
	if v := queryString(t, root, "SELECT @@log_bin"); v != "1" {
		t.Fatalf("the private server has log_bin %s", v)
	}
	p := startProxy(t, func(c *config.Config) {
		c.Backend.Address, c.Backend.User, c.Backend.Password, c.Backend.Database = srv.Addr, "root", "", "hf"
		c.Pool.Max, c.Pool.MaxIdle = 2, 2
	})
	const clients, steps = 6, 10
	var failures sync.Map
	concurrently(t, clients, func(i int) error {
		c, err := rawDial(p.addr, rawmysql.Options{User: "app", Password: "app", DB: "hf", Caps: rawmysql.CapSessionTrack})
		if err != nil {
			return err
		}
		defer c.NC.Close()
		ins, err := c.Prepare("INSERT INTO t (v) VALUES (?)")
		if err != nil {
			return err
		}
		for j := 0; j < steps; j++ {
			for _, q := range []string{
				fmt.Sprintf("INSERT INTO t (v) VALUES (%d)", i*100+j),
				"SELECT COUNT(*) FROM t",
				fmt.Sprintf("SET time_zone = '+0%d:00'", j%9),
				"BEGIN", fmt.Sprintf("UPDATE t SET v = v + 1 WHERE v = %d", i*100+j), "COMMIT",
				"SELECT @@time_zone",
			} {
				if _, err := c.Results(q); err != nil {
					failures.Store(fmt.Sprintf("client %d: %s", i, q), err.Error())
				}
			}
			if _, err := c.Execute(ins.ID, 0, []rawmysql.Param{rawmysql.IntParam(int64(j))}, true); err != nil {
				failures.Store(fmt.Sprintf("client %d: execute INSERT", i), err.Error())
			}
		}
		return nil
	})
	n := 0
	failures.Range(func(k, v any) bool {
		if n++; n <= 5 {
			t.Errorf("%s: %s", k, v)
		}
		return true
	})
	if n > 0 {
		t.Fatalf("%d statements failed after writes on a binlog-on server", n)
	}
	if got := queryString(t, root, "SELECT COUNT(*) FROM hf.t"); got != fmt.Sprint(clients*steps*2) {
		t.Fatalf("%s rows, want %d", got, clients*steps*2)
	}

	// A client that tracks last_gtid is told its commit's GTID, as
	// MariaDB tells it. (It is not restored on another connection: it is
	// read-only; see README, "Not restored".)
	c := p.raw(t, rawmysql.Options{DB: "hf", Caps: rawmysql.CapSessionTrack})
	c.mustQuery("SET SESSION session_track_system_variables = 'last_gtid'")
	rs := c.mustQuery("INSERT INTO t (v) VALUES (-1)")
	st, err := rawmysql.DecodeState(rs[0].OK.StateInfo)
	if err != nil || len(st) != 1 || st[0].Name != "last_gtid" || !strings.HasPrefix(st[0].Value, "0-1-") {
		t.Fatalf("INSERT's session state %+v (%v), want last_gtid 0-1-<n>", st, err)
	}
	if want := queryString(t, root, "SELECT @@gtid_binlog_pos"); st[0].Value != want {
		t.Fatalf("last_gtid %s, server's binlog position %s", st[0].Value, want)
	}
}

// A client that changes one character-set variable alone, then moves to
// another backend connection, reads exactly what MariaDB gives it: the
// restore must not change the client's other character-set variables
// (SET NAMES, which the results' collation needs, sets all three).
func TestCharsetResultsAloneMoves(t *testing.T) {
	for _, cs := range []string{"cp1251", "koi8r", "utf8mb3", "latin1"} {
		for _, binary := range []bool{false, true} {
			name := cs + "/text"
			if binary {
				name = cs + "/binary"
			}
			t.Run(name, func(t *testing.T) {
				p := twoBackends(t)
				read := func(c *rawConn) (string, uint16) {
					var r rawmysql.Result
					if binary {
						st := c.mustPrepare("SELECT ? AS n, @@character_set_client AS c")
						r = c.mustExecute(st, []rawmysql.Param{rawmysql.StrParam("привет")}, true)
					} else {
						r = c.mustQuery("SELECT 'привет' AS n, @@character_set_client AS c")[0]
					}
					return r.Cell(0, 0) + " / " + r.Cell(0, 1), r.Cols[0].Charset
				}
				set := func(c *rawConn) {
					if binary {
						st := c.mustPrepare("SET character_set_results = ?")
						c.mustExecute(st, []rawmysql.Param{rawmysql.StrParam(cs)}, true)
					} else {
						c.mustQuery("SET character_set_results = '" + cs + "'")
					}
				}
				d := p.rawDirect(t, rawmysql.Options{})
				set(d)
				want, wantCS := read(d)

				c := p.raw(t, rawmysql.Options{})
				tid := rawThread(c)
				set(c)
				done := stepTo(t, p, tid) // c's next statement runs on the other connection
				defer done()
				if got, gotCS := read(c); got != want || gotCS != wantCS {
					t.Fatalf("after moving: %q (charset %d), MariaDB gives %q (charset %d)", got, gotCS, want, wantCS)
				}
			})
		}
	}
}

// Many clients share a pool of two, each setting random session variables
// (by text and by prepared statement) and reading them back, beside a twin
// connection straight to MariaDB that runs the same statements: each must
// read exactly what its twin reads.
func TestSessionVariablesStress(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 2, 2 })
	type variable struct {
		name   string
		values []string
	}
	vars := []variable{
		{"character_set_results", []string{"utf8mb4", "cp1251", "latin1", "koi8r", "NULL"}},
		{"character_set_client", []string{"utf8mb4", "cp1251", "latin1", "utf8mb3"}},
		{"character_set_connection", []string{"utf8mb4", "latin1", "cp1251"}},
		{"collation_connection", []string{"utf8mb4_general_ci", "utf8mb4_bin", "latin1_swedish_ci", "cp1251_bin", "utf8mb4_unicode_ci"}},
		{"time_zone", []string{"SYSTEM", "+00:00", "+05:30", "-03:00"}},
		{"sql_mode", []string{"", "ANSI_QUOTES", "STRICT_TRANS_TABLES,NO_ZERO_DATE", "TRADITIONAL"}},
		{"max_error_count", []string{"10", "64", "200"}},
		{"div_precision_increment", []string{"2", "4", "9"}},
		{"group_concat_max_len", []string{"1024", "4096", "100000"}},
	}
	var read strings.Builder
	read.WriteString("SELECT ")
	for i, v := range vars {
		if i > 0 {
			read.WriteString(", ")
		}
		fmt.Fprintf(&read, "IFNULL(@@%s, 'NULL')", v.name)
	}
	read.WriteString(", 'привет'")
	const clients, rounds = 24, 40
	var mu sync.Mutex
	var wrong []string
	reads := 0
	concurrently(t, clients, func(i int) error {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		var sides [2]*rawConn
		for side, addr := range []string{p.cfg.Backend.Address, p.addr} {
			o := rawmysql.Options{User: "app", Password: "app", DB: p.db}
			if side == 0 {
				o.User, o.Password = p.user, p.user
			}
			c, err := rawDial(addr, o)
			if err != nil {
				return err
			}
			defer c.NC.Close()
			sides[side] = c
		}
		var stmts [2]map[string]uint32
		for side := range stmts {
			stmts[side] = map[string]uint32{}
		}
		run := func(side int, q string, param *rawmysql.Param, binary bool) ([]rawmysql.Result, error) {
			c := sides[side]
			if !binary {
				return c.Results(q)
			}
			id, ok := stmts[side][q]
			if !ok {
				st, err := c.Prepare(q)
				if err != nil {
					return nil, err
				}
				id = st.ID
				stmts[side][q] = id
			}
			var params []rawmysql.Param
			if param != nil {
				params = []rawmysql.Param{*param}
			}
			return c.Execute(id, 0, params, true)
		}
		for round := 0; round < rounds; round++ {
			for k := 1 + r.IntN(2); k > 0; k-- {
				v := vars[r.IntN(len(vars))]
				val := v.values[r.IntN(len(v.values))]
				binary := r.IntN(2) == 0
				q := "SET " + v.name + " = "
				var param *rawmysql.Param
				n, numErr := strconv.ParseInt(val, 10, 64)
				switch {
				case val == "NULL":
					q, binary = q+"NULL", false
				case binary && numErr == nil:
					pr := rawmysql.IntParam(n)
					q, param = q+"?", &pr
				case binary:
					pr := rawmysql.StrParam(val)
					q, param = q+"?", &pr
				case numErr == nil:
					q += val
				default:
					q += "'" + val + "'"
				}
				for side := range sides {
					if _, err := run(side, q, param, binary); err != nil {
						return fmt.Errorf("client %d side %d: %s (%s): %v", i, side, q, val, err)
					}
				}
			}
			binary := r.IntN(2) == 0
			var got [2]string
			for side := range sides {
				rs, err := run(side, read.String(), nil, binary)
				if err != nil {
					return fmt.Errorf("client %d side %d: read back: %v", i, side, err)
				}
				var cells []string
				for j := range rs[0].Cols {
					cells = append(cells, rs[0].Cell(0, j))
				}
				got[side] = strings.Join(cells, "|")
			}
			mu.Lock()
			reads++
			if got[0] != got[1] {
				wrong = append(wrong, fmt.Sprintf("client %d round %d (binary %v):\n  MariaDB:  %s\n  holdfast: %s", i, round, binary, got[0], got[1]))
			}
			mu.Unlock()
		}
		return nil
	})
	for i, w := range wrong {
		if i == 5 {
			break
		}
		t.Error(w)
	}
	if len(wrong) > 0 {
		t.Fatalf("%d of %d reads differ from MariaDB's", len(wrong), reads)
	}
	t.Logf("%d reads by %d clients on a pool of 2: each read exactly what MariaDB gave its twin", reads, clients)
}

// A stored function called in a SELECT can change the session's variables;
// the result set's EOF says so (SERVER_SESSION_STATE_CHANGED) but carries
// no tracker data. The caller keeps the change, as with MariaDB, and no
// other client of that backend connection sees it: not after the SELECT,
// and not queued behind it on a pipelined connection.
func TestStoredFunctionChangesStateInSelect(t *testing.T) {
	setup := func(t *testing.T, p *testProxy) {
		mustExec(t, p.direct(t), "CREATE FUNCTION set_tz() RETURNS INT DETERMINISTIC BEGIN SET @@session.time_zone = '+05:00'; RETURN 1; END")
	}
	t.Run("borrowed", func(t *testing.T) {
		p := twoBackends(t)
		setup(t, p)
		d := p.rawDirect(t, rawmysql.Options{})
		d.mustQuery("SELECT set_tz()")
		want := d.value("SELECT @@time_zone")

		c := p.raw(t, rawmysql.Options{})
		c.mustQuery("SELECT set_tz()")
		// The pool lends the connection returned last first: had the
		// caller given its connection back, b would get it.
		b := p.conn(t)
		if got := queryString(t, b, "SELECT @@time_zone"); got != "SYSTEM" {
			t.Fatalf("another client sees time_zone %s after a stored function set it for the caller", got)
		}
		if got := c.value("SELECT @@time_zone"); got != want {
			t.Fatalf("the caller has time_zone %s, MariaDB gives %s", got, want)
		}
		if pins := p.srv.Stats().Pins; pins["session_state"] != 1 {
			t.Fatalf("pins %v, want the caller pinned (session_state)", pins)
		}
	})
	t.Run("pipelined", func(t *testing.T) {
		p := startProxy(t, func(c *config.Config) {
			c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
			c.Pool.PipelineDepth = 8
		})
		setup(t, p)
		queryString(t, p.open(t), "SELECT 1")
		p.srv.slowHead.Store(int64(time.Hour)) // let statements queue behind the slow head
		head := p.conn(t)
		others := make([]*rawConn, 4)
		for i := range others {
			others[i] = p.raw(t, rawmysql.Options{})
		}
		caller := p.raw(t, rawmysql.Options{})
		ctx := context.Background()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the pipe's head: holds the one connection a while
			defer wg.Done()
			_, _ = head.ExecContext(ctx, "SELECT SLEEP(0.5)")
		}()
		waitFor(t, "the head to run on a pipe", func() bool { return pipeQueued(p) >= 1 })
		callerDone := make(chan error, 1)
		go func() {
			_, err := caller.Results("SELECT set_tz()")
			callerDone <- err
		}()
		waitFor(t, "the caller to queue behind the head", func() bool { return pipeQueued(p) >= 2 || p.srv.Waiting().Total() >= 1 })
		got := make([]string, len(others))
		errs := make([]error, len(others))
		for i, o := range others {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rs, err := o.Results("SELECT @@time_zone")
				if err == nil {
					got[i] = rs[0].Cell(0, 0)
				}
				errs[i] = err
			}()
		}
		if err := <-callerDone; err != nil {
			t.Fatal(err)
		}
		if tz := caller.value("SELECT @@time_zone"); tz != "+05:00" {
			t.Errorf("the caller has time_zone %s, want +05:00", tz)
		}
		caller.NC.Close() // it keeps (pins) the one connection while connected
		wg.Wait()
		for i := range others {
			if errs[i] != nil || got[i] != "SYSTEM" {
				t.Errorf("client %d queued behind the function's caller: time_zone %q (%v), want SYSTEM", i, got[i], errs[i])
			}
		}
	})
	t.Run("set_statement", func(t *testing.T) {
		// SET STATEMENT's variables are back when its SELECT ends: no pin,
		// and no report of them reaches the next client's OK.
		p := startProxy(t, func(c *config.Config) { c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1 })
		c := p.raw(t, rawmysql.Options{})
		c.mustQuery("SET STATEMENT sort_buffer_size = 100000 FOR SELECT 1")
		if pins := p.srv.Stats().Pins; len(pins) != 0 {
			t.Fatalf("SET STATEMENT ... FOR SELECT pinned: %v", pins)
		}
		o := p.raw(t, rawmysql.Options{Caps: rawmysql.CapSessionTrack})
		o.mustQuery("SET SESSION session_track_system_variables = '*'")
		rs := o.mustQuery("SET time_zone = '+01:00'")
		st, err := rawmysql.DecodeState(rs[0].OK.StateInfo)
		if err != nil || !slices.ContainsFunc(st, func(e rawmysql.StateEntry) bool { return e.Name == "time_zone" }) {
			t.Fatalf("the OK of SET time_zone tracked %+v (%v), want time_zone among it", st, err)
		}
		for _, e := range st {
			if e.Name == "sort_buffer_size" {
				t.Fatalf("another client was told of SET STATEMENT's variable: %+v", st)
			}
		}
	})
}

// KILL among other statements of a multi-statement text runs in its place,
// translated, as MariaDB runs it: the statements before and after it run
// with MORE_RESULTS, an error ends the text, and KILL QUERY of one's own
// connection answers 1317 and ends it.
func TestKillInMultiStatement(t *testing.T) {
	p := startProxy(t)
	opts := rawmysql.Options{Caps: rawmysql.CapMultiStatements}
	type outcome struct {
		statuses []uint16
		err      string
	}
	run := func(c *rawConn, q string) outcome {
		rs, err := c.Results(q)
		o := outcome{statuses: rawmysql.Statuses(rs)}
		if err != nil {
			o.err = err.Error()
		}
		return o
	}
	d, c := p.rawDirect(t, opts), p.raw(t, opts)
	dv, cv := p.rawDirect(t, rawmysql.Options{}), p.raw(t, rawmysql.Options{User: "app", Password: "app"})
	ids := [2]string{d.value("SELECT CONNECTION_ID()"), c.value("SELECT CONNECTION_ID()")}
	victims := [2]string{dv.value("SELECT CONNECTION_ID()"), cv.value("SELECT CONNECTION_ID()")}
	for _, q := range []string{
		"SELECT 1; KILL QUERY {self}; SELECT 2",
		"KILL QUERY {self}; SELECT 1",
		"KILL 4000000000; SELECT 1",
		"SELECT 1; KILL QUERY 4000000000",
		"DO 1; KILL QUERY {victim}; SELECT 2",
		"SELECT 1; KILL {victim}; SELECT 2; DO 3",
	} {
		var got [2]outcome
		for side, cc := range []*rawConn{d, c} {
			got[side] = run(cc, strings.NewReplacer("{self}", ids[side], "{victim}", victims[side]).Replace(q))
		}
		if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
			t.Errorf("%s:\n  MariaDB:  %+v\n  holdfast: %+v", q, got[0], got[1])
		}
	}
	// The victim of KILL [CONNECTION] is gone on both sides.
	for side, v := range []*rawConn{dv, cv} {
		if _, err := v.Results("SELECT 1"); err == nil {
			t.Errorf("%s: the killed connection still answers", sideNames[side])
		}
	}
	// Forms holdfast cannot translate are refused before anything runs.
	for _, q := range []string{"DO 1; KILL (SELECT 1); SELECT 2", "BEGIN NOT ATOMIC KILL QUERY 4000000000; END"} {
		if o := run(c, q); !strings.Contains(o.err, "1235") || len(o.statuses) != 0 {
			t.Errorf("%s: %+v, want a 1235 refusal alone", q, o)
		}
	}
}

// Setting a variable holdfast keeps for the client (wait_timeout, the
// session_track_* settings) is explained by the tracker's report or by
// holdfast's read-back: it does not pin the session.
func TestKeptVariablesDoNotPin(t *testing.T) {
	p := twoBackends(t)
	c := p.raw(t, rawmysql.Options{Caps: rawmysql.CapSessionTrack})
	for _, q := range []string{"SET wait_timeout = 100", "SET interactive_timeout = 50",
		"SET session_track_system_variables = 'time_zone'", "SET session_track_state_change = ON"} {
		c.mustQuery(q)
		if pins := p.srv.Stats().Pins; len(pins) != 0 {
			t.Fatalf("%s pinned the session: %v", q, pins)
		}
	}
	tid := rawThread(c)
	done := stepTo(t, p, tid)
	defer done()
	if got := c.value("SELECT CONCAT(@@wait_timeout, '/', @@interactive_timeout, '/', @@session_track_system_variables)"); got != "100/50/time_zone" {
		t.Fatalf("after moving: %s, want 100/50/time_zone", got)
	}
}

// A prepared statement keeps the meaning its text had when the client
// prepared it (sql_mode, the character set of its literals), as on
// MariaDB: holdfast's backend statements are shared by clients only when
// they were parsed alike, and one prepared again on another connection is
// parsed as the client's was.
func TestPreparedStatementKeepsItsParse(t *testing.T) {
	p := twoBackends(t)
	mustExec(t, p.direct(t), "CREATE TABLE pq (a VARCHAR(10))")
	mustExec(t, p.direct(t), "INSERT INTO pq VALUES ('column')")
	const text = `SELECT "a", 'é' FROM pq`
	type step struct {
		before, after string // run before the prepare, and between it and the execute
		move          bool   // execute on another backend connection
	}
	for _, st := range []step{
		{before: "SET sql_mode = 'ANSI_QUOTES'"},
		{before: "SET sql_mode = DEFAULT"},
		{before: "SET NAMES latin1"},
		{before: "SET NAMES utf8mb4"},
		{before: "SET sql_mode = DEFAULT", after: "SET sql_mode = 'ANSI_QUOTES'", move: true},
		{before: "SET sql_mode = 'ANSI_QUOTES'", after: "SET sql_mode = DEFAULT", move: true},
		{before: "SET NAMES latin1", after: "SET NAMES utf8mb4", move: true},
	} {
		var got [2]string
		for side := range got {
			var c *rawConn
			if side == sideDirect {
				c = p.rawDirect(t, rawmysql.Options{})
			} else {
				c = p.raw(t, rawmysql.Options{})
			}
			c.mustQuery(st.before)
			s := c.mustPrepare(text)
			if st.after != "" {
				c.mustQuery(st.after)
			}
			var done func()
			if side == sideHoldfast && st.move {
				done = stepTo(t, p, rawThread(c))
			}
			r := c.mustExecute(s, nil, true)
			got[side] = r.Cell(0, 0) + " " + fmt.Sprintf("%x", r.Cell(0, 1))
			if done != nil {
				done()
			}
			c.NC.Close()
		}
		if got[0] != got[1] {
			t.Errorf("%+v: holdfast %q, MariaDB %q", st, got[1], got[0])
		}
	}
}

// A statement is counted under the tag its own comment carries, lexed as
// the server lexes it under the session's sql_mode: a comment inside a
// string literal is no tag (and a drain of that tag would not stop it).
func TestTagUnderSessionSQLMode(t *testing.T) {
	p := startProxy(t)
	// Under ANSI_QUOTES "..." names a column.
	mustExec(t, p.direct(t), "CREATE TABLE ansi (`x\\` INT, `/* conn_tag:evil2 */` INT)")
	for _, tc := range []struct{ mode, sql string }{
		{"NO_BACKSLASH_ESCAPES", `SELECT 'x\', '/* conn_tag:evil1 */' FROM dual /* conn_tag:real1 */`},
		{"NO_BACKSLASH_ESCAPES,ANSI_QUOTES", `SELECT "x\", "/* conn_tag:evil2 */" FROM ansi /* conn_tag:real2 */`},
	} {
		c := p.raw(t, rawmysql.Options{})
		c.mustQuery("SET sql_mode = '" + tc.mode + "'")
		c.mustQuery(tc.sql)
		// A prepared statement too.
		c.mustExecute(c.mustPrepare(tc.sql), nil, true)
	}
	counts := map[string]uint64{}
	for _, s := range p.srv.Recorder().Snapshot() {
		counts[s.Tag] = s.Statements
	}
	for _, tag := range []string{"real1", "real2"} {
		if counts[tag] != 2 {
			t.Errorf("tag %s counted %d statements, want 2 (tags: %v)", tag, counts[tag], counts)
		}
	}
	for _, tag := range []string{"evil1", "evil2"} {
		if counts[tag] != 0 {
			t.Errorf("a comment inside a string literal counted %d statements under %s", counts[tag], tag)
		}
	}
}
