package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The web view's API on a finished run: the view, a re-drive that
// reproduces the log, a fork that runs to its end; bad input is refused.
func TestWebViewAPI(t *testing.T) {
	base := serving(t, t.TempDir())
	code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if code != 201 {
		t.Fatalf("start: %d %v", code, out)
	}
	run := out["run_id"].(string)
	sse(t, base, "alice-token", run)

	code, v := call(t, "GET", base+"/v1/runs/"+run+"/view", "alice-token", "")
	if code != 200 || len(v["timeline"].([]any)) == 0 || v["tree"].(map[string]any)["run_id"] != run {
		t.Fatalf("view: %d %v", code, v)
	}
	if kids := v["tree"].(map[string]any)["kids"]; kids == nil || len(kids.([]any)) != 2 {
		t.Fatalf("call tree children: %v", kids)
	}
	if code, _ := call(t, "GET", base+"/v1/runs/"+run+"/view", "bob-token", ""); code != 404 {
		t.Fatalf("another principal's view: %d", code)
	}
	if code, _ := call(t, "GET", base+"/v1/runs/"+run+"/view?at=last-99", "alice-token", ""); code != 400 {
		t.Fatalf("view at a bad revision: %d", code)
	}
	code, tr := call(t, "GET", base+"/v1/runs/"+run+"/transcript", "alice-token", "")
	if code != 200 || len(tr["entries"].([]any)) < 5 || len(tr["window"].([]any)) != len(tr["entries"].([]any)) {
		t.Fatalf("transcript: %d %v", code, tr)
	}
	code, rd := call(t, "POST", base+"/v1/runs/"+run+"/redrive", "alice-token", `{"at":0}`)
	if code != 200 || rd["exact"] != true {
		t.Fatalf("redrive: %d %v", code, rd)
	}
	code, fk := call(t, "POST", base+"/v1/runs/"+run+"/fork", "alice-token", `{"at":1}`)
	if code != 201 {
		t.Fatalf("fork: %d %v", code, fk)
	}
	types, _ := sse(t, base, "alice-token", fk["run_id"].(string))
	if types[len(types)-2] != "cairn.checkpoint.committed" {
		t.Fatalf("the fork did not complete: %v", types)
	}
	if code, _ := call(t, "POST", base+"/v1/runs/"+run+"/fork", "alice-token", `{"at":9999}`); code != 400 {
		t.Fatalf("fork at a bad revision: %d", code)
	}
}

// The page of a finished run in headless Chromium renders its steps, its
// children and its completion; the screenshot is kept for review.
func TestWebViewInChromium(t *testing.T) {
	load := headlessChromium(t, 20*time.Second)
	base := serving(t, t.TempDir())
	code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"researcher","message":"Is the Great Wall visible from orbit?"}`)
	if code != 201 {
		t.Fatalf("start: %d %v", code, out)
	}
	run := out["run_id"].(string)
	sse(t, base, "alice-token", run)
	url := base + "/ui/runs/" + run + "#token=alice-token"
	headless := func(args ...string) []byte { return load(url, args...) }
	dom := string(headless("--dump-dom"))
	if !regexp.MustCompile(`data-rendered="[1-9]`).MatchString(dom) {
		t.Fatalf("the page did not render the run:\n%.2000s", dom)
	}
	for _, want := range []string{`class="entry kind-task"`, `class="entry kind-model"`, "spawn_fact_checker", `class="entry kind-child"`,
		`class="entry kind-completed"`, "(fact-checker, completed)", "(summarizer, completed)", "status completed"} {
		if !strings.Contains(dom, want) {
			t.Fatalf("the rendered page lacks %q:\n%.3000s", want, dom)
		}
	}
	if n := strings.Count(dom, `class="entry kind-model"`); n < 3 {
		t.Fatalf("%d model steps rendered, want the root's 3 or more", n)
	}
	shot := filepath.Join(os.TempDir(), "cairn-web-run.png")
	if dir := os.Getenv("CAIRN_ARTIFACTS"); dir != "" {
		shot = filepath.Join(dir, "cairn-web-run.png")
	}
	headless("--screenshot="+shot, "--window-size=1280,1600", "--hide-scrollbars")
	png, err := os.ReadFile(shot)
	if err != nil || len(png) < 1000 || !bytes.HasPrefix(png, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s: %d bytes, %v", shot, len(png), err)
	}
	t.Logf("screenshot: %s (%d bytes)", shot, len(png))
}

// chromium is the browser's path. Without chromium the test is skipped,
// and fails under CI (which installs it).
func chromium(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed (.ci/run installs it with apt-get)")
		}
		t.Skip("chromium is not installed; CI installs it")
	}
	return path
}

// headlessChromium returns what loads a URL in headless Chromium with
// extra arguments (--dump-dom, --screenshot=...) and returns its output,
// letting the page run for budget of virtual time. Without chromium the
// test is skipped, and fails under CI (which installs it).
func headlessChromium(t *testing.T, budget time.Duration) func(url string, args ...string) []byte {
	t.Helper()
	browser := chromium(t)
	return func(url string, args ...string) []byte {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, browser, append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
			"--user-data-dir=" + t.TempDir(), fmt.Sprintf("--virtual-time-budget=%d", budget.Milliseconds())}, append(args, url)...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.Bytes()
	}
}
