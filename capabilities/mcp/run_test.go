package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/memory"
)

// npmEnv names the folder where .ci/run installed the npm MCP servers
// (node_modules/@modelcontextprotocol/server-everything, server-memory).
const npmEnv = "CAIRN_MCP_NPM"

// npmServers returns the configuration of the two npm servers, or skips
// the test when they are not installed and this is not CI (in CI a missing
// folder is a failure, never a skip).
func npmServers(t *testing.T) (everything, memory ServerConfig) {
	t.Helper()
	dir := os.Getenv(npmEnv)
	if dir == "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not set in CI: .ci/run installs the npm MCP servers and sets it", npmEnv)
		}
		t.Skipf("%s is not set: run .ci/run, or npm install @modelcontextprotocol/server-everything @modelcontextprotocol/server-memory into a folder and set it", npmEnv)
	}
	mod := filepath.Join(dir, "node_modules", "@modelcontextprotocol")
	everything = ServerConfig{Name: "everything", Command: []string{"node", filepath.Join(mod, "server-everything", "dist", "index.js"), "stdio"},
		Env:   map[string]string{"CAIRN_TEST_SECRET": "SECRETVALUE"},
		Tools: []string{"echo", "get-sum", "get-tiny-image", "gzip-file-as-resource", "get-env"}, Agents: []string{"agent"}}
	memory = ServerConfig{Name: "memory", Command: []string{"node", filepath.Join(mod, "server-memory", "dist", "index.js")},
		Env:   map[string]string{"MEMORY_FILE_PATH": filepath.Join(t.TempDir(), "memory.jsonl")},
		Tools: []string{"create_entities", "read_graph"}, Agents: []string{"agent"}}
	return everything, memory
}

// runHost is a run of the agent "agent" on a memory store with the real
// JavaScript executor, the MCP host's capabilities granted and its Backend.
type runHost struct {
	*runtimetest.Host
	mcp *Host
}

func newRunHost(t *testing.T, h *Host, steps ...model.Response) *runHost {
	t.Helper()
	rh := runtimetest.NewHost(t, memory.New(), steps...)
	rh.Def = runtime.AgentDefinition{Slug: "agent", Instructions: "Use the tools.", OutputSchema: json.RawMessage(runtimetest.OutputSchema),
		Capabilities: h.Grants()["agent"]}
	rh.Subs = nil
	rh.Caps = h.Capabilities()
	rh.Redact = runtime.Secrets{"SECRETVALUE", "hunter2"}
	return &runHost{Host: rh, mcp: h}
}

func (r *runHost) attempt(t *testing.T, s runtime.Store) (*runtime.Result, error) {
	t.Helper()
	execs, err := jsexec.New()
	if err != nil {
		t.Fatal(err)
	}
	in := r.Input(s)
	in.ExecutorFactory = execs
	in.Backend = r.mcp.Backend("agent", nil)
	return runtime.Run(context.Background(), in)
}

// toolResult returns the tool result of a call in the transcript.
func (r *runHost) toolResult(t *testing.T, callID string) *model.ToolResult {
	t.Helper()
	for _, m := range r.History() {
		for _, p := range m.Parts {
			if p.ToolResult != nil && p.ToolResult.CallID == callID {
				return p.ToolResult
			}
		}
	}
	t.Fatalf("no result for call %s", callID)
	return nil
}

func runJS(id, code string) model.Response {
	args, _ := json.Marshal(map[string]string{"code": code})
	return model.Reply(model.Call(id, "run_js", string(args)))
}

func complete(id string) model.Response {
	return model.Reply(model.Call(id, "complete", `{"type":"output","output":{"answer":"done"}}`))
}

// TestRunAgainstNPMServers: a run whose script calls tools of two MCP
// servers no one here wrote (server-everything, server-memory), through the
// canonical invoker: text, structured content, an image and an embedded
// resource (attachments in host storage), a tool error the script catches,
// a stateful server, a secret the server leaks that JavaScript never sees,
// and a converted schema (the helper's if/then/else: neither npm server
// offers a schema outside the gate's vocabulary) whose arguments are still
// checked in full.
func TestRunAgainstNPMServers(t *testing.T) {
	everything, mem := npmServers(t)
	helper, _ := helperConfig(t, "pick")
	blobs := &memBlobs{}
	h, err := Start(context.Background(), &Config{Servers: []ServerConfig{everything, mem, helper}}, Options{Blobs: blobs, Redactor: runtime.Secrets{"SECRETVALUE"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close(context.Background()) })
	const script = `
const echo = await caps.everything.echo({message: "hello"});
const sum = await caps.everything.get_sum({a: 2, b: 40});
const img = await caps.everything.get_tiny_image({});
let toolError = null;
try { await caps.everything.gzip_file_as_resource({data: "ftp://example.com/x", outputType: "resource"}); } catch (e) { toolError = String(e.message || e); }
const gz = await caps.everything.gzip_file_as_resource({data: "data:text/plain;base64,aGVsbG8gY2Fpcm4=", name: "hello.gz", outputType: "resource"});
await caps.memory.create_entities({entities: [{name: "Cairn", entityType: "project", observations: ["durable"]}]});
const graph = await caps.memory.read_graph({});
const env = await caps.everything.get_env({});
let rejected = null;
try { await caps.helper.pick({kind: "box"}); } catch (e) { rejected = String(e.message || e); }
const picked = await caps.helper.pick({kind: "box", size: 3});
return {echo: echo.text, sum: sum.text, image: img.attachments, toolError, gz: gz.attachments, graph: graph.structured,
  envLeak: env.text.includes("SECRETVALUE"), envRedacted: env.text.includes("[REDACTED]"), rejected, picked: picked.text};`
	rh := newRunHost(t, h, runJS("c1", script), complete("c2"))
	res, err := rh.attempt(t, rh.Store())
	if err != nil || res.Reply == nil {
		t.Fatalf("run: %+v %v", res, err)
	}
	tr := rh.toolResult(t, "c1")
	if tr.IsError {
		t.Fatalf("run_js failed: %s", tr.Content)
	}
	var value struct {
		Result struct {
			Echo, Sum, ToolError, Rejected, Picked string
			Image, Gz                              []model.Attachment
			Graph                                  struct {
				Entities []struct{ Name string } `json:"entities"`
			}
			EnvLeak, EnvRedacted bool
		}
	}
	if err := json.Unmarshal([]byte(tr.Content), &value); err != nil {
		t.Fatalf("script value: %v\n%s", err, tr.Content)
	}
	out := value.Result
	if !strings.Contains(out.Echo, "hello") || !strings.Contains(out.Sum, "42") {
		t.Errorf("echo %q, sum %q", out.Echo, out.Sum)
	}
	if len(out.Image) != 1 || out.Image[0].MediaType != "image/png" || out.Image[0].Size == 0 {
		t.Errorf("image attachments = %+v", out.Image)
	} else if d, ok := blobs.get(out.Image[0].Ref); !ok || !strings.HasPrefix(string(d), "\x89PNG") {
		t.Errorf("the image is not in host storage as a PNG (%d bytes)", len(d))
	}
	if out.ToolError == "" {
		t.Error("the tool error was not thrown to the script")
	}
	if len(out.Gz) != 1 || out.Gz[0].Name == "" {
		t.Errorf("embedded resource attachments = %+v", out.Gz)
	}
	if len(out.Graph.Entities) != 1 || out.Graph.Entities[0].Name != "Cairn" {
		t.Errorf("memory graph = %+v", out.Graph)
	}
	if out.EnvLeak || !out.EnvRedacted || strings.Contains(tr.Content, "SECRETVALUE") {
		t.Errorf("the server's secret reached JavaScript (leak %v, redacted %v)", out.EnvLeak, out.EnvRedacted)
	}
	if !strings.Contains(out.Rejected, "size") {
		t.Errorf("pick without size was not rejected by the converted schema: %q", out.Rejected)
	}
	if !strings.Contains(out.Picked, `"size":3`) {
		t.Errorf("picked = %q", out.Picked)
	}
	// The attachments travel with the tool result (C16): references only.
	if len(tr.Attachments) != 2 {
		t.Errorf("tool result attachments = %+v, want the image and the resource", tr.Attachments)
	}
}

// crashAfter is a store whose next save fails once armed fires: the crash
// of a node after a script's callback ran and before its postresult
// committed.
type crashAfter struct {
	runtime.Store
	armed func() bool
	fired *atomic.Bool
}

var errCrash = errors.New("test: node crashed")

func (c crashAfter) SaveCheckpoint(ctx context.Context, cp *runtime.Checkpoint) error {
	if c.armed() && c.fired.CompareAndSwap(false, true) {
		return errCrash
	}
	return c.Store.SaveCheckpoint(ctx, cp)
}

// TestInterruptedScriptIsUnknownEffect: a run_js whose script called an
// effectful MCP tool is interrupted before its result commits. The resumed
// attempt does not run the script again (the tool was called once) and
// commits an unknown-effect notice that names the tool as effectful (C20).
func TestInterruptedScriptIsUnknownEffect(t *testing.T) {
	sc, counter := helperConfig(t, "count", "pick")
	h, _, _ := startHelper(t, sc)
	rh := newRunHost(t, h, runJS("c1", `const r = await caps.helper.count({}); return r.text;`), complete("c2"))
	var fired atomic.Bool
	called := func() bool { _, err := os.Stat(counter); return err == nil }
	_, err := rh.attempt(t, crashAfter{Store: rh.Store(), armed: called, fired: &fired})
	if !errors.Is(err, errCrash) {
		t.Fatalf("first attempt: err = %v, want the crash", err)
	}
	res, err := rh.attempt(t, rh.Store())
	if err != nil || res.Reply == nil {
		t.Fatalf("resumed attempt: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(counter); strings.Count(string(b), "\n") != 1 {
		t.Fatalf("the tool ran %d times, want once", strings.Count(string(b), "\n"))
	}
	tr := rh.toolResult(t, "c1")
	if !tr.IsError || !strings.Contains(tr.Content, "Unknown effect") {
		t.Fatalf("c1 result = %+v", tr)
	}
	line := ""
	for _, l := range strings.Split(tr.Content, "\n") {
		if strings.HasPrefix(l, runtime.EffectEffectful) {
			line = l
		}
	}
	if !strings.Contains(line, "caps.helper.count") || strings.Contains(line, "caps.helper.pick") {
		t.Errorf("the notice does not name helper.count (and only it) as effectful:\n%s", tr.Content)
	}
	if !strings.Contains(tr.Content, fmt.Sprintf("%s (changed nothing; safe to call again): caps.helper.pick", runtime.EffectReadOnly)) {
		t.Errorf("the read-only tool is not listed as such:\n%s", tr.Content)
	}
}

// TestRunSurvivesServerCrash: the server exits in the middle of a callback.
// The callback throws (the script catches it), the server is restarted,
// the script's next callback is served by the new process and the run
// completes.
func TestRunSurvivesServerCrash(t *testing.T) {
	sc, _ := helperConfig(t, "count", "crash")
	h, _, _ := startHelper(t, sc)
	first := h.server("helper").pid()
	rh := newRunHost(t, h, runJS("c1", `
let lost = null;
try { await caps.helper.crash({}); } catch (e) { lost = String(e.message || e); }
const r = await caps.helper.count({});
return {lost, count: r.text};`), complete("c2"))
	res, err := rh.attempt(t, rh.Store())
	if err != nil || res.Reply == nil {
		t.Fatalf("run: %+v %v", res, err)
	}
	tr := rh.toolResult(t, "c1")
	var value struct {
		Result struct{ Lost, Count string }
	}
	if err := json.Unmarshal([]byte(tr.Content), &value); err != nil || tr.IsError {
		t.Fatalf("c1 = %+v (%v)", tr, err)
	}
	if !strings.Contains(value.Result.Lost, "connection was lost") || value.Result.Count != "count=1" {
		t.Errorf("script saw %+v", value.Result)
	}
	if pid := h.server("helper").pid(); pid == first {
		t.Errorf("the server was not restarted (pid %d)", pid)
	}
}
