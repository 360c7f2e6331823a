package proxy

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/config"
	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/rawmysql"
)

// fromBackend starts holdfast with auth.from_backend on, its lookup
// account able to read nothing but mysql.global_priv.
func fromBackend(t *testing.T, log *slog.Logger, mutate ...func(*config.Config)) *testProxy {
	t.Helper()
	lookup := newBackendUser(t, "%", "look-secret", "SELECT ON mysql.global_priv")
	m := append([]func(*config.Config){func(c *config.Config) {
		c.Auth.FromBackend = config.FromBackend{Enabled: true, LookupUser: lookup, LookupPassword: "look-secret", CacheTTL: 200 * time.Millisecond}
		c.Auth.FailureDelay = 0
	}}, mutate...)
	if log == nil {
		return startProxy(t, m...)
	}
	return newTestProxy(t, log, m...)
}

func loginErr(p *testProxy, user, pass string) error {
	db, err := sql.Open("mysql", p.dsn(user, pass))
	if err != nil {
		return err
	}
	defer db.Close()
	var u string
	return db.QueryRow("SELECT CURRENT_USER()").Scan(&u)
}

// A user created in MariaDB and absent from config.yaml logs in through
// holdfast with its password and works as that account (holdfast logs in
// to the backend with what the scramble yields); a wrong password gets
// 1045; a password changed in MariaDB takes effect within the cache TTL;
// COM_CHANGE_USER goes through the same check.
func TestFromBackend(t *testing.T) {
	p := fromBackend(t, nil)
	mustExec(t, p.direct(t), "CREATE TABLE t (id INT PRIMARY KEY)")
	u := newBackendUser(t, "%", "pw-one", "SELECT ON `"+p.db+"`.*")
	db, err := sql.Open("mysql", p.dsn(u, "pw-one"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if cu := queryString(t, db, "SELECT CURRENT_USER()"); cu != u+"@%" {
		t.Fatalf("CURRENT_USER() %s, want %s@%%", cu, u)
	}
	if _, err := db.Exec("INSERT INTO t VALUES (1)"); mysqlErrNo(err) != 1142 {
		t.Fatalf("INSERT as a SELECT-only account: %v, want 1142", err)
	}
	if err := loginErr(p, u, "pw-two"); mysqlErrNo(err) != 1045 {
		t.Fatalf("wrong password: %v, want 1045", err)
	}
	if st := p.srv.Stats(); st.LoginFailures != 1 {
		t.Fatalf("%d failed logins counted, want 1", st.LoginFailures)
	}

	mustExec(t, dbtest.Root(t), "ALTER USER '"+u+"'@'%' IDENTIFIED BY 'pw-two'")
	waitFor(t, "the new password accepted", func() bool { return loginErr(p, u, "pw-two") == nil })
	if err := loginErr(p, u, "pw-one"); mysqlErrNo(err) != 1045 {
		t.Fatalf("the old password after the change: %v, want 1045", err)
	}

	c := p.raw(t, rawmysql.Options{})
	if _, _, err := c.ChangeUser(u, "pw-two", p.db); err != nil {
		t.Fatalf("COM_CHANGE_USER to a backend user: %v", err)
	}
	if cu := c.value("SELECT CURRENT_USER()"); cu != u+"@%" {
		t.Fatalf("after COM_CHANGE_USER: %s", cu)
	}
	c = p.raw(t, rawmysql.Options{})
	if _, _, err := c.ChangeUser(u, "pw-one", p.db); errCode(err) != 1045 {
		t.Fatalf("COM_CHANGE_USER with the old password: %v, want 1045", err)
	}
	// Not a way in as holdfast's own accounts.
	if err := loginErr(p, p.cfg.Backend.User, p.cfg.Backend.Password); mysqlErrNo(err) != 1045 {
		t.Fatalf("the service account through from_backend: %v, want 1045", err)
	}
}

// An account is the one MariaDB would pick for the client's address, and
// one that cannot be checked against a native hash is refused, never taken
// for one without a password; the same holds for COM_CHANGE_USER.
func TestFromBackendRefusals(t *testing.T) {
	p := fromBackend(t, nil)
	root := dbtest.Root(t)
	elsewhere := newBackendUser(t, "10.%", "pw")
	// Two accounts of one name: from 127.0.0.1 the more specific wins.
	var rb [3]byte
	_, _ = rand.Read(rb[:])
	both := "hfa_" + hex.EncodeToString(rb[:])
	for _, q := range []string{
		"CREATE USER '" + both + "'@'%' IDENTIFIED BY 'any-host'",
		"CREATE USER '" + both + "'@'127.0.0.1' IDENTIFIED BY 'this-host'",
		"GRANT SELECT ON `" + p.db + "`.* TO '" + both + "'@'%'",
		"GRANT SELECT ON `" + p.db + "`.* TO '" + both + "'@'127.0.0.1'",
	} {
		mustExec(t, root, q)
	}
	t.Cleanup(func() { _, _ = root.Exec("DROP USER IF EXISTS '" + both + "'@'%', '" + both + "'@'127.0.0.1'") })
	if err := loginErr(p, both, "this-host"); err != nil {
		t.Fatalf("the account for 127.0.0.1: %v", err)
	}
	if err := loginErr(p, both, "any-host"); mysqlErrNo(err) != 1045 {
		t.Fatalf("the less specific account's password: %v, want 1045", err)
	}

	refused := map[string]struct{ user, pass string }{
		"host pattern": {elsewhere, "pw"},
	}
	add := func(what, create, pass string) {
		_, _ = rand.Read(rb[:])
		name := "hfa_" + hex.EncodeToString(rb[:])
		mustExec(t, root, fmt.Sprintf(create, "'"+name+"'@'%'"))
		t.Cleanup(func() { _, _ = root.Exec("DROP USER IF EXISTS '" + name + "'@'%'") })
		refused[what] = struct{ user, pass string }{name, pass}
	}
	add("no password", "CREATE USER %s", "")
	add("no password, one sent", "CREATE USER %s", "x")
	add("unix_socket", "CREATE USER %s IDENTIFIED VIA unix_socket", "")
	add("invalid stored credential", "CREATE USER %s IDENTIFIED VIA mysql_native_password USING 'invalid'", "invalid")
	add("locked", "CREATE USER %s IDENTIFIED BY 'pw' ACCOUNT LOCK", "pw")
	add("expired", "CREATE USER %s IDENTIFIED BY 'pw' PASSWORD EXPIRE", "pw")
	add("several methods", "CREATE USER %s IDENTIFIED VIA mysql_native_password USING PASSWORD('pw') OR unix_socket", "pw")
	_, _ = rand.Read(rb[:])
	role := "hfr_" + hex.EncodeToString(rb[:])
	mustExec(t, root, "CREATE ROLE "+role)
	t.Cleanup(func() { _, _ = root.Exec("DROP ROLE IF EXISTS " + role) })
	refused["role"] = struct{ user, pass string }{role, ""}
	for what, a := range refused {
		if err := loginErr(p, a.user, a.pass); mysqlErrNo(err) != 1045 {
			t.Errorf("%s: login %v, want 1045", what, err)
		}
		c := p.raw(t, rawmysql.Options{})
		if _, _, err := c.ChangeUser(a.user, a.pass, ""); errCode(err) != 1045 {
			t.Errorf("%s: COM_CHANGE_USER %v, want 1045", what, err)
		}
	}
}

func TestHostMatching(t *testing.T) {
	ip := net.ParseIP("10.1.2.3")
	for _, tc := range []struct {
		pattern string
		ip      string
		match   bool
	}{
		{"%", "10.1.2.3", true},
		{"", "10.1.2.3", true},
		{"10.%", "10.1.2.3", true},
		{"10.%", "110.1.2.3", false},
		{"10.1.2._", "10.1.2.3", true},
		{"10.1.2._", "10.1.2.33", false},
		{"10.1.2.3", "10.1.2.3", true},
		{"10.0.0.0/255.0.0.0", "10.1.2.3", true},
		{"10.0.0.0/255.255.0.0", "10.1.2.3", false},
		{"localhost", "127.0.0.1", true},
		{"localhost", "10.1.2.3", false},
		{"db.example.com", "10.1.2.3", false}, // no name resolution: no match
		{`10\.1.2.3`, "10.1.2.3", true},
	} {
		if got := hostMatches(tc.pattern, net.ParseIP(tc.ip)); got != tc.match {
			t.Errorf("hostMatches(%q, %s) = %v", tc.pattern, tc.ip, got)
		}
	}
	rows := []storedAccount{{host: "%", auth: "any"}, {host: "10.%", auth: "ten"}, {host: "10.1.2.3", auth: "exact"}, {host: "10.1.%", auth: "ten-one"}}
	if a, _ := pickAccount(rows, ip); a.auth != "exact" {
		t.Errorf("picked %q, want the exact host", a.auth)
	}
	if a, _ := pickAccount(rows[:2], ip); a.auth != "ten" {
		t.Errorf("picked %q, want 10.%%", a.auth)
	}
	if a, _ := pickAccount([]storedAccount{rows[1], rows[3]}, ip); a.auth != "ten-one" {
		t.Errorf("picked %q, want 10.1.%% (its wildcard comes later)", a.auth)
	}
	if _, ok := pickAccount(rows[1:2], net.ParseIP("192.168.0.1")); ok {
		t.Error("10.% matched 192.168.0.1")
	}
}

// Failed logins are counted, logged without secrets, and slow further
// attempts for that user from that address; an attempt waiting out its
// delay holds no handshake slot, so 100 wrong guesses at one user do not
// slow another user's login.
func TestFailedLoginsSlowed(t *testing.T) {
	var logs dbtest.SyncBuffer
	p := fromBackend(t, slog.New(slog.NewTextHandler(&logs, nil)), func(c *config.Config) {
		c.Auth.FailureDelay, c.Auth.MaxFailureDelay = 20*time.Second, 30*time.Second
	})
	victim := newBackendUser(t, "%", "the-real-one", "SELECT ON `"+p.db+"`.*")
	other := newBackendUser(t, "%", "other-pw", "SELECT ON `"+p.db+"`.*")

	guess := func(pass string) error {
		c, err := rawDial(p.addr, rawmysql.Options{User: victim, Password: pass})
		if err == nil {
			c.NC.Close()
			return errors.New("a wrong password logged in")
		}
		return err
	}
	if err := guess("guess-0"); errCode(err) != 1045 {
		t.Fatalf("first wrong guess: %v, want 1045", err)
	}
	results := make(chan error, 100)
	for i := 1; i <= 100; i++ {
		go func() { results <- guess(fmt.Sprintf("guess-%d", i)) }()
	}
	// One guess waits its turn (20 s); the others, whose turn would come
	// past max_failure_delay, are refused unchecked.
	for range 99 {
		if err := <-results; errCode(err) != 1045 {
			t.Fatalf("a queued-out guess: %v, want 1045 at once", err)
		}
	}
	waitFor(t, "a guess waiting its turn", func() bool { return p.srv.Stats().LoginsWaiting == 1 })
	// A refused guess gives its slot back just after its client has the
	// error: wait for that, not for the waiting guess, which holds none.
	waitFor(t, "every handshake slot free while a guess waits", func() bool { return len(p.srv.handshakes) == 0 })
	if n := p.srv.Stats().LoginsWaiting; n != 1 {
		t.Fatalf("%d logins waiting once the slots were free, want the guess still waiting", n)
	}
	// Another user, from the same address, logs in now, while the guess
	// still waits; so does a configured user.
	if err := loginErr(p, other, "other-pw"); err != nil {
		t.Fatalf("another user's login: %v", err)
	}
	if err := loginErr(p, "app", "app"); err != nil {
		t.Fatalf("a configured user's login: %v", err)
	}
	if st := p.srv.Stats(); st.LoginsWaiting != 1 || st.LoginFailures != 100 {
		t.Fatalf("waiting %d (want the guess still waiting), failures %d (want 100: 1 checked, 99 refused unchecked)", st.LoginsWaiting, st.LoginFailures)
	}
	log := logs.String()
	if !strings.Contains(log, `msg="login failed" user=`+victim+` client=127.0.0.1 reason="wrong password" consecutive_failures=1`) {
		t.Fatalf("no log line for the failed login:\n%s", log)
	}
	for _, secret := range []string{"guess-", "the-real-one", "look-secret"} {
		if strings.Contains(log, secret) {
			t.Fatalf("the log holds %q:\n%s", secret, log)
		}
	}
	// Shutting down ends the wait.
	p.srv.Close()
	if err := <-results; err == nil {
		t.Fatal("the waiting guess logged in")
	}
}
