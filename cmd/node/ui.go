package main

import _ "embed"

// The web pages are static files, built into the binary: their scripts
// and styles are inline (the Content-Security-Policy allows nothing else),
// every datum comes from the JSON API and is written into the page as
// text, never as HTML, and the bearer token comes from the URL fragment
// (#token=...), which browsers never send to the server.

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
