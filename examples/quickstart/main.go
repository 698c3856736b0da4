// Quickstart runs one agent task end to end on an embedded NATS JetStream
// server, offline: a scripted model, capabilities called from real
// JavaScript (goja), every step committed to the log before it is trusted.
//
// Half way through, the process "crashes" right after a side effect and
// before its result is committed. The second attempt resumes from the log:
// the interrupted script is not run again; the model is told its effect is
// unknown, checks, and finishes with a schema-validated reply.
//
//	go run ./examples/quickstart
//	go run ./examples/quickstart -data /tmp/cairn   # keep the log
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"

	njs "github.com/nats-io/nats.go/jetstream"

	"github.com/cairn-agents/cairn/events"
	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/jsexec"
	"github.com/cairn-agents/cairn/runtime/jstool"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/store/jetstream"
)

func main() {
	jsexec.MaybeRunWorker() // this binary is also the JavaScript worker
	data := flag.String("data", "", "JetStream data directory (default: a temporary one, removed at exit)")
	flag.Parse()
	if err := run(*data); err != nil {
		log.Fatal(err)
	}
}

const outputSchema = `{"type":"object","required":["answer","low_stock"],"properties":{"answer":{"type":"string","minLength":1},"low_stock":{"type":"array","items":{"type":"string"}}},"additionalProperties":false}`

func run(dir string) error {
	ctx := context.Background()
	if dir == "" {
		tmp, err := os.MkdirTemp("", "cairn-quickstart-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	srv, err := jetstream.StartServer(jetstream.ServerConfig{StoreDir: dir, Port: -1})
	if err != nil {
		return err
	}
	defer srv.Close(context.Background())
	nc, err := srv.Connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	store, err := jetstream.New(ctx, nc, jetstream.Config{Holder: "quickstart"})
	if err != nil {
		return err
	}
	executors, err := jsexec.New()
	if err != nil {
		return err
	}
	fmt.Printf("embedded NATS JetStream in %s (SyncAlways: every commit is on disk before it is acknowledged)\n", dir)
	fmt.Printf("JavaScript executor: %s mode\n\n", executors.Mode())

	ctrl := &soloController{steps: 10}
	host := &host{inventory: map[string]int{"bolts": 1200, "nuts": 40, "washers": 7, "gears": 300}}
	usage := &usage{}
	in := runtime.Input{
		Definition: runtime.AgentDefinition{
			Slug:         "stock-keeper",
			Instructions: "You keep the warehouse stock. Use run_js to call the capabilities.",
			OutputSchema: json.RawMessage(outputSchema),
			Capabilities: []string{"inventory.list", "report.save", "report.get"},
		},
		Model:       model.WithUsage(script(), usage),
		ModelLimits: runtime.ModelLimits{ContextTokens: 32000, OutputTokens: 2000},
		Budget:      runtime.Budget{Steps: 10},
		Backend:     host, ExecutorFactory: executors, Controller: ctrl,
		Sink:     printer{},
		Redactor: runtime.Secrets{"warehouse-api-key-123"},
		Message:  "Which items are low on stock (under 50)? Save a report, then answer.",
		Capabilities: []runtime.Capability{
			{Name: "inventory.list", Description: "All items with their counts.", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
			{Name: "report.save", Description: "Save the stock report (a side effect).", InputSchema: json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string"}},"additionalProperties":false}`)},
			{Name: "report.get", Description: "The saved report, or null.", InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`)},
		},
	}

	// Attempt 1: the capability "crashes" the process right after its side
	// effect, before the script's result can be committed.
	fmt.Println("== attempt 1")
	attemptCtx, crash := context.WithCancel(ctx)
	host.crash = crash
	s, err := store.Open(ctx, "quickstart", "run-1")
	if err != nil {
		return err
	}
	in.Store = s
	if _, err := runtime.Run(attemptCtx, in); !errors.Is(err, context.Canceled) {
		return fmt.Errorf("attempt 1 should have been interrupted, got %v", err)
	}
	fmt.Printf("   ... process lost after the report was saved (saves so far: %d)\n\n", host.saves)

	// Attempt 2: a new lease fences out the old writer; the run resumes from
	// the last commit.
	fmt.Println("== attempt 2 (recovery from the log)")
	host.crash = nil
	if s, err = store.Open(ctx, "quickstart", "run-1"); err != nil {
		return err
	}
	in.Store = s
	in.RecoveryNotice = "The worker restarted; one script may have been interrupted."
	res, err := runtime.Run(ctx, in)
	if err != nil {
		return err
	}
	if res.CleanupError != nil {
		fmt.Println("   cleanup:", res.CleanupError)
	}
	fmt.Printf("\n== reply (%s), valid against the output schema:\n%s\n", res.Reply.Type, res.Reply.Output)
	fmt.Printf("report saves: %d (the interrupted script was not run again)\n", host.saves)
	if host.saves != 1 {
		return fmt.Errorf("the report was saved %d times", host.saves)
	}
	fmt.Printf("tokens: %d in, %d out; steps reserved: %d\n", usage.in, usage.out, 10-ctrl.remaining())

	js, _ := njs.New(nc)
	st, _ := js.Stream(ctx, events.DefaultStream)
	info, _ := st.Info(ctx)
	fmt.Printf("log: %d events in stream CAIRN\n", info.State.Msgs)
	return nil
}

// script is the scripted model: what a model would answer at each step.
func script() *model.Scripted {
	return &model.Scripted{Steps: []model.Response{
		model.Reply(model.Part{Type: model.PartText, Text: "Let me look at the inventory."},
			model.Call("call-1", "run_js", `{"code":"const inv = await caps.inventory.list();\nconst low = Object.entries(inv.items).filter(([, n]) => n < 50).map(([k]) => k);\nconsole.log('low stock:', low.join(', '));\nreturn low;"}`)),
		model.Reply(model.Part{Type: model.PartText, Text: "Saving the report."},
			model.Call("call-2", "run_js", `{"code":"await caps.report.save({text: 'Low stock: nuts, washers'});\nreturn 'saved';"}`)),
		model.Reply(model.Part{Type: model.PartText, Text: "That script was interrupted; I will check whether the report exists before saving again."},
			model.Call("call-3", "run_js", `{"code":"return await caps.report.get();"}`)),
		model.Reply(model.Call("call-4", "complete", `{"type":"output","output":{"answer":"Nuts (40) and washers (7) are under 50; the report is saved.","low_stock":["nuts","washers"]}}`)),
	}}
}

// host is the capability backend: a tiny warehouse.
type host struct {
	mu        sync.Mutex
	inventory map[string]int
	report    *string
	saves     int
	crash     func()
}

func (h *host) Invoke(ctx context.Context, inv jstool.Invocation) (jstool.Value, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch inv.Capability {
	case "inventory.list":
		b, _ := json.Marshal(map[string]any{"items": h.inventory, "api_key": "warehouse-api-key-123"})
		return jstool.Value{JSON: b}, nil
	case "report.save":
		var a struct{ Text string }
		_ = json.Unmarshal(inv.Args, &a)
		h.report = &a.Text
		h.saves++
		if h.crash != nil {
			h.crash() // the side effect happened; the process dies now
		}
		return jstool.Value{JSON: json.RawMessage(`{"ok":true}`)}, nil
	case "report.get":
		b, _ := json.Marshal(h.report)
		return jstool.Value{JSON: b}, nil
	}
	return jstool.Value{}, fmt.Errorf("no capability %q", inv.Capability)
}

// soloController is the host side for an agent without subagents: a step
// budget, and completion accepted as is. (The node's controller, with
// children, budgets and wakeups, lives in actors/.)
type soloController struct {
	mu    sync.Mutex
	steps int
}

func (c *soloController) BeforeModel(context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.steps == 0 {
		return errors.New("step budget exhausted")
	}
	c.steps--
	return nil
}

var errNoChildren = errors.New("this agent has no subagents")

func (c *soloController) Spawn(context.Context, string, string, []byte) (runtime.AgentRunInfo, error) {
	return runtime.AgentRunInfo{}, errNoChildren
}
func (c *soloController) Continue(context.Context, string, string, string) (runtime.AgentRunInfo, error) {
	return runtime.AgentRunInfo{}, errNoChildren
}
func (c *soloController) Get(context.Context, []string) ([]runtime.CallInfo, error) {
	return nil, errNoChildren
}
func (c *soloController) Cancel(context.Context, []string) ([]runtime.CancelInfo, error) {
	return nil, errNoChildren
}
func (c *soloController) Wait(context.Context, string, runtime.WaitRequest) (runtime.WaitResult, error) {
	return runtime.WaitResult{}, errNoChildren
}
func (c *soloController) Complete(context.Context, runtime.Reply) error { return nil }

func (c *soloController) remaining() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steps
}

// usage sums reported tokens (the host's budget ledger in a real node).
type usage struct {
	mu      sync.Mutex
	in, out int64
}

func (u *usage) RecordUsage(_ context.Context, _ model.Purpose, x model.Usage) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.in += x.InputTokens
	u.out += x.OutputTokens
	return nil
}

// printer shows the run's progress: each event arrives after its commit.
type printer struct{}

func (printer) Emit(_ context.Context, ev runtime.SinkEvent) {
	text := strings.ReplaceAll(ev.Text, "\n", " ")
	if len(text) > 110 {
		text = text[:110] + "..."
	}
	switch ev.Kind {
	case runtime.SinkText:
		fmt.Printf("   [rev %d] model: %s\n", ev.Revision, text)
	case runtime.SinkToolCall:
		fmt.Printf("   [rev %d] call %s %s\n", ev.Revision, ev.CallID, ev.Tool)
	case runtime.SinkToolResult:
		status := "ok"
		if ev.IsError {
			status = "error"
		}
		fmt.Printf("   [rev %d] result %s (%s): %s\n", ev.Revision, ev.CallID, status, text)
	case runtime.SinkCompleted:
		fmt.Printf("   [rev %d] completed\n", ev.Revision)
	}
}
