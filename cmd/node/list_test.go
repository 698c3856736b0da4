package main

import (
	"bytes"
	"net/url"
	"strings"
	"testing"
	"time"
)

// GET /v1/runs: each filter, the cursor, and a 400 naming each parameter
// that does not parse. Alice's three runs and Bob's one, all completed.
func TestRunsListFiltersAndPages(t *testing.T) {
	base := serving(t, t.TempDir())
	start := func(token string) string {
		t.Helper()
		status, started := call(t, "POST", base+"/v1/runs", token, `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
		run, _ := started["run_id"].(string)
		if status != 201 || run == "" {
			t.Fatalf("start: %d %v", status, started)
		}
		sse(t, base, token, run) // to the run's end
		return run
	}
	before := time.Now().UTC()
	var alices []string
	for range 3 {
		alices = append([]string{start("alice-token")}, alices...) // newest first
	}
	bobs := start("bob-token")
	list := func(query string) ([]string, string) {
		t.Helper()
		status, out := call(t, "GET", base+"/v1/runs?"+query, "alice-token", "")
		if status != 200 {
			t.Fatalf("GET /v1/runs?%s: %d %v", query, status, out)
		}
		var ids []string
		runs, _ := out["runs"].([]any)
		for _, r := range runs {
			m, _ := r.(map[string]any)
			id, _ := m["run_id"].(string)
			ids = append(ids, id)
		}
		next, _ := out["next_cursor"].(string)
		return ids, next
	}
	all := strings.Join(alices, " ")
	for _, tc := range []struct{ query, want string }{
		{"", all},
		{"status=completed", all},
		{"status=failed,needs_input", ""},
		{"status=running&status=completed", all},
		{"agent=researcher", all},
		{"agent=summarizer", ""},
		{"since=" + url.QueryEscape(before.Format(time.RFC3339Nano)), all},
		{"until=" + url.QueryEscape(before.Format(time.RFC3339Nano)), ""},
		{"q=" + alices[1], alices[1]},
		{"q=" + bobs, ""}, // Bob's run is not Alice's to see
	} {
		if got, next := list(tc.query); strings.Join(got, " ") != tc.want || next != "" {
			t.Errorf("?%s: %v (next %q); want %q", tc.query, got, next, tc.want)
		}
	}
	// The researcher's children: parent= lists them (children or not).
	kids, _ := list("parent=" + alices[0])
	if again, _ := list("parent=" + alices[0] + "&children=true"); len(kids) == 0 || strings.Join(again, " ") != strings.Join(kids, " ") {
		t.Errorf("children of %s: %v, and with children=true %v", alices[0], kids, again)
	}
	if withKids, _ := list("children=true"); len(withKids) != 3+3*len(kids) {
		t.Errorf("children=true: %d runs; want %d", len(withKids), 3+3*len(kids))
	}
	// Pages of one: every run once, in order.
	var paged []string
	for cursor, pages := "", 0; ; pages++ {
		if pages > 5 {
			t.Fatal("more than 5 pages of one for 3 runs")
		}
		got, next := list("limit=1&cursor=" + url.QueryEscape(cursor))
		paged = append(paged, got...)
		if next == "" {
			break
		}
		cursor = next
	}
	if strings.Join(paged, " ") != all {
		t.Errorf("pages of one: %v; want %s", paged, all)
	}
	// node runs ls passes the same filters.
	var out, errb bytes.Buffer
	if code := runsCmd([]string{"ls", "--api", base, "--token", "alice-token", "--status", "completed", "--limit", "1"}, &out, &errb); code != 0 {
		t.Fatalf("runs ls: %d %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], alices[0]) || !strings.HasPrefix(lines[1], "more: node runs ls --cursor ") {
		t.Errorf("runs ls --status completed --limit 1:\n%s", out.String())
	}
	out.Reset()
	if code := runsCmd([]string{"ls", "--api", base, "--token", "alice-token", "--status", "done"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), `status: \"done\" is not a status`) && !strings.Contains(errb.String(), `status: "done" is not a status`) {
		t.Errorf("runs ls --status done: exit %d, stderr %q", code, errb.String())
	}
	for _, tc := range []struct{ query, want string }{
		{"status=done", `status: "done" is not a status`},
		{"limit=0", "limit:"},
		{"limit=5000", "limit: 5000"},
		{"limit=many", "limit:"},
		{"since=yesterday", "since:"},
		{"until=2026-13-01", "until:"},
		{"since=2026-12-02T00:00:00Z&until=2026-12-01T00:00:00Z", "until: not after since"},
		{"children=maybe", "children:"},
		{"cursor=forged", "cursor:"},
	} {
		status, out := call(t, "GET", base+"/v1/runs?"+tc.query, "alice-token", "")
		e, _ := out["error"].(map[string]any)
		msg, _ := e["message"].(string)
		if status != 400 || e["code"] != "bad_query" || !strings.HasPrefix(msg, tc.want) {
			t.Errorf("?%s: %d %v; want 400 bad_query %q...", tc.query, status, out, tc.want)
		}
	}
}
