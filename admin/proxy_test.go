package admin_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/holdfast-db/holdfast/admin"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
	"github.com/holdfast-db/holdfast/proxy"
)

// holdfast is a proxy server in front of a fresh test database with its
// admin listener, as cmd/holdfast wires them.
type holdfast struct {
	srv   *proxy.Server
	addr  string // MySQL protocol
	db    string
	admin *httptest.Server
}

func startHoldfast(t *testing.T, mutate ...func(*config.Config)) *holdfast {
	t.Helper()
	db := dbtest.NewDatabase(t)
	c := dbtest.Config(t)
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Backend.Address, cfg.Backend.User, cfg.Backend.Password, cfg.Backend.Database = c.Addr, c.User, c.Passwd, db
	cfg.Users = []config.User{{Name: "app", Password: "app"}}
	cfg.Pool.Min, cfg.Pool.Max, cfg.Pool.MaxIdle = 0, 4, 4
	cfg.Pool.AcquireTimeout = 20 * time.Second
	cfg.Reservation.Enabled = false
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := proxy.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	reg := prometheus.NewRegistry()
	reg.MustRegister(admin.NewCollector(srv, srv.Recorder()))
	adm := admin.New(srv, admin.Options{Gatherer: reg, Failover: func() config.Failover { return cfg.Failover }, Access: admin.Access{Credentials: []admin.Credential{
		{Name: holdfastproc.AdminCredential, Scope: admin.ScopeWrite, Token: holdfastproc.AdminToken}}}})
	ts := httptest.NewServer(adm.Handler())
	t.Cleanup(func() {
		ts.Close()
		srv.Close()
		<-done
	})
	return &holdfast{srv: srv, addr: ln.Addr().String(), db: db, admin: ts}
}

func (h *holdfast) open(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s", h.addr, h.db))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return db
}

// get fetches an admin path and returns its body, also decoded into v
// when v is not nil.
func (h *holdfast) get(t *testing.T, path string, v any) string {
	t.Helper()
	b := dbtest.Fetch(t, http.MethodGet, h.admin.URL+path)
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, b)
		}
	}
	return string(b)
}

func (h *holdfast) call(t *testing.T, method, path string) {
	t.Helper()
	dbtest.Fetch(t, method, h.admin.URL+path)
}

// holdTag begins a transaction on db and runs a statement of tag in it, so
// that tag holds a backend connection until the caller ends the
// transaction (it is rolled back at cleanup otherwise).
func holdTag(t *testing.T, db *sql.DB, tag string) *sql.Tx {
	t.Helper()
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	if _, err := tx.Exec("/* conn_tag:" + tag + " */ SELECT 1"); err != nil {
		t.Fatal(err)
	}
	return tx
}

// execAsync runs query on db in the background; the channel gets its
// error.
func execAsync(db *sql.DB, query string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := db.Exec(query)
		done <- err
	}()
	return done
}

// waiting waits until /api/pool counts a client as waiting, and returns
// what it showed then.
func (h *holdfast) waiting(t *testing.T) pool {
	t.Helper()
	var p pool
	dbtest.Eventually(t, "a client is counted as waiting", func() bool {
		h.get(t, "/api/pool", &p)
		return p.Waiting > 0
	})
	return p
}

type pool struct {
	Waiting         int `json:"waiting"`
	WaitingPool     int `json:"waiting_pool"`
	WaitingTagLimit int `json:"waiting_tag_limit"`
	WaitingPipeline int `json:"waiting_pipeline"`
	InUse           int `json:"in_use"`
}

type gates struct {
	Gates []struct {
		Tag     string `json:"tag"`
		Drained bool   `json:"drained"`
		Limit   int    `json:"limit"`
		InUse   int    `json:"in_use"`
		Waiting int    `json:"waiting"`
	} `json:"gates"`
}

// TestWaitingUnderTagLimit: a client queued under a tag's connection limit
// is counted in /api/pool's waiting, and the gate's in_use is what the tag
// holds.
func TestWaitingUnderTagLimit(t *testing.T) {
	h := startHoldfast(t, func(c *config.Config) { c.Tags.Limits = map[string]int{"capped": 1} })
	db := h.open(t)
	holder := holdTag(t, db, "capped")
	queued := execAsync(db, "/* conn_tag:capped */ SELECT 2")
	p := h.waiting(t)
	if p.Waiting != 1 || p.WaitingTagLimit != 1 || p.WaitingPool != 0 || p.WaitingPipeline != 0 {
		t.Errorf("/api/pool while one client queues under the limit: %+v", p)
	}
	var g gates
	h.get(t, "/api/gates", &g)
	if len(g.Gates) != 1 || g.Gates[0].InUse != 1 || g.Gates[0].Waiting != 1 || g.Gates[0].Limit != 1 {
		t.Errorf("/api/gates: %+v", g.Gates)
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-queued; err != nil {
		t.Fatalf("the queued statement: %v", err)
	}
	h.get(t, "/api/pool", &p)
	if p.Waiting != 0 {
		t.Errorf("waiting after the queue drained: %+v", p)
	}
}

// TestDrainedTagInUse: a drained tag whose transaction still holds its
// connection shows in_use 1 (as held_now in /api/tags), and the next
// statement of the tag gets 9001 with one "holdfast: " prefix.
func TestDrainedTagInUse(t *testing.T) {
	h := startHoldfast(t)
	db := h.open(t)
	holder := holdTag(t, db, "reports")
	h.call(t, "POST", "/api/tags/reports/drain?reason=INC-7")
	var g gates
	h.get(t, "/api/gates", &g)
	if len(g.Gates) != 1 || !g.Gates[0].Drained || g.Gates[0].InUse != 1 {
		t.Errorf("/api/gates for a drained tag holding one connection: %+v", g.Gates)
	}
	var tags struct {
		Tags []struct {
			Tag     string `json:"tag"`
			HeldNow int    `json:"held_now"`
		} `json:"tags"`
	}
	h.get(t, "/api/tags", &tags)
	for _, x := range tags.Tags {
		if x.Tag == "reports" && x.HeldNow != g.Gates[0].InUse {
			t.Errorf("held_now %d but in_use %d", x.HeldNow, g.Gates[0].InUse)
		}
	}
	body := h.get(t, "/api/holders", nil)
	if !regexp.MustCompile(`"held_for_seconds": \d+\.\d{3},`).MatchString(body) {
		t.Errorf("held_for_seconds not rounded to the millisecond:\n%s", body)
	}

	_, err := db.Exec("/* conn_tag:reports */ SELECT 2")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9001 {
		t.Fatalf("statement of a drained tag: %v, want error 9001", err)
	}
	if !strings.HasPrefix(me.Message, "holdfast: tag 'reports' is drained by on-call since ") ||
		strings.Count(me.Message, "holdfast") != 1 || strings.Contains(me.Message, "proxy") || !strings.Contains(me.Message, "(INC-7)") {
		t.Errorf("message %q: want one prefix, the tag and the reason", me.Message)
	}
	if err := holder.Commit(); err != nil {
		t.Fatalf("the transaction that held before the drain: %v", err)
	}
}

// TestLimitMessage: a statement that waited out pool.acquire_timeout under
// a tag's limit gets 9002 with one prefix.
func TestLimitMessage(t *testing.T) {
	h := startHoldfast(t, func(c *config.Config) {
		c.Tags.Limits = map[string]int{"capped": 1}
		c.Pool.AcquireTimeout = 200 * time.Millisecond
	})
	db := h.open(t)
	holdTag(t, db, "capped")
	_, err := db.Exec("/* conn_tag:capped */ SELECT 2")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9002 {
		t.Fatalf("statement over the limit: %v, want 9002", err)
	}
	if !strings.HasPrefix(me.Message, "holdfast: tag 'capped' is limited to 1 backend connections") ||
		strings.Count(me.Message, "holdfast") != 1 || strings.Contains(me.Message, "proxy") {
		t.Errorf("message %q", me.Message)
	}
}

// TestWaitingForPipeline: a SELECT waiting for a place on a shared
// connection (the pool at its max, the only pipe's statement slow) is
// counted in /api/pool's waiting.
func TestWaitingForPipeline(t *testing.T) {
	h := startHoldfast(t, func(c *config.Config) {
		c.Pool.Min, c.Pool.Max, c.Pool.MaxIdle = 0, 1, 1
		c.Pool.PipelineDepth = 2
	})
	db := h.open(t)
	if _, err := db.Exec("SELECT 1"); err != nil { // an idle connection, for the pipe
		t.Fatal(err)
	}
	slow := execAsync(db, "SELECT SLEEP(2)")
	// Once it has run 20 ms, its pipe takes no newcomers (slowHead).
	dbtest.Eventually(t, "the slow SELECT has held the connection for 50 ms", func() bool {
		var hs struct {
			Holders []struct {
				HeldFor float64 `json:"held_for_seconds"`
			} `json:"holders"`
		}
		h.get(t, "/api/holders", &hs)
		return len(hs.Holders) == 1 && hs.Holders[0].HeldFor >= 0.05
	})
	queued := execAsync(db, "SELECT 2")
	p := h.waiting(t)
	if p.WaitingPipeline != 1 || p.Waiting != p.WaitingPool+p.WaitingTagLimit+p.WaitingPipeline {
		t.Errorf("/api/pool while a SELECT waits for a pipeline place: %+v", p)
	}
	for _, c := range []<-chan error{slow, queued} {
		if err := <-c; err != nil {
			t.Fatal(err)
		}
	}
}
