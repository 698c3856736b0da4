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

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// bossProvider speaks OpenAI's Chat Completions for two agents, told apart
// by their instructions: the boss spawns the worker, waits for it and
// completes; the worker answers once release is closed.
type bossProvider struct{ release chan struct{} }

func (p *bossProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	boss, results := false, 0
	for _, m := range chatMessages(r) {
		switch {
		case m.Role == "system" && strings.Contains(fmt.Sprint(m.Content), "BOSS"):
			boss = true
		case m.Role == "tool":
			results++
		}
	}
	name, args := "complete", `{"type":"output","output":{"answer":"done"}}`
	switch {
	case !boss:
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		}
	case results == 0:
		name, args = "spawn_worker", `{"q":"x"}`
	case results == 1:
		name, args = "wait_calls", `{"ids":["call-0"]}`
	}
	writeChatCall(w, fmt.Sprintf("call-%d", results), "", name, args, 10, 5)
}

// A run parked on its child reads waiting (its latest commit dispatches
// wait_calls) in GET /v1/runs/{run}, in MCP's get_run and in the list
// filtered by status,
// and running, then completed, once the child ends. Before, it read
// running throughout.
func TestParkedRunShowsWaiting(t *testing.T) {
	p := &bossProvider{release: make(chan struct{})}
	srv := httptest.NewServer(p)
	// Closed after the node stops (cleanups run last to first): the
	// worker's request ends with its run.
	t.Cleanup(srv.Close)
	var once sync.Once
	release := func() { once.Do(func() { close(p.release) }) }
	defer release()
	t.Setenv("OPENAI_API_KEY", "sk-test-boss")
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	agents := t.TempDir()
	for name, body := range map[string]string{
		"boss.yaml": "slug: boss\ninstructions: You are the BOSS.\nmodel: openai:m\nlimits: {context_tokens: 64000, output_tokens: 1024}\n" +
			"output_schema: {type: object, properties: {answer: {type: string}}}\nsubagents: [worker]\n",
		"worker.yaml": "slug: worker\ninstructions: You are the worker.\nmodel: openai:m\nlimits: {context_tokens: 64000, output_tokens: 1024}\n" +
			"input_schema: {type: object, properties: {q: {type: string}}}\noutput_schema: {type: object, properties: {answer: {type: string}}}\n",
	} {
		if err := os.WriteFile(filepath.Join(agents, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := serveOptions{nodeOptions: nodeOptions{agentsDir: agents, data: t.TempDir(), logger: slog.New(slog.DiscardHandler)},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice"}}
	base, _ := startServe(t, o)
	code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"boss","message":"go"}`)
	if code != 201 {
		t.Fatalf("start: %d %v", code, out)
	}
	run := out["run_id"].(string)
	// The index follows the log: wait (generously, on a loaded machine)
	// for it to read the park.
	deadline := time.Now().Add(time.Minute)
	for {
		code, got := call(t, "GET", base+"/v1/runs/"+run, "alice-token", "")
		if code == 200 && got["status"] == "waiting" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the parked run reads %d %v, want waiting", code, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// MCP's get_run says so too (before, it read the log's records
	// alone: running).
	cs := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
	if got, errText := callTool(t, cs, "get_run", map[string]any{"run_id": run}); errText != "" || got.Status != "waiting" {
		t.Fatalf("MCP get_run of the parked run: %+v %q, want waiting", got, errText)
	}
	code, list := call(t, "GET", base+"/v1/runs?status=waiting", "alice-token", "")
	if runs, _ := list["runs"].([]any); code != 200 || len(runs) != 1 || runs[0].(map[string]any)["run_id"] != run {
		t.Fatalf("runs waiting: %d %v, want the boss", code, list)
	}
	release()
	sse(t, base, "alice-token", run)
	if code, got := call(t, "GET", base+"/v1/runs/"+run, "alice-token", ""); code != 200 || got["status"] != "completed" {
		t.Fatalf("after its child: %d %v, want completed", code, got)
	}
}
