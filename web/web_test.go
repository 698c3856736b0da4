package web

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The pages are served as the built-in files, under a policy that allows
// their inline scripts and nothing from elsewhere; /ui/runs moves to the
// list; a run page's path must name a valid run ID.
func TestPages(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux)
	for _, tc := range []struct {
		path     string
		status   int
		contains string
	}{
		{"/ui/", 200, "<title>"},
		{"/ui/runs/r1a2b3", 200, "<title>"},
		{"/ui/runs", http.StatusFound, ""},
		{"/ui/runs/not%20an%20id", 404, ""},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", tc.path, nil))
		if rec.Code != tc.status {
			t.Fatalf("GET %s = %d, want %d", tc.path, rec.Code, tc.status)
		}
		if tc.status != 200 {
			if tc.status == http.StatusFound && rec.Header().Get("Location") != "/ui/" {
				t.Fatalf("GET %s moves to %q, want /ui/", tc.path, rec.Header().Get("Location"))
			}
			continue
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Fatalf("GET %s: Content-Security-Policy %q", tc.path, csp)
		}
		if !strings.Contains(rec.Body.String(), tc.contains) || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" {
			t.Fatalf("GET %s: %s %.200q", tc.path, rec.Header().Get("Content-Type"), rec.Body.String())
		}
	}
	if runPage == runsPage || len(runPage) < 1000 || len(runsPage) < 1000 {
		t.Fatalf("the embedded pages: run %d bytes, runs %d bytes", len(runPage), len(runsPage))
	}
}
