package proxy

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
)

// testProxy is a holdfast server on 127.0.0.1:0 in front of a fresh
// database on the test MariaDB.
type testProxy struct {
	srv  *Server
	addr string
	db   string // the test's database
	user string // backend account (its own, so its connections can be counted)
	cfg  config.Config
}

// startProxy starts holdfast for one test, its log going to the test log.
// By default the backend account is a fresh user so dbtest.Connections
// counts only this proxy's connections; mutate adjusts the configuration.
func startProxy(t testing.TB, mutate ...func(*config.Config)) *testProxy {
	t.Helper()
	return newTestProxy(t, testLogger(t), mutate...)
}

// newTestProxy is startProxy with a given logger.
func newTestProxy(t testing.TB, log *slog.Logger, mutate ...func(*config.Config)) *testProxy {
	t.Helper()
	db := dbtest.NewDatabase(t)
	user := dbtest.NewUser(t, db)
	c := dbtest.Config(t)
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin.Listen = ""
	cfg.Backend.Address = c.Addr
	cfg.Backend.User = user
	cfg.Backend.Password = user
	cfg.Backend.Database = db
	cfg.Users = []config.User{
		{Name: "app", Password: "app"},
		{Name: "other", Password: "other"},
		{Name: "sha", Password: "sha-secret", AuthPlugin: "caching_sha2_password"},
		{Name: "admin", Password: "admin", Admin: true},
	}
	cfg.Pool.Min = 0
	cfg.Pool.Max = 4
	cfg.Pool.AcquireTimeout = 10 * time.Second
	for _, m := range mutate {
		m(&cfg)
	}
	p := serveProxy(t, cfg, log)
	p.db, p.user = db, user
	return p
}

// serveProxy validates cfg, starts holdfast on it listening on a free
// port, and closes it when the test ends (a Serve error fails the test).
// The returned proxy's db and user are the caller's to fill in.
func serveProxy(t testing.TB, cfg config.Config, log *slog.Logger) *testProxy {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testProxy{srv: srv, addr: ln.Addr().String(), cfg: cfg}
}

// selfThread is an SQL expression for the id of the backend thread that
// runs the statement it is part of (through holdfast, CONNECTION_ID() is
// holdfast's own connection id): the process-list row whose statement
// text carries a marker that only this text holds.
func selfThread() string {
	return fmt.Sprintf("(SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND <> 'Sleep' AND INFO LIKE '%%hfself%016x%%' ORDER BY TIME_MS LIMIT 1)", rand.Uint64())
}

// dsn is a go-sql-driver DSN for the proxy.
func (p *testProxy) dsn(user, pass string, params ...string) string {
	d := fmt.Sprintf("%s:%s@tcp(%s)/%s", user, pass, p.addr, p.db)
	if len(params) > 0 {
		d += "?" + strings.Join(params, "&")
	}
	return d
}

// open returns a database/sql pool through the proxy as user app.
func (p *testProxy) open(t testing.TB, params ...string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", p.dsn("app", "app", params...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// conn returns one dedicated client connection through the proxy.
func (p *testProxy) conn(t testing.TB, params ...string) *sql.Conn {
	t.Helper()
	db := p.open(t, params...)
	c, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// direct returns a pool straight to the test database (no proxy).
func (p *testProxy) direct(t testing.TB) *sql.DB {
	return dbtest.Open(t, p.db)
}

// testLogger sends the server's logs to the test log until the test ends.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(newTestWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newTestWriter returns a writer to the test log that drops what is
// written after the test ends (t.Log would panic then).
func newTestWriter(t testing.TB) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return w
}

type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// concurrently runs f(0) to f(n-1), each on a goroutine of its own, and
// once all have returned reports every error, as client i's.
func concurrently(t testing.TB, n int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := f(i); err != nil {
				errs <- fmt.Errorf("client %d: %w", i, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// globalStatus reads a numeric server status variable of the test MariaDB.
func globalStatus(t testing.TB, name string) int64 {
	t.Helper()
	var n int64
	if err := dbtest.Root(t).QueryRow("SHOW GLOBAL STATUS LIKE '"+name+"'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustExec(t testing.TB, q interface {
	ExecContext(context.Context, string, ...any) (sql.Result, error)
}, query string, args ...any) sql.Result {
	t.Helper()
	r, err := q.ExecContext(context.Background(), query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return r
}

func queryString(t testing.TB, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, query string, args ...any) string {
	t.Helper()
	var s sql.NullString
	if err := q.QueryRowContext(context.Background(), query, args...).Scan(&s); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return s.String
}
