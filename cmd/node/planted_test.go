package main

import (
	"bytes"
	"crypto/rand"
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
)

// plantedModel is an OpenAI chat-completions server (the wire format the
// openai adapter speaks) that records every request body. Its first answer
// calls run_js with a script that builds the secret from character codes
// (so the script's text does not hold it), stores it with kv.put and returns
// what kv.get gives back: the secret reaches the run as a capability's
// result. Its next answer echoes the secret, in its text and in the run's
// output.
type plantedModel struct {
	secret string
	mu     sync.Mutex
	bodies [][]byte
}

func (p *plantedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	p.bodies = append(p.bodies, body)
	p.mu.Unlock()
	var req struct {
		Messages []struct {
			Role string `json:"role"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(body, &req)
	afterTool := len(req.Messages) > 0 && req.Messages[len(req.Messages)-1].Role == "tool"
	var codes []string
	for _, c := range []byte(p.secret) {
		codes = append(codes, fmt.Sprint(c))
	}
	var text, name string
	var args any
	if !afterTool {
		text, name = "I will store the key and read it back.", "run_js"
		args = map[string]string{"code": "const s = String.fromCharCode(" + strings.Join(codes, ",") + ");\n" +
			"await caps.kv.put({key: \"k\", value: s});\nconst r = await caps.kv.get({key: \"k\"});\nreturn r.value;"}
	} else {
		text, name = "The key is "+p.secret, "complete"
		args = map[string]any{"type": "output", "output": map[string]string{"answer": "echo " + p.secret}}
	}
	a, _ := json.Marshal(args)
	resp := map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
		"choices": []any{map[string]any{"index": 0, "finish_reason": "tool_calls", "message": map[string]any{
			"role": "assistant", "content": text,
			"tool_calls": []any{map[string]any{"id": fmt.Sprintf("call-%d", len(req.Messages)), "type": "function",
				"function": map[string]any{"name": name, "arguments": string(a)}}},
		}}},
		"usage": map[string]int{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

const plantedAgent = `slug: planted
description: Stores a value and echoes it.
instructions: Store the value in the user's message, read it back and complete with it.
model: openai:m
limits: {context_tokens: 64000, output_tokens: 1024}
output_schema:
  type: object
  required: [answer]
  additionalProperties: false
  properties:
    answer: {type: string}
capabilities: [kv.get, kv.put]
`

// TestPlantedSecret (issue 24): one secret with characters JSON escapes,
// planted in the environment (the provider key), a capability's result, the
// user's message and the model's answers, is in none of: the API's answers
// (the run, its view, its transcript, the runs list), the event stream, the
// run page, /metrics, the node's log at debug level, every request the
// model received, `node replay` (text and --json); and, with the payload
// codec on, in no file of the data directory.
func TestPlantedSecret(t *testing.T) {
	for _, sealed := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "sealed"}[sealed], func(t *testing.T) {
			tail := make([]byte, 12)
			_, _ = rand.Read(tail)
			// The tail is what is searched for: hex survives every
			// encoding (JSON, HTML, SSE), so any copy of the secret, whole
			// or cut, is found.
			needle := hex.EncodeToString(tail)
			secret := `sk-proj-"<&>\` + needle
			planted := &plantedModel{secret: secret}
			provider := httptest.NewServer(planted)
			defer provider.Close()
			t.Setenv("OPENAI_API_KEY", secret)
			t.Setenv("ANTHROPIC_API_KEY", "")
			t.Setenv("OPENAI_BASE_URL", provider.URL)

			agents := t.TempDir()
			if err := os.WriteFile(filepath.Join(agents, "planted.yaml"), []byte(plantedAgent), 0o644); err != nil {
				t.Fatal(err)
			}
			data := t.TempDir()
			var keys payloadKeys
			var keysArgs []string
			if sealed {
				line, err := events.NewKey("k1")
				if err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(t.TempDir(), "payload.keys")
				if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := keys.Set(path); err != nil {
					t.Fatal(err)
				}
				keysArgs = []string{"--payload-keys", path}
			}
			logs := &syncbuf.Buffer{}
			logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			o := serveOptions{nodeOptions: nodeOptions{agentsDir: agents, data: data, logger: logger, keys: keys},
				listen: "127.0.0.1:0", tokens: map[string]string{"alice-token": "alice", "auditor-token": "auditor"}, raw: "auditor"}
			base, stopServe := startServe(t, o)
			stop := func() {
				if err := stopServe(); err != nil {
					t.Errorf("serve: %v", err)
				}
			}

			// Everything the node hands out, by where it came from.
			seen := map[string]string{}
			token := "alice-token"
			get := func(what, path string) string {
				t.Helper()
				req, _ := http.NewRequest("GET", base+path, nil)
				req.Header.Set("Authorization", "Bearer "+token)
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
			get("the transcript", "/v1/runs/"+run+"/transcript")
			get("the runs list", "/v1/runs")
			get("the runs list searched", "/v1/runs?q=key")
			get("the run page", "/ui/runs/"+run)
			get("the runs page", "/ui/")
			get("/metrics", "/metrics")
			mcp := mcpClient(t, &sdk.StreamableClientTransport{Endpoint: base + "/mcp", HTTPClient: &http.Client{Transport: bearer{"alice-token"}}})
			got, errText := callTool(t, mcp, "get_run", map[string]any{"run_id": run})
			if errText != "" || got.Status != "completed" {
				t.Fatalf("/mcp get_run: %+v %s", got, errText)
			}
			b, _ := json.Marshal(got)
			seen["/mcp get_run"] = string(b)
			// The control: a principal granted raw values sees the secret
			// (and so this test sees a leak when there is one). Its runs
			// are its own: alice's run is a 404 to it, so it starts one.
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
			get("raw: the event stream", "/v1/runs/"+ownRun+"/events")
			if raw := get("raw: the run", "/v1/runs/"+ownRun); !strings.Contains(raw, needle) {
				t.Fatalf("the auditor, granted raw values, does not see the secret: %s", raw)
			}
			for what := range seen {
				if strings.HasPrefix(what, "raw: ") {
					delete(seen, what)
				}
			}
			token = "alice-token"
			stop()
			seen["the node's log"] = logs.String()
			if !strings.Contains(seen["the node's log"], run) {
				t.Fatalf("the log never names the run: it is not the node's log\n%s", seen["the node's log"])
			}
			planted.mu.Lock()
			for i, b := range planted.bodies {
				seen[fmt.Sprintf("model request %d", i+1)] = string(b)
			}
			requests := len(planted.bodies)
			planted.mu.Unlock()
			if requests < 4 {
				t.Fatalf("the model got %d requests, want the tool call's and the completion's, of both runs", requests)
			}
			// The capability's result reached the model (redacted): the
			// script did run and hand the secret back.
			if !strings.Contains(seen["model request 2"], "[REDACTED]") {
				t.Fatalf("the second model request carries no redacted result:\n%s", seen["model request 2"])
			}

			for _, args := range [][]string{{"--data", data, run}, {"--data", data, "--json", run}} {
				var out, errb bytes.Buffer
				if code := replayCmd(append(append([]string{}, keysArgs...), args...), &out, &errb); code != 0 {
					t.Fatalf("node replay %v: exit %d: %s", args, code, errb.String())
				}
				seen["node replay "+strings.Join(args[2:], " ")] = out.String() + errb.String()
			}
			if sealed {
				// Without the keys replay fails, naming the key, not
				// showing the log.
				var out, errb bytes.Buffer
				if code := replayCmd([]string{"--data", data, run}, &out, &errb); code == 0 || !strings.Contains(errb.String(), `sealed with a key this reader does not have (key "k1")`) {
					t.Fatalf("replay without the keys: exit %d: %s%s", code, out.String(), errb.String())
				}
				seen["node replay without the keys"] = out.String() + errb.String()
			}

			var out, errb bytes.Buffer
			if code := replayCmd(append(append([]string{}, keysArgs...), "--data", data, "--raw", run), &out, &errb); code != 0 || !strings.Contains(out.String(), needle) {
				t.Fatalf("node replay --raw: exit %d, the secret not shown: %s%s", code, out.String(), errb.String())
			}

			for what, text := range seen {
				if strings.Contains(text, needle) {
					t.Errorf("%s shows the secret:\n%s", what, text)
				}
			}
			if !sealed {
				return
			}
			err = filepath.WalkDir(data, func(path string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				b, err := os.ReadFile(path)
				if err != nil {
					return err
				}
				if bytes.Contains(b, []byte(needle)) {
					t.Errorf("%s holds the secret", path)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
