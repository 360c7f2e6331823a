package admin_test

import (
	"net/http"
	"net/url"
	"testing"

	"github.com/holdfast-db/holdfast/proxy"
)

// GET /api/explain shows the plan the statement path would make for a
// statement, a user and a tag, under the controls in force.
func TestAPIExplain(t *testing.T) {
	h := startHoldfast(t)
	h.srv.DrainTag("batch", "INC-9", 0)
	var e proxy.Explanation
	h.get(t, "/api/explain?"+url.Values{"sql": {"SELECT 1"}, "user": {"app"}, "tag": {"batch"}}.Encode(), &e)
	if e.Action != "run" || e.Key != "batch" || e.Backend != "primary" || len(e.Controls) == 0 {
		t.Fatalf("explain: %+v", e)
	}
	h.get(t, "/api/explain?"+url.Values{"sql": {"BEGIN"}}.Encode(), &e)
	if e.Action != "defer BEGIN" {
		t.Fatalf("explain BEGIN: %+v", e)
	}
	resp, err := http.Get(h.admin.URL + "/api/explain")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("explain without sql: %s, want 400", resp.Status)
	}
}
