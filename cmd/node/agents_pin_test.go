package main

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/cairn-agents/cairn/actors/definition"
	"github.com/cairn-agents/cairn/internal/syncbuf"
)

// deployProvider speaks OpenAI's Chat Completions. It records the system
// prompt of every request by the run's task (the first user message), and
// while hold is set it answers none: each request waits until its client
// gives up (the node stopping).
type deployProvider struct {
	mu      sync.Mutex
	hold    bool
	held    chan string
	release chan struct{}
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
		select {
		case <-r.Context().Done():
			return
		case <-p.release:
		}
	}
	writeChatCall(w, "call-done", "", "complete", `{"type":"output","output":{"answer":"done"}}`, 10, 5)
}

// newDeployProvider serves a deployProvider, holding, as the OpenAI base
// URL of the nodes the test starts.
func newDeployProvider(t *testing.T) *deployProvider {
	t.Helper()
	p := &deployProvider{hold: true, held: make(chan string, 8), release: make(chan struct{}), systems: map[string][]string{}}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	t.Setenv("OPENAI_API_KEY", "sk-test-deploy-key")
	t.Setenv("ANTHROPIC_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", srv.URL)
	return p
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
	p := newDeployProvider(t)
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
	base, _ = startServe(t, o)
	// The runs ask their model again, under their first version; the
	// agents' list shows them in flight on it, the new version current.
	for range runs {
		select {
		case <-p.held:
		case <-time.After(time.Minute):
			t.Fatal("the runs' model requests after the deploy never arrived")
		}
	}
	var old string
	deadline := time.Now().Add(time.Minute)
	for {
		code, got := call(t, "GET", base+"/v1/agents", "alice-token", "")
		vs := agentVersions(got, "writer")
		if code == 200 && len(vs) == 2 && vs[0]["current"] == true && vs[1]["current"] == false && vs[1]["active"] == float64(3) {
			old = vs[1]["version"].(string)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET /v1/agents: %d %v; want writer's new version current, the old one with 3 runs in flight", code, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var stdout, stderr strings.Builder
	if code := dispatch([]string{"agents", "ls", "--api", base, "--token", "alice-token"}, &stdout, &stderr); code != 0 {
		t.Fatalf("agents ls: exit %d: %s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "current") || !strings.HasSuffix(strings.Join(strings.Fields(lines[2]), " "), definition.Short(old)+" older 3 3") {
		t.Errorf("agents ls:\n%s\nwant the current version, then the older one with 3 runs in flight", stdout.String())
	}
	for task, run := range runs {
		if code, got := call(t, "GET", base+"/v1/runs/"+run, "alice-token", ""); code != 200 || got["definition"] != old {
			t.Errorf("run of %q: %d, definition %v; want %s", task, code, got["definition"], old)
		}
	}
	code, shown := call(t, "GET", base+"/v1/agents/writer/versions/"+old, "alice-token", "")
	changed, _ := shown["changes"].([]any)
	if code != 200 || len(changed) != 1 || changed[0].(map[string]any)["field"] != "instructions" ||
		changed[0].(map[string]any)["version"] != "You write, version one." || changed[0].(map[string]any)["current"] != "You write, version two." {
		t.Errorf("the old version against the current one: %d %v; want the instructions alone changed", code, shown)
	}
	for _, bad := range []struct {
		path string
		code int
	}{{"/v1/agents/writer/versions/nothex", 400}, {"/v1/agents/writer/versions/" + strings.Repeat("0", 64), 404}, {"/v1/agents/nobody/versions/" + old, 404}} {
		if code, got := call(t, "GET", base+bad.path, "alice-token", ""); code != bad.code {
			t.Errorf("GET %s: %d %v; want %d", bad.path, code, got, bad.code)
		}
	}
	// A dry run lists the three; one of them is moved.
	stdout.Reset()
	if code := dispatch([]string{"agents", "upgrade", "writer", "--dry-run", "--api", base, "--token", "alice-token"}, &stdout, &stderr); code != 0 ||
		!strings.HasSuffix(strings.TrimSpace(stdout.String()), "3 would move, 0 refused") {
		t.Errorf("agents upgrade --dry-run: exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := dispatch([]string{"agents", "upgrade", "--run", runs["first task"], "--api", base, "--token", "alice-token"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "moves from "+definition.Short(old)) {
		t.Errorf("agents upgrade --run: exit %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	if code, got := call(t, "POST", base+"/v1/runs/"+runs["first task"]+"/upgrade", "alice-token", `{}`); code != 409 || !strings.Contains(fmt.Sprint(got), "pending") {
		t.Errorf("a second upgrade of the run: %d %v; want 409, one pending", code, got)
	}
	// The run page of another run in flight on the old version shows what
	// changed and moves it when asked (in Chromium; without it, outside
	// CI, the run is moved through the API and the rest is checked alike).
	if _, err := exec.LookPath("chromium"); err == nil || os.Getenv("CI") != "" {
		ctx := browser(t)
		if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/runs/"+runs["second task"]+"#token=alice-token")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, `!document.getElementById("version").hidden && !document.getElementById("upgrade").hidden &&
			document.getElementById("vdiff").textContent.includes("instructions: \"You write, version one.\" → now \"You write, version two.\"")`)
		if err := chromedp.Do(ctx, chromedp.Click("#upgrade")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, `document.getElementById("upgraded").textContent.startsWith("moves to ")`)
	} else {
		t.Log("chromium is not installed: the run page's upgrade is not clicked, the API moves the run")
		if code, got := call(t, "POST", base+"/v1/runs/"+runs["second task"]+"/upgrade", "alice-token", `{}`); code != 200 {
			t.Fatalf("upgrade: %d %v", code, got)
		}
	}
	p.mu.Lock()
	p.hold = false
	p.mu.Unlock()
	close(p.release)
	for task, run := range runs {
		deadline = time.Now().Add(time.Minute)
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
			t.Fatalf("run of %q: %d model requests, want one before the deploy and some after", task, len(seen))
		}
		for i, s := range seen {
			want := "version one"
			if (task == "first task" || task == "second task") && i == len(seen)-1 {
				// Upgraded while it waited at its model: the answer in
				// flight is not committed, and its request is made again
				// under the new version.
				want = "version two"
			}
			if !strings.Contains(s, want) {
				t.Errorf("run of %q, request %d of %d: system %q; want %q", task, i+1, len(seen), s, want)
			}
		}
	}
	// A run that completed on the old version re-drives against its log
	// under that version, not the files' (before: a contract mismatch).
	if code, got := call(t, "POST", base+"/v1/runs/"+runs["third task"]+"/redrive", "alice-token", `{"at":0}`); code != 200 || got["exact"] != true {
		t.Errorf("re-drive of a run of the old version: %d %v; want exact", code, got)
	}
	if code, got := call(t, "POST", base+"/v1/runs/"+runs["second task"]+"/upgrade", "alice-token", `{"dry_run":true}`); code != 409 || !strings.Contains(fmt.Sprint(got), "ended") {
		t.Errorf("upgrading an ended run: %d %v; want 409, ended", code, got)
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

// agentVersions is the versions GET /v1/agents lists for slug.
func agentVersions(got map[string]any, slug string) []map[string]any {
	agents, _ := got["agents"].([]any)
	for _, a := range agents {
		a, _ := a.(map[string]any)
		if a["slug"] != slug {
			continue
		}
		var out []map[string]any
		vs, _ := a["versions"].([]any)
		for _, v := range vs {
			m, _ := v.(map[string]any)
			out = append(out, m)
		}
		return out
	}
	return nil
}

// A deploy whose agent file the gate refuses stops nothing in flight: the
// node starts, logs the file and the field, serves its other agents, and
// the runs pinned to the refused agent's earlier version complete under
// it; a new run of that agent is a 404. Before, the node refused to start
// and the runs waited for a fixed file.
func TestRefusedAgentFileStopsNoRunInFlight(t *testing.T) {
	p := newDeployProvider(t)
	agents, data := t.TempDir(), t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(agents, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	agent := func(slug, instructions, answerType string) string {
		return "slug: " + slug + "\ninstructions: " + instructions + "\nmodel: openai:m\nlimits: {context_tokens: 64000, output_tokens: 1024}\n" +
			"output_schema: {type: object, properties: {answer: {type: " + answerType + "}}}\n"
	}
	write("writer.yaml", agent("writer", "You write, version one.", "string"))
	write("helper.yaml", agent("helper", "You help.", "string"))
	var logs syncbuf.Buffer
	o := serveOptions{nodeOptions: nodeOptions{agentsDir: agents, data: data, logger: slog.New(slog.NewTextHandler(&logs, nil))},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice"}}
	base, stop := startServe(t, o)
	code, out := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"writer","message":"in flight"}`)
	if code != 201 {
		t.Fatalf("start: %d %v", code, out)
	}
	run := out["run_id"].(string)
	select {
	case <-p.held:
	case <-time.After(time.Minute):
		t.Fatal("the run's model request never arrived")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	write("writer.yaml", agent("writer", "You write, version two.", "strin")) // not a JSON Schema type
	p.mu.Lock()
	p.hold = false
	p.mu.Unlock()
	close(p.release)
	base, _ = startServe(t, o)
	if l := logs.String(); !strings.Contains(l, "agent file refused") || !strings.Contains(l, "writer.yaml") || !strings.Contains(l, "field=output_schema") {
		t.Errorf("the node's log does not name the refused file and field:\n%s", l)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		code, got := call(t, "GET", base+"/v1/runs/"+run, "alice-token", "")
		if code == 200 && got["status"] == "completed" {
			break
		}
		if code == 200 && got["status"] == "failed" || time.Now().After(deadline) {
			t.Fatalf("the run in flight after a deploy with a refused file: %d %v; want completed", code, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if seen := p.seen("in flight"); len(seen) < 2 || !strings.Contains(seen[len(seen)-1], "version one") {
		t.Errorf("the run's requests: %q; want its last under the version it was admitted under", seen)
	}
	if code, got := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"writer","message":"new"}`); code != 404 {
		t.Errorf("a new run of the refused agent: %d %v; want 404", code, got)
	}
	if code, got := call(t, "POST", base+"/v1/runs", "alice-token", `{"agent":"helper","message":"new"}`); code != 201 {
		t.Errorf("a new run of the agent whose file is fine: %d %v; want 201", code, got)
	}
}
