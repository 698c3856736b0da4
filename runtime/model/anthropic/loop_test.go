package anthropic

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/cairn-agents/cairn/runtime"
	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/runtimetest"
	"github.com/cairn-agents/cairn/store/memory"
)

// usageLog is a model.UsageRecorder that sums what it is given.
type usageLog struct {
	mu    sync.Mutex
	total model.Usage
	calls int
}

func (u *usageLog) RecordUsage(_ context.Context, _ model.Purpose, v model.Usage) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.total = u.total.Add(v)
	u.calls++
	return nil
}

// toolUse is a Messages API body with a signed thinking block and one
// tool_use block.
func toolUse(n int, id, name, input string) string {
	return fmt.Sprintf(`{"id":"msg_%d","type":"message","role":"assistant","model":"claude-test","stop_reason":"tool_use","stop_sequence":null,
	  "content":[{"type":"thinking","thinking":"step %d","signature":"SIG%d/+=="},
	    {"type":"tool_use","id":%q,"name":%q,"input":%s}],
	  "usage":{"input_tokens":%d,"output_tokens":10,"cache_read_input_tokens":0}}`, n, n, n, id, name, input, 100*n)
}

// The adapter under the real run loop: a spawn, a run_js and a complete,
// each scripted in the provider's wire format; the second and third
// requests must carry the earlier calls and results, correctly paired.
func TestRunLoop(t *testing.T) {
	const (
		spawnArgs    = `{"text":"t"}`
		jsArgs       = `{"code":"return 1"}`
		completeArgs = `{"type":"output","output":{"answer":"42"}}`
	)
	f := newFakeServer(t, ok(toolUse(1, "toolu_s", "spawn_summarizer", spawnArgs)), ok(toolUse(2, "toolu_j", "run_js", jsArgs)),
		ok(toolUse(3, "toolu_c", "complete", completeArgs)))
	m, _ := newTestModel(t, f)
	usage := &usageLog{}
	host := runtimetest.NewHost(t, memory.New())
	host.Def.ModelOptions = json.RawMessage(`{"thinking_budget":1024}`)
	// The child finishes while the model thinks about its third step, so
	// complete is accepted.
	f.setHook(func(n int) {
		if n == 2 {
			host.Ctrl.FinishChildren()
		}
	})
	in := host.Input(host.Store())
	in.Model = model.WithUsage(m, usage)
	res, err := runtime.Run(context.Background(), in)
	if err != nil || res == nil || res.Reply == nil {
		for i, r := range f.requests() {
			t.Logf("request %d: %s", i, r.raw)
		}
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if string(res.Reply.Output) != `{"answer":"42"}` {
		t.Fatalf("reply %s", res.Reply.Output)
	}
	if host.Execs.Executed("toolu_j") != 1 || host.Ctrl.Count("Spawn") != 1 {
		t.Fatalf("run_js executed %d times, %d spawns", host.Execs.Executed("toolu_j"), host.Ctrl.Count("Spawn"))
	}
	if usage.calls != 3 || usage.total.InputTokens != 600 || usage.total.OutputTokens != 30 {
		t.Fatalf("recorded usage %+v in %d calls", usage.total, usage.calls)
	}
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	calls := [][2]string{{"toolu_s", "spawn_summarizer"}, {"toolu_j", "run_js"}}
	args := map[string]string{"toolu_s": spawnArgs, "toolu_j": jsArgs}
	for i, r := range reqs {
		msgs, _ := r.body["messages"].([]any)
		if field(msgs, 0, "role") != "user" || field(r.body, "system", 0, "text") == nil || field(r.body, "thinking", "budget_tokens") != float64(1024) {
			t.Fatalf("request %d: %s", i, r.raw)
		}
		rest := msgs[1:]
		if len(rest) != 2*len(calls[:i]) {
			t.Fatalf("request %d: %d messages after the task, want %d", i, len(rest), 2*i)
		}
		for j, c := range calls[:i] {
			n := j + 1
			a, u := rest[2*j], rest[2*j+1]
			// The thinking block exactly as received, then the call.
			jsonEqual(t, fmt.Sprintf("request %d assistant %d", i, n), a, fmt.Sprintf(`{"role":"assistant","content":[
			  {"type":"thinking","thinking":"step %d","signature":"SIG%d/+=="},
			  {"type":"tool_use","id":%q,"name":%q,"input":%s}]}`, n, n, c[0], c[1], args[c[0]]))
			if field(u, "role") != "user" || field(u, "content", 0, "type") != "tool_result" || field(u, "content", 0, "tool_use_id") != c[0] ||
				field(u, "content", 0, "content", 0, "text") == "" || field(u, "content", 1) != nil {
				t.Fatalf("request %d: %v, want the result of %s", i, u, c[0])
			}
		}
		names := map[string]bool{}
		list, _ := r.body["tools"].([]any)
		for _, tl := range list {
			names[fmt.Sprint(field(tl, "name"))] = true
		}
		for _, want := range []string{"spawn_summarizer", "run_js", "complete"} {
			if !names[want] {
				t.Fatalf("request %d has no %s tool", i, want)
			}
		}
	}
	for _, msg := range host.History() {
		if msg.Role == model.RoleAssistant && string(msg.Meta[MetaMessageID]) == "" {
			t.Fatalf("assistant message %s lost its provider metadata: %q", msg.ID, msg.Meta)
		}
	}
}
