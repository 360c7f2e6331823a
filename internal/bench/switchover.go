package bench

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/internal/netrelay"
)

// The switchover harness (`make bench-switchover`, cmd/holdfast-bench-switchover):
// two private MariaDB servers with binary logging and GTID replication
// (lossless semi-synchronous: dbtest.SemiSyncArgs), a
// relay standing in for the VIP (or DNS name) an HA tool moves, holdfast
// in front of the VIP with an ordinary backend account (no SUPER: the
// read-only primary refuses its writes with 1290), and the same load on
// two paths in the same run: through holdfast, and straight to the VIP,
// each client reconnecting after an error. Per path, 24 clients run
// autocommit INSERTs and 8 run short transactions (BEGIN, two INSERTs,
// COMMIT). In the middle:
//
//   - planned: a switchover as an HA tool does it (dbtest.Switchover): the
//     primary read-only, the replica caught up, promoted, the old primary
//     pointed at it, the VIP moved;
//   - pause: the same, with holdfast's `pause` control set on the clients'
//     tag (PUT /api/tags/sw/pause, fleet-wide) PauseSettle before the
//     flip and lifted (DELETE) once the VIP has moved: new transactions
//     wait, open ones finish, so that none meets the flip. The direct path
//     has no pause: it is the planned baseline again;
//   - kill: the primary killed (SIGKILL), the replica promoted and the VIP
//     moved PromoteAfter later. The promotion applies the replica's relay
//     log first (dbtest.PromoteApplied), as an HA tool does: what the
//     replica had received of the old primary's acknowledged writes is
//     kept.
//
// Every answer is recorded (when it began and ended, its code) and, at the
// end, checked against the new primary: an acknowledged write must be
// there, a write refused with a server error must not (an answer that says
// nothing ran while the row exists is a lie); a lost connection is the
// in-doubt answer, true either way. See switchover_report.go for the
// figures and the acceptance checks.

// SwitchoverOptions configure the harness.
type SwitchoverOptions struct {
	Go, Repo string
	// Scenarios to run, in order: "planned", "pause", "kill".
	Scenarios []string
	// Duration is each scenario's load; the fault comes at SwitchAt.
	Duration, SwitchAt time.Duration
	// PromoteAfter is how long after the kill the replica is promoted and
	// the VIP moved.
	PromoteAfter time.Duration
	// PauseSettle is, in the pause scenario, how long after setting the
	// pause the switchover begins: the transactions open when it was set
	// finish meanwhile. PauseTag is the tag paused ("" none: the clients'
	// own tag, swTag).
	PauseSettle time.Duration
	PauseTag    string
	// Autocommit and Txn clients per path; Pace is each client's pause
	// between two statements (or transactions).
	Autocommit, Txn int
	Pace            time.Duration
	Keep            bool // keep the scratch directory
	// Set are holdfast settings over config.yaml's defaults, "path=value"
	// ("failover.transaction_replay=true").
	Set []string
}

// DefaultSwitchoverOptions are the load, shortened so that the
// three scenarios take under two minutes: 25 s of load each, the
// fault at 6 s, 24 + 8 clients per path.
func DefaultSwitchoverOptions() SwitchoverOptions {
	return SwitchoverOptions{Go: "go", Repo: ".", Scenarios: []string{"planned", "pause", "kill"}, Duration: 25 * time.Second,
		SwitchAt: 6 * time.Second, PromoteAfter: 2 * time.Second, PauseSettle: 300 * time.Millisecond, Autocommit: 24, Txn: 8,
		Pace: 5 * time.Millisecond}
}

// swTag is the clients' tag (the app account's default_tag): the pause
// scenario pauses it.
const swTag = "sw"

// Paths of the load.
const (
	pathHoldfast = "holdfast"
	pathDirect   = "direct"
)

// swAnswer is one client operation's outcome: an autocommit INSERT, or a
// transaction of two.
type swAnswer struct {
	path       string
	txn        bool
	ids        []int64
	start, end time.Time
	// code is 0 on success, a server's (or holdfast's) error code, or
	// codeLost / codeRefused for what the driver saw of the connection.
	code uint16
	// committing: a transaction's error came on its COMMIT (in doubt when
	// the connection was lost then); before it, nothing was committed.
	committing bool
	msg        string
}

// Driver-side outcomes. codeLost is in the client library's numbering;
// codeRefused is a number no server sends, so that the report tells the
// client's own failure to connect from holdfast's error 2003 (it could
// not reach the backend).
const (
	codeLost    = 2013 // the connection broke after the statement went out: in doubt
	codeRefused = 1    // the connection could not be made, or the driver sent nothing on it: nothing ran
)

// swEvents are the moments of one scenario, on the harness's clock.
type swEvents struct {
	// start is the load's start; fault to ended the switch as clients may
	// feel it: planned, the primary made read-only to the VIP moved; pause,
	// the pause set to the pause lifted; kill, the kill to the promotion.
	start, fault, ended time.Time
	// flip is when the primary stopped taking writes: made read-only
	// (planned, pause: when the SET went out), killed (kill). A transaction begun before it and
	// ended after it was open at the flip.
	flip     time.Time
	steps    dbtest.SwitchoverSteps
	promoted time.Time // kill: the replica promoted
	// received is the GTID position the replica had received when it was
	// promoted (kill), all of it applied first.
	received string
	// pause: the answers to setting and lifting the pause ("" until
	// tried; "ok" when holdfast took it), and when each was answered.
	pauseSet, pauseLift string
	paused, lifted      time.Time
	// From holdfast's admin API, polled: when it first showed the former
	// primary retired, and a new primary.
	retired, newPrimary time.Time
}

// RunSwitchover runs the scenarios and prints their reports to w.
func RunSwitchover(ctx context.Context, o SwitchoverOptions, w io.Writer) error {
	printf := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	// The driver logs every broken connection; the report counts them.
	_ = mysql.SetLogger(log.New(io.Discard, "", 0))
	dir, bin, err := buildInScratch(ctx, o.Go, o.Repo, "holdfast-switchover-", printf)
	if dir != "" && !o.Keep {
		defer os.RemoveAll(dir)
	}
	if err != nil {
		return err
	}
	printf("machine: %d CPUs (shared: other work may run at the same time), load average %s\n", runtime.NumCPU(), loadAvg())
	var reports []*swReport
	for _, sc := range o.Scenarios {
		sdir := filepath.Join(dir, sc)
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			return err
		}
		r, err := runScenario(ctx, o, sc, bin, sdir, printf)
		if err != nil {
			return fmt.Errorf("bench: scenario %s: %w", sc, err)
		}
		r.print(w)
		reports = append(reports, r)
	}
	printTable(w, reports)
	printAcceptance(w, reports)
	if o.Keep {
		printf("scratch directory kept: %s\n", dir)
	}
	return nil
}

// runScenario starts the servers, the VIP and holdfast, runs the load with
// the fault in the middle, and checks every answer.
func runScenario(ctx context.Context, o SwitchoverOptions, scenario, bin, dir string, printf func(string, ...any)) (*swReport, error) {
	mk := func(name string) (string, error) {
		d := filepath.Join(dir, name)
		return d, os.MkdirAll(d, 0o755)
	}
	xdir, err := mk("x")
	if err != nil {
		return nil, err
	}
	ydir, err := mk("y")
	if err != nil {
		return nil, err
	}
	// Lossless semi-synchronous replication on both (their roles swap):
	// without it a killed primary takes the acknowledged writes its
	// replica had not yet received with it, on both paths alike.
	x, err := dbtest.NewPrivate(xdir, append([]string{"--log-slave-updates=1"}, dbtest.SemiSyncArgs...)...)
	if err != nil {
		return nil, err
	}
	defer x.Stop()
	y, err := dbtest.NewPrivate(ydir, append([]string{"--server-id=2", "--read-only=1", "--log-slave-updates=1"}, dbtest.SemiSyncArgs...)...)
	if err != nil {
		return nil, err
	}
	defer y.Stop()
	if err := y.Follow(x); err != nil {
		return nil, err
	}
	xdb := x.Open("")
	defer xdb.Close()
	for _, q := range []string{
		"CREATE DATABASE sw", "CREATE TABLE sw.t (id BIGINT PRIMARY KEY, path CHAR(1) NOT NULL, client INT NOT NULL)",
		// An ordinary account: read_only refuses its writes.
		"CREATE USER app IDENTIFIED BY 'app'", "GRANT SELECT, INSERT, UPDATE, DELETE ON sw.* TO app",
		// holdfast's own account, with what holdfast migrate -print-grants asks.
		"CREATE USER hf IDENTIFIED BY 'hf'", "GRANT ALL PRIVILEGES ON hf.* TO hf", "GRANT SLAVE MONITOR, CONNECTION ADMIN ON *.* TO hf",
	} {
		if _, err := xdb.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", q, err)
		}
	}
	vip, err := netrelay.Start("127.0.0.1:0", x.Addr, 0)
	if err != nil {
		return nil, err
	}
	defer vip.Close()
	listen, err := dbtest.ListenAddr()
	if err != nil {
		return nil, err
	}
	admin, err := dbtest.ListenAddr()
	if err != nil {
		return nil, err
	}
	cfgPath := filepath.Join(dir, "holdfast.yaml")
	pc := holdfastproc.Config{Listen: listen, Admin: admin, Users: []holdfastproc.User{{Name: "app", Password: "app", DefaultTag: swTag}},
		Backend: holdfastproc.Backend{Address: vip.Addr().String(), User: "app", Password: "app", Database: "sw"},
		Fleet:   holdfastproc.Fleet{Database: "hf", User: "hf", Password: "hf"}, Set: o.Set}
	if err := pc.Write(cfgPath, "generated by holdfast's switchover bench: holdfast's defaults but for these"); err != nil {
		return nil, err
	}
	h := holdfastproc.New(holdfastproc.Options{Bin: bin, Config: cfgPath, LogPath: filepath.Join(dir, "holdfast.log"),
		Unset: []string{"GOMAXPROCS"}, Ready: swReady(admin, listen)})
	if out, err := h.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w\n%s", err, out)
	}
	if err := h.Start(ctx); err != nil {
		return nil, err
	}
	defer h.Stop(15 * time.Second)
	printf("\n== %s: servers %s (primary, pid %d) and %s (replica, pid %d), VIP %s, holdfast %s (pid %d), %d+%d clients per path ==\n",
		scenario, x.Addr, x.Pid(), y.Addr, y.Pid(), vip.Addr(), listen, h.Pid(), o.Autocommit, o.Txn)
	if len(o.Set) > 0 {
		printf("   holdfast's settings over config.yaml's defaults: %s\n", strings.Join(o.Set, ", "))
	}

	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	rec := &swRecorder{}
	var ids atomic.Int64
	var wg sync.WaitGroup
	for _, path := range []string{pathHoldfast, pathDirect} {
		addr, user := listen, "app"
		if path == pathDirect {
			addr = vip.Addr().String()
		}
		for c := range o.Autocommit + o.Txn {
			wg.Add(1)
			go func() {
				defer wg.Done()
				swClient(lctx, rec, path, addr, user, c, c >= o.Autocommit, o.Pace, &ids)
			}()
		}
	}
	ev := swEvents{start: time.Now()}
	// holdfast's view, polled from its admin API.
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchTopology(watchCtx, admin, &ev)
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(o.SwitchAt):
	}
	ev.fault = time.Now()
	switch scenario {
	case "planned", "pause":
		if scenario == "pause" {
			ev.pauseSet = setPause(ctx, admin, cmp.Or(o.PauseTag, swTag), http.MethodPut)
			ev.paused = time.Now()
			time.Sleep(o.PauseSettle)
		}
		ev.steps, err = dbtest.Switchover(ctx, x, y, func() { vip.Retarget(y.Addr) })
		if err != nil {
			return nil, err
		}
		// The flip is when SET GLOBAL read_only went out: some writes
		// are refused before it returns.
		ev.flip, ev.fault, ev.ended = ev.steps.Start, ev.steps.Start, ev.steps.Moved
		if scenario == "pause" {
			ev.pauseLift = setPause(ctx, admin, cmp.Or(o.PauseTag, swTag), http.MethodDelete)
			ev.lifted = time.Now()
			ev.fault, ev.ended = ev.paused, ev.lifted
		}
	case "kill":
		x.Kill()
		ev.flip = ev.fault
		time.Sleep(o.PromoteAfter)
		if ev.received, err = y.PromoteApplied(ctx, 30*time.Second); err != nil {
			return nil, err
		}
		ev.promoted = time.Now()
		vip.Retarget(y.Addr)
		ev.ended = time.Now()
	default:
		return nil, fmt.Errorf("bench: unknown scenario %q (want planned, pause or kill)", scenario)
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(time.Until(ev.start.Add(o.Duration))):
	}
	stopLoad()
	wg.Wait()
	stopWatch()
	<-watched

	ydb := y.Open("sw")
	defer ydb.Close()
	have, err := swRows(ctx, ydb)
	if err != nil {
		return nil, err
	}
	r := &swReport{scenario: scenario, ev: ev, answers: rec.all(), have: have, pace: o.Pace}
	r.topology = fetchTopology(admin)
	return r, nil
}

// swClient runs one client until ctx ends: autocommit INSERTs, or (txn)
// transactions of two INSERTs, one connection at a time, a new one after
// any error (as the clients do).
func swClient(ctx context.Context, rec *swRecorder, path, addr, user string, client int, txn bool, pace time.Duration, ids *atomic.Int64) {
	c := mysql.NewConfig()
	c.Net, c.Addr, c.User, c.Passwd, c.DBName = "tcp", addr, user, user, "sw"
	// A connect waits up to 30 s, longer than holdfast is to hold anything
	// while there is no primary: a login it holds shows as latency, not as
	// the client's own timeout.
	c.Timeout, c.ReadTimeout, c.WriteTimeout = 30*time.Second, 60*time.Second, 60*time.Second
	conn, err := mysql.NewConnector(c)
	if err != nil {
		panic(err)
	}
	db := sql.OpenDB(conn)
	defer db.Close()
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	p := path[:1]
	for ctx.Err() == nil {
		a := swAnswer{path: path, txn: txn, start: time.Now()}
		if txn {
			a.ids = []int64{ids.Add(1), ids.Add(1)}
		} else {
			a.ids = []int64{ids.Add(1)}
		}
		err := swOp(db, a.ids, p, client, &a.committing)
		a.end = time.Now()
		a.code, a.msg = classify(err)
		rec.add(a)
		if err != nil {
			// A new connection for the next one (the old one may be to a
			// server that is no longer the primary).
			db.SetMaxIdleConns(0)
			db.SetMaxIdleConns(1)
		}
		select {
		case <-ctx.Done():
		case <-time.After(pace):
		}
	}
}

// swOp runs one operation on one connection: an INSERT of ids[0], or (two
// ids) BEGIN, two INSERTs, COMMIT; committing is set once the COMMIT is
// sent. A failure to get a connection is refusedErr: nothing ran.
func swOp(db *sql.DB, ids []int64, p string, client int, committing *bool) error {
	ctx := context.Background()
	conn, err := db.Conn(ctx)
	if err != nil {
		return refusedErr{err}
	}
	defer conn.Close()
	if len(ids) == 1 {
		_, err := conn.ExecContext(ctx, "INSERT INTO t VALUES (?, ?, ?)", ids[0], p, client)
		return err
	}
	if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
		return err
	}
	for _, id := range ids {
		if _, err := conn.ExecContext(ctx, "INSERT INTO t VALUES (?, ?, ?)", id, p, client); err != nil {
			_, _ = conn.ExecContext(ctx, "ROLLBACK")
			return err
		}
	}
	*committing = true
	_, err = conn.ExecContext(ctx, "COMMIT")
	return err
}

// refusedErr is a failure to get a connection: nothing ran.
type refusedErr struct{ error }

func (e refusedErr) Unwrap() error { return e.error }

// classify turns a driver error into a code: the server's; codeRefused
// when no connection could be had, or the driver sent nothing on it
// (driver.ErrBadConn: nothing ran); codeLost otherwise (the connection
// broke after the statement went out: in doubt).
func classify(err error) (uint16, string) {
	if err == nil {
		return 0, ""
	}
	var me *mysql.MySQLError
	var re refusedErr
	switch {
	case errors.As(err, &me):
		return me.Number, me.Message
	case errors.As(err, &re) || errors.Is(err, driver.ErrBadConn):
		return codeRefused, err.Error()
	}
	return codeLost, err.Error()
}

// swRecorder collects answers from the clients.
type swRecorder struct {
	mu  sync.Mutex // guards out
	out []swAnswer
}

func (r *swRecorder) add(a swAnswer) {
	r.mu.Lock()
	r.out = append(r.out, a)
	r.mu.Unlock()
}

func (r *swRecorder) all() []swAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.out)
}

// swRows reads every id on the new primary.
func swRows(ctx context.Context, db *sql.DB) (map[int64]bool, error) {
	rows, err := db.QueryContext(ctx, "SELECT id FROM t")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		have[id] = true
	}
	return have, rows.Err()
}

// swReady is holdfast's readiness for the load: it knows the primary
// (GET /api/topology) and answers a statement through it, so that no
// client's first statement meets holdfast still starting.
func swReady(admin, listen string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if t := fetchTopology(admin); t.State != "primary" {
			return fmt.Errorf("bench: holdfast's topology is %q, not yet a primary", t.State)
		}
		c := mysql.NewConfig()
		c.Net, c.Addr, c.User, c.Passwd, c.DBName, c.Timeout = "tcp", listen, "app", "app", "sw", 2*time.Second
		conn, err := mysql.NewConnector(c)
		if err != nil {
			return err
		}
		db := sql.OpenDB(conn)
		defer db.Close()
		_, err = db.ExecContext(ctx, "SELECT 1")
		return err
	}
}

// setPause sets (PUT) or lifts (DELETE) holdfast's pause control on tag,
// fleet-wide, as an HA tool or on-call does around a planned
// switchover. It returns "ok", or holdfast's refusal (a holdfast without
// the pause control answers 404): the run goes on without the pause, and
// the report says so.
func setPause(ctx context.Context, admin, tag, method string) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := "http://" + admin + "/api/tags/" + url.PathEscape(tag) + "/pause"
	if method == http.MethodPut {
		u += "?reason=planned+switchover&by=bench-switchover"
	}
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Authorization", "Bearer "+holdfastproc.AdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		var ans struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &ans) != nil || ans.Error == "" {
			ans.Error = strings.Join(strings.Fields(string(body)), " ")
		}
		return fmt.Sprintf("%s: %s", resp.Status, ans.Error)
	}
	return "ok"
}

// swTopology is what the harness reads of GET /api/topology.
type swTopology struct {
	State              string   `json:"state"`
	Primary            string   `json:"primary"`
	Retired            []string `json:"retired"`
	PrimaryChanges     uint64   `json:"primary_changes"`
	NoPrimarySeconds   float64  `json:"no_primary_seconds"`
	Checks             uint64   `json:"checks"`
	ReadOnlyAnswers    uint64   `json:"read_only_answers"`
	RetiredConnections uint64   `json:"retired_connections"`
	RetiredDials       uint64   `json:"retired_dials"`
	Failover           struct {
		Held             uint64 `json:"held"`
		Retried          uint64 `json:"retried"`
		Refused          uint64 `json:"refused"`
		TxnsReplayed     uint64 `json:"transactions_replayed"`
		TxnReplaysFailed uint64 `json:"transaction_replays_failed"`
	} `json:"failover"`
}

func fetchTopology(admin string) swTopology {
	var t swTopology
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + admin + "/api/topology")
	if err != nil {
		return t
	}
	defer resp.Body.Close()
	_ = json.NewDecoder(resp.Body).Decode(&t)
	return t
}

// watchTopology polls holdfast's topology until ctx ends, noting when it
// first showed the first primary retired and when it showed another.
func watchTopology(ctx context.Context, admin string, ev *swEvents) {
	first := ""
	for ctx.Err() == nil {
		t := fetchTopology(admin)
		now := time.Now()
		if first == "" && t.State == "primary" {
			first = t.Primary
		}
		if first != "" && ev.retired.IsZero() && slices.Contains(t.Retired, first) {
			ev.retired = now
		}
		if first != "" && ev.newPrimary.IsZero() && t.State == "primary" && t.Primary != first {
			ev.newPrimary = now
		}
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
}
