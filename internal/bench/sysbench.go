package bench

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// Endpoint is where sysbench (or Client) connects, and as whom.
type Endpoint struct {
	Name     string // "direct", "relay", "holdfast"
	Addr     string // host:port
	User     string
	Password string
}

// Dial logs in to ep as its account, selecting db, bounded by 30 s (and
// ctx).
func (ep Endpoint) Dial(ctx context.Context, db string) (*rawmysql.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return dial(ctx, ep.Addr, ep.User, ep.Password, db)
}

// dial logs in to addr with the load generator's connection: the
// capabilities a lean client asks for (CLIENT_DEPRECATE_EOF, no LOCAL
// INFILE, no PS_MULTI_RESULTS), a 4 KiB read buffer, and any sequence id
// accepted at the start of a reply. ctx bounds the dial and the login.
func dial(ctx context.Context, addr, user, password, db string) (*rawmysql.Conn, error) {
	return rawmysql.Dial(ctx, addr, rawmysql.Options{
		User: user, Password: password, DB: db,
		Caps:       rawmysql.CapDeprecateEOF,
		Drop:       rawmysql.CapPSMultiResults | rawmysql.CapLocalFiles,
		LenientSeq: true,
	})
}

// Workload is one sysbench test at one thread count, with the issue's
// target for holdfast's throughput relative to the TCP relay.
type Workload struct {
	Test    string  // oltp_point_select, oltp_read_write
	Threads int     // --threads
	Target  float64 // holdfast tps ≥ Target × relay tps
}

func (w Workload) String() string {
	return fmt.Sprintf("%s@%d", strings.TrimPrefix(w.Test, "oltp_"), w.Threads)
}

// Sysbench builds and runs sysbench command lines against one database.
// The zero value is not usable: Path, Database, Tables and TableSize are
// required.
type Sysbench struct {
	Path      string // the sysbench executable
	Database  string // --mysql-db
	Tables    int    // --tables
	TableSize int    // --table-size
}

// Args is the sysbench argument list for test against e, ending in the
// command (prepare, run, cleanup); extra go before the command.
func (s Sysbench) Args(test string, e Endpoint, command string, extra ...string) []string {
	host, port, _ := strings.Cut(e.Addr, ":")
	args := []string{test, "--db-driver=mysql",
		"--mysql-host=" + host, "--mysql-port=" + port,
		"--mysql-user=" + e.User, "--mysql-password=" + e.Password,
		"--mysql-db=" + s.Database,
		"--tables=" + strconv.Itoa(s.Tables), "--table-size=" + strconv.Itoa(s.TableSize)}
	args = append(args, extra...)
	return append(args, command)
}

// RunArgs is the argument list of a timed run of w.
func (s Sysbench) RunArgs(w Workload, e Endpoint, d time.Duration) []string {
	return s.Args(w.Test, e, "run", "--threads="+strconv.Itoa(w.Threads),
		"--time="+strconv.Itoa(int(d.Round(time.Second)/time.Second)), "--report-interval=0")
}

// CommandLine renders args as a shell command line.
func (s Sysbench) CommandLine(args []string) string {
	return s.Path + " " + strings.Join(args, " ")
}

// Exec runs sysbench with args and returns its combined output, and the CPU
// time the sysbench process used. A non-zero exit is an error carrying the
// output's last lines.
func (s Sysbench) Exec(ctx context.Context, args []string) (out string, cpu time.Duration, err error) {
	cmd := exec.CommandContext(ctx, s.Path, args...)
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if err != nil {
		return string(b), cpu, fmt.Errorf("bench: sysbench %s: %w\n%s", args[len(args)-1], err, tail(string(b), 8))
	}
	return string(b), cpu, nil
}

// SysbenchResult is what a sysbench run reports.
type SysbenchResult struct {
	Transactions int64
	TPS          float64 // transactions per second
	Queries      int64
	QPS          float64
	Errors       int64   // "ignored errors" (sysbench's default --mysql-ignore-errors list)
	Reconnects   int64   // "reconnects"
	P95          float64 // latency percentile, milliseconds (sysbench's --percentile, default 95)
	Seconds      float64 // "total time"
}

var (
	reTxn     = regexp.MustCompile(`(?m)^\s*transactions:\s+(\d+)\s+\(([\d.]+) per sec\.\)`)
	reQueries = regexp.MustCompile(`(?m)^\s*queries:\s+(\d+)\s+\(([\d.]+) per sec\.\)`)
	reIgnored = regexp.MustCompile(`(?m)^\s*ignored errors:\s+(\d+)`)
	reRecon   = regexp.MustCompile(`(?m)^\s*reconnects:\s+(\d+)`)
	rePct     = regexp.MustCompile(`(?m)^\s*\d+th percentile:\s+([\d.]+)`)
	reTime    = regexp.MustCompile(`(?m)^\s*total time:\s+([\d.]+)s`)
)

// ParseSysbench reads the report of `sysbench ... run`. Every field must be
// present; a missing one is an error naming it.
func ParseSysbench(out string) (SysbenchResult, error) {
	var r SysbenchResult
	var missing []string
	find := func(name string, re *regexp.Regexp) []string {
		m := re.FindStringSubmatch(out)
		if m == nil {
			missing = append(missing, name)
			return make([]string, re.NumSubexp()+1)
		}
		return m
	}
	atoi := func(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }
	atof := func(s string) float64 { f, _ := strconv.ParseFloat(s, 64); return f }
	m := find("transactions", reTxn)
	r.Transactions, r.TPS = atoi(m[1]), atof(m[2])
	m = find("queries", reQueries)
	r.Queries, r.QPS = atoi(m[1]), atof(m[2])
	r.Errors = atoi(find("ignored errors", reIgnored)[1])
	r.Reconnects = atoi(find("reconnects", reRecon)[1])
	r.P95 = atof(find("percentile", rePct)[1])
	r.Seconds = atof(find("total time", reTime)[1])
	if len(missing) > 0 {
		return r, fmt.Errorf("bench: sysbench report lacks %s:\n%s", strings.Join(missing, ", "), tail(out, 8))
	}
	if strings.Contains(out, "FATAL") {
		return r, errors.New("bench: sysbench reported FATAL:\n" + tail(grepLines(out, "FATAL"), 8))
	}
	return r, nil
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
