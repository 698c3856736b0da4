package cluster_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-agents/cairn/events"
)

// versionProvider speaks OpenAI's Chat Completions: it records the system
// prompt of every request by the run's task (its first user message) and,
// while held, answers none (each request waits for release or its
// client).
type versionProvider struct {
	mu      sync.Mutex
	held    bool
	release chan struct{}
	asked   chan string
	systems map[string][]string
}

func (p *versionProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	var system, task string
	for _, m := range req.Messages {
		switch {
		case m.Role == "system" && system == "":
			system = fmt.Sprint(m.Content)
		case m.Role == "user" && task == "":
			task = fmt.Sprint(m.Content)
		}
	}
	p.mu.Lock()
	p.systems[task] = append(p.systems[task], system)
	held := p.held
	p.mu.Unlock()
	select {
	case p.asked <- task:
	default:
	}
	if held {
		select {
		case <-p.release:
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"tool_calls",
		"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call-done","type":"function","function":{"name":"complete",
		"arguments":"{\"type\":\"output\",\"output\":{\"answer\":\"done\"}}"}}]}}],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}`)
}

func (p *versionProvider) seen(task string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.systems[task]...)
}

// A cluster whose members hold different files for one agent, as in the
// middle of a rolling deploy: runs admitted by the member of the old file
// run under it on every member, across the kill -9 of that member (the
// others resume them under the version the run was admitted under, not
// under their own files); runs admitted by a member of the new file take
// the new one. Before runs were pinned, a run resumed on a member with the
// other file failed: "checkpoint contract mismatch".
func TestMembersWithDifferentFiles(t *testing.T) {
	p := &versionProvider{held: true, release: make(chan struct{}), asked: make(chan string, 64), systems: map[string][]string{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	dirs := map[string]string{}
	for _, version := range []string{"one", "two"} {
		dir := t.TempDir()
		body := "slug: writer\ninstructions: You write, version " + version + ".\nmodel: openai:m\nlimits: {context_tokens: 64000, output_tokens: 1024}\n" +
			"output_schema: {type: object, properties: {answer: {type: string}}}\n"
		if err := os.WriteFile(filepath.Join(dir, "writer.yaml"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		dirs[version] = dir
	}
	c := newClusterWith(t, 3, func(i int, n *proc) {
		version := "two"
		if i == 0 {
			version = "one"
		}
		for k := range n.args {
			if n.args[k] == "--agents" {
				n.args[k+1] = dirs[version]
			}
		}
		n.env = append(n.env, "OPENAI_API_KEY=sk-cluster-test-key-0123456789", "OPENAI_BASE_URL="+srv.URL)
	})
	// A cluster that has run a while: every member writes the schema
	// level that names a run's definition version (a new cluster writes
	// level 1 for ten member TTLs; a member that restarts beside the
	// others starts at theirs).
	deadline := time.Now().Add(3 * time.Minute)
	for i := range c.nodes {
		for c.logCount(i, "schema_level="+strconv.Itoa(events.SchemaVersion)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached schema level %d:\n%s", c.nodes[i].name, events.SchemaVersion, tail(c.nodes[i].logPath, 20))
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	start := func(i int, task string) (string, string) {
		t.Helper()
		res, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/runs", c.nodes[i].http), "application/json",
			strings.NewReader(`{"agent":"writer","message":"`+task+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out struct {
			RunID string `json:"run_id"`
		}
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusCreated || json.Unmarshal(b, &out) != nil {
			t.Fatalf("start on %s: %s: %s", c.nodes[i].name, res.Status, b)
		}
		return task, out.RunID
	}
	show := func(i int, run string) map[string]any {
		t.Helper()
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/runs/%s", c.nodes[i].http, run))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(res.Body).Decode(&out)
		return out
	}
	// Six runs admitted by n1 (the old file): placed by identity, most
	// run on n2 and n3 (the new file).
	old := map[string]string{}
	for k := range 6 {
		task, run := start(0, fmt.Sprintf("old task %d", k))
		old[task] = run
	}
	waitAsked := func(tasks map[string]string) {
		t.Helper()
		left := map[string]bool{}
		for task := range tasks {
			left[task] = true
		}
		deadline := time.After(3 * time.Minute)
		for len(left) > 0 {
			select {
			case task := <-p.asked:
				delete(left, task)
			case <-deadline:
				t.Fatalf("these runs never asked their model: %v", left)
			}
		}
	}
	waitAsked(old)
	// n1 dies: its runs, and its file, go; n2 and n3 resume them (the
	// requests held on n2 and n3 are answered now, the runs n1 held ask
	// again once they move).
	c.kill(0)
	close(p.release)
	p.mu.Lock()
	p.held = false
	p.mu.Unlock()
	for task, run := range old {
		deadline := time.Now().Add(3 * time.Minute)
		for {
			got := show(1, run)
			if got["status"] == "completed" {
				break
			}
			if got["status"] == "failed" || time.Now().After(deadline) {
				t.Fatalf("run of %q after its admitting member died: %v; want completed under the old file", task, got)
			}
			time.Sleep(100 * time.Millisecond)
		}
		for i, s := range p.seen(task) {
			if !strings.Contains(s, "version one") {
				t.Errorf("run of %q, request %d: system %q; want the instructions it was admitted under", task, i+1, s)
			}
		}
	}
	// A run admitted by a member of the new file takes it.
	task, run := start(1, "new task")
	deadline = time.Now().Add(3 * time.Minute)
	for show(2, run)["status"] != "completed" {
		if time.Now().After(deadline) {
			t.Fatalf("the new run: %v", show(2, run))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if seen := p.seen(task); len(seen) == 0 || !strings.Contains(seen[0], "version two") {
		t.Errorf("the new run's requests: %q; want the new instructions", seen)
	}
	if show(2, run)["definition"] == show(2, old["old task 0"])["definition"] {
		t.Error("the new run names the old runs' definition version")
	}
}
