package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	mcpcaps "github.com/cairn-agents/cairn/capabilities/mcp"
)

// askerDir is a deployment with one agent that asks a question, then
// answers with the city it was told.
func askerDir(t *testing.T, more map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		"asker.yaml": `slug: asker
description: Asks for a city, then names it.
instructions: Ask which city, then answer with it.
model: scripted:asker.script.yaml
limits: {context_tokens: 8000, output_tokens: 500}
output_schema: {type: object, required: [city], properties: {city: {type: string}}}
`,
		"asker.script.yaml": `steps:
  - calls:
      - id: q1
        name: complete
        args: {type: needs_input, question: "Which city?"}
  - calls:
      - id: a1
        name: complete
        args: {type: output, output: {city: Oslo}}
`,
	}
	for k, v := range more {
		files[k] = v
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// serveAt starts `node serve` in-process with alice's and bob's tokens.
func serveAt(t *testing.T, o nodeOptions) string {
	t.Helper()
	o.data = t.TempDir()
	o.logger = slog.New(slog.DiscardHandler)
	base, _ := startServe(t, serveOptions{nodeOptions: o, listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice", "bob-token": "bob"}})
	return base
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func mcpClient(t *testing.T, tr sdk.Transport) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, tr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpRun is a tool's answer about a run, as a client decodes it.
type mcpRun struct {
	RunID     string `json:"run_id"`
	SessionID string `json:"session_id"`
	Agent     string `json:"agent"`
	Status    string `json:"status"`
	Reply     *struct {
		Type     string `json:"type"`
		Output   any    `json:"output"`
		Question string `json:"question"`
	} `json:"reply"`
	Error string `json:"error"`
}

// callTool calls a tool and decodes its structured content; isError
// results come back as their text.
func callTool(t *testing.T, cs *sdk.ClientSession, name string, args any) (mcpRun, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		var texts []string
		for _, c := range res.Content {
			if tc, ok := c.(*sdk.TextContent); ok {
				texts = append(texts, tc.Text)
			}
		}
		return mcpRun{}, strings.Join(texts, "\n")
	}
	b, _ := json.Marshal(res.StructuredContent)
	var out mcpRun
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structured content %s: %v", name, b, err)
	}
	return out, ""
}

// followToReply drives a run from start to its needs_input question, the
// answer, and the continuation's output, with the SDK's own client.
func followToReply(t *testing.T, cs *sdk.ClientSession) (first, second mcpRun) {
	t.Helper()
	ctx := context.Background()
	agents, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "list_agents", Arguments: map[string]any{}})
	if err != nil || agents.IsError {
		t.Fatalf("list_agents: %v %+v", err, agents)
	}
	if b, _ := json.Marshal(agents.StructuredContent); !strings.Contains(string(b), `"slug":"asker"`) {
		t.Fatalf("list_agents = %s", b)
	}
	started, msg := callTool(t, cs, "start_run", map[string]any{"agent": "asker", "message": "Name a city."})
	if msg != "" || started.RunID == "" {
		t.Fatalf("start_run: %+v %s", started, msg)
	}
	asked, msg := callTool(t, cs, "get_run", map[string]any{"run_id": started.RunID, "wait_seconds": 60})
	if msg != "" || asked.Status != "needs_input" || asked.Reply == nil || asked.Reply.Type != "needs_input" || asked.Reply.Question != "Which city?" {
		t.Fatalf("get_run: %+v %s", asked, msg)
	}
	next, msg := callTool(t, cs, "answer", map[string]any{"run_id": started.RunID, "message": "Oslo"})
	if msg != "" || next.RunID == "" || next.RunID == started.RunID || next.SessionID != started.SessionID {
		t.Fatalf("answer: %+v %s", next, msg)
	}
	done, msg := callTool(t, cs, "get_run", map[string]any{"run_id": next.RunID, "wait_seconds": 60})
	if msg != "" || done.Status != "completed" || done.Reply == nil || done.Reply.Type != "output" {
		t.Fatalf("get_run after the answer: %+v %s", done, msg)
	}
	if out, _ := done.Reply.Output.(map[string]any); out["city"] != "Oslo" {
		t.Fatalf("output = %v", done.Reply.Output)
	}
	return started, next
}

// TestMCPServerHTTP: the Go SDK's client drives Cairn's MCP endpoint on
// `node serve` end to end, with the API's tokens: runs are the caller's own.
func TestMCPServerHTTP(t *testing.T) {
	base := serveAt(t, nodeOptions{agentsDir: askerDir(t, nil)})
	alice := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
	run, answered := followToReply(t, alice)
	if _, msg := callTool(t, alice, "answer", map[string]any{"run_id": answered.RunID, "message": "again"}); !strings.Contains(msg, "did not ask a question") {
		t.Errorf("answer to a run that replied with output: %q", msg)
	}

	bob := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"bob-token"}}})
	if _, msg := callTool(t, bob, "get_run", map[string]any{"run_id": run.RunID}); !strings.Contains(msg, "no such run") {
		t.Errorf("bob saw alice's run: %q", msg)
	}
	if _, msg := callTool(t, bob, "cancel_run", map[string]any{"run_id": run.RunID}); !strings.Contains(msg, "no such run") {
		t.Errorf("bob cancelled alice's run: %q", msg)
	}
	if _, msg := callTool(t, alice, "answer", map[string]any{"run_id": run.RunID + "x", "message": "again"}); !strings.Contains(msg, "no such run") {
		t.Errorf("answer to an unknown run: %q", msg)
	}
	if _, msg := callTool(t, alice, "start_run", map[string]any{"agent": "nobody", "message": "x"}); !strings.Contains(msg, `agent "nobody" is not deployed`) {
		t.Errorf("unknown agent: %q", msg)
	}

	resp, err := http.Post(base+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("no token: status %d, want 401", resp.StatusCode)
	}
}

// TestMCPServerStdio: `node mcp` as a subprocess, driven over stdio by the
// SDK's CommandTransport.
func TestMCPServerStdio(t *testing.T) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "CAIRN_NODE_ARGS="+strings.Join([]string{"mcp", "--agents", askerDir(t, nil), "--data", t.TempDir()}, "\x1f"))
	cs := mcpClient(t, &sdk.CommandTransport{Command: cmd})
	followToReply(t, cs)
	if _, msg := callTool(t, cs, "get_run", map[string]any{"run_id": "r0000", "wait_seconds": 1}); !strings.Contains(msg, "no such run") {
		t.Errorf("unknown run: %q", msg)
	}
	if _, msg := callTool(t, cs, "get_run", map[string]any{"run_id": "x", "wait_seconds": 301}); !strings.Contains(msg, "wait_seconds") {
		t.Errorf("wait_seconds out of range: %q", msg)
	}
}

// npmServersFile writes an --mcp-servers file for the npm servers that
// .ci/run installs (CAIRN_MCP_NPM); without them the test is skipped, except
// in CI, where it fails.
func npmServersFile(t *testing.T, agents string) string {
	t.Helper()
	dir := os.Getenv("CAIRN_MCP_NPM")
	if dir == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CAIRN_MCP_NPM is not set in CI: .ci/run installs the npm MCP servers and sets it")
		}
		t.Skip("CAIRN_MCP_NPM is not set (see .ci/run)")
	}
	mod := filepath.Join(dir, "node_modules", "@modelcontextprotocol")
	body := `servers:
  - name: everything
    command: [node, ` + filepath.Join(mod, "server-everything", "dist", "index.js") + `, stdio]
    tools: [echo, get-tiny-image]
    agents: [` + agents + `]
  - name: memory
    command: [node, ` + filepath.Join(mod, "server-memory", "dist", "index.js") + `]
    env: {MEMORY_FILE_PATH: ` + filepath.Join(t.TempDir(), "memory.jsonl") + `}
    tools: [create_entities, read_graph]
    agents: [` + agents + `]
    effects: {read_graph: read-only}
`
	path := filepath.Join(t.TempDir(), "mcp.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

const toolsmith = `slug: toolsmith
instructions: Use the MCP tools.
model: scripted:toolsmith.script.yaml
limits: {context_tokens: 8000, output_tokens: 500}
output_schema: {type: object, required: [city], properties: {city: {type: string}}}
`

const toolsmithScript = `steps:
  - calls:
      - id: t1
        name: run_js
        args:
          code: |
            const img = await caps.everything.get_tiny_image({});
            await caps.memory.create_entities({entities: [{name: "Oslo", entityType: "city", observations: ["cold"]}]});
            const g = await caps.memory.read_graph({});
            const e = await caps.everything.echo({message: "hi"});
            return {ref: img.attachments[0].ref, entities: g.structured.entities.length, echo: e.text};
  - calls:
      - id: t2
        name: complete
        args: {type: output, output: {city: Oslo}}
`

// TestMCPToolsAsCapabilities: `node serve --mcp-servers` binds the npm
// servers' tools for the agent the file names; a run calls them from
// run_js (the image lands in the node's object store), driven through
// Cairn's own MCP endpoint.
func TestMCPToolsAsCapabilities(t *testing.T) {
	dir := askerDir(t, map[string]string{"toolsmith.yaml": toolsmith, "toolsmith.script.yaml": toolsmithScript})
	base := serveAt(t, nodeOptions{agentsDir: dir, mcpServers: npmServersFile(t, "toolsmith")})
	alice := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
	started, msg := callTool(t, alice, "start_run", map[string]any{"agent": "toolsmith", "message": "Go."})
	if msg != "" {
		t.Fatal(msg)
	}
	done, msg := callTool(t, alice, "get_run", map[string]any{"run_id": started.RunID, "wait_seconds": 120})
	if msg != "" || done.Status != "completed" {
		t.Fatalf("get_run: %+v %s", done, msg)
	}
	req, _ := http.NewRequest("GET", base+"/v1/runs/"+started.RunID+"/events", nil)
	req.Header.Set("Authorization", "Bearer alice-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var log strings.Builder
	buf := make([]byte, 32<<10)
	for !strings.Contains(log.String(), "event: end") {
		n, err := resp.Body.Read(buf)
		log.Write(buf[:n])
		if err != nil {
			break
		}
	}
	for _, want := range []string{`nats-object://CAIRN_ATTACHMENTS/`, `\"entities\":1`, `Echo: hi`} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the run's events do not contain %s", want)
		}
	}
	if t.Failed() {
		t.Logf("events:\n%s", log.String())
	}
}

// TestMCPToolNotGranted: an agent whose definition names an MCP tool the
// servers file does not grant it stops the node, naming file and field.
func TestMCPToolNotGranted(t *testing.T) {
	sneaky := strings.Replace(toolsmith, "slug: toolsmith", "slug: sneaky", 1) + "capabilities: [everything.echo]\n"
	dir := askerDir(t, map[string]string{"toolsmith.yaml": toolsmith, "toolsmith.script.yaml": toolsmithScript, "sneaky.yaml": sneaky})
	_, err := startApp(context.Background(), nodeOptions{agentsDir: dir, data: t.TempDir(), mcpServers: npmServersFile(t, "toolsmith")})
	if err == nil || !strings.Contains(err.Error(), "sneaky.yaml: capabilities[0]: everything.echo is an MCP tool") {
		t.Fatalf("err = %v", err)
	}
}

// TestMCPCancelRun: cancel_run stops a run that is busy in a capability
// call (a tool of a streamable-HTTP MCP server that blocks until released).
func TestMCPCancelRun(t *testing.T) {
	entered, release := make(chan struct{}, 1), make(chan struct{})
	slow := sdk.NewServer(&sdk.Implementation{Name: "slow", Version: "1"}, nil)
	slow.AddTool(&sdk.Tool{Name: "block", InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(ctx context.Context, _ *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			entered <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "released"}}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return slow }, nil))
	// Cleanups run last first: the node (registered by serveAt, later)
	// stops before this server does.
	t.Cleanup(func() { close(release); hs.Close() })
	servers := filepath.Join(t.TempDir(), "mcp.json")
	if err := os.WriteFile(servers, []byte(`{"servers":[{"name":"slow","url":"`+hs.URL+`","tools":["block"],"agents":["blocker"]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := askerDir(t, map[string]string{
		"blocker.yaml": strings.Replace(toolsmith, "toolsmith", "blocker", -1),
		"blocker.script.yaml": `steps:
  - calls:
      - id: b1
        name: run_js
        args: {code: "return await caps.slow.block({});"}
`})
	base := serveAt(t, nodeOptions{agentsDir: dir, mcpServers: servers})
	alice := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
	started, msg := callTool(t, alice, "start_run", map[string]any{"agent": "blocker", "message": "Go."})
	if msg != "" {
		t.Fatal(msg)
	}
	<-entered // the run is inside the tool call: running, until released
	cancelled, msg := callTool(t, alice, "cancel_run", map[string]any{"run_id": started.RunID})
	if msg != "" || cancelled.Status != "cancelled" {
		t.Fatalf("cancel_run: %+v %s", cancelled, msg)
	}
	got, msg := callTool(t, alice, "get_run", map[string]any{"run_id": started.RunID, "wait_seconds": 5})
	if msg != "" || got.Status != "cancelled" || got.Reply != nil {
		t.Fatalf("get_run after cancel: %+v %s", got, msg)
	}
}

// TestMCPSecrets (issue 49): every env value and header of an MCP server's
// configuration is a secret, whatever its name (before, only env names with
// KEY, TOKEN, SECRET, PASSWORD or CREDENTIAL were), but the variables and
// headers that are plainly none (PATH, NODE_ENV, Content-Type, ...); the
// token of a Bearer or Basic header and a URL's password too.
func TestMCPSecrets(t *testing.T) {
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:pa55-w0rd-9"))
	cfg := &mcpcaps.Config{Servers: []mcpcaps.ServerConfig{
		{Name: "a", URL: "http://u:url-pa55word@h", Headers: map[string]string{"Authorization": "Bearer tok123", "X-Api-Key": "xk-12345678", "content-type": "application/json", "Accept": "text/event-stream"}},
		{Name: "b", Command: []string{"x"}, Env: map[string]string{"GITHUB_TOKEN": "ghp_abc", "SERVICE_CONFIG": "cfg-value-1\nline2", "MEMORY_FILE_PATH": "/tmp/m",
			"PATH": "/usr/bin:/bin", "NODE_ENV": "production", "LC_ALL": "C.UTF-8"}},
		{Name: "c", URL: "http://h", Headers: map[string]string{"Authorization": basic}},
	}}
	got := secretNames{}
	mcpSecrets(got, cfg)
	want := secretNames{
		"mcp server a header Authorization": "Bearer tok123", "mcp server a header Authorization (token)": "tok123",
		"mcp server a header X-Api-Key": "xk-12345678", "mcp server a url password": "url-pa55word",
		"mcp server b env GITHUB_TOKEN": "ghp_abc", "mcp server b env SERVICE_CONFIG": "cfg-value-1\nline2", "mcp server b env MEMORY_FILE_PATH": "/tmp/m",
		"mcp server c header Authorization": basic, "mcp server c header Authorization (token)": basic[len("Basic "):],
		"mcp server c header Authorization (password)": "pa55-w0rd-9",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("secrets:\n%v\nwant:\n%v", got, want)
	}
}

// TestRunWithMCPServers: `node run --mcp-servers` gives the agent the npm
// servers' tools.
func TestRunWithMCPServers(t *testing.T) {
	dir := askerDir(t, map[string]string{"toolsmith.yaml": toolsmith, "toolsmith.script.yaml": toolsmithScript})
	servers := npmServersFile(t, "toolsmith")
	var out, errb strings.Builder
	code := runCmd([]string{"--data", t.TempDir(), "--mcp-servers", servers, filepath.Join(dir, "toolsmith.yaml"), "Go."}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "Oslo") || !strings.Contains(out.String(), "nats-object://CAIRN_ATTACHMENTS/") {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
}

// A node stops at once, and cleanly, while an MCP client holds its session
// open (and an event stream follows a run): both are long-lived requests
// that never go idle, and the shutdown waited its whole 10 s for them, then
// exited with "context deadline exceeded" (found by the planted-secret
// suite).
func TestServeStopsWithOpenStreams(t *testing.T) {
	base, stop := startServe(t, serveOptions{nodeOptions: nodeOptions{agentsDir: askerDir(t, nil), data: t.TempDir(), logger: slog.New(slog.DiscardHandler)},
		listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice"}})
	cs := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
	if _, errText := callTool(t, cs, "list_agents", map[string]any{}); errText != "" {
		t.Fatal(errText)
	}
	if err := stop(); err != nil {
		t.Fatalf("serve stopped with %v, want a clean stop", err)
	}
}
