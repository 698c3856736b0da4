// Package web is the node's web UI: two static pages, built into the
// binary, over the JSON API (package api). Their scripts and styles are
// inline (the Content-Security-Policy allows nothing else), every datum
// comes from the API and is written into the page as text, never as HTML,
// and the bearer token comes from the URL fragment (#token=...), which
// browsers never send to the server.
//
//	GET /ui/             the list of runs (/ui/runs redirects to it)
//	GET /ui/runs/{run}   a run's page
//
// A run's page follows the run live through /v1/runs/{run}/events (SSE).
package web

import (
	_ "embed"
	"net/http"

	"github.com/cairn-agents/cairn/events"
)

// Register adds the pages to mux.
func Register(mux *http.ServeMux) {
	mux.HandleFunc("GET /ui/{$}", func(w http.ResponseWriter, r *http.Request) { writePage(w, runsPage) })
	mux.HandleFunc("GET /ui/runs", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusFound) })
	mux.HandleFunc("GET /ui/runs/{run}", func(w http.ResponseWriter, r *http.Request) {
		if events.ValidID(r.PathValue("run")) != nil {
			http.NotFound(w, r)
			return
		}
		writePage(w, runPage)
	})
}

// writePage writes one of the static pages: its scripts and styles inline,
// everything else from this origin only.
func writePage(w http.ResponseWriter, page string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'")
	_, _ = w.Write([]byte(page))
}

// runPage is the web view of one run (/ui/runs/{run}): its timeline with
// a time on every event, each failed provider request, its call tree, its
// budget and tokens over time, followed live over the run's event stream;
// a failed run's reason and a needs_input question with an answer box;
// replay (the timeline at a revision), re-drive and fork.
//
//go:embed ui/run.html
var runPage string

// runsPage is the web list of runs (/ui/): the caller's runs from
// GET /v1/runs, newest first, filtered by status, agent, parent, creation
// time and an ID prefix, a page at a time, each a link to its run page. The
// filters live in the URL fragment with the token (#token=...&status=failed),
// so a filtered view can be bookmarked and shared without its token
// reaching a log. While it shows the first page it reads it again every
// five seconds (live); a later page stays as it was read.
//
//go:embed ui/runs.html
var runsPage string
