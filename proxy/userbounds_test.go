package proxy

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/attribution"
	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
	"github.com/holdfast-db/holdfast/proxy/mysqlwire"
)

// callerProcs answers every CALL holdfast.* with one row, and records the
// tag of each call's caller (what the engine attributes its work to).
type callerProcs struct {
	mu      sync.Mutex // guards callers
	callers []string
}

func (p *callerProcs) Call(ctx context.Context, name string, args []any) ([]string, [][]any, error) {
	var tag string
	if cs := attribution.Callers(ctx); len(cs) == 1 {
		tag = cs[0].Name()
	}
	p.mu.Lock()
	p.callers = append(p.callers, tag)
	p.mu.Unlock()
	return []string{"ok"}, [][]any{{int64(1)}}, nil
}

func (p *callerProcs) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.callers...)
}

// startProxyProcs is startProxy with procs answering CALL holdfast.*.
func startProxyProcs(t *testing.T, procs Procedures, mutate ...func(*config.Config)) *testProxy {
	t.Helper()
	db := dbtest.NewDatabase(t)
	user := dbtest.NewUser(t, db)
	cfg := config.Default()
	cfg.Listen, cfg.Admin.Listen = "127.0.0.1:0", ""
	cfg.Backend.Address = dbtest.Config(t).Addr
	cfg.Backend.User, cfg.Backend.Password, cfg.Backend.Database = user, user, db
	cfg.Users = []config.User{{Name: "app", Password: "app"}}
	cfg.Pool.Min, cfg.Pool.Max = 0, 4
	for _, m := range mutate {
		m(&cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv.SetProcedures(procs)
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
	return &testProxy{srv: srv, addr: ln.Addr().String(), db: db, user: user, cfg: cfg}
}

// withReporter adds user rep, who may carry report_* only (its default
// tag report_default), and user strict, who is refused any other tag.
func withReporter(c *config.Config) {
	c.Users = append(c.Users,
		config.User{Name: "rep", Password: "rep", DefaultTag: "report_default", Tags: []string{"report_*"}},
		config.User{Name: "strict", Password: "strict", DefaultTag: "report_default", Tags: []string{"report_*"}, RefuseOtherTags: true})
}

func (p *testProxy) openAs(t *testing.T, user string, params ...string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", p.dsn(user, user, params...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func mysqlCode(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

func userStat(p *testProxy, user string) UserStats {
	for _, u := range p.srv.Stats().Users {
		if u.User == user {
			return u
		}
	}
	return UserStats{}
}

// A user held to report_* claims checkout_x, drained and critical, by
// comment, by the conn_tag attribute, in a prepared statement and in a
// CALL holdfast.* (text and prepared): every statement runs, under the
// user's default tag (background), and nothing is recorded, classed,
// gated or attributed as checkout_x. The same statements of a user
// without a list are drained.
func TestUserTagsOutsideListRunUntagged(t *testing.T) {
	for _, disabled := range []bool{false, true} {
		name := "attribution"
		if disabled {
			name = "attribution_disabled"
		}
		t.Run(name, func(t *testing.T) {
			procs := &callerProcs{}
			p := startProxyProcs(t, procs, withReporter, func(c *config.Config) {
				c.Attribution.Disabled = disabled
				c.Overload.Classes = map[string][]string{"critical": {"checkout_*"}, "background": {"report_*"}}
			})
			p.srv.DrainTag("checkout_x", "INC-1", 0)
			ctx := context.Background()

			// The drain holds for a user without a list.
			if _, err := p.openAs(t, "app").Exec("/* conn_tag:checkout_x */ SELECT 1"); mysqlCode(err) != 9001 {
				t.Fatalf("app's checkout_x statement: %v, want 9001 (drained)", err)
			}
			before := p.srv.ClassStats()

			rep, err := p.openAs(t, "rep").Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer rep.Close()
			for _, q := range []string{
				"/* conn_tag:checkout_x */ SELECT 1",
				"SELECT 1 /*conn_tag='checkout_x'*/",
				"/* conn_tag:checkout_x */ CALL holdfast.ping()",
			} {
				if _, err := rep.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s as rep: %v", q, err)
				}
			}
			for _, q := range []string{"/* conn_tag:checkout_x */ SELECT ?", "/* conn_tag:checkout_x */ CALL holdfast.ping(?)"} {
				st, err := rep.PrepareContext(ctx, q)
				if err != nil {
					t.Fatalf("prepare %s as rep: %v", q, err)
				}
				for range 2 {
					if _, err := st.ExecContext(ctx, 1); err != nil {
						t.Fatalf("execute %s as rep: %v", q, err)
					}
				}
				st.Close()
			}
			// The attribute form: the connection's tag.
			attr, err := p.openAs(t, "rep", "connectionAttributes=conn_tag:checkout_x").Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer attr.Close()
			mustExec(t, attr, "SELECT 1")
			mustExec(t, attr, "CALL holdfast.ping()")

			if got := userStat(p, "rep").TagsDefaulted; got != 6 {
				t.Errorf("rep's tags denied: %d, want 6 (3 texts, 2 prepares, 1 attribute)", got)
			}
			if got := procs.seen(); len(got) != 4 || strings.Contains(strings.Join(got, ","), "checkout") {
				t.Errorf("the engine's callers: %q; want 4 calls, none for checkout_x", got)
			}
			if !disabled {
				for _, c := range procs.seen() {
					if c != "report_default" {
						t.Errorf("a call attributed to %q, want report_default", c)
					}
				}
				for _, ti := range p.srv.Tags() {
					if strings.HasPrefix(ti.Tag, "checkout") && ti.Statements > 0 {
						t.Errorf("tag %s recorded %d statements", ti.Tag, ti.Statements)
					}
				}
			}
			after := p.srv.ClassStats()
			if after[classCritical].Admitted != before[classCritical].Admitted {
				t.Errorf("rep's statements admitted as critical: %d", after[classCritical].Admitted-before[classCritical].Admitted)
			}
			if after[classBackground].Admitted == before[classBackground].Admitted {
				t.Error("rep's statements were not admitted under their default tag's class (background)")
			}
		})
	}
}

// A user under refuse_other_tags gets 9012 for a statement, a prepare or a
// CALL claiming another tag, and nothing runs; a login whose conn_tag
// attribute is outside its tags is refused; its own tags and untagged
// statements run.
func TestUserTagsRefused(t *testing.T) {
	procs := &callerProcs{}
	p := startProxyProcs(t, procs, withReporter)
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY)")
	ctx := context.Background()
	c, err := p.openAs(t, "strict").Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	refused := func(what string, err error) {
		t.Helper()
		var me *mysql.MySQLError
		if !errors.As(err, &me) || me.Number != 9012 || me.SQLState != [5]byte{'4', '2', '0', '0', '0'} ||
			!strings.Contains(me.Message, "'strict' may not carry tag 'checkout_x'") || !strings.Contains(me.Message, "report_*") {
			t.Fatalf("%s: %v, want error 9012 (42000) naming the user, the tag and its tags", what, err)
		}
	}
	_, err = c.ExecContext(ctx, "/* conn_tag:checkout_x */ INSERT INTO t VALUES (1)")
	refused("a text statement", err)
	_, err = c.PrepareContext(ctx, "/* conn_tag:checkout_x */ INSERT INTO t VALUES (?)")
	refused("a prepare", err)
	_, err = c.ExecContext(ctx, "/* conn_tag:checkout_x */ CALL holdfast.ping()")
	refused("a CALL holdfast.*", err)
	_, err = c.PrepareContext(ctx, "/* conn_tag:checkout_x */ CALL holdfast.ping(?)")
	refused("a prepared CALL holdfast.*", err)
	if n := queryString(t, p.direct(t), "SELECT COUNT(*) FROM t"); n != "0" {
		t.Fatalf("%s rows: a refused statement ran", n)
	}
	if len(procs.seen()) != 0 {
		t.Fatal("a refused CALL reached the engine")
	}
	mustExec(t, c, "/* conn_tag:report_x */ INSERT INTO t VALUES (2)")
	mustExec(t, c, "INSERT INTO t VALUES (3)")

	err = p.openAs(t, "strict", "connectionAttributes=conn_tag:checkout_x").Ping()
	refused("a login with conn_tag checkout_x", err)
	if err := p.openAs(t, "strict", "connectionAttributes=conn_tag:report_y").Ping(); err != nil {
		t.Fatalf("a login with an allowed conn_tag: %v", err)
	}
	if st := userStat(p, "strict"); st.TagsRefused != 5 || st.TagsDefaulted != 0 {
		t.Errorf("strict's denied tags: %+v, want 5 refused", st)
	}
}

// COM_CHANGE_USER applies the new user's list: a drained tag app may not
// escape runs under rep's default tag after a change to rep, and is
// refused after a change to strict. A reload gives an open session its
// user's new list at its next statement.
func TestUserTagsChangeUserAndReload(t *testing.T) {
	p := startProxy(t, withReporter)
	p.srv.DrainTag("checkout_x", "INC-1", 0)
	c := p.raw(t, rawmysql.Options{})
	const q = "/* conn_tag:checkout_x */ SELECT 1"
	if _, err := c.Results(q); errCode(err) != 9001 {
		t.Fatalf("as app: %v, want 9001", err)
	}
	if _, _, err := c.ChangeUser("rep", "rep", p.db); err != nil {
		t.Fatal(err)
	}
	c.mustQuery(q)
	if _, _, err := c.ChangeUser("strict", "strict", p.db); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Results(q); errCode(err) != 9012 {
		t.Fatalf("as strict: %v, want 9012", err)
	}
	if _, _, err := c.ChangeUser("app", "app", p.db); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Results(q); errCode(err) != 9001 {
		t.Fatalf("back as app: %v, want 9001", err)
	}

	// Reload: app may carry report_* only, from its next statement on.
	cfg := p.cfg
	cfg.Users = append([]config.User(nil), cfg.Users...)
	cfg.Users[0].Tags, cfg.Users[0].DefaultTag = []string{"report_*"}, "report_app"
	if err := p.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	c.mustQuery(q)
	if got := userStat(p, "app").TagsDefaulted; got != 1 {
		t.Fatalf("app's denied tags after the reload: %d, want 1", got)
	}
}

// users[].max_clients: the user's next login past it gets 1040 naming the
// bound; other users log in; once one of its clients leaves, a login
// works again. COM_CHANGE_USER to a user at its bound is refused the same
// way.
func TestUserMaxClients(t *testing.T) {
	p := startProxy(t, func(c *config.Config) {
		c.Users = append(c.Users, config.User{Name: "lim", Password: "lim", MaxClients: 2})
	})
	o := rawmysql.Options{User: "lim", Password: "lim", DB: p.db}
	a, b := p.raw(t, o), p.raw(t, o)
	a.mustQuery("SELECT 1")
	_, err := rawDial(p.addr, o)
	var se *mysqlwire.SQLError
	if !errors.As(err, &se) || se.Code != 1040 || se.State != "08004" || !strings.Contains(se.Msg, "Too many connections") ||
		!strings.Contains(se.Msg, "'lim'") || !strings.Contains(se.Msg, "max_clients = 2") {
		t.Fatalf("third login of lim: %v, want 1040 (08004) naming the user's max_clients", err)
	}
	p.raw(t, rawmysql.Options{}).mustQuery("SELECT 1") // app is not bounded by lim's clients
	other := p.raw(t, rawmysql.Options{})
	if _, _, err := other.ChangeUser("lim", "lim", p.db); errCode(err) != 1040 {
		t.Fatalf("COM_CHANGE_USER to lim at its bound: %v, want 1040", err)
	}
	if st := p.srv.Stats(); st.RejectedUser != 2 || userStat(p, "lim").Rejected != 2 {
		t.Fatalf("rejections counted: %d (lim: %d), want 2", st.RejectedUser, userStat(p, "lim").Rejected)
	}
	b.NC.Close()
	waitFor(t, "lim's closed client to leave", func() bool { return userStat(p, "lim").Clients == 1 })
	p.raw(t, o).mustQuery("SELECT 1")
	// A change of user moves the count: b's place went to the new client,
	// and a's moves to app.
	if _, _, err := a.ChangeUser("app", "app", p.db); err != nil {
		t.Fatal(err)
	}
	if n := userStat(p, "lim").Clients; n != 1 {
		t.Fatalf("lim's clients after one changed user: %d, want 1", n)
	}
	p.raw(t, o).mustQuery("SELECT 1")
}

// Routing sees the tag a statement runs under: reads of a user held to
// report_* that claim checkout_x, routed to the replica, stay on the
// primary.
func TestUserTagsRouting(t *testing.T) {
	p := startPairProxy(t, map[string]string{"checkout_*": "replica_stale_ok"})
	db := p.open(t)
	const q = "/* conn_tag:checkout_x */ SELECT v FROM t WHERE id = 1"
	readV(t, db, q, 10) // warms the replica's pool
	if pr, rr := p.counted(t, func() { readV(t, db, q, 10) }); pr != 0 || rr != 1 {
		t.Fatalf("app without a list: %d reads on the primary, %d on the replica; want the replica", pr, rr)
	}
	cfg := p.cfg
	cfg.Users = []config.User{{Name: "app", Password: "app", DefaultTag: "report_app", Tags: []string{"report_*"}}}
	if err := p.srv.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	pr, rr := p.counted(t, func() {
		for range 10 {
			readV(t, db, q, 10)
		}
	})
	if pr != 10 || rr != 0 {
		t.Fatalf("app held to report_*: %d reads of checkout_x on the primary, %d on the replica; want all on the primary", pr, rr)
	}
}

// Users from the backend are held to auth.from_backend's tags and
// max_clients, configured users to their own.
func TestUserBoundsFromBackend(t *testing.T) {
	p := fromBackend(t, nil, func(c *config.Config) {
		c.Auth.FromBackend.DefaultTag = "team_default"
		c.Auth.FromBackend.Tags = []string{"team_*"}
		c.Auth.FromBackend.MaxClients = 1
	})
	p.srv.DrainTag("checkout_x", "INC-1", 0)
	u := newBackendUser(t, "%", "pw", "SELECT ON `"+p.db+"`.*")
	o := rawmysql.Options{User: u, Password: "pw", DB: p.db}
	c := p.raw(t, o)
	c.mustQuery("/* conn_tag:checkout_x */ SELECT 1")
	if _, err := rawDial(p.addr, o); errCode(err) != 1040 || !strings.Contains(err.Error(), "auth.from_backend.max_clients = 1") {
		t.Fatalf("a second login of a backend user: %v, want 1040 naming auth.from_backend.max_clients", err)
	}
	if st := userStat(p, u); st.TagsDefaulted != 1 || st.Rejected != 1 {
		t.Fatalf("%s: %+v", u, st)
	}
	if !slicesContainTag(p.srv.Tags(), "team_default") {
		t.Fatal("the backend user's statement is not under auth.from_backend.default_tag")
	}
	// app has no list, and no bound but sessions.max_clients.
	if _, err := p.raw(t, rawmysql.Options{}).Results("/* conn_tag:checkout_x */ SELECT 1"); errCode(err) != 9001 {
		t.Fatalf("app: %v, want 9001", err)
	}
	p.raw(t, rawmysql.Options{}).mustQuery("SELECT 1")
}

func slicesContainTag(ts []TagInfo, tag string) bool {
	for _, ti := range ts {
		if ti.Tag == tag && ti.Statements > 0 {
			return true
		}
	}
	return false
}

// sessions.max_clients: the next client past it gets 1040 naming the
// setting, before any greeting; once one leaves, a login works again.
// (config.Default() sets it: see config's TestParse.)
func TestSessionsMaxClients(t *testing.T) {
	p := startProxy(t, func(c *config.Config) { c.Sessions.MaxClients = 2 })
	a := p.raw(t, rawmysql.Options{})
	p.raw(t, rawmysql.Options{User: "other", Password: "other"})
	// A session counts once registered, just after its login's OK.
	waitFor(t, "both clients registered", func() bool { return p.srv.Stats().ClientsActive == 2 })
	_, err := rawDial(p.addr, rawmysql.Options{User: "app", Password: "app", DB: p.db})
	var se *mysqlwire.SQLError
	if !errors.As(err, &se) || se.Code != 1040 || se.State != "08004" || !strings.Contains(se.Msg, "sessions.max_clients = 2") {
		t.Fatalf("a third client: %v, want 1040 (08004) naming sessions.max_clients", err)
	}
	if st := p.srv.Stats(); st.Rejected != 1 || st.RejectedUser != 0 {
		t.Fatalf("rejections counted: %d (user: %d), want 1", st.Rejected, st.RejectedUser)
	}
	a.NC.Close()
	waitFor(t, "the closed client to leave", func() bool { return p.srv.Stats().ClientsActive == 1 })
	p.raw(t, rawmysql.Options{}).mustQuery("SELECT 1")
}
