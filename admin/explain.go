package admin

import (
	"net/http"

	"github.com/holdfast-db/holdfast/proxy"
)

// Explainer is what GET /api/explain needs of the server: the plan a
// statement would get now, for a user and tag (proxy.Server.Explain). A
// Server that is not one answers that route with 404.
type Explainer interface {
	Explain(user, tag, sql string) (proxy.Explanation, error)
}

// apiExplain answers GET /api/explain?sql=STATEMENT&user=U&tag=T: where
// the statement would go and why (a read: it runs nothing).
func (a *Admin) apiExplain(w http.ResponseWriter, r *http.Request) {
	ex, ok := a.srv.(Explainer)
	if !ok {
		writeError(w, http.StatusNotFound, "this server does not explain statements")
		return
	}
	q := r.URL.Query()
	sql := q.Get("sql")
	if sql == "" {
		writeError(w, http.StatusBadRequest, "explain: want sql=STATEMENT (and user=, tag= as a client would send it)")
		return
	}
	e, err := ex.Explain(q.Get("user"), q.Get("tag"), sql)
	if err != nil {
		writeError(w, http.StatusBadRequest, "explain: %v", err)
		return
	}
	writeJSON(w, http.StatusOK, e)
}
