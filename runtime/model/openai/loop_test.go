package openai

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

// chatCall is a Chat Completions body with one tool call.
func chatCall(n int, id, name, args string) string {
	a, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":"chatcmpl-%d","object":"chat.completion","created":1,"model":"gpt-test","system_fingerprint":"fp_%d",
	  "choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
	    "tool_calls":[{"id":%q,"type":"function","function":{"name":%q,"arguments":%s}}]}}],
	  "usage":{"prompt_tokens":%d,"completion_tokens":10,"total_tokens":%d}}`, n, n, id, name, a, 100*n, 100*n+10)
}

// respCall is a Responses body with a reasoning item and one function call.
func respCall(n int, id, name, args string) string {
	a, _ := json.Marshal(args)
	return fmt.Sprintf(`{"id":"resp_%d","object":"response","status":"completed","model":"o4-mini","output":[
	  {"id":"rs_%d","type":"reasoning","summary":[{"type":"summary_text","text":"step %d"}],"encrypted_content":"ENC%d=="},
	  {"id":"fc_%d","type":"function_call","status":"completed","call_id":%q,"name":%q,"arguments":%s}],
	  "usage":{"input_tokens":%d,"output_tokens":10,"output_tokens_details":{"reasoning_tokens":4}}}`, n, n, n, n, n, id, name, a, 100*n)
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
	tests := []struct {
		name    string
		api     API
		replies []reply
		options string
	}{
		{
			name: "chat completions",
			api:  APIChat,
			replies: []reply{ok(chatCall(1, "call_s", "spawn_summarizer", spawnArgs)), ok(chatCall(2, "call_j", "run_js", jsArgs)),
				ok(chatCall(3, "call_c", "complete", completeArgs))},
			options: `{"temperature":0}`,
		},
		{
			name: "responses",
			api:  APIResponses,
			replies: []reply{ok(respCall(1, "call_s", "spawn_summarizer", spawnArgs)), ok(respCall(2, "call_j", "run_js", jsArgs)),
				ok(respCall(3, "call_c", "complete", completeArgs))},
			options: `{"reasoning_effort":"low"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, tt.replies...)
			m, _ := newTestModel(t, f, tt.api)
			usage := &usageLog{}
			host := runtimetest.NewHost(t, memory.New())
			// The child finishes while the model thinks about its third
			// step, so complete is accepted.
			f.setHook(func(n int) {
				if n == 2 {
					host.Ctrl.FinishChildren()
				}
			})
			host.Def.ModelOptions = json.RawMessage(tt.options)
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
			if host.Execs.Executed("call_j") != 1 || host.Ctrl.Count("Spawn") != 1 {
				t.Fatalf("run_js executed %d times, %d spawns", host.Execs.Executed("call_j"), host.Ctrl.Count("Spawn"))
			}
			if usage.calls != 3 || usage.total.InputTokens != 600 || usage.total.OutputTokens != 30 {
				t.Fatalf("recorded usage %+v in %d calls", usage.total, usage.calls)
			}
			reqs := f.requests()
			if len(reqs) != 3 {
				t.Fatalf("%d requests, want 3", len(reqs))
			}
			// What each request must end with: the calls so far, each
			// followed by its result.
			calls := [][2]string{{"call_s", "spawn_summarizer"}, {"call_j", "run_js"}}
			args := map[string]string{"call_s": spawnArgs, "call_j": jsArgs}
			for i, r := range reqs {
				if tt.api == APIChat {
					checkChatPairs(t, i, r.body, calls[:i], args)
				} else {
					checkResponsesPairs(t, i, r.body, calls[:i], args)
				}
				tools := map[string]bool{}
				list, _ := r.body["tools"].([]any)
				for _, tl := range list {
					name := field(tl, "function", "name")
					if tt.api == APIResponses {
						name = field(tl, "name")
					}
					tools[fmt.Sprint(name)] = true
				}
				for _, want := range []string{"spawn_summarizer", "run_js", "complete"} {
					if !tools[want] {
						t.Fatalf("request %d has no %s tool: %v", i, want, tools)
					}
				}
			}
			for _, msg := range host.History() {
				if msg.Role == model.RoleAssistant && string(msg.Meta[MetaResponseID]) == "" {
					t.Fatalf("assistant message %s lost its provider metadata: %q", msg.ID, msg.Meta)
				}
			}
		})
	}
}

func checkChatPairs(t *testing.T, i int, body map[string]any, calls [][2]string, args map[string]string) {
	t.Helper()
	msgs, _ := body["messages"].([]any)
	if field(msgs, 0, "role") != "system" || field(msgs, 1, "role") != "user" {
		t.Fatalf("request %d starts %v", i, msgs[:min(2, len(msgs))])
	}
	rest := msgs[2:]
	if len(rest) != 2*len(calls) {
		t.Fatalf("request %d: %d messages after the task, want %d: %v", i, len(rest), 2*len(calls), rest)
	}
	for j, c := range calls {
		a, r := rest[2*j], rest[2*j+1]
		if field(a, "role") != "assistant" || field(a, "tool_calls", 0, "id") != c[0] || field(a, "tool_calls", 0, "function", "name") != c[1] ||
			field(a, "tool_calls", 0, "function", "arguments") != args[c[0]] || field(a, "tool_calls", 1) != nil {
			t.Fatalf("request %d message %d: %v, want the call %s", i, 2*j+2, a, c)
		}
		if field(r, "role") != "tool" || field(r, "tool_call_id") != c[0] || field(r, "content") == "" {
			t.Fatalf("request %d message %d: %v, want the result of %s", i, 2*j+3, r, c[0])
		}
	}
}

func checkResponsesPairs(t *testing.T, i int, body map[string]any, calls [][2]string, args map[string]string) {
	t.Helper()
	items, _ := body["input"].([]any)
	if field(items, 0, "role") != "user" || body["instructions"] == nil {
		t.Fatalf("request %d starts %v", i, items[:min(1, len(items))])
	}
	rest := items[1:]
	if len(rest) != 3*len(calls) {
		t.Fatalf("request %d: %d items after the task, want %d: %v", i, len(rest), 3*len(calls), rest)
	}
	for j, c := range calls {
		rs, fc, out := rest[3*j], rest[3*j+1], rest[3*j+2]
		n := j + 1
		// The reasoning item exactly as the server sent it.
		jsonEqual(t, fmt.Sprintf("request %d reasoning item %d", i, n), rs,
			fmt.Sprintf(`{"id":"rs_%d","type":"reasoning","summary":[{"type":"summary_text","text":"step %d"}],"encrypted_content":"ENC%d=="}`, n, n, n))
		if field(fc, "type") != "function_call" || field(fc, "call_id") != c[0] || field(fc, "name") != c[1] || field(fc, "arguments") != args[c[0]] {
			t.Fatalf("request %d item %d: %v, want the call %s", i, 3*j+2, fc, c)
		}
		if field(out, "type") != "function_call_output" || field(out, "call_id") != c[0] || field(out, "output") == "" {
			t.Fatalf("request %d item %d: %v, want the result of %s", i, 3*j+3, out, c[0])
		}
	}
}
