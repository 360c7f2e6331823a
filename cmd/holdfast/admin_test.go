package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// readToken is the token of a credential of scope read in the tests below.
const readToken = "prometheus-0123456789abcdef"

// adminProcess starts holdfast, after `holdfast migrate`, with an admin
// listener whose credentials are the harness's (write), prometheus's
// (read) and, when local, the local one in holdfast-admin.token next to
// the configuration; more is appended to its admin section.
func adminProcess(t *testing.T, local bool, more string) (p *process, admin string) {
	t.Helper()
	p = newProcess(t)
	admin = dbtest.FreeAddr(t)
	y := "admin:\n  credentials:\n" +
		"    - {name: " + holdfastproc.AdminCredential + ", scope: write, token: " + holdfastproc.AdminToken + "}\n" +
		"    - {name: prometheus, scope: read, token: " + readToken + "}\n"
	if local {
		y += "  local_token_path: holdfast-admin.token\n"
	}
	writeConfigAdmin(t, p.config, p.addr, p.db, appUser, admin, y+more)
	p.migrate(t)
	return p.serve(t), admin
}

// request sends method url with the bearer token (none when "") and
// returns the status and body; a request that gets no answer fails t.
func request(t *testing.T, method, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// controlsSetBy is the fleet's control rows of p's database, as
// "tag kind set_by".
func controlsSetBy(t *testing.T, p *process) []string {
	t.Helper()
	rows, err := dbtest.Root(t).Query("SELECT tag, kind, set_by FROM `" + dbtest.TablesDB(p.db) + "`.holdfast_controls ORDER BY tag, kind")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var tag, kind, by string
		if err := rows.Scan(&tag, &kind, &by); err != nil {
			t.Fatal(err)
		}
		out = append(out, tag+" "+kind+" "+by)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestAdminWritesNeedACredential: on the loopback listener, a change
// without a credential gets 401 and one with a read credential 403, on
// every route that changes something, and neither changes the fleet's
// control table or the gates; the statement of the tag still runs. A
// change with a write credential is recorded under the credential's name,
// name/by when a by is given. The local credential's token is written
// next to the configuration, readable by its owner only, and works.
func TestAdminWritesNeedACredential(t *testing.T) {
	p, admin := adminProcess(t, true, "")
	base := "http://" + admin
	db := p.open(t, "app", "app")
	localPath := filepath.Join(filepath.Dir(p.config), "holdfast-admin.token")
	changes := []string{
		"POST /api/tags/checkout/drain?by=oncall-lead&reason=INC-1",
		"PUT /api/tags/checkout/limit?max=1&by=oncall-lead",
		"PUT /api/tags/checkout/max_transaction_time?max=1ms",
		"PUT /api/tags/*/class?class=background",
		"PUT /api/tags/*/route?policy=replica_stale_ok",
		"PUT /api/shapes/0123456789abcdef/block",
		"PUT /api/shapes/0123456789abcdef/limit?max=1",
		"DELETE /api/tags/checkout/drain",
	}
	for _, c := range changes {
		method, path, _ := strings.Cut(c, " ")
		code, body := request(t, method, base+path, "")
		var ans struct {
			Error     string `json:"error"`
			LocalPath string `json:"local_token_path"`
		}
		_ = json.Unmarshal([]byte(body), &ans)
		if code != http.StatusUnauthorized || !strings.Contains(ans.Error, "it needs a credential of scope write") || ans.LocalPath != localPath {
			t.Errorf("%s without a credential: %d %s", c, code, body)
		}
		if code, body := request(t, method, base+path, readToken); code != http.StatusForbidden || !strings.Contains(body, "has scope read") {
			t.Errorf("%s with a read credential: %d %s", c, code, body)
		}
	}
	if rows := controlsSetBy(t, p); len(rows) != 0 {
		t.Fatalf("refused changes wrote controls: %q", rows)
	}
	if code, body := request(t, "GET", base+"/api/gates", ""); code != 200 || !strings.Contains(body, `"gates": []`) {
		t.Fatalf("gates after refused changes: %d %s", code, body)
	}
	if !serves(db, "checkout") {
		t.Fatal("checkout is not served after refused changes")
	}

	// With the harness's write credential, by the credential's name.
	if code, body := request(t, "POST", base+"/api/tags/checkout/drain?by=alice&reason=INC-1", holdfastproc.AdminToken); code != 200 ||
		!strings.Contains(body, `"set_by": "harness/alice"`) || !strings.Contains(body, `"by_unverified": "alice"`) {
		t.Fatalf("drain with a write credential: %d %s", code, body)
	}
	if code, body := request(t, "PUT", base+"/api/tags/report/limit?max=2", holdfastproc.AdminToken); code != 200 || !strings.Contains(body, `"set_by": "harness"`) {
		t.Fatalf("limit with a write credential: %d %s", code, body)
	}
	if got, want := controlsSetBy(t, p), []string{"checkout drain harness/alice", "report limit harness"}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("controls %q, want %q", got, want)
	}
	if !refuses(db, "checkout") {
		t.Fatal("checkout is served after the drain")
	}

	// The local credential.
	st, err := os.Stat(localPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %v, want 0600", localPath, st.Mode().Perm())
	}
	b, err := os.ReadFile(localPath)
	if err != nil {
		t.Fatal(err)
	}
	local := strings.TrimSpace(string(b))
	if len(local) != 64 || strings.Contains(p.Out.String(), local) {
		t.Fatalf("local token %d characters; in the log: %v", len(local), strings.Contains(p.Out.String(), local))
	}
	if code, body := request(t, "DELETE", base+"/api/tags/checkout/drain", local); code != 200 || !strings.Contains(body, `"set_by": "local"`) {
		t.Fatalf("undrain with the local credential: %d %s", code, body)
	}
	for _, tok := range []string{holdfastproc.AdminToken, readToken, local} {
		if strings.Contains(p.Out.String(), tok) {
			t.Errorf("a token is in holdfast's log")
		}
	}
}

// TestHoldfastctlCredentials: holdfastctl without a credential is told
// what a change needs; with the write credential's token (from a file) it
// changes the fleet, and prints the author with its by marked unverified;
// with a read credential's it is told that it needs a write one; on
// holdfast's own machine it finds the local credential by itself.
func TestHoldfastctlCredentials(t *testing.T) {
	ctlBin := dbtest.Command(t, "./cmd/holdfastctl")
	dir := t.TempDir()
	run := func(env []string, args ...string) (string, error) {
		t.Helper()
		cmd := guarded(t, ctlBin, args...)
		cmd.Dir = dir // not the configuration's directory
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOLDFAST_CTL_BY=alice"}, env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	p, admin := adminProcess(t, false, "")
	out, err := run(nil, "-addr", admin, "drain", "checkout")
	if err == nil || !strings.Contains(out, "this command changes the fleet: it needs a write credential; set HOLDFAST_ADMIN_TOKEN_FILE (or -token-file FILE)") {
		t.Fatalf("drain without a credential: %v\n%s", err, out)
	}
	if out, err := run(nil, "-addr", admin, "tags"); err != nil {
		t.Fatalf("tags without a credential, on loopback: %v\n%s", err, out)
	}
	file := filepath.Join(dir, "oncall.token")
	if err := os.WriteFile(file, []byte(holdfastproc.AdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err = run([]string{"HOLDFAST_ADMIN_TOKEN_FILE=" + file}, "-addr", admin, "drain", "checkout", "-reason", "INC-2")
	if err != nil || !strings.Contains(out, "set by harness/alice (by unverified)") {
		t.Fatalf("drain with a write credential: %v\n%s", err, out)
	}
	if got := controlsSetBy(t, p); len(got) != 1 || got[0] != "checkout drain harness/alice" {
		t.Fatalf("controls %q", got)
	}
	out, err = run([]string{"HOLDFAST_ADMIN_TOKEN_FILE=" + file}, "-addr", admin, "controls")
	if err != nil || !strings.Contains(out, "harness/alice (by unverified)") {
		t.Fatalf("controls: %v\n%s", err, out)
	}
	out, err = run([]string{"HOLDFAST_ADMIN_TOKEN=" + readToken}, "-addr", admin, "undrain", "checkout")
	if err == nil || !strings.Contains(out, "it needs a write credential, and the token from $HOLDFAST_ADMIN_TOKEN is a read credential's") {
		t.Fatalf("undrain with a read credential: %v\n%s", err, out)
	}

	// On holdfast's machine, with the local credential on.
	_, localAdmin := adminProcess(t, true, "")
	out, err = run(nil, "-addr", localAdmin, "drain", "report")
	if err != nil || !strings.Contains(out, "set by local/alice (by unverified)") {
		t.Fatalf("drain with the local credential found by itself: %v\n%s", err, out)
	}
}

// TestAdminTLS: with admin.tls, the listener speaks TLS only; holdfastctl
// reaches it at https:// with the certificate's CA, and says what to do
// without it, or when it speaks plain HTTP to it.
func TestAdminTLS(t *testing.T) {
	ctlBin := dbtest.Command(t, "./cmd/holdfastctl")
	cert, key := dbtest.WriteCert(t, t.TempDir())
	_, admin := adminProcess(t, false, fmt.Sprintf("  tls: {cert_file: %s, key_file: %s}\n", cert, key))
	run := func(args ...string) (string, error) {
		t.Helper()
		out, err := holdfastctl(t, ctlBin, args...).CombinedOutput()
		return string(out), err
	}
	if out, err := run("-addr", "https://"+admin, "-ca-file", cert, "drain", "checkout"); err != nil || !strings.Contains(out, "drained checkout") {
		t.Fatalf("over TLS: %v\n%s", err, out)
	}
	if out, err := run("-addr", "https://"+admin, "tags"); err == nil || !strings.Contains(out, "pass -ca-file") {
		t.Fatalf("over TLS without the CA: %v\n%s", err, out)
	}
	if out, err := run("-addr", admin, "tags"); err == nil || !strings.Contains(out, "use -addr https://HOST:PORT") {
		t.Fatalf("plain HTTP to TLS: %v\n%s", err, out)
	}
}

// TestSIGHUPAdminListen: a reload that changes admin.listen binds the new
// address, then closes the old one; one whose address cannot be bound is
// refused whole (its credentials too), with the reason logged, and the
// listener goes on serving where it was.
func TestSIGHUPAdminListen(t *testing.T) {
	p := newProcess(t)
	first := dbtest.FreeAddr(t)
	writeConfigAdmin(t, p.config, p.addr, p.db, appUser, first, "")
	p.serve(t)
	answers := func(addr string) bool {
		c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		resp, err := c.Get("http://" + addr + "/api/pool")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	refused := func(addr string) bool {
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}
	if !answers(first) {
		t.Fatal("the first address does not answer")
	}
	second := dbtest.FreeAddr(t)
	writeConfigAdmin(t, p.config, p.addr, p.db, appUser, second, "")
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	dbtest.Eventually(t, "the new address answers", func() bool { return answers(second) })
	dbtest.Eventually(t, "the old address refuses connections", func() bool { return refused(first) })

	// An address in use, with a new credential: refused whole.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	writeConfigAdmin(t, p.config, p.addr, p.db, appUser, taken.Addr().String(),
		"admin:\n  credentials:\n    - {name: newcomer, scope: write, token: newcomer-0123456789ab}\n")
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	dbtest.Eventually(t, "the refusal is logged", func() bool {
		return strings.Contains(p.Out.String(), "reload: the admin section is refused") && strings.Contains(p.Out.String(), "address already in use")
	})
	if !answers(second) {
		t.Fatal("the listener stopped serving after a refused reload")
	}
	if code, body := request(t, "POST", "http://"+second+"/api/tags/x/drain", "newcomer-0123456789ab"); code != http.StatusUnauthorized {
		t.Fatalf("a credential of the refused reload: %d %s", code, body)
	}
	if code, body := request(t, "POST", "http://"+second+"/api/tags/x/drain?local=1", holdfastproc.AdminToken); code != http.StatusOK {
		t.Fatalf("the credential in force: %d %s", code, body)
	}
}
