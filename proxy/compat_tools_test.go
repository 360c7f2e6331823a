package proxy

import (
	"bytes"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// cli runs the mariadb command-line client through the proxy with the SQL
// on stdin and returns its output and error.
func (p *testProxy) cli(t *testing.T, sql string, args ...string) (string, error) {
	t.Helper()
	host, port, _ := strings.Cut(p.addr, ":")
	base := []string{"--no-defaults", "--protocol=tcp", "-h", host, "-P", port, "-uapp", "-papp", "--batch", "--connect-timeout=10"}
	cmd := exec.Command("mariadb", append(append(base, args...), p.db)...)
	cmd.Stdin = strings.NewReader(sql)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestMariadbCLI(t *testing.T) {
	if _, err := exec.LookPath("mariadb"); err != nil {
		t.Fatal("the mariadb client is required (make test installs it): ", err)
	}
	p := startProxy(t)
	out, err := p.cli(t, `
CREATE TABLE t (id INT PRIMARY KEY, note VARCHAR(50));
INSERT INTO t VALUES (1, 'one'), (2, 'two');
BEGIN;
UPDATE t SET note = 'uno' WHERE id = 1;
COMMIT;
SELECT id, note FROM t ORDER BY id;
SET @v := 41;
SELECT @v + 1 AS answer;
SELECT DATABASE() AS db, CONNECTION_ID() > 0 AS has_id;
`)
	if err != nil {
		t.Fatalf("mariadb: %v\n%s", err, out)
	}
	want := "id\tnote\n1\tuno\n2\ttwo\nanswer\n42\ndb\thas_id\n" + p.db + "\t1\n"
	if out != want {
		t.Fatalf("output\n%q\nwant\n%q", out, want)
	}

	// The client's own `use` command sends COM_INIT_DB; status uses
	// COM_STATISTICS through mariadb-admin below.
	other := dbtest.NewDatabase(t)
	mustExec(t, dbtest.Root(t), "GRANT ALL ON `"+other+"`.* TO '"+p.user+"'@'%'")
	out, err = p.cli(t, "use "+other+"\nSELECT DATABASE();\n")
	if err != nil || !strings.Contains(out, other) {
		t.Fatalf("use: %v\n%s", err, out)
	}

	// Errors reach the client with the backend's code and SQLSTATE.
	out, err = p.cli(t, "SELECT * FROM no_such_table;\n")
	if err == nil || !strings.Contains(out, "ERROR 1146 (42S02)") || !strings.Contains(out, "no_such_table") {
		t.Fatalf("missing table: %v\n%s", err, out)
	}

	// -c keeps comments: the backend sees the statement with its comment.
	mustExec(t, dbtest.Root(t), "SET GLOBAL log_output = 'TABLE'")
	out, err = p.cli(t, "SELECT /* conn_tag:cli_test */ 'commented' AS c, (SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = "+selfThread()+") AS seen;\n", "-c")
	if err != nil {
		t.Fatalf("mariadb -c: %v\n%s", err, out)
	}
	if !strings.Contains(out, "/* conn_tag:cli_test */") {
		t.Fatalf("the backend did not see the comment:\n%s", out)
	}
	out, _ = p.cli(t, "SELECT /* conn_tag:cli_test */ (SELECT INFO FROM information_schema.PROCESSLIST WHERE ID = "+selfThread()+") AS seen;\n")
	if strings.Contains(out, "conn_tag") {
		t.Fatalf("without -c the client strips comments, yet the backend saw one:\n%s", out)
	}

	// mariadb-admin: COM_PING and COM_STATISTICS.
	host, port, _ := strings.Cut(p.addr, ":")
	for _, c := range []string{"ping", "status"} {
		cmd := exec.Command("mariadb-admin", "--no-defaults", "--protocol=tcp", "-h", host, "-P", port, "-uapp", "-papp", c)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mariadb-admin %s: %v\n%s", c, err, b)
		}
		if c == "ping" && !strings.Contains(string(b), "alive") || c == "status" && !strings.Contains(string(b), "Uptime") {
			t.Fatalf("mariadb-admin %s: %s", c, b)
		}
	}
}

// TestSysbench runs sysbench oltp_read_write with 32 threads for 3 s through
// holdfast; it must finish with zero errors of any kind.
func TestSysbench(t *testing.T) {
	if _, err := exec.LookPath("sysbench"); err != nil {
		t.Fatal("sysbench is required (make test installs it): ", err)
	}
	p := startProxy(t, func(c *config.Config) {
		c.Pool.Max, c.Pool.MaxIdle = 8, 8
		c.Pool.AcquireTimeout = 30 * time.Second
	})
	host, port, _ := strings.Cut(p.addr, ":")
	args := []string{"oltp_read_write", "--db-driver=mysql", "--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=app", "--mysql-password=app", "--mysql-db=" + p.db, "--tables=4", "--table-size=50000",
		"--mysql-ignore-errors=none"}
	run := func(extra ...string) string {
		cmd := exec.Command("sysbench", append(append([]string{}, args...), extra...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("sysbench %s: %v\n%s", extra, err, b)
		}
		return string(b)
	}
	run("prepare")
	out := run("--threads=32", "--time=3", "--report-interval=0", "run")
	t.Log(out)
	num := func(re string) int {
		m := regexp.MustCompile(re).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no %q in sysbench output", re)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if n := num(`transactions:\s+(\d+)`); n < 32 {
		t.Fatalf("only %d transactions", n)
	}
	if n := num(`ignored errors:\s+(\d+)`); n != 0 {
		t.Fatalf("%d errors", n)
	}
	if n := num(`reconnects:\s+(\d+)`); n != 0 {
		t.Fatalf("%d reconnects", n)
	}
	if strings.Contains(out, "FATAL") {
		t.Fatalf("sysbench reported an error:\n%s", out)
	}
	st := p.srv.Stats()
	if st.Pool.Max != 8 || st.PinnedSessions != 0 {
		t.Fatalf("stats %+v", st)
	}
	t.Log(fmt.Sprintf("pool: %+v", st.Pool))
}
