package proxy

import (
	"bytes"
	"database/sql"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// pairProxy is holdfast in front of a private primary and replica.
type pairProxy struct {
	*testProxy
	primary, replica *dbtest.Private
	pdb, rdb         *sql.DB // root on each server
}

// startPairProxy starts a primary/replica pair with database rt (table t,
// row (1, 10)) and holdfast in front of it with the replica configured
// and routing.tags from policies.
func startPairProxy(t *testing.T, policies map[string]string) *pairProxy {
	t.Helper()
	primary, replica := dbtest.StartReplicaPair(t)
	pdb, rdb := primary.Open(""), replica.Open("")
	t.Cleanup(func() { pdb.Close(); rdb.Close() })
	for _, q := range []string{"CREATE DATABASE rt", "CREATE TABLE rt.t (id INT PRIMARY KEY, v INT)", "INSERT INTO rt.t VALUES (1, 10)", "CREATE SEQUENCE rt.seq"} {
		if _, err := pdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp(t, pdb, rdb)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = ""
	cfg.Backend.Address = primary.Addr
	cfg.Backend.User, cfg.Backend.Password, cfg.Backend.Database = "root", "", "rt"
	cfg.Backend.Replicas = []config.Replica{{Address: replica.Addr}}
	cfg.Routing.Tags = policies
	cfg.Routing.CheckInterval = 50 * time.Millisecond
	cfg.Users = []config.User{{Name: "app", Password: "app"}}
	cfg.Pool.Min, cfg.Pool.Max = 0, 4
	tp := serveProxy(t, cfg, testLogger(t))
	tp.db = "rt"
	srv := tp.srv
	p := &pairProxy{testProxy: tp, primary: primary, replica: replica, pdb: pdb, rdb: rdb}
	waitFor(t, "the replica in service", func() bool { rs := srv.Replicas(); return len(rs) == 1 && rs[0].Up })
	return p
}

// caughtUp waits until the replica has applied the primary's position.
func caughtUp(t *testing.T, pdb, rdb *sql.DB) {
	t.Helper()
	if err := dbtest.CaughtUp(t.Context(), pdb, rdb, 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

// counted runs f and returns how many SELECTs each server ran meanwhile
// (the reads of Com_select themselves are SHOWs).
func (p *pairProxy) counted(t *testing.T, f func()) (primary, replica int) {
	t.Helper()
	p0, r0 := dbtest.ComSelect(t, p.pdb), dbtest.ComSelect(t, p.rdb)
	f()
	return dbtest.ComSelect(t, p.pdb) - p0, dbtest.ComSelect(t, p.rdb) - r0
}

func readV(t *testing.T, db *sql.DB, q string, want int) {
	t.Helper()
	var v int
	if err := db.QueryRow(q).Scan(&v); err != nil || v != want {
		t.Fatalf("%s: %d, %v, want %d", q, v, err, want)
	}
}

// Reads go to the replica by their tag's policy, counted on each server's
// Com_select; untagged reads, locking reads, reads with the
// /* holdfast:primary */ hint, reads in a transaction and writes stay on
// the primary. The replica's state and metrics say what happened.
func TestReplicaRoutesByPolicy(t *testing.T) {
	p := startPairProxy(t, map[string]string{"report_*": "replica_stale_ok"})
	db := p.open(t)
	readV(t, db, "/* conn_tag:report_x */ SELECT v FROM t WHERE id = 1", 10) // warms the replica's pool
	pr, rr := p.counted(t, func() {
		for range 20 {
			readV(t, db, "/* conn_tag:report_x */ SELECT v FROM t WHERE id = 1", 10)
		}
	})
	if pr != 0 || rr != 20 {
		t.Fatalf("20 reads of a replica_stale_ok tag: %d on the primary, %d on the replica; want 0 and 20", pr, rr)
	}
	pr, rr = p.counted(t, func() {
		for range 10 {
			readV(t, db, "SELECT v FROM t WHERE id = 1", 10)
		}
		readV(t, db, "/* conn_tag:report_x */ SELECT v FROM t WHERE id = 1 FOR UPDATE", 10)
		readV(t, db, "/* conn_tag:report_x */ /* holdfast:primary */ SELECT v FROM t WHERE id = 1", 10)
		readV(t, db, "/* conn_tag:report_x */ SELECT NEXTVAL(seq)", 1) // a sequence moves: a write
		tx, err := db.Begin()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		if err := tx.QueryRow("/* conn_tag:report_x */ SELECT v FROM t WHERE id = 1").Scan(&v); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec("/* conn_tag:report_x */ UPDATE t SET v = 11 WHERE id = 1"); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	})
	if pr != 14 || rr != 0 {
		t.Fatalf("10 untagged reads, a locking read, a hinted read, a NEXTVAL and a transaction's read: %d on the primary, %d on the replica; want 14 and 0", pr, rr)
	}
	var v int
	if err := p.pdb.QueryRow("SELECT v FROM rt.t WHERE id = 1").Scan(&v); err != nil || v != 11 {
		t.Fatalf("the transaction's write on the primary: %d %v", v, err)
	}
	rs := p.srv.Replicas()
	if rs[0].Routed != 21 || !rs[0].Up || rs[0].FellBack != 0 || rs[0].Borrows != 21 || rs[0].HoldSeconds <= 0 {
		t.Errorf("replica state %+v, want 21 reads routed and borrowed, none fallen back, hold time, in service", rs[0])
	}
	if tags := rs[0].Tags; len(tags) != 1 || tags[0].Tag != "report_x" || tags[0].Borrows != 21 || tags[0].HoldSeconds <= 0 {
		t.Errorf("the replica's leases by tag: %+v, want report_x's 21 with their hold", tags)
	}
}

// Under the replica policy a client reads its own write: with the
// replica's SQL thread stopped the read goes to the primary, and once the
// replica has applied the write, to the replica again.
func TestReplicaReadYourWrites(t *testing.T) {
	p := startPairProxy(t, map[string]string{"catalog": "replica", "report": "replica_stale_ok"})
	db := p.open(t)
	db.SetMaxOpenConns(1) // one session: its last write is the one it reads
	readV(t, db, "/* conn_tag:catalog */ SELECT v FROM t WHERE id = 1", 10)
	if _, err := p.rdb.Exec("STOP SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("/* conn_tag:catalog */ INSERT INTO t VALUES (2, 20)"); err != nil {
		t.Fatal(err)
	}
	pr, rr := p.counted(t, func() {
		for range 5 {
			readV(t, db, "/* conn_tag:catalog */ SELECT v FROM t WHERE id = 2", 20)
		}
	})
	if pr != 5 || rr != 0 {
		t.Fatalf("reads of its own write with the replica stopped: %d on the primary, %d on the replica; want 5 and 0", pr, rr)
	}
	if _, err := p.rdb.Exec("START SLAVE SQL_THREAD"); err != nil {
		t.Fatal(err)
	}
	caughtUp(t, p.pdb, p.rdb)
	waitFor(t, "the read of its write to go to the replica again", func() bool {
		_, rr := p.counted(t, func() { readV(t, db, "/* conn_tag:catalog */ SELECT v FROM t WHERE id = 2", 20) })
		return rr == 1
	})
}

// A replica that dies is left out and its reads go to the primary, every
// one of them answered; when it is back, reads go to it again.
func TestReplicaKilled(t *testing.T) {
	p := startPairProxy(t, map[string]string{"report": "replica_stale_ok"})
	db := p.open(t)
	for range 5 {
		readV(t, db, "/* conn_tag:report */ SELECT v FROM t WHERE id = 1", 10)
	}
	// A read running on the replica when it dies: no byte of its answer
	// was sent, so it runs again on the primary and its client gets the
	// answer.
	type answer struct {
		v   int
		err error
	}
	got := make(chan answer, 1)
	go func() {
		var a answer
		var slept int
		a.err = db.QueryRow("/* conn_tag:report */ SELECT SLEEP(2), v FROM t WHERE id = 1").Scan(&slept, &a.v)
		got <- a
	}()
	waitFor(t, "the slow read to run on the replica", func() bool {
		var n int
		_ = p.rdb.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%SLEEP(2)%' AND INFO NOT LIKE '%PROCESSLIST%'").Scan(&n)
		return n == 1
	})
	p.replica.Kill()
	if a := <-got; a.err != nil || a.v != 10 {
		t.Fatalf("a read running on the replica when it died: %d, %v; want 10 from the primary", a.v, a.err)
	}
	for i := range 30 {
		var v int
		if err := db.QueryRow("/* conn_tag:report */ SELECT v FROM t WHERE id = 1").Scan(&v); err != nil || v != 10 {
			t.Fatalf("read %d after the replica died: %d, %v", i, v, err)
		}
	}
	if rs := p.srv.Replicas(); rs[0].Up {
		t.Fatalf("the dead replica is in service: %+v", rs[0])
	}
	p.replica.Start()
	if err := p.replica.Follow(p.primary); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "reads to go to the replica again", func() bool {
		_, rr := p.counted(t, func() { readV(t, db, "/* conn_tag:report */ SELECT v FROM t WHERE id = 1", 10) })
		return rr == 1
	})
	t.Logf("replica: %+v", p.srv.Replicas()[0])
}

// A read answered by the replica is byte for byte the answer the primary
// gives for the same data: column definitions, rows, EOF or OK, with the
// capabilities of each driver the differential test speaks as.
func TestReplicaAnswersLikePrimary(t *testing.T) {
	p := startPairProxy(t, map[string]string{"report": "replica_stale_ok"})
	for _, q := range []string{
		"CREATE TABLE rt.types (id INT PRIMARY KEY, d DECIMAL(10,3), s VARCHAR(20) CHARACTER SET utf8mb4, b VARBINARY(8), dt DATETIME(6), j JSON, f DOUBLE, n INT NULL, e ENUM('a','b'), bl BLOB)",
		"INSERT INTO rt.types VALUES (1, 12.5, 'héllo', x'00ff', '2026-12-04 10:11:12.131415', '{\"a\": [1, 2]}', 1.5e-3, NULL, 'b', REPEAT('x', 300)), (2, -1, '', '', '1970-01-01 00:00:01', 'null', 0, 7, 'a', NULL)",
	} {
		if _, err := p.pdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	caughtUp(t, p.pdb, p.rdb)
	readV(t, p.open(t), "/* conn_tag:report */ SELECT id FROM types WHERE id = 1", 1) // the replica's first connection reads its defaults
	queries := []string{
		"SELECT * FROM types ORDER BY id",
		"SELECT id, d * 2 AS dd, UPPER(s), LENGTH(bl), JSON_EXTRACT(j, '$.a[1]') FROM types WHERE id > 0 ORDER BY id DESC",
		"SELECT COUNT(*), SUM(d), MAX(dt) FROM types",
		"SELECT * FROM types WHERE id = 99",
		"SELECT no_such_column FROM types",
	}
	for _, d := range diffDrivers {
		c := rawLogin(t, p.addr, rawmysql.Options{User: "app", Password: "app", DB: "rt", Caps: d.caps, Drop: ^d.caps, Ext: d.ext, Collation: d.coll})
		for _, q := range queries {
			var resp [2][][]byte
			for i, text := range []string{"/* conn_tag:report */ /* holdfast:primary */ " + q, "/* conn_tag:report */ " + q} {
				pr, rr := p.counted(t, func() {
					if err := c.Command(append([]byte{rawmysql.ComQuery}, text...)); err != nil {
						t.Fatal(err)
					}
					ps, err := readResponse(c, respResults)
					if err != nil {
						t.Fatalf("%s: %s: %v", d.name, text, err)
					}
					resp[i] = ps
				})
				if want := [2][2]int{{1, 0}, {0, 1}}[i]; [2]int{pr, rr} != want {
					t.Fatalf("%s: %q ran %d times on the primary, %d on the replica; want %v", d.name, text, pr, rr, want)
				}
			}
			if len(resp[0]) != len(resp[1]) {
				t.Fatalf("%s: %s: %d packets from the primary, %d from the replica", d.name, q, len(resp[0]), len(resp[1]))
			}
			for i := range resp[0] {
				if !bytes.Equal(resp[0][i], resp[1][i]) {
					t.Fatalf("%s: %s: packet %d differs:\nprimary %s\nreplica %s", d.name, q, i, describePacket(resp[0][i], true), describePacket(resp[1][i], true))
				}
			}
		}
	}
}

// A replica that lags (delayed replication, 2 s behind): right after a
// write its writer reads from the primary; past max_replica_lag the
// replica gets no reads at all, even stale_ok ones; once it has applied
// the write it is back in service and the writer's reads go to it.
func TestReplicaLagging(t *testing.T) {
	p := startPairProxy(t, map[string]string{"catalog": "replica", "report": "replica_stale_ok"})
	// A delay of 4 s against a bound of 1 s: the replica lags past the
	// bound for about 3 s after the write, wide enough for a check to see
	// it even when a loaded machine samples the primary's position late.
	for _, q := range []string{"STOP SLAVE", "CHANGE MASTER TO MASTER_DELAY=4", "START SLAVE"} {
		if _, err := p.rdb.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	// While its replication was stopped it replicated from no one: out of
	// service until a check sees it running again.
	checks := p.srv.Topology().Checks
	waitFor(t, "the replica in service again", func() bool { return p.srv.Topology().Checks >= checks+2 && p.srv.Replicas()[0].Up })
	writer := p.open(t)
	writer.SetMaxOpenConns(1)
	other := p.open(t)
	readV(t, writer, "/* conn_tag:catalog */ SELECT v FROM t WHERE id = 1", 10)
	readV(t, other, "/* conn_tag:report */ SELECT v FROM t WHERE id = 1", 10)
	if _, err := writer.Exec("/* conn_tag:catalog */ UPDATE t SET v = 12 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	pr, rr := p.counted(t, func() { readV(t, writer, "/* conn_tag:catalog */ SELECT v FROM t WHERE id = 1", 12) })
	if pr != 1 || rr != 0 {
		t.Fatalf("the writer's read right after its write: %d on the primary, %d on the replica; want the primary", pr, rr)
	}
	waitFor(t, "the lagging replica out of service", func() bool { return !p.srv.Replicas()[0].Up })
	if r := p.srv.Replicas()[0]; r.Lag <= 1 || !strings.Contains(r.Reason, "lags") {
		t.Fatalf("out of service as %+v, want a lag over max_replica_lag", r)
	}
	pr, rr = p.counted(t, func() { readV(t, other, "/* conn_tag:report */ SELECT v FROM t WHERE id = 1", 12) })
	if pr != 1 || rr != 0 {
		t.Fatalf("a stale_ok read while the replica lags past the bound: %d on the primary, %d on the replica; want the primary", pr, rr)
	}
	waitFor(t, "the replica back in service", func() bool { return p.srv.Replicas()[0].Up })
	pr, rr = p.counted(t, func() { readV(t, writer, "/* conn_tag:catalog */ SELECT v FROM t WHERE id = 1", 12) })
	if pr != 0 || rr != 1 {
		t.Fatalf("the writer's read once the replica applied its write: %d on the primary, %d on the replica; want the replica", pr, rr)
	}
}

// KILL QUERY reaches a read running on a replica (it goes to the replica's
// server, not the primary's); CONNECTION_ID() keeps working beside routed
// reads, and prepared reads are routed like typed ones.
func TestReplicaKillAndPrimaryOnlyFeatures(t *testing.T) {
	p := startPairProxy(t, map[string]string{"report": "replica_stale_ok"})
	db := p.open(t)
	conn, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var id int64
	if err := conn.QueryRowContext(t.Context(), "SELECT CONNECTION_ID()").Scan(&id); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		var a, b int
		got <- conn.QueryRowContext(t.Context(), "/* conn_tag:report */ SELECT SLEEP(20), v FROM t WHERE id = 1").Scan(&a, &b)
	}()
	waitFor(t, "the slow read to run on the replica", func() bool {
		var n int
		_ = p.rdb.QueryRow("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%SLEEP(20)%' AND INFO NOT LIKE '%PROCESSLIST%'").Scan(&n)
		return n == 1
	})
	if _, err := db.Exec("KILL QUERY " + strconv.FormatInt(id, 10)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		// SLEEP interrupted by KILL QUERY returns 1 (not an error) in
		// MariaDB; either way the statement ended early.
		if err != nil && mysqlErrNo(err) != codeQueryInterrupted {
			t.Fatalf("the killed read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("KILL QUERY did not end the read running on the replica")
	}
	// A prepared read of a routed tag goes to the replica too (prepared
	// there on first use); a prepared write of the tag still succeeds.
	pr, rr := p.counted(t, func() {
		for range 3 {
			var v int
			if err := db.QueryRow("/* conn_tag:report */ SELECT v FROM t WHERE id = ?", 1).Scan(&v); err != nil || v != 10 {
				t.Fatalf("a prepared read of a routed tag: %d %v", v, err)
			}
		}
	})
	if pr != 0 || rr != 3 {
		t.Fatalf("3 prepared reads of a replica_stale_ok tag: %d on the primary, %d on the replica; want 0 and 3", pr, rr)
	}
	if _, err := db.Exec("/* conn_tag:report */ UPDATE t SET v = ? WHERE id = 1", 10); err != nil {
		t.Fatal(err)
	}
}

// A reload's pool limits reach the replicas' pools too (a replica without
// its own max follows pool.max).
func TestReplicaPoolFollowsReload(t *testing.T) {
	p := startPairProxy(t, map[string]string{"report": "replica_stale_ok"})
	if got := p.srv.Replicas()[0].Pool.Max; got != 4 {
		t.Fatalf("the replica's pool max is %d, want pool.max 4", got)
	}
	cfg := p.cfg
	cfg.Pool.Max = 7
	if err := p.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if got := p.srv.Replicas()[0].Pool.Max; got != 7 {
		t.Fatalf("after a reload to pool.max 7 the replica's pool max is %d", got)
	}
}

// A replica with no connection free within its budget gives the read to
// the primary, which answers it at once, and stays in service: the read
// does not queue behind the replica's long reads.
func TestReplicaBusyFallsBack(t *testing.T) {
	p := startPairProxy(t, map[string]string{"report_*": "replica_stale_ok"})
	db := p.open(t)
	db.SetMaxOpenConns(8)
	readV(t, db, "/* conn_tag:report_x */ SELECT v FROM t WHERE id = 1", 10) // warms the replica's pool
	var wg sync.WaitGroup
	for range 4 { // the replica's pool max (pool.max)
		wg.Go(func() {
			if _, err := db.Exec("/* conn_tag:report_x */ SELECT SLEEP(2)"); err != nil {
				t.Error(err)
			}
		})
	}
	defer wg.Wait()
	dbtest.Eventually(t, "four reads holding every replica connection", func() bool { return p.srv.Replicas()[0].InUse == 4 })
	before := p.srv.Replicas()[0]
	pr, rr := p.counted(t, func() { readV(t, db, "/* conn_tag:report_x */ SELECT v FROM t WHERE id = 1", 10) })
	after := p.srv.Replicas()[0]
	if pr != 1 || rr != 0 || after.FellBack-before.FellBack != 1 || !after.Up {
		t.Fatalf("a read while the replica is busy: %d on the primary, %d on the replica, %d fell back, up %v; want 1, 0, 1, true",
			pr, rr, after.FellBack-before.FellBack, after.Up)
	}
}

// Read-your-writes positions across a switchover: MariaDB numbers a
// domain's transactions on, whichever server commits them (the new
// primary's first GTID follows the last it applied from the former one,
// with its own server_id), so a session's writes are kept as the highest
// sequence number per domain, and a replica has them when its position
// reaches that number in each domain, whatever server_id wrote it. A new
// primary that writes in a domain of its own adds that domain.
func TestReadYourWritesPositionsAcrossSwitch(t *testing.T) {
	st := sessionWrites(t, "0-1-100")           // written on the former primary (server_id 1)
	mustCover(t, "0-1-100", st, true)           // a replica of the former primary that applied it
	mustCover(t, "0-1-99", st, false)           // one that did not
	mustCover(t, "0-2-101", st, true)           // a replica of the new primary (server_id 2), which had it when promoted
	st = sessionWrites(t, "0-1-100", "0-2-105") // then written on the new primary
	mustCover(t, "0-1-100", st, false)          // the former primary before it applied the new one's writes
	mustCover(t, "0-2-104", st, false)
	mustCover(t, "0-2-105", st, true)
	st = sessionWrites(t, "0-1-100", "7-2-3") // a new primary writing in a domain of its own
	mustCover(t, "0-1-100", st, false)
	mustCover(t, "0-1-100,7-2-2", st, false)
	mustCover(t, "0-2-100,7-2-3", st, true)
}

// sessionWrites is a session's write positions after commits of gtids
// (as the server's OK packets report them).
func sessionWrites(t *testing.T, gtids ...string) gtidPos {
	t.Helper()
	s := &session{}
	for _, g := range gtids {
		s.noteWrite(g)
	}
	if s.state.WritesUnplaced {
		t.Fatalf("%v: a write could not be placed", gtids)
	}
	return gtidPos(s.state.Writes)
}

func mustCover(t *testing.T, replicaPos string, writes gtidPos, want bool) {
	t.Helper()
	p, ok := parseGTIDPos(replicaPos)
	if !ok {
		t.Fatalf("cannot parse %q", replicaPos)
	}
	if got := p.covers(writes); got != want {
		t.Errorf("a replica at %s has the session's writes %v: %v, want %v", replicaPos, writes, got, want)
	}
}
