package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser starts headless Chromium under the DevTools protocol (chromedp),
// to click and type in a page.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	// A generous bound for a loaded machine: every wait below is on an
	// element, never on time.
	ctx, cancelTimeout := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	return ctx
}

// waitFor waits until the page's expression is true. It reads the page
// with Runtime.evaluate, which the page's Content-Security-Policy (no
// eval) lets through, unlike chromedp's waits, which inject functions.
func waitFor(t *testing.T, ctx context.Context, expr string) {
	t.Helper()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("waiting for %s: %v", expr, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", expr, ctx.Err())
		case <-time.After(50 * time.Millisecond): // the page's next render
		}
	}
}

// shot saves a screenshot of the page under the test's output (or
// $CAIRN_ARTIFACTS) and logs where.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("CAIRN_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
}

// From the run page an operator answers a needs_input question (the
// answer continues the session as a new run, which completes), and a
// cancelled run's page shows why it ended, its end in the timeline and
// its attempt's outcome. Driven in headless Chromium: typed, clicked,
// asserted on the DOM.
func TestRunPageAnswersAndShowsCancellation(t *testing.T) {
	ctx := browser(t)
	p := &pageProvider{seen: map[string]int{}, hung: make(chan struct{}, 1)}
	base, start := pageNode(t, p, "")

	t.Run("answer a question", func(t *testing.T) {
		asked := start("ask me")
		sse(t, base, "alice-token", asked)
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/runs/"+asked+"#token=alice-token")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, `!document.getElementById("answer").hidden`)
		question, err := chromedp.Run(ctx, chromedp.Text("#question"))
		if err != nil {
			t.Fatal(err)
		}
		if err := chromedp.Do(ctx, chromedp.SendKeys("#reply", "In 1969."), chromedp.Click("#send")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, `document.querySelector("#sent a") !== null`)
		link, err := chromedp.Run(ctx, chromedp.AttributeValue("#sent a", "href"))
		if err != nil {
			t.Fatal(err)
		}
		href, ok := link.Value, link.Exists
		shot(t, ctx, "cairn-run-answered.png")
		if question != "Which year do you mean?" {
			t.Fatalf("question %q", question)
		}
		m := regexp.MustCompile(`/ui/runs/([^#]+)#token=alice-token$`).FindStringSubmatch(href)
		if !ok || m == nil {
			t.Fatalf("the answer links %q, want the continuation's page", href)
		}
		sse(t, base, "alice-token", m[1])
		code, got := call(t, "GET", base+"/v1/runs/"+m[1], "alice-token", "")
		if code != 200 || got["status"] != "completed" || got["session_id"] == nil {
			t.Fatalf("the continuation: %d %v", code, got)
		}
		_, first := call(t, "GET", base+"/v1/runs/"+asked, "alice-token", "")
		if got["session_id"] != first["session_id"] {
			t.Fatalf("the continuation is in session %v, the question's in %v", got["session_id"], first["session_id"])
		}
	})

	t.Run("a cancelled run", func(t *testing.T) {
		hung := start("hang on")
		<-p.hung // its model request is in flight
		if code, out := call(t, "POST", base+"/v1/runs/"+hung+"/cancel", "alice-token", ""); code != 200 {
			t.Fatalf("cancel: %d %v", code, out)
		}
		sse(t, base, "alice-token", hung)
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/runs/"+hung+"#token=alice-token")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, `!document.getElementById("error").hidden && document.querySelector("#timeline .kind-ended") !== null &&
			/: cancelled$/.test((document.querySelector("#timeline .kind-attempt") || {}).textContent || "")`)
		// Read in one turn of the page's script: a render (each event of
		// the stream, then its end, refreshes the page) may replace the
		// timeline between separate reads (an attempt read "" under load).
		type view struct {
			Err     string `json:"err"`
			Ended   int    `json:"ended"`
			Attempt string `json:"attempt"`
		}
		v, err := chromedp.Run(ctx, chromedp.Evaluate[view](`({err: document.getElementById("error").textContent,
			ended: document.querySelectorAll("#timeline .kind-ended").length,
			attempt: (document.querySelector("#timeline .kind-attempt") || {}).textContent || ""})`))
		if err != nil {
			t.Fatal(err)
		}
		errText, ended, attempt := v.Err, v.Ended, v.Attempt
		shot(t, ctx, "cairn-run-cancelled.png")
		if !strings.HasPrefix(errText, "cancelled: ") || ended != 1 || !strings.HasSuffix(attempt, ": cancelled") {
			t.Fatalf("error box %q, %d end entries, attempt %q: want the cancellation, one end, the attempt cancelled", errText, ended, attempt)
		}
	})
}
