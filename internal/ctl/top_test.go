package ctl

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/testkit"
)

// tagsJSON two seconds later: checkout held 4.2 s more (2.10 connections on
// average), search 1.4 s (0.70), holdfast:refill 0.1 s, the new tag signup
// 0.6 s; reports.nightly (drained) and untagged did nothing.
const tagsLaterJSON = `{"tags":[
 {"tag":"reports.nightly","hold_seconds":3870.2,"exec_seconds":3601,"idle_in_transaction_seconds":12.5,"wait_seconds":31.25,"borrows":40,"statements":812,"errors":17,"transactions":40,"slow_transactions":40,"held_now":1,"drained":true,"limit":2},
 {"tag":"checkout","hold_seconds":16.7,"exec_seconds":4.1,"idle_in_transaction_seconds":12.0,"wait_seconds":0.5,"borrows":1290,"statements":5640,"errors":3,"transactions":1180,"slow_transactions":3,"held_now":3,"drained":false,"limit":0},
 {"tag":"search","hold_seconds":5.65,"exec_seconds":5.3,"idle_in_transaction_seconds":0,"wait_seconds":0,"borrows":9700,"statements":9700,"errors":0,"transactions":0,"slow_transactions":0,"held_now":0,"drained":false,"limit":4},
 {"tag":"signup","hold_seconds":0.6,"exec_seconds":0.2,"idle_in_transaction_seconds":0.3,"wait_seconds":0,"borrows":20,"statements":80,"errors":0,"transactions":20,"slow_transactions":0,"held_now":0,"drained":false,"limit":0},
 {"tag":"holdfast:refill","hold_seconds":0.4,"exec_seconds":0.4,"idle_in_transaction_seconds":0,"wait_seconds":0,"borrows":40,"statements":40,"errors":0,"transactions":0,"slow_transactions":0,"held_now":0,"drained":false,"limit":0},
 {"tag":"untagged","hold_seconds":0.004,"exec_seconds":0.004,"idle_in_transaction_seconds":0,"wait_seconds":0,"borrows":1,"statements":1,"errors":0,"transactions":0,"slow_transactions":0,"held_now":0,"drained":false,"limit":0}
], "folded": 3}`

const poolLaterJSON = `{"open":9,"in_use":4,"idle":5,"waiting":1,"max":16,"acquired":184,"waited":6,"wait_seconds":0.12,"timeouts":0,"rejected":0,"clients":41,"pinned_sessions":1}`

func decodeTags(t *testing.T, s string) []Tag {
	t.Helper()
	f := newFakeAdmin(t)
	f.answer("GET /api/tags", 200, s)
	l, err := f.client(t, "").Tags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return l.Tags
}

func TestRates(t *testing.T) {
	rates := Rates(decodeTags(t, tagsJSON), decodeTags(t, tagsLaterJSON), 2*time.Second)
	byTag := map[string]TagRate{}
	var order []string
	for _, r := range rates {
		byTag[r.Tag] = r
		order = append(order, r.Tag)
	}
	if got := strings.Join(order, " "); got != "checkout search signup holdfast:refill reports.nightly untagged" {
		t.Errorf("order = %s", got)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	co := byTag["checkout"]
	near("checkout held", co.Held, 2.1) // 4.2 hold seconds in 2 s
	near("checkout share", co.Share, 2.1/3.15)
	near("checkout wait", co.Wait, 0.05) // 0.1 wait seconds in 2 s
	near("checkout exec", co.Exec, 1.0)
	near("checkout idle", co.IdleInTxn, 3.1)
	near("checkout stmts/s", co.Statements, 120)
	if co.Errors != 1 || co.HeldNow != 3 {
		t.Errorf("checkout = %+v", co)
	}
	near("signup held (new tag counts from zero)", byTag["signup"].Held, 0.3)
	near("search held", byTag["search"].Held, 0.7)
	if r := byTag["reports.nightly"]; r.Held != 0 || r.Share != 0 || !r.Drained || !r.active() {
		t.Errorf("reports.nightly = %+v", r)
	}
	if byTag["untagged"].active() {
		t.Error("untagged is active")
	}
	sum := 0.0
	for _, r := range rates {
		sum += r.Share
	}
	near("sum of shares", sum, 1)
}

func TestRatesIntervalScales(t *testing.T) {
	prev := []Tag{{Tag: "a", HoldSeconds: 10}}
	cur := []Tag{{Tag: "a", HoldSeconds: 13}}
	if r := Rates(prev, cur, 500*time.Millisecond); r[0].Held != 6 {
		t.Errorf("3 s held in 0.5 s = %v connections, want 6", r[0].Held)
	}
	if r := Rates(prev, cur, 3*time.Second); r[0].Held != 1 || r[0].Share != 1 {
		t.Errorf("3 s held in 3 s = %+v, want 1 connection, share 1", r[0])
	}
}

// TestRatesCounterReset: holdfast restarted between snapshots.
func TestRatesCounterReset(t *testing.T) {
	prev := []Tag{{Tag: "a", HoldSeconds: 100, Statements: 1000, Errors: 5}}
	cur := []Tag{{Tag: "a", HoldSeconds: 1, Statements: 10, Errors: 0}}
	r := Rates(prev, cur, time.Second)[0]
	if r.Held != 1 || r.Statements != 10 || r.Errors != 0 {
		t.Errorf("after a restart = %+v, want the new totals as the deltas", r)
	}
}

func TestRatesNothingHeld(t *testing.T) {
	tags := []Tag{{Tag: "a", HoldSeconds: 1}}
	if r := Rates(tags, tags, time.Second)[0]; r.Held != 0 || r.Share != 0 {
		t.Errorf("idle = %+v", r)
	}
}

// topFake serves tagsJSON and poolJSON first, then the later snapshots.
func topFake(t *testing.T) *fakeAdmin {
	f := newFakeAdmin(t)
	f.answerSeq("GET /api/tags", 200, tagsJSON, tagsLaterJSON)
	f.answerSeq("GET /api/pool", 200, poolJSON, poolLaterJSON)
	f.answer("GET /api/holders", 200, holdersJSON)
	return f
}

func newTopCLI(t *testing.T, f *fakeAdmin, out *strings.Builder) *CLI {
	clock := testkit.NewClock(time.Date(2026, 5, 12, 14, 3, 0, 0, time.UTC))
	return &CLI{Client: f.client(t, "tok"), Out: out, Now: clock.Now, Sleep: clock.Sleep}
}

// holdersAged is holdersJSON d seconds later: every hold still open.
func holdersAged(t *testing.T, d float64) string {
	var r struct {
		Holders []map[string]any `json:"holders"`
	}
	if err := json.Unmarshal([]byte(holdersJSON), &r); err != nil {
		t.Fatal(err)
	}
	for _, h := range r.Holders {
		h["held_for_seconds"] = h["held_for_seconds"].(float64) + d
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestTopGolden(t *testing.T) {
	f := topFake(t)
	f.answerSeq("GET /api/holders", 200, holdersJSON, holdersAged(t, 2), holdersAged(t, 4))
	var out strings.Builder
	c := newTopCLI(t, f, &out)
	if err := c.Top(context.Background(), TopOptions{Interval: 2 * time.Second, Tags: 20, Holders: 3, Iterations: 2}); err != nil {
		t.Fatal(err)
	}
	golden(t, "top.golden", strings.ReplaceAll(out.String(), f.srv.Listener.Addr().String(), "127.0.0.1:6034"))
	reqs := f.requests()
	if len(reqs) != 9 { // three snapshots of tags, pool, holders
		t.Errorf("%d requests, want 9: %+v", len(reqs), reqs)
	}
	for _, r := range reqs {
		if r.Method != "GET" || r.Auth != "Bearer tok" {
			t.Errorf("request %+v", r)
		}
	}
}

func TestTopRowLimit(t *testing.T) {
	f := topFake(t)
	var out strings.Builder
	c := newTopCLI(t, f, &out)
	if err := c.Top(context.Background(), TopOptions{Interval: time.Second, Tags: 2, Iterations: 1}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	// Over one second every rate doubles: checkout held 4.2 connections.
	if !hasRow(s, "checkout", "4.20") {
		t.Errorf("checkout did not hold 4.2 s over 1 s:\n%s", s)
	}
	for _, w := range []string{"search", "(3 more active tags not shown (-n); 1 idle tag not shown; 3 new tag names folded into \"other\")"} {
		if !strings.Contains(s, w) {
			t.Errorf("frame lacks %q:\n%s", w, s)
		}
	}
	if strings.Contains(s, "signup") || strings.Contains(s, "LONGEST HOLDERS") {
		t.Errorf("frame shows more than asked:\n%s", s)
	}
}

func TestTopTerminal(t *testing.T) {
	f := topFake(t)
	var out strings.Builder
	c := newTopCLI(t, f, &out)
	c.Terminal, c.Width = true, 60
	if err := c.Top(context.Background(), TopOptions{Interval: 2 * time.Second, Holders: 5, Iterations: 2}); err != nil {
		t.Fatal(err)
	}
	frames := strings.Split(out.String(), clearScreen)
	if len(frames) != 4 || frames[0] != "" || !strings.HasPrefix(frames[1], "holdfast top: measuring") {
		t.Fatalf("want a measuring screen and two cleared frames, got %q", out.String())
	}
	if !strings.Contains(frames[2], "UPDATE inventory SE…") {
		t.Errorf("statement not cut to the width:\n%s", frames[2])
	}
}

func TestTopFirstSnapshotFails(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/tags", 401, `{"error":"missing bearer token"}`)
	var out strings.Builder
	err := newTopCLI(t, f, &out).Top(context.Background(), TopOptions{Interval: time.Second})
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != 401 || out.Len() != 0 {
		t.Errorf("err = %v, output %q", err, out.String())
	}
}

// TestTopRefreshFails: a failed refresh is shown, and the next frame
// measures from the last good snapshot, over both intervals.
func TestTopRefreshFails(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/pool", 200, poolJSON)
	f.answer("GET /api/holders", 200, `{"holders":[]}`)
	var out strings.Builder
	c := newTopCLI(t, f, &out)
	f.mu.Lock()
	f.answers["GET /api/tags"] = func(n int) (int, string) {
		switch n {
		case 0:
			return 200, tagsJSON
		case 1:
			return 503, `{"error":"shutting down"}`
		}
		return 200, tagsLaterJSON
	}
	f.mu.Unlock()
	err := c.Top(context.Background(), TopOptions{Interval: time.Second, Iterations: 2})
	if err != nil {
		t.Fatalf("err = %v, want nil: the last frame succeeded", err)
	}
	s := out.String()
	for _, w := range []string{"error: GET /api/tags at", "503 Service Unavailable: shutting down", "retrying every 1s",
		"rates over the last 2s"} {
		if !strings.Contains(s, w) {
			t.Errorf("output lacks %q:\n%s", w, s)
		}
	}
	if !hasRow(s, "checkout", "2.10") {
		t.Errorf("checkout did not hold 4.2 s over 2 s:\n%s", s)
	}
}

// TestTopOnceFails: -once against an API that fails after the first
// snapshot exits with the error.
func TestTopOnceFails(t *testing.T) {
	f := topFake(t)
	f.mu.Lock()
	f.answers["GET /api/tags"] = func(n int) (int, string) {
		if n == 0 {
			return 200, tagsJSON
		}
		return 500, `{"error":"boom"}`
	}
	f.mu.Unlock()
	var out strings.Builder
	err := newTopCLI(t, f, &out).Top(context.Background(), TopOptions{Interval: time.Second, Iterations: 1})
	if err == nil || !strings.Contains(err.Error(), "500 Internal Server Error: boom") || !strings.Contains(out.String(), "error: ") {
		t.Errorf("err = %v, output %q", err, out.String())
	}
}

// hasRow reports whether a line of s starts with the given fields.
func hasRow(s string, fields ...string) bool {
	for _, ln := range strings.Split(s, "\n") {
		f := strings.Fields(ln)
		if len(f) >= len(fields) && strings.Join(f[:len(fields)], " ") == strings.Join(fields, " ") {
			return true
		}
	}
	return false
}

func TestTopCancelled(t *testing.T) {
	f := topFake(t)
	var out strings.Builder
	ctx, cancel := context.WithCancel(context.Background())
	c := newTopCLI(t, f, &out)
	frames := 0
	c.Sleep = func(ctx context.Context, d time.Duration) error {
		if frames++; frames == 3 {
			cancel() // Ctrl-C during the third wait
		}
		return ctx.Err()
	}
	if err := c.Top(ctx, TopOptions{Interval: time.Second}); err != nil {
		t.Errorf("err = %v, want nil after Ctrl-C", err)
	}
	if n := strings.Count(out.String(), "pool  open"); n != 2 {
		t.Errorf("%d frames, want 2", n)
	}
}

func TestTopUsage(t *testing.T) {
	c := &CLI{Out: &strings.Builder{}}
	for _, o := range []TopOptions{{Interval: 0}, {Interval: time.Second, Tags: -1}, {Interval: time.Second, Iterations: -2}} {
		var ue *UsageError
		if err := c.Top(context.Background(), o); !errors.As(err, &ue) {
			t.Errorf("Top(%+v) = %v, want a *UsageError", o, err)
		}
	}
}

// TestTopCountsOpenTransactions: a tag whose long transaction is still
// open holds one connection on average over the interval, and shows the
// transaction's age, though its finished-hold counter did not move.
func TestTopCountsOpenTransactions(t *testing.T) {
	f := newFakeAdmin(t)
	f.answer("GET /api/tags", 200, `{"tags":[{"tag":"report","hold_seconds":0,"borrows":1,"statements":1,"held_now":1}],"folded":0}`)
	f.answer("GET /api/pool", 200, `{"open":1,"in_use":1,"idle":0,"waiting":3,"waiting_pool":0,"waiting_tag_limit":2,"waiting_pipeline":1,"max":4}`)
	f.answerSeq("GET /api/holders", 200,
		`{"holders":[{"client_id":5,"user":"app","tag":"report","held_for_seconds":120.000,"in_transaction":true,"statement":"SELECT ?"}]}`,
		`{"holders":[{"client_id":5,"user":"app","tag":"report","held_for_seconds":122.000,"in_transaction":true,"statement":"SELECT ?"}]}`)
	var out strings.Builder
	if err := newTopCLI(t, f, &out).Top(context.Background(), TopOptions{Interval: 2 * time.Second, Iterations: 1}); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !hasRow(s, "report", "1.00", "100", "1", "2m02s") {
		t.Errorf("the open transaction is not counted:\n%s", s)
	}
	if !strings.Contains(s, "waiting 3 (0 for the pool, 2 under tag limits, 1 for a pipeline)") {
		t.Errorf("waiting is not broken down:\n%s", s)
	}
}

// TestWithInFlight: a hold that ends between two snapshots adds only its
// time within the interval; a tag seen only among the holders gets a row.
func TestWithInFlight(t *testing.T) {
	prev := WithInFlight([]Tag{{Tag: "a", HoldSeconds: 10}}, []Holder{{Tag: "a", HeldForSeconds: 3}, {Tag: "b", HeldForSeconds: 1}})
	// a's hold ended after 4 s in all (1 s into the interval); b's goes on.
	cur := WithInFlight([]Tag{{Tag: "a", HoldSeconds: 14}, {Tag: "b"}}, []Holder{{Tag: "b", HeldForSeconds: 3}})
	r := Rates(prev, cur, 2*time.Second)
	byTag := map[string]float64{}
	for _, x := range r {
		byTag[x.Tag] = x.Held
	}
	if byTag["a"] != 0.5 || byTag["b"] != 1 {
		t.Errorf("held %v, want a 0.5 (1 s in 2 s), b 1", byTag)
	}
	if len(prev) != 2 || prev[1].Tag != "b" || prev[1].InFlightSeconds != 1 || prev[0].HoldSeconds != 10 {
		t.Errorf("prev %+v", prev)
	}
}
