package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// pageProvider speaks OpenAI's Chat Completions and answers by the task in
// the user's message: "flaky" fails its first request with a 503 and then
// completes; "refused" is a 401 (the run fails); "ask" completes with a
// needs_input question; "hang" never answers; any other completes.
type pageProvider struct {
	mu   sync.Mutex
	seen map[string]int
	// hung, when set, is told of each request held by a "hang" task.
	hung chan struct{}
}

func (p *pageProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The task is the latest user message: a continuation's is its answer.
	task := ""
	for _, m := range chatMessages(r) {
		if m.Role == "user" {
			task = fmt.Sprint(m.Content)
		}
	}
	p.mu.Lock()
	p.seen[task]++
	n := p.seen[task]
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case strings.Contains(task, "hang"):
		// Until the run's attempt gives up on it (the run was cancelled).
		if p.hung != nil {
			p.hung <- struct{}{}
		}
		<-r.Context().Done()
		return
	case strings.Contains(task, "refused"):
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"message":"Incorrect API key provided","type":"invalid_request_error"}}`)
		return
	case strings.Contains(task, "flaky") && n == 1:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"error":{"message":"overloaded","type":"server_error"}}`)
		return
	}
	args := `{"type":"output","output":{"answer":"done"}}`
	if strings.Contains(task, "ask") {
		args = `{"type":"needs_input","question":"Which year do you mean?"}`
	}
	writeChatCall(w, fmt.Sprintf("call-%d", n), "Working on it.", "complete", args, 12, 4)
}

// pageNode serves a node whose one agent, flaky (with the retry policy
// given), asks provider, and returns its address and what starts a run of
// it on a task (its ID).
func pageNode(t *testing.T, provider http.Handler, retry string) (base string, start func(task string) string) {
	t.Helper()
	srv := httptest.NewServer(provider)
	t.Cleanup(srv.Close)
	t.Setenv("OPENAI_API_KEY", "sk-test-page")
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	agents := t.TempDir()
	if err := os.WriteFile(filepath.Join(agents, "flaky.yaml"), []byte(retryAgent(retry)), 0o644); err != nil {
		t.Fatal(err)
	}
	o := serveOptions{nodeOptions: nodeOptions{agentsDir: agents, data: t.TempDir(), logger: slog.New(slog.DiscardHandler)},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice"}}
	base, _ = startServe(t, o)
	return base, func(task string) string {
		t.Helper()
		code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"flaky","message":"`+task+`"}`)
		if code != 201 {
			t.Fatalf("start %q: %d %v", task, code, out)
		}
		return out["run_id"].(string)
	}
}

// The run page in headless Chromium says what an operator looks for: a
// failed run's error above everything; each failed provider request in the
// timeline with its status and retry; a time on every event; the tokens of
// each step; a needs_input question with a box to answer it.
func TestRunPageShowsFailuresTimesAndQuestions(t *testing.T) {
	load := headlessChromium(t, 8*time.Second)
	base, start := pageNode(t, &pageProvider{seen: map[string]int{}}, "retry: {attempts: 3, backoff: 1ms, max_backoff: 2ms}\n")
	started := start
	start = func(task string) string {
		run := started(task)
		sse(t, base, "alice-token", run) // to its end
		return run
	}
	page := func(run string) string {
		return string(load(base+"/ui/runs/"+run+"#token=alice-token", "--dump-dom"))
	}
	stamp := regexp.MustCompile(`<span class="time" title="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z">\d\d:\d\d:\d\d\.\d{3}</span>`)

	flaky := page(start("a flaky task"))
	for _, want := range []string{`class="entry kind-model_failure"`, "request 1 failed (HTTP 503)", "retrying in", `class="tokens-step"`,
		"<td>12</td><td>4</td><td>16</td>"} {
		if !strings.Contains(flaky, want) {
			t.Errorf("the flaky run's page lacks %q:\n%.4000s", want, flaky)
		}
	}
	entries := strings.Count(flaky, `class="entry kind-`)
	if n := len(stamp.FindAllString(flaky, -1)); entries == 0 || n < entries {
		t.Errorf("%d timeline entries, %d with a time:\n%.4000s", entries, n, flaky)
	}
	if !regexp.MustCompile(`<div id="error" hidden=""`).MatchString(flaky) {
		t.Errorf("a completed run shows an error box:\n%.2000s", flaky)
	}

	refused := page(start("a refused task"))
	if !regexp.MustCompile(`<div id="error">failed: [^<]*HTTP 401[^<]*</div>`).MatchString(refused) {
		t.Errorf("the failed run's page does not say why it failed:\n%.4000s", refused)
	}
	if !strings.Contains(refused, `class="entry kind-ended"`) {
		t.Errorf("the failed run's page does not show its end (the timeline stopped at its last commit):\n%.4000s", refused)
	}
	if !regexp.MustCompile(`kind-attempt[^>]*>(<span[^>]*>[^<]*</span>)*attempt 1: node-[^<]* holds the lease \(epoch 1\): failed`).MatchString(refused) {
		t.Errorf("the failed run's page does not show its attempt, its node and how it ended:\n%.4000s", refused)
	}

	asked := page(start("ask me"))
	if !strings.Contains(asked, `<div id="answer">`) || !strings.Contains(asked, `<b id="question">Which year do you mean?</b>`) || !strings.Contains(asked, `id="reply"`) {
		t.Errorf("the needs_input run's page has no question with an answer box:\n%.4000s", asked)
	}
}
