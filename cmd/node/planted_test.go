package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/internal/syncbuf"
	"github.com/cairn-agents/cairn/runtime/redact/redacttest"
	"github.com/cairn-agents/cairn/store/jetstream"
)

// plantedModel is an OpenAI chat-completions server (the wire format the
// openai adapter speaks) that echoes a secret everywhere a provider can,
// and records every request body:
//
//   - the first request of each conversation fails with a 500 whose body
//     holds the secret (the error a provider returns), and is retried;
//   - its answer holds the secret in its text, in the id and model fields
//     (provider metadata, kept as bytes), in a call of a tool named after
//     the secret, and in the arguments of a run_js call whose script holds
//     it as a string literal, stores it with kv.put, reads it back with
//     kv.get, asks both planted MCP servers for their configured values
//     (an env variable, two headers), and returns the value once and
//     double-stringified (JSON.stringify(JSON.stringify(s)));
//   - after the tool results, it echoes the secret in its text and in the
//     run's output.
type plantedModel struct {
	secret string
	mu     sync.Mutex
	bodies [][]byte
	failed map[[32]byte]bool
}

func (p *plantedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	msgs, _ := json.Marshal(req.Messages)
	p.mu.Lock()
	p.bodies = append(p.bodies, body)
	key := sha256.Sum256(msgs)
	fail := len(req.Messages) <= 2 && !p.failed[key]
	p.failed[key] = true
	p.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if fail {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "the upstream refused key " + p.secret, "type": "server_error"}})
		return
	}
	afterTool := len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool"
	lit, _ := json.Marshal(p.secret)
	type call struct {
		name string
		args any
	}
	var text string
	var calls []call
	if !afterTool {
		text = "I will store the key " + p.secret + " and read it back."
		calls = []call{
			{"run_js", map[string]string{"code": "const s = " + string(lit) + ";\n" +
				"await caps.kv.put({key: \"k\", value: s});\nconst r = await caps.kv.get({key: \"k\"});\n" +
				"const env = await caps.stdio.getenv({name: \"SERVICE_CONFIG\"});\n" +
				"const auth = await caps.web.header({name: \"Authorization\"});\nconst key = await caps.web.header({name: \"X-Api-Key\"});\n" +
				"return {once: r.value, twice: JSON.stringify(JSON.stringify(s)), env, auth, key};"}},
			{"lookup_" + p.secret, map[string]string{"q": p.secret}},
		}
	} else {
		text = "The key is " + p.secret
		calls = []call{{"complete", map[string]any{"type": "output", "output": map[string]string{"answer": "echo " + p.secret}}}}
	}
	var toolCalls []any
	for i, c := range calls {
		a, _ := json.Marshal(c.args)
		toolCalls = append(toolCalls, map[string]any{"id": fmt.Sprintf("call-%d-%d", len(req.Messages), i), "type": "function",
			"function": map[string]any{"name": c.name, "arguments": string(a)}})
	}
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-" + p.secret, "object": "chat.completion", "created": 1, "model": "m " + p.secret,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
			"role": "assistant", "content": text, "tool_calls": toolCalls,
		}}},
		"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	})
}

func (p *plantedModel) requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, len(p.bodies))
	for i, b := range p.bodies {
		out[i] = string(b)
	}
	return out
}

const plantedAgent = `slug: planted
description: Stores a value and echoes it.
instructions: Store the value in the user's message, read it back and complete with it.
model: openai:m
limits: {context_tokens: 64000, output_tokens: 1024}
retry: {attempts: 3, backoff: 10ms, max_backoff: 10ms}
output_schema:
  type: object
  required: [answer]
  additionalProperties: false
  properties:
    answer: {type: string}
capabilities: [kv.get, kv.put]
`

// plantedMCPEnv makes the test binary a stdio MCP server (TestMain):
// getenv {name} returns a variable of its environment, the env its
// configuration gave it.
const plantedMCPEnv = "CAIRN_PLANTED_MCP_SERVER"

func plantedMCPServer() {
	srv := sdk.NewServer(&sdk.Implementation{Name: "stdio", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "getenv", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Name string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: os.Getenv(args.Name)}}}, nil
		})
	_ = srv.Run(context.Background(), &sdk.StdioTransport{})
}

// plantedHTTPServer is a streamable-HTTP MCP server: header {name} returns
// a header of the request, one of those its configuration has the node
// send.
func plantedHTTPServer(t *testing.T) string {
	srv := sdk.NewServer(&sdk.Implementation{Name: "web", Version: "1"}, nil)
	srv.AddTool(&sdk.Tool{Name: "header", InputSchema: json.RawMessage(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)},
		func(_ context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var args struct{ Name string }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			v := ""
			if req.Extra != nil {
				v = req.Extra.Header.Get(args.Name)
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: v}}}, nil
		})
	hs := httptest.NewServer(sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// planting is where one row of TestPlantedSecret configures its secret.
type planting struct {
	env     map[string]string // the node's environment (and replay's)
	mcpEnv  map[string]string // the stdio MCP server's env
	headers map[string]string // the HTTP MCP server's headers
	o       *serveOptions
	data    string
	keysArg []string // --payload-keys FILE, for replay
}

// plantedSources are the places a node takes a secret from, one row each:
// the secret (with JSON- and HTML-special characters, and a newline where
// the place can hold one: not in an HTTP header) is configured there, and
// otherwise echoed everywhere by the model.
var plantedSources = []struct {
	name    string
	newline bool
	// plant configures secret (or, for a generated one, returns the
	// value it configured instead).
	plant func(t *testing.T, p *planting, secret string) string
	// sealed runs the node with the payload codec on.
	sealed bool
}{
	{name: "provider key", plant: func(t *testing.T, p *planting, s string) string { p.env["OPENAI_API_KEY"] = s; return s }},
	{name: "MCP env with a newline", newline: true, plant: func(t *testing.T, p *planting, s string) string { p.mcpEnv["SERVICE_CONFIG"] = s; return s }},
	{name: "MCP env", plant: func(t *testing.T, p *planting, s string) string { p.mcpEnv["SERVICE_CONFIG"] = s; return s }},
	{name: "MCP header Bearer", plant: func(t *testing.T, p *planting, s string) string { p.headers["Authorization"] = "Bearer " + s; return s }},
	{name: "MCP header X-Api-Key", plant: func(t *testing.T, p *planting, s string) string { p.headers["X-Api-Key"] = s; return s }},
	{name: "API token", plant: func(t *testing.T, p *planting, s string) string { p.o.tokens[s] = "carol"; return s }},
	{name: "metrics token", plant: func(t *testing.T, p *planting, s string) string {
		p.o.metricsToken = s
		p.env["CAIRN_METRICS_TOKEN"] = s
		return s
	}},
	{name: "NATS route secret", newline: true, plant: func(t *testing.T, p *planting, s string) string { p.env[routeSecretEnv] = s; return s }},
	{name: "NATS credentials", plant: func(t *testing.T, p *planting, _ string) string {
		c, err := jetstream.LoadOrCreateCredentials(credentialsPath(p.data))
		if err != nil {
			t.Fatal(err)
		}
		return c.Reader
	}},
	{name: "payload key", sealed: true, plant: func(t *testing.T, p *planting, _ string) string {
		line, err := events.NewKey("k1")
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "payload.keys")
		if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := p.o.keys.Set(path); err != nil {
			t.Fatal(err)
		}
		p.keysArg = []string{"--payload-keys", path}
		_, key, _ := strings.Cut(line, ":")
		return key
	}},
}

// TestPlantedSecret (issues 24 and 49): one secret, configured in each
// place a node takes a secret from (a row each) and echoed by the model in
// its text, a tool's name and arguments, an error and the response's
// metadata, returned by a script once and double-stringified, and handed
// back by MCP servers, is in no output, in no encoding redacttest knows
// (raw; JSON-escaped one to four levels deep; percent-encoded; HTML
// entities; base64 at each alignment): the API's answers (the start, the
// run, its view, its transcript, the runs list), the event stream, the
// web pages, /metrics, MCP's get_run, the node's log at debug level, every
// request the model received, `node replay` (text, --json, --diff; and
// with a configuration that lacks a secret, nothing but why), `node runs
// show`, `runs ls` and `runs tail` (text and --json); and with the payload
// codec on, in no file of the data directory. The controls: a principal
// granted raw values, and `replay --raw`, see it.
func TestPlantedSecret(t *testing.T) {
	web := plantedHTTPServer(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for i, src := range plantedSources {
		t.Run(src.name, func(t *testing.T) {
			tail := make([]byte, 12)
			_, _ = rand.Read(tail)
			// The tail is searched for too: hex survives every textual
			// encoding, so any copy of the secret, whole or cut, is found.
			needle := hex.EncodeToString(tail)
			secret := `sk-proj-"<&>'\` + needle
			if src.newline {
				secret += "\nline-2"
			}
			data := t.TempDir()
			logs := &syncbuf.Buffer{}
			o := serveOptions{nodeOptions: nodeOptions{agentsDir: t.TempDir(), data: data,
				logger: (&logOptions{format: "json", level: slog.LevelDebug}).logger(logs)},
				listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice", "auditor-token": "auditor"}, raw: "auditor"}
			p := &planting{env: map[string]string{"OPENAI_API_KEY": "x", "ANTHROPIC_API_KEY": "", "CAIRN_TOKENS": "", "CAIRN_TOKEN": "",
				"CAIRN_METRICS_TOKEN": "", routeSecretEnv: ""},
				mcpEnv: map[string]string{plantedMCPEnv: "1", "SERVICE_CONFIG": "svc-config-not-planted"}, headers: map[string]string{}, o: &o, data: data}
			if planted := src.plant(t, p, secret); planted != secret {
				secret, needle = planted, planted
			}
			// The tokens as serve reads them, so that replay can too.
			var pairs []string
			for tok, who := range o.tokens {
				pairs = append(pairs, who+"="+tok)
			}
			p.env["CAIRN_TOKENS"] = strings.Join(pairs, ",")
			for k, v := range p.env {
				t.Setenv(k, v)
			}
			model := &plantedModel{secret: secret, failed: map[[32]byte]bool{}}
			provider := httptest.NewServer(model)
			defer provider.Close()
			t.Setenv("OPENAI_BASE_URL", provider.URL)
			if err := os.WriteFile(filepath.Join(o.agentsDir, "planted.yaml"), []byte(plantedAgent), 0o644); err != nil {
				t.Fatal(err)
			}
			servers, _ := json.Marshal(map[string]any{"servers": []any{
				map[string]any{"name": "stdio", "command": []string{exe, "-test.run=^$"}, "env": p.mcpEnv, "tools": []string{"getenv"}, "agents": []string{"planted"}},
				map[string]any{"name": "web", "url": web, "headers": p.headers, "tools": []string{"header"}, "agents": []string{"planted"}},
			}})
			o.mcpServers = filepath.Join(t.TempDir(), "mcp.json")
			if err := os.WriteFile(o.mcpServers, servers, 0o600); err != nil {
				t.Fatal(err)
			}
			base, stopServe := startServe(t, o)

			// Everything the node hands out, by where it came from.
			seen := map[string]string{}
			token := "alice-token"
			get := func(what, path string) string {
				t.Helper()
				req, _ := http.NewRequest("GET", base+path, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				if path == "/metrics" && o.metricsToken != "" {
					req.Header.Set("Authorization", "Bearer "+o.metricsToken)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
				}
				seen[what] = string(b)
				return string(b)
			}
			msg, _ := json.Marshal(map[string]string{"agent": "planted", "message": "Store this key: " + secret})
			status, _, started := post(t, base, nil, string(msg))
			if status != http.StatusCreated {
				t.Fatalf("POST /v1/runs: %d %v", status, started)
			}
			seen["POST /v1/runs"] = fmt.Sprint(started)
			run, _ := started["run_id"].(string)
			// The event stream ends with the run: it is the wait.
			stream := get("the event stream", "/v1/runs/"+run+"/events")
			if !strings.Contains(stream, "event: end") {
				t.Fatalf("the event stream did not end:\n%s", stream)
			}
			shown := get("GET /v1/runs/{run}", "/v1/runs/"+run)
			if !strings.Contains(shown, `"completed"`) || !strings.Contains(shown, "[REDACTED]") {
				t.Fatalf("the run did not complete with its output redacted: %s", shown)
			}
			get("the view", "/v1/runs/"+run+"/view")
			// The agents and the run's definition version, as pinned.
			var pinnedRun struct {
				Definition string `json:"definition"`
			}
			if err := json.Unmarshal([]byte(shown), &pinnedRun); err != nil || pinnedRun.Definition == "" {
				t.Fatalf("the run names no definition version: %s (%v)", shown, err)
			}
			get("the agents", "/v1/agents")
			get("the run's definition version", "/v1/agents/planted/versions/"+pinnedRun.Definition)
			transcript := get("the transcript", "/v1/runs/"+run+"/transcript")
			for _, want := range []string{`"lookup_[REDACTED]"`, "openai.response_id", "openai.model", "getenv", "header"} {
				if !strings.Contains(transcript, want) {
					t.Fatalf("the transcript lacks %s: the model's answer was not what the test plants\n%s", want, transcript)
				}
			}
			get("the runs list", "/v1/runs")
			get("the runs list searched", "/v1/runs?q=key")
			get("the run page", "/ui/runs/"+run)
			get("the runs page", "/ui/")
			metrics := get("/metrics", "/metrics")
			if !strings.Contains(metrics, `cairn_tool_calls_total{tool="unknown"} 1`) {
				t.Errorf("/metrics does not count the made-up tool as unknown:\n%s", metrics)
			}
			mcp := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
			got, errText := callTool(t, mcp, "get_run", map[string]any{"run_id": run})
			if errText != "" || got.Status != "completed" {
				t.Fatalf("/mcp get_run: %+v %s", got, errText)
			}
			b, _ := json.Marshal(got)
			seen["/mcp get_run"] = string(b)
			for _, args := range [][]string{{"show", run}, {"ls"}, {"tail", run}, {"tail", "--json", run}} {
				var out, errb bytes.Buffer
				if code := runsCmd(append([]string{args[0], "--api", base, "--token", "alice-token"}, args[1:]...), &out, &errb); code != 0 {
					t.Fatalf("node runs %v: exit %d: %s", args, code, errb.String())
				}
				seen["node runs "+strings.Join(args, " ")] = out.String() + errb.String()
			}
			if i == 0 {
				// The control: a principal granted raw values sees the
				// secret (and so this test sees a leak when there is
				// one). Its runs are its own: alice's run is a 404 to it,
				// so it starts one.
				token = "auditor-token"
				req, _ := http.NewRequest("POST", base+"/v1/runs", strings.NewReader(string(msg)))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", "Bearer auditor-token")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				var own map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&own)
				resp.Body.Close()
				ownRun, _ := own["run_id"].(string)
				get("raw", "/v1/runs/"+ownRun+"/events")
				if raw := get("raw", "/v1/runs/"+ownRun); !strings.Contains(raw, needle) {
					t.Fatalf("the auditor, granted raw values, does not see the secret: %s", raw)
				}
				delete(seen, "raw")
				token = "alice-token"
			}
			if err := stopServe(); err != nil {
				t.Errorf("serve: %v", err)
			}
			seen["the node's log"] = logs.String()
			if !strings.Contains(seen["the node's log"], run) {
				t.Fatalf("the log never names the run: it is not the node's log\n%s", seen["the node's log"])
			}
			requests := model.requests()
			for i, b := range requests {
				seen[fmt.Sprintf("model request %d", i+1)] = b
			}
			if len(requests) < 3 {
				t.Fatalf("the model got %d requests, want a failed one, its retry, and the completion's", len(requests))
			}

			replayArgs := append(append([]string{}, p.keysArg...), "--data", data, "--mcp-servers", o.mcpServers)
			for _, args := range [][]string{{run}, {"--json", run}, {"--at", "2", "--diff", "last", run}} {
				var out, errb bytes.Buffer
				if code := replayCmd(append(append([]string{}, replayArgs...), args...), &out, &errb); code != 0 {
					t.Fatalf("node replay %v: exit %d: %s", args, code, errb.String())
				}
				seen["node replay "+strings.Join(args, " ")] = out.String() + errb.String()
			}
			// Without the MCP servers' file, replay lacks secrets the
			// node redacts: it prints why, and nothing of the run.
			var out, errb bytes.Buffer
			if code := replayCmd(append(append([]string{}, p.keysArg...), "--data", data, run), &out, &errb); code != 1 || out.Len() != 0 ||
				!strings.Contains(errb.String(), "the node redacts secrets this command was not given (") || !strings.Contains(errb.String(), "mcp server stdio env SERVICE_CONFIG") {
				t.Fatalf("replay without the node's configuration: exit %d\n%s%s", code, out.String(), errb.String())
			}
			seen["node replay without the node's configuration"] = out.String() + errb.String()
			out.Reset()
			errb.Reset()
			if code := replayCmd(append(append([]string{}, p.keysArg...), "--data", data, "--raw", run), &out, &errb); code != 0 || !strings.Contains(out.String(), needle) {
				t.Fatalf("node replay --raw: exit %d, the secret not shown: %s%s", code, out.String(), errb.String())
			}

			for what, text := range seen {
				if form := redacttest.Find(text, secret); form != "" || strings.Contains(text, needle) {
					t.Errorf("%s shows the secret (%s form):\n%s", what, form, text)
				}
			}
			if !src.sealed {
				return
			}
			err := filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if form := redacttest.Find(string(b), secret); form != "" {
					t.Errorf("%s holds the secret (%s form)", path, form)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
