// Package dashboard holds the web pages of hoard's dashboards, built into
// the binary: the platform's (served by the controller, ADR 26) and a
// standalone cachelet's (served by `hoard serve` next to its /metrics).
// The pages are static: each polls a JSON state document its server
// makes. They allow only their own scripts and styles (SecurityHeaders).
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed static
var files embed.FS

// SecurityHeaders are set on every answer of a dashboard: only its own
// scripts, styles and connections, no framing, no referrer.
var SecurityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
	"X-Content-Type-Options":  "nosniff",
	"Referrer-Policy":         "no-referrer",
	"X-Frame-Options":         "DENY",
}

// SetHeaders sets SecurityHeaders on w.
func SetHeaders(w http.ResponseWriter) {
	for k, v := range SecurityHeaders {
		w.Header().Set(k, v)
	}
}

// Handler serves one dashboard's page (page: "platform" or "cachelet")
// and the shared assets under prefix ("/dashboard"): prefix/ is the page,
// prefix/NAME the assets.
func Handler(prefix, page string) http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	static := http.StripPrefix(prefix, http.FileServerFS(sub))
	index := "/" + page + ".html"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		SetHeaders(w)
		p := strings.TrimPrefix(r.URL.Path, prefix)
		if p == "/" || p == "" {
			http.ServeFileFS(w, r, sub, strings.TrimPrefix(index, "/"))
			return
		}
		if strings.HasSuffix(p, ".html") {
			http.NotFound(w, r) // the pages only at prefix/
			return
		}
		static.ServeHTTP(w, r)
	})
}
