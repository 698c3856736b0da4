package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// deployProvider speaks OpenAI's Chat Completions. It records the system
// prompt of every request by the run's task (the first user message), and
// while hold is set it answers none: each request waits until its client
// gives up (the node stopping).
type deployProvider struct {
	mu      sync.Mutex
	hold    bool
	held    chan string
	systems map[string][]string
}

func (p *deployProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var system, task string
	for _, m := range chatMessages(r) {
		switch {
		case m.Role == "system" && system == "":
			system = fmt.Sprint(m.Content)
		case m.Role == "user" && task == "":
			task = fmt.Sprint(m.Content)
		}
	}
	p.mu.Lock()
	p.systems[task] = append(p.systems[task], system)
	hold := p.hold
	p.mu.Unlock()
	if hold {
		p.held <- task
		<-r.Context().Done()
		return
	}
	writeChatCall(w, "call-done", "", "complete", `{"type":"output","output":{"answer":"done"}}`, 10, 5)
}

func (p *deployProvider) seen(task string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.systems[task]...)
}

// The operator's ordinary deploy: three runs of an agent wait on their
// model request; the node is stopped, the agent file's instructions are
// edited, the node is started again. Every run completes, each of its
// requests after the restart made with the instructions it was admitted
// under; a run started after the deploy gets the new ones. Before, all
// three failed: "checkpoint contract mismatch".
func TestPromptEditDoesNotFailRunsInFlight(t *testing.T) {
	p := &deployProvider{hold: true, held: make(chan string, 8), systems: map[string][]string{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	t.Setenv("OPENAI_API_KEY", "sk-test-deploy-key")
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	agents, data := t.TempDir(), t.TempDir()
	file := filepath.Join(agents, "writer.yaml")
	write := func(instructions string) {
		t.Helper()
		body := "slug: writer\ninstructions: " + instructions + "\nmodel: openai:m\nlimits: {context_tokens: 64000, output_tokens: 1024}\n" +
			"output_schema: {type: object, properties: {answer: {type: string}}}\n"
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("You write, version one.")
	o := serveOptions{nodeOptions: nodeOptions{agentsDir: agents, data: data, logger: slog.New(slog.DiscardHandler)},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice"}}
	base, stop := startServe(t, o)
	runs := map[string]string{}
	for _, task := range []string{"first task", "second task", "third task"} {
		code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"writer","message":"`+task+`"}`)
		if code != 201 {
			t.Fatalf("start: %d %v", code, out)
		}
		runs[task] = out["run_id"].(string)
	}
	for range runs {
		select {
		case <-p.held:
		case <-time.After(time.Minute):
			t.Fatal("the runs' model requests never arrived")
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}

	write("You write, version two.")
	p.mu.Lock()
	p.hold = false
	p.mu.Unlock()
	base, _ = startServe(t, o)
	for task, run := range runs {
		deadline := time.Now().Add(time.Minute)
		for {
			code, got := call(t, "GET", base+"/v1/runs/"+run, "alice-token", "")
			if code == 200 && got["status"] == "completed" {
				break
			}
			if code == 200 && got["status"] == "failed" || time.Now().After(deadline) {
				t.Fatalf("run of %q after the deploy: %d %v; want completed", task, code, got)
			}
			time.Sleep(50 * time.Millisecond)
		}
		seen := p.seen(task)
		if len(seen) < 2 {
			t.Fatalf("run of %q: %d model requests, want one before the deploy and one after", task, len(seen))
		}
		for i, s := range seen {
			if !strings.Contains(s, "version one") {
				t.Errorf("run of %q, request %d: system %q; want the instructions it was admitted under", task, i+1, s)
			}
		}
	}
	code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"writer","message":"after the deploy"}`)
	if code != 201 {
		t.Fatalf("start: %d %v", code, out)
	}
	sse(t, base, "alice-token", out["run_id"].(string))
	if seen := p.seen("after the deploy"); len(seen) != 1 || !strings.Contains(seen[0], "version two") {
		t.Errorf("the run started after the deploy: systems %q; want the new instructions", seen)
	}
}
