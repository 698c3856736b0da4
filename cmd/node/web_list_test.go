package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The runs page in headless Chromium: it lists the caller's runs newest
// first, each a link to its page, filters them by status and by ID, and
// pages them; the screenshot is kept for review.
func TestRunsPageInChromium(t *testing.T) {
	load := headlessChromium(t, 8*time.Second)
	base := serving(t, t.TempDir())
	var runs []string // newest first
	for range 2 {
		code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
		if code != 201 {
			t.Fatalf("start: %d %v", code, out)
		}
		run := out["run_id"].(string)
		sse(t, base, "alice-token", run)
		runs = append([]string{run}, runs...)
	}
	headless := func(fragment string, args ...string) string {
		t.Helper()
		return string(load(base+"/ui/#"+fragment, args...))
	}
	rows := regexp.MustCompile(`<tr class="run" data-run="([^"]+)"`)
	listed := func(dom string) []string {
		var ids []string
		for _, m := range rows.FindAllStringSubmatch(dom, -1) {
			ids = append(ids, m[1])
		}
		return ids
	}
	for _, tc := range []struct {
		name, fragment string
		want           []string
		next           bool
	}{
		{"every root", "token=alice-token", runs, false},
		{"completed, a page of one", "token=alice-token&status=completed&limit=1", runs[:1], true},
		{"failed", "token=alice-token&status=failed", nil, false},
		{"by ID", "token=alice-token&q=" + runs[1], runs[1:], false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dom := headless(tc.fragment, "--dump-dom")
			if !regexp.MustCompile(`data-rendered="[1-9]`).MatchString(dom) {
				t.Fatalf("the page did not render:\n%.2000s", dom)
			}
			if got := listed(dom); strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("rows %v; want %v", got, tc.want)
			}
			for _, r := range tc.want {
				if !strings.Contains(dom, `href="/ui/runs/`+r+`#token=alice-token"`) {
					t.Errorf("no link to %s's page", r)
				}
			}
			nextShown := strings.Contains(dom, `<button id="next">`)
			if nextShown != tc.next {
				t.Errorf("next page button shown %v; want %v", nextShown, tc.next)
			}
		})
	}
	dom := headless("token=alice-token&limit=5000", "--dump-dom")
	if !strings.Contains(dom, `limit: 5000: want 1 to 1000`) {
		t.Errorf("a bad filter's error is not on the page:\n%.2000s", dom)
	}
	shot := filepath.Join(os.TempDir(), "cairn-web-runs.png")
	if dir := os.Getenv("CAIRN_ARTIFACTS"); dir != "" {
		shot = filepath.Join(dir, "cairn-web-runs.png")
	}
	headless("token=alice-token&children=true", "--screenshot="+shot, "--window-size=1280,800", "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %d bytes, %v", shot, len(png), err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}
