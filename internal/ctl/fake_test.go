package ctl

import (
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// The admin API's answers, verbatim in the contract's shapes.
const (
	tagsJSON = `{"tags":[
 {"tag":"checkout","hold_seconds":12.5,"exec_seconds":3.1,"idle_in_transaction_seconds":8.9,"wait_seconds":0.4,"borrows":1200,"statements":5400,"errors":2,"transactions":1100,"slow_transactions":3,"held_now":2,"drained":false,"limit":0},
 {"tag":"search","hold_seconds":4.25,"exec_seconds":4,"idle_in_transaction_seconds":0,"wait_seconds":0,"borrows":9000,"statements":9000,"errors":0,"transactions":0,"slow_transactions":0,"held_now":1,"drained":false,"limit":4},
 {"tag":"reports.nightly","hold_seconds":3870.2,"exec_seconds":3601,"idle_in_transaction_seconds":12.5,"wait_seconds":31.25,"borrows":40,"statements":812,"errors":17,"transactions":40,"slow_transactions":40,"held_now":1,"drained":true,"limit":2},
 {"tag":"holdfast:refill","hold_seconds":0.3,"exec_seconds":0.3,"idle_in_transaction_seconds":0,"wait_seconds":0,"borrows":30,"statements":30,"errors":0,"transactions":0,"slow_transactions":0,"held_now":0,"drained":false,"limit":0},
 {"tag":"untagged","hold_seconds":0.004,"exec_seconds":0.004,"idle_in_transaction_seconds":0,"wait_seconds":0,"borrows":1,"statements":1,"errors":0,"transactions":0,"slow_transactions":0,"held_now":0,"drained":false,"limit":0}
], "folded": 0}`
	tagsFoldedJSON = `{"tags":[], "folded": 1734}`
	holdersJSON    = `{"holders":[
 {"client_id":10042,"user":"app","tag":"checkout","held_for_seconds":0.250,"in_transaction":true,"statement":"UPDATE inventory SET reserved = reserved + 1 WHERE sku = ? AND warehouse_id = ? AND reserved < stock"},
 {"client_id":0,"user":"","tag":"holdfast:refill","held_for_seconds":0.012,"in_transaction":false,"statement":"CALL holdfast.refill(?)"},
 {"client_id":977,"user":"reporting","tag":"reports.nightly","held_for_seconds":185.4,"in_transaction":true,"statement":"SELECT o.id,\n       o.total\n  FROM orders o\n WHERE o.created_at > ?\u001b[2J"},
 {"client_id":10077,"user":"app","tag":"checkout","held_for_seconds":4.2,"in_transaction":true,"statement":""}
]}`
	poolJSON = `{"open":8,"in_use":3,"idle":5,"waiting":0,"max":16,"acquired":123,"waited":4,"wait_seconds":0.02,"timeouts":0,"rejected":0,"clients":40,"pinned_sessions":1}`
)

// request is what the fake admin API saw.
type request struct {
	Method, Path, Query, Auth string
	Tag                       string // the {tag} wildcard as the server's mux decoded it
}

// fakeAdmin is an admin API served by httptest with the route patterns a
// holdfast built on net/http's ServeMux would use. Handlers answer with
// the strings in answers (keyed by pattern), or via custom when set.
type fakeAdmin struct {
	srv *httptest.Server

	mu      sync.Mutex // guards following
	reqs    []request
	answers map[string]func(n int) (status int, body string) // n counts calls per pattern, from 0
	calls   map[string]int
}

var patterns = []string{
	"GET /api/tags", "GET /api/holders", "GET /api/pool",
	"POST /api/tags/{tag}/drain", "DELETE /api/tags/{tag}/drain",
	"PUT /api/tags/{tag}/limit", "DELETE /api/tags/{tag}/limit",
	"GET /api/authority", "PUT /api/authority", "GET /api/fleet", "GET /api/topology",
	"GET /api/explain",
	"PUT /api/tags/{tag}/{kind}", "DELETE /api/tags/{tag}/{kind}",
}

func newFakeAdmin(t *testing.T) *fakeAdmin {
	f := &fakeAdmin{answers: map[string]func(int) (int, string){}, calls: map[string]int{}}
	mux := http.NewServeMux()
	for _, p := range patterns {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			f.mu.Lock()
			f.reqs = append(f.reqs, request{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Get("Authorization"), r.PathValue("tag")})
			n := f.calls[p]
			f.calls[p]++
			answer := f.answers[p]
			f.mu.Unlock()
			status, body := http.StatusNotImplemented, `{"error":"no answer for `+p+`"}`
			if answer != nil {
				status, body = answer(n)
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, body)
		})
	}
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

// answer makes pattern answer status and body every time.
func (f *fakeAdmin) answer(pattern string, status int, body string) {
	f.answerSeq(pattern, status, body)
}

// answerSeq makes pattern answer status with bodies[n] on its nth call,
// the last one from then on.
func (f *fakeAdmin) answerSeq(pattern string, status int, bodies ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[pattern] = func(n int) (int, string) { return status, bodies[min(n, len(bodies)-1)] }
}

func (f *fakeAdmin) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.reqs...)
}

// client returns a Client for f; the address is the URL without "http://",
// as a user would type it.
func (f *fakeAdmin) client(t *testing.T, token string) *Client {
	t.Helper()
	c, err := NewClient(f.srv.Listener.Addr().String(), token, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)\n--- got\n%s--- want\n%s", name, got, want)
	}
}
