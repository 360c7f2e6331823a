package browsertest

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/go-sql-driver/mysql"

	"github.com/holdfast-db/holdfast/internal/dbtest"
	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// chromium returns Debian's Chromium, installing it with the project's
// test tools when missing. It never skips.
func chromium(t *testing.T) string {
	t.Helper()
	const path = "/usr/bin/chromium"
	if _, err := os.Stat(path); err == nil {
		return path
	}
	out, err := exec.Command("../../scripts/tools-up.sh").CombinedOutput()
	if _, serr := os.Stat(path); serr != nil {
		t.Fatalf("%s is missing and ../../scripts/tools-up.sh did not install it (Debian package chromium): %v\n%s", path, err, out)
	}
	return path
}

// browser starts headless Chromium, driven over the DevTools protocol.
// rules are host-resolver rules (MAP name address), so a test can give a
// page a host name of its own.
func browser(t *testing.T, rules string) context.Context {
	t.Helper()
	profile, err := os.MkdirTemp("", "holdfast-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("host-resolver-rules", rules),
		chromedp.UserDataDir(profile),
		chromedp.WindowSize(1440, 1100),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancel()
		acancel() // waits for the browser to exit
		_ = os.RemoveAll(profile)
	})
	// The first run starts the browser for the life of ctx: no timeout on it.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	// A hang guard for the rest of the test, not a timing assertion.
	ctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(tcancel)
	return ctx
}

// steps runs browser actions, failing the test on the first error.
func steps(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// value runs one browser action that returns a value.
func value[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// css is a CSS selector.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// until waits for a JavaScript expression to be truthy.
func until(js string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingInterval(100*time.Millisecond))
}

// adminGates reads the drained tags from the admin API.
func adminDrained(t *testing.T, admin string) map[string]bool {
	t.Helper()
	var g struct {
		Gates []struct {
			Tag     string `json:"tag"`
			Drained bool   `json:"drained"`
		} `json:"gates"`
	}
	dbtest.FetchJSON(t, "http://"+admin+"/api/gates", &g)
	out := map[string]bool{}
	for _, x := range g.Gates {
		out[x.Tag] = x.Drained
	}
	return out
}

// traffic runs tagged work through holdfast until stop is closed, at most
// a few thousand statements per client. Errors after drained is set are
// the drain's doing and end that client quietly.
func traffic(t *testing.T, db *sql.DB, stop <-chan struct{}, drained *atomic.Bool) *sync.WaitGroup {
	var wg sync.WaitGroup
	client := func(name string, step func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := step(); err != nil {
					if !drained.Load() {
						t.Errorf("%s: %v", name, err)
					}
					return
				}
			}
		}()
	}
	for i := 0; i < 2; i++ {
		client("checkout", func() error {
			tx, err := db.Begin()
			if err != nil {
				return err
			}
			defer tx.Rollback()
			if _, err := tx.Exec("/* conn_tag:checkout */ SELECT 1"); err != nil {
				return err
			}
			time.Sleep(30 * time.Millisecond) // the application between statements
			if _, err := tx.Exec("/* conn_tag:checkout */ SELECT SLEEP(0.01)"); err != nil {
				return err
			}
			return tx.Commit()
		})
		client("search", func() error {
			_, err := db.Exec("/* conn_tag:search */ SELECT SLEEP(0.02)")
			return err
		})
	}
	return &wg
}

// The credentials of the page's person: oncall may change the fleet,
// grafana may only read.
const (
	oncallToken  = "oncall-0123456789abcdef"
	oncallToken2 = "oncall-rotated-0123456789"
	grafanaToken = "grafana-0123456789abcdef"
)

// TestStatusPageInBrowser drives two tags through a real holdfast, opens
// its status page in headless Chromium and checks that both tags and a
// live holder show, with no credential (reads on loopback); that a drain
// clicked on the page, once confirmed, asks for a credential of scope
// write (a read one is refused), is made once it is given, is recorded as
// the credential's, and refuses the tag's next statement with 9001; that
// the lift from the page works with the token kept; that the same drain
// from a page of another origin, or through a DNS-rebinding host name, is
// refused; and that after a reload rotates the token, the page forgets
// the old one, asks again once, and keeps the new one for the tab.
func TestStatusPageInBrowser(t *testing.T) {
	ctx := browser(t, "MAP rebind.test 127.0.0.1")
	addr, admin, database := dbtest.FreeAddr(t), dbtest.FreeAddr(t), dbtest.NewDatabase(t)
	config := filepath.Join(t.TempDir(), "holdfast.yaml")
	writeConfig := func(oncall string) {
		creds := "admin:\n  credentials:\n" +
			"    - {name: " + holdfastproc.AdminCredential + ", scope: write, token: " + holdfastproc.AdminToken + "}\n" +
			"    - {name: oncall, scope: write, token: " + oncall + "}\n" +
			"    - {name: grafana, scope: read, token: " + grafanaToken + "}\n"
		dbtest.WriteHoldfastConfig(t, config, holdfastproc.Config{Listen: addr, Admin: admin,
			Users:   []holdfastproc.User{{Name: "app", Password: "app"}},
			Backend: holdfastproc.Backend{Database: database}, YAML: "shutdown_grace: 20s\nlog:\n  level: debug\n" + creds})
	}
	writeConfig(oncallToken)
	p := dbtest.StartHoldfast(t, holdfastproc.Options{Bin: dbtest.Command(t, "./cmd/holdfast"), Config: config, Listen: addr}, true)
	db, err := sql.Open("mysql", fmt.Sprintf("app:app@tcp(%s)/%s", addr, database))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(8)

	// Some reservations, so the engine has a hot pool to show.
	for _, q := range []string{
		"CALL holdfast.receive(1, 1001, 1, 500)",
		`CALL holdfast.reserve(1, 'order-1', '[{"item":1001,"qty":2,"locations":[1]}]', NULL)`,
		`CALL holdfast.reserve(1, 'order-2', '[{"item":1001,"qty":1,"locations":[1]}]', NULL)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	// A live holder: a transaction left open.
	holder, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.Exec("/* conn_tag:checkout */ SELECT 'left open'"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var drained atomic.Bool
	wg := traffic(t, db, stop, &drained)
	defer func() {
		close(stop)
		wg.Wait()
	}()

	dbtest.Eventually(t, "the admin listener answers", func() bool {
		resp, err := http.Get("http://" + admin + "/api/pool")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	page := "http://" + admin + "/"
	steps(t, ctx, "open the status page", chromedp.Navigate(page),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="checkout"]`)),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="search"]`)),
		chromedp.WaitVisible(css(`#holders tbody tr[data-tag="checkout"]`)),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="checkout"] svg.spark polyline`)))
	holderText := value(t, ctx, "read the holders", chromedp.Text(css(`#holders tbody`)))
	if !strings.Contains(holderText, "SELECT") || !strings.Contains(holderText, "yes") {
		t.Errorf("live holders: %q", holderText)
	}
	if engine := value(t, ctx, "read the engine card", chromedp.Text(css(`#card-engine`))); !strings.Contains(engine, "inline refills/s") {
		t.Errorf("engine card: %q", engine)
	}
	// Let samples build the sparklines: rates over 10 s or more.
	steps(t, ctx, "wait for the rates to span 10 s",
		until(`/last (\d\d+(\.\d)?s|\dm)/.test(document.getElementById("tags-window").textContent)`))

	// Drain search with the page's button: Cancel first changes nothing.
	drainButton := css(`#tags tbody tr[data-tag="search"] button[data-action="drain"]`)
	steps(t, ctx, "open the drain dialog and cancel",
		chromedp.Click(drainButton),
		chromedp.WaitVisible(css(`#confirm-ok`)),
		chromedp.Click(css(`#confirm-cancel`)),
		chromedp.WaitNotVisible(css(`#confirm`)))
	if adminDrained(t, admin)["search"] {
		t.Fatal("cancelling the dialog drained the tag")
	}
	drained.Store(true)
	steps(t, ctx, "drain search from the page: a credential is asked for",
		chromedp.Click(drainButton),
		chromedp.WaitVisible(css(`#confirm-reason`)),
		chromedp.SendKeys(css(`#confirm-reason`), "browser-test"),
		chromedp.Click(css(`#confirm-ok`)),
		chromedp.WaitVisible(css(`#token-input`)))
	if why := value(t, ctx, "read why", chromedp.Text(css(`#token-why`))); !strings.Contains(why, "needs a credential of scope write") {
		t.Errorf("the token form says %q", why)
	}
	if adminDrained(t, admin)["search"] {
		t.Fatal("a drain without a credential went through")
	}
	steps(t, ctx, "give a read credential's token",
		chromedp.SendKeys(css(`#token-input`), grafanaToken),
		chromedp.Click(css(`#token-submit`)),
		until(`document.getElementById("message").textContent.includes("has scope read")`),
		chromedp.WaitVisible(css(`#token-input`)))
	if adminDrained(t, admin)["search"] {
		t.Fatal("a read credential drained search")
	}
	steps(t, ctx, "give a write credential's token",
		chromedp.SendKeys(css(`#token-input`), oncallToken),
		chromedp.Click(css(`#token-submit`)),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="search"] button[data-action="undrain"]`)))
	if m := value(t, ctx, "read the message", chromedp.Text(css(`#message`))); m != "drained search" {
		t.Errorf("message after the drain: %q", m)
	}
	_, err = db.Exec("/* conn_tag:search */ SELECT 1")
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 9001 || !strings.Contains(me.Message, "browser-test") {
		t.Fatalf("search's next statement after the drain: %v, want error 9001 with the reason", err)
	}
	// The drain went to the fleet: the page lists it with its author and
	// reason, and says how many instances share it.
	steps(t, ctx, "the fleet's controls list the drain",
		chromedp.WaitVisible(css(`#fleet-controls tbody tr[data-tag="search"][data-kind="drain"]`)))
	if row := value(t, ctx, "read the fleet control", chromedp.Text(css(`#fleet-controls tbody tr[data-tag="search"]`))); !strings.Contains(row, "browser-test") ||
		!strings.Contains(row, "drained") || !strings.Contains(row, "oncall") {
		t.Errorf("fleet control row: %q", row)
	}
	if card := value(t, ctx, "read the fleet card", chromedp.Text(css(`#card-fleet`))); !strings.Contains(card, "1 instance") || !strings.Contains(card, "controls read") {
		t.Errorf("fleet card: %q", card)
	}
	// The overload card: classes' counts since start (the engine's
	// borrows are critical).
	if card := value(t, ctx, "read the overload card", chromedp.Text(css(`#card-overload`))); !strings.Contains(card, "nothing shed") || !strings.Contains(card, "critical") || strings.Contains(card, "undefined") {
		t.Errorf("overload card: %q", card)
	}
	// The primary card: the one server, and the statements held,
	// retried and refused with 9010 (none here), with the hold's settings.
	if card := value(t, ctx, "read the primary card", chromedp.Text(css(`#card-topology`))); !strings.Contains(card, "0 statements held now") ||
		!strings.Contains(card, "refused with 9010") || !strings.Contains(card, "hold 15.0s, at most 1000 held") || strings.Contains(card, "undefined") {
		t.Errorf("primary card: %q", card)
	}
	steps(t, ctx, "let the page refresh", chromedp.Sleep(2500*time.Millisecond))
	png := value(t, ctx, "screenshot", chromedp.FullScreenshot(100))
	shot := filepath.Join(t.TempDir(), "status-page.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("status page screenshot: %s", shot)
	if dir := os.Getenv("HOLDFAST_SCREENSHOT_DIR"); dir != "" {
		keep := filepath.Join(dir, "status-page.png")
		if err := os.WriteFile(keep, png, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("kept a copy: %s", keep)
	}

	// Lift the drain from the page, with the token it keeps.
	steps(t, ctx, "undrain search from the page",
		chromedp.Click(css(`#tags tbody tr[data-tag="search"] button[data-action="undrain"]`)),
		chromedp.WaitVisible(css(`#confirm-ok`)),
		chromedp.Click(css(`#confirm-ok`)),
		chromedp.WaitVisible(drainButton))
	if m := value(t, ctx, "read the message", chromedp.Text(css(`#message`))); m != "undrained search" {
		t.Errorf("message after the undrain: %q", m)
	}
	if adminDrained(t, admin)["search"] {
		t.Fatal("search is still drained after the lift")
	}
	if _, err := db.Exec("/* conn_tag:search */ SELECT 1"); err != nil {
		t.Fatalf("search's next statement after the lift: %v", err)
	}

	// The same drain from a page of another origin: a form that posts to
	// the admin listener on load (no preflight, as a hostile page would).
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `<!doctype html><form id="f" method="POST" action="http://%s/api/tags/checkout/drain?reason=evil"></form>
<script>document.getElementById("f").submit()</script>`, admin)
	}))
	defer evil.Close()
	steps(t, ctx, "a page of another origin posts a drain", chromedp.Navigate(evil.URL),
		until(`location.host === "`+admin+`" && document.body && document.body.innerText.length > 0`))
	if refused := value(t, ctx, "read the answer", chromedp.Evaluate[string](`document.body.innerText`)); !strings.Contains(refused, "admin: cross-origin request refused") {
		t.Errorf("the cross-origin drain was answered %q", refused)
	}
	if adminDrained(t, admin)["checkout"] {
		t.Fatal("a page of another origin drained checkout")
	}
	// Not a browser: the same request with a foreign Origin header.
	req, _ := http.NewRequest("POST", "http://"+admin+"/api/tags/checkout/drain", nil)
	req.Header.Set("Origin", "http://evil.example")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || adminDrained(t, admin)["checkout"] {
		t.Fatalf("a POST with Origin http://evil.example: %s", resp.Status)
	}

	// DNS rebinding: the page served under a name that now resolves to
	// 127.0.0.1 is same-origin with itself, so only the Host check stops it.
	rebound := "http://rebind.test:" + admin[strings.LastIndex(admin, ":")+1:] + "/"
	steps(t, ctx, "a DNS-rebinding page", chromedp.Navigate(rebound),
		until(`document.getElementById("updated").textContent.startsWith("refresh failed")`))
	updated := value(t, ctx, "read the page", chromedp.Text(css(`#updated`)))
	status := value(t, ctx, "post a drain from it", chromedp.Evaluate[int](
		`fetch("/api/tags/checkout/drain?reason=rebound", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if status != http.StatusForbidden || !strings.Contains(updated, "admin: host 'rebind.test:") {
		t.Errorf("DNS-rebinding page: drain answered %d, page says %q", status, updated)
	}
	if adminDrained(t, admin)["checkout"] {
		t.Fatal("a DNS-rebinding page drained checkout")
	}

	// A reload rotates oncall's token: the page forgets the old one, goes
	// on showing what it may read, asks for a token at the next change,
	// and keeps the new one for the tab.
	steps(t, ctx, "back to the page", chromedp.Navigate(page),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="checkout"]`)))
	writeConfig(oncallToken2)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	dbtest.Eventually(t, "the reload rotates the token", func() bool {
		req, _ := http.NewRequest("GET", "http://"+admin+"/api/pool", nil)
		req.Header.Set("Authorization", "Bearer "+oncallToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	})
	steps(t, ctx, "the page forgets the old token",
		until(`document.getElementById("message").textContent.includes("The token was refused")`),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="checkout"]`)))
	steps(t, ctx, "drain search again: asked for the new token",
		chromedp.Click(drainButton),
		chromedp.WaitVisible(css(`#confirm-ok`)),
		chromedp.Click(css(`#confirm-ok`)),
		chromedp.WaitVisible(css(`#token-input`)),
		chromedp.SendKeys(css(`#token-input`), oncallToken2),
		chromedp.Click(css(`#token-submit`)),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="search"] button[data-action="undrain"]`)))
	steps(t, ctx, "reload the page, lift the drain without being asked",
		chromedp.Reload(),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="search"] button[data-action="undrain"]`)),
		chromedp.Click(css(`#tags tbody tr[data-tag="search"] button[data-action="undrain"]`)),
		chromedp.WaitVisible(css(`#confirm-ok`)),
		chromedp.Click(css(`#confirm-ok`)),
		chromedp.WaitVisible(css(`#tags tbody tr[data-tag="search"] button[data-action="drain"]`)))
	if hidden := value(t, ctx, "read the token form", chromedp.Evaluate[bool](`document.getElementById("token-form").hidden`)); !hidden {
		t.Error("the page asked for the token again after a reload")
	}
	if adminDrained(t, admin)["search"] {
		t.Fatal("search is still drained")
	}
	if err := holder.Commit(); err != nil {
		t.Fatal(err)
	}
}
