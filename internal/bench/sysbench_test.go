package bench

import (
	"strings"
	"testing"
	"time"
)

const sysbenchReport = `sysbench 1.0.20 (using system LuaJIT 2.1.0-beta3)

Running the test with following options:
Number of threads: 4
Initializing random number generator from current time


Initializing worker threads...

Threads started!

SQL statistics:
    queries performed:
        read:                            209073
        write:                           0
        other:                           0
        total:                           209073
    transactions:                        209073 (69645.37 per sec.)
    queries:                             418146 (139290.74 per sec.)
    ignored errors:                      3      (1.00 per sec.)
    reconnects:                          2      (0.67 per sec.)

General statistics:
    total time:                          3.0011s
    total number of events:              209073

Latency (ms):
         min:                                    0.02
         avg:                                    0.06
         max:                                    5.18
         95th percentile:                        0.11
         sum:                                11962.64

Threads fairness:
    events (avg/stddev):           52268.2500/2417.58
    execution time (avg/stddev):   2.9907/0.00
`

func TestParseSysbench(t *testing.T) {
	r, err := ParseSysbench(sysbenchReport)
	if err != nil {
		t.Fatal(err)
	}
	want := SysbenchResult{Transactions: 209073, TPS: 69645.37, Queries: 418146, QPS: 139290.74,
		Errors: 3, Reconnects: 2, P95: 0.11, Seconds: 3.0011}
	if r != want {
		t.Fatalf("got %+v\nwant %+v", r, want)
	}
}

func TestParseSysbenchFailures(t *testing.T) {
	noLatency := strings.Split(sysbenchReport, "Latency (ms):")[0]
	if _, err := ParseSysbench(noLatency); err == nil || !strings.Contains(err.Error(), "percentile") {
		t.Fatalf("report without latency: %v, want an error naming the percentile", err)
	}
	fatal := `FATAL: unable to connect to MySQL server on host '127.0.0.1', port 1, aborting...
FATAL: error 2002: Can't connect to server on '127.0.0.1' (115)
`
	if _, err := ParseSysbench(fatal); err == nil || !strings.Contains(err.Error(), "transactions") {
		t.Fatalf("FATAL output: %v, want an error", err)
	}
	if _, err := ParseSysbench(sysbenchReport + "FATAL: mysql_stmt_execute() failed\n"); err == nil || !strings.Contains(err.Error(), "FATAL") {
		t.Fatalf("report with a FATAL line: %v, want an error", err)
	}
}

func TestSysbenchArgs(t *testing.T) {
	s := Sysbench{Path: "sysbench", Database: "holdfast_bench", Tables: 4, TableSize: 10000}
	e := Endpoint{Name: "holdfast", Addr: "127.0.0.1:6033", User: "sbtest", Password: "pw"}
	got := s.CommandLine(s.RunArgs(Workload{Test: "oltp_point_select", Threads: 256}, e, 10*time.Second))
	want := "sysbench oltp_point_select --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port=6033 " +
		"--mysql-user=sbtest --mysql-password=pw --mysql-db=holdfast_bench --tables=4 --table-size=10000 " +
		"--threads=256 --time=10 --report-interval=0 run"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if w := (Workload{Test: "oltp_read_write", Threads: 16}).String(); w != "read_write@16" {
		t.Fatalf("workload name %q", w)
	}
}
