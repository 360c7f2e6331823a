package admin

import (
	"embed"
	"io/fs"
	"net/http"
)

// The status page: one HTML shell and its script and style, embedded, with
// no framework and nothing fetched from elsewhere. The script reads
// GET /api/status every two seconds and acts through the API.
//
//go:embed page
var pageFiles embed.FS

var pageFS, _ = fs.Sub(pageFiles, "page")

// pageHeaders keep the page from being framed by another site (a hidden
// click on its drain button) and from loading or sending anything
// anywhere but this listener.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
}

func servePage(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	http.ServeFileFS(w, r, pageFS, "index.html")
}

func serveStatic(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "status.js", "status.css", "favicon.svg":
	default:
		http.NotFound(w, r)
		return
	}
	pageHeaders(w)
	http.ServeFileFS(w, r, pageFS, r.URL.Path)
}
