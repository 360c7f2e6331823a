package dbtest

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/holdfast-db/holdfast/internal/holdfastproc"
)

// httpClient bounds every request: a hang guard, so that a Fetch inside
// Eventually cannot outlast Eventually's own.
var httpClient = &http.Client{Timeout: 10 * time.Second}

// Fetch sends a request without a body to url and returns the response's
// body; a failed request or a status other than 200 fails t. A change
// (a method but GET and HEAD) carries holdfastproc.AdminToken, the write
// credential of the holdfast processes tests run; a read carries none.
func Fetch(t testing.TB, method, url string) []byte {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if method != http.MethodGet && method != http.MethodHead {
		req.Header.Set("Authorization", "Bearer "+holdfastproc.AdminToken)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: %s %s", method, url, resp.Status, b)
	}
	return b
}

// FetchJSON is Fetch of GET url with the body decoded into v.
func FetchJSON(t testing.TB, url string, v any) {
	t.Helper()
	b := Fetch(t, http.MethodGet, url)
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", url, err, b)
	}
}
