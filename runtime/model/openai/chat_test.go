package openai

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// The Chat Completions examples of OpenAI's API reference.
const (
	chatTextBody = `{
  "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT",
  "object": "chat.completion",
  "created": 1741569952,
  "model": "gpt-4.1-2025-04-14",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "Hello! How can I assist you today?",
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "stop"
    }
  ],
  "usage": {
    "prompt_tokens": 19,
    "completion_tokens": 10,
    "total_tokens": 29,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_44709d6fcb"
}`
	chatToolBody = `{
  "id": "chatcmpl-abc123",
  "object": "chat.completion",
  "created": 1699896916,
  "model": "gpt-4o-mini",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": null,
        "tool_calls": [
          {
            "id": "call_abc123",
            "type": "function",
            "function": {
              "name": "get_current_weather",
              "arguments": "{\n\"location\": \"Boston, MA\"\n}"
            }
          }
        ]
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99,
    "prompt_tokens_details": {"cached_tokens": 64}, "completion_tokens_details": {"reasoning_tokens": 5}}
}`
	chatParallelBody = `{
  "id": "chatcmpl-par",
  "object": "chat.completion",
  "created": 1699896916,
  "model": "gpt-4o",
  "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}},
    {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Bogot\u00e1\"}"}}
  ]}}],
  "usage": {"prompt_tokens": 100, "completion_tokens": 40, "total_tokens": 140}
}`
	chatRefusalBody = `{
  "id": "chatcmpl-ref", "object": "chat.completion", "created": 1, "model": "gpt-4o",
  "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": null,
    "refusal": "I'm sorry, I cannot assist with that request."}}],
  "usage": {"prompt_tokens": 10, "completion_tokens": 9, "total_tokens": 19}
}`
	chatLengthBody = `{
  "id": "chatcmpl-len", "object": "chat.completion", "created": 1, "model": "gpt-4o",
  "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "Let me",
    "tool_calls": [{"id": "call_cut", "type": "function", "function": {"name": "run_js", "arguments": "{\"code\": \"return [1, 2"}}]}}],
  "usage": {"prompt_tokens": 10, "completion_tokens": 16, "total_tokens": 26}
}`
	// DeepSeek's reasoner and vLLM: reasoning_content beside the content.
	chatReasoningBody = `{
  "id": "chatcmpl-rsn", "object": "chat.completion", "created": 1, "model": "deepseek-reasoner",
  "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
    "reasoning_content": "The user greets me. I greet back.", "content": "Hi!"}}],
  "usage": {"prompt_tokens": 5, "completion_tokens": 12, "total_tokens": 17, "completion_tokens_details": {"reasoning_tokens": 9}}
}`
)

func TestChatRequestMapping(t *testing.T) {
	f := newFakeServer(t, ok(chatTextBody))
	m, _ := newTestModel(t, f, APIChat)
	req := model.Request{
		Purpose: model.PurposeStep,
		System:  "Plan and answer.",
		Messages: []model.Message{
			model.TextMessage("u1", model.RoleUser, "What is the weather?"),
			{ID: "a1", Role: model.RoleAssistant, Meta: map[string][]byte{"cairn.secret": []byte("x"), MetaResponseID: []byte("chatcmpl-0")}, Parts: []model.Part{
				{Type: model.PartReasoning, Text: "thinking", Meta: map[string][]byte{MetaReasoningField: []byte("reasoning_content")}},
				{Type: model.PartText, Text: "Checking two cities."},
				model.Call("call_1", "get_weather", `{"location":"Paris"}`),
				model.Call("call_2", "get_weather", `{"location": "Bogotá"`), // malformed, sent as it was
			}},
			{ID: "t1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "call_1", Name: "get_weather", Content: "18C"}}}},
			{ID: "t2", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "call_2", Name: "get_weather", Content: "invalid arguments", IsError: true,
				Attachments: []model.Attachment{{Ref: "obj://k1", MediaType: "text/csv", Name: "log.csv", Size: 12}}}}}},
			{ID: "u2", Role: model.RoleUser, Parts: []model.Part{
				{Type: model.PartText, Text: "And this picture?"},
				{Type: model.PartAttachment, Attachment: &model.Attachment{Ref: "https://example.test/p.png", MediaType: "image/png"}},
			}},
		},
		Tools: []model.ToolDef{
			{Name: "get_weather", Description: "Weather for a city.", InputSchema: json.RawMessage(`{"type":"object","required":["location"],"properties":{"location":{"type":"string"}},"additionalProperties":false}`)},
			{Name: "complete", Description: "Finish.", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number","maximum":1e2}}}`)},
		},
		MaxOutputTokens: 4000,
		Options:         json.RawMessage(`{"temperature":0.2,"top_p":0.9,"seed":7,"stop":["END"],"reasoning_effort":"low","parallel_tool_calls":false,"tool_choice":"required","extra_body":{"top_k":20}}`),
	}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.path != "/v1/chat/completions" {
		t.Fatalf("path %q", r.path)
	}
	if got := r.header.Get("Authorization"); got != "Bearer sk-test-secret-key-0123456789" {
		t.Fatalf("Authorization %q", got)
	}
	jsonEqual(t, "request", r.body, `{
	  "model": "gpt-test",
	  "messages": [
	    {"role": "system", "content": "Plan and answer."},
	    {"role": "user", "content": "What is the weather?"},
	    {"role": "assistant", "content": "Checking two cities.", "tool_calls": [
	      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\":\"Paris\"}"}},
	      {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"location\": \"Bogotá\""}}
	    ]},
	    {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
	    {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments\n[attachment \"log.csv\" text/csv 12 bytes: obj://k1]"},
	    {"role": "user", "content": [
	      {"type": "text", "text": "And this picture?"},
	      {"type": "image_url", "image_url": {"url": "https://example.test/p.png"}}
	    ]}
	  ],
	  "tools": [
	    {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
	      "parameters": {"type":"object","required":["location"],"properties":{"location":{"type":"string"}},"additionalProperties":false}}},
	    {"type": "function", "function": {"name": "complete", "description": "Finish.",
	      "parameters": {"type":"object","properties":{"n":{"type":"number","maximum":100}}}}}
	  ],
	  "max_tokens": 4000,
	  "temperature": 0.2,
	  "top_p": 0.9,
	  "seed": 7,
	  "stop": ["END"],
	  "reasoning_effort": "low",
	  "parallel_tool_calls": false,
	  "tool_choice": "required",
	  "top_k": 20
	}`)
	// The schema's bytes are sent unchanged: key order and number text.
	if !strings.Contains(string(r.raw), `{"type":"object","properties":{"n":{"type":"number","maximum":1e2}}}`) {
		t.Fatalf("schema not sent verbatim: %s", r.raw)
	}
	if strings.Contains(string(r.raw), "cairn.") {
		t.Fatalf("a runtime Meta key reached the wire: %s", r.raw)
	}
}

func TestChatMaxTokensParam(t *testing.T) {
	tests := []struct {
		name  string
		param string
		want  string
	}{
		{"compatible default", MaxTokensAuto, "max_tokens"},
		{"completion", MaxTokensCompletion, "max_completion_tokens"},
		{"legacy", MaxTokensLegacy, "max_tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, ok(chatTextBody))
			m, _ := newTestModel(t, f, APIChat, func(c *Config) { c.MaxTokensParam = tt.param })
			if _, err := m.Generate(context.Background(), model.Request{Messages: []model.Message{model.TextMessage("u", model.RoleUser, "hi")}, MaxOutputTokens: 77}); err != nil {
				t.Fatal(err)
			}
			body := f.requests()[0].body
			if body[tt.want] != float64(77) || len(body) != 3 {
				t.Fatalf("body %v, want %s: 77", body, tt.want)
			}
		})
	}
}

func TestChatCompactionRequest(t *testing.T) {
	f := newFakeServer(t, ok(chatTextBody))
	m, _ := newTestModel(t, f, APIChat)
	_, err := m.Generate(context.Background(), model.Request{Purpose: model.PurposeCompaction, System: "Summarize.",
		Messages: []model.Message{model.TextMessage("compaction-input", model.RoleUser, "transcript")}, MaxOutputTokens: 100,
		// Tool settings must not be sent without tools.
		Options: json.RawMessage(`{"tool_choice":"required","parallel_tool_calls":true}`)})
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "compaction request", f.requests()[0].body, `{"model":"gpt-test","max_tokens":100,
	  "messages":[{"role":"system","content":"Summarize."},{"role":"user","content":"transcript"}]}`)
}

func TestChatResponses(t *testing.T) {
	meta := func(kv ...string) map[string][]byte {
		m := map[string][]byte{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = []byte(kv[i+1])
		}
		return m
	}
	tests := []struct {
		name      string
		body      string
		wantParts []model.Part
		wantUsage model.Usage
		wantStop  string
		wantMeta  map[string][]byte // a subset of Message.Meta
		wantErr   error
	}{
		{
			name:      "plain text",
			body:      chatTextBody,
			wantParts: []model.Part{{Type: model.PartText, Text: "Hello! How can I assist you today?"}},
			wantUsage: model.Usage{InputTokens: 19, OutputTokens: 10},
			wantStop:  "stop",
			wantMeta: meta(MetaResponseID, "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", MetaModel, "gpt-4.1-2025-04-14",
				MetaSystemFingerprint, "fp_44709d6fcb", MetaFinishReason, "stop", MetaServiceTier, "default", MetaAPI, "chat"),
		},
		{
			name:      "tool call keeps the exact arguments",
			body:      chatToolBody,
			wantParts: []model.Part{model.Call("call_abc123", "get_current_weather", "{\n\"location\": \"Boston, MA\"\n}")},
			wantUsage: model.Usage{InputTokens: 82, OutputTokens: 17, CachedInputTokens: 64, ReasoningTokens: 5},
			wantStop:  "tool_calls",
		},
		{
			name: "parallel tool calls in order",
			body: chatParallelBody,
			wantParts: []model.Part{
				model.Call("call_1", "get_weather", `{"location":"Paris"}`),
				model.Call("call_2", "get_weather", `{"location":"Bogotá"}`),
			},
			wantUsage: model.Usage{InputTokens: 100, OutputTokens: 40},
			wantStop:  "tool_calls",
		},
		{
			name: "refusal is a marked text part",
			body: chatRefusalBody,
			wantParts: []model.Part{{Type: model.PartText, Text: RefusalPrefix + "I'm sorry, I cannot assist with that request.",
				Meta: meta(MetaRefusal, "I'm sorry, I cannot assist with that request.")}},
			wantUsage: model.Usage{InputTokens: 10, OutputTokens: 9},
			wantStop:  "stop",
		},
		{
			name: "length stop keeps cut-off arguments",
			body: chatLengthBody,
			wantParts: []model.Part{{Type: model.PartText, Text: "Let me"},
				model.Call("call_cut", "run_js", `{"code": "return [1, 2`)},
			wantUsage: model.Usage{InputTokens: 10, OutputTokens: 16},
			wantStop:  "length",
		},
		{
			name: "reasoning_content of a compatible server",
			body: chatReasoningBody,
			wantParts: []model.Part{
				{Type: model.PartReasoning, Text: "The user greets me. I greet back.", Meta: meta(MetaReasoningField, "reasoning_content")},
				{Type: model.PartText, Text: "Hi!"},
			},
			wantUsage: model.Usage{InputTokens: 5, OutputTokens: 12, ReasoningTokens: 9},
			wantStop:  "stop",
		},
		{
			name: "reasoning and reasoning_details of OpenRouter",
			body: `{"id":"gen-1","object":"chat.completion","model":"x","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"ok",
				"reasoning":"hmm","reasoning_details":[{"type":"reasoning.encrypted","data":"ZW5j","id":"r1"}]}}]}`,
			wantParts: []model.Part{{Type: model.PartReasoning, Text: "hmm", Meta: meta(MetaReasoningField, "reasoning")}, {Type: model.PartText, Text: "ok"}},
			wantStop:  "stop",
			wantMeta:  meta(MetaReasoningDetails, `[{"type":"reasoning.encrypted","data":"ZW5j","id":"r1"}]`),
		},
		{
			name: "arguments sent as an object are kept as sent",
			body: `{"id":"x","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","tool_calls":[
				{"id":"c1","type":"function","function":{"name":"f","arguments":{"a": 1}}}]}}]}`,
			wantParts: []model.Part{model.Call("c1", "f", `{"a": 1}`)},
			wantStop:  "tool_calls",
		},
		{
			name: "arguments keep surrounding whitespace and escapes",
			body: `{"id":"x","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","tool_calls":[
				{"id":"c1","type":"function","function":{"name":"f","arguments":" {\"s\": \"\u00e9\\n\"}\n"}}]}}]}`,
			wantParts: []model.Part{model.Call("c1", "f", " {\"s\": \"é\\n\"}\n")},
			wantStop:  "tool_calls",
		},
		{
			name:      "content as an array of parts",
			body:      `{"id":"x","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}`,
			wantParts: []model.Part{{Type: model.PartText, Text: "ab"}},
			wantStop:  "stop",
		},
		{name: "invalid JSON", body: `{"id": "x", "choices": [`, wantErr: ErrResponse},
		{name: "not an object", body: `[1,2]`, wantErr: ErrResponse},
		{name: "no choices", body: `{"id":"x","object":"chat.completion","choices":[]}`, wantErr: ErrResponse},
		{name: "no message", body: `{"id":"x","choices":[{"index":0,"finish_reason":"stop"}]}`, wantErr: ErrResponse},
		{name: "no finish reason", body: `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"a"}}]}`, wantErr: ErrResponse},
		{name: "unknown finish reason", body: `{"id":"x","choices":[{"index":0,"finish_reason":"exploded","message":{"content":"a"}}]}`, wantErr: ErrResponse},
		{name: "tool call without id", body: `{"id":"x","choices":[{"index":0,"finish_reason":"tool_calls","message":{"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`, wantErr: ErrResponse},
		{name: "tool call without name", body: `{"id":"x","choices":[{"index":0,"finish_reason":"tool_calls","message":{"tool_calls":[{"id":"c","type":"function","function":{"arguments":"{}"}}]}}]}`, wantErr: ErrResponse},
		{name: "an error object with status 200", body: `{"error":{"message":"upstream failed","code":502}}`, wantErr: ErrResponse},
		{name: "wrong object", body: `{"object":"list","choices":[]}`, wantErr: ErrResponse},
		{
			name:      "usage reported, response unusable: usage still returned",
			body:      `{"id":"x","choices":[{"index":0,"finish_reason":"bogus","message":{"content":"a"}}],"usage":{"prompt_tokens":7,"completion_tokens":3}}`,
			wantUsage: model.Usage{InputTokens: 7, OutputTokens: 3},
			wantErr:   ErrResponse,
		},
		{name: "usage of the wrong type", body: `{"choices":[],"usage":{"prompt_tokens":"many"}}`, wantErr: ErrResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, ok(tt.body))
			m, _ := newTestModel(t, f, APIChat)
			resp, err := m.Generate(context.Background(), model.Request{Messages: []model.Message{model.TextMessage("u", model.RoleUser, "hi")}})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantUsage == (model.Usage{}) {
					if resp != nil {
						t.Fatalf("resp = %+v with the error, want nil", resp)
					}
				} else if resp == nil || resp.Usage != tt.wantUsage {
					t.Fatalf("resp = %+v, want usage %+v with the error (C34)", resp, tt.wantUsage)
				}
				if len(f.requests()) != 1 {
					t.Fatalf("%d requests: a malformed response must not be retried", len(f.requests()))
				}
				return
			}
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if resp.Message.Role != model.RoleAssistant {
				t.Fatalf("role %q", resp.Message.Role)
			}
			if !reflect.DeepEqual(resp.Message.Parts, tt.wantParts) {
				t.Fatalf("parts:\n got %s\nwant %s", dumpParts(resp.Message.Parts), dumpParts(tt.wantParts))
			}
			if resp.Usage != tt.wantUsage || resp.StopReason != tt.wantStop {
				t.Fatalf("usage %+v stop %q, want %+v %q", resp.Usage, resp.StopReason, tt.wantUsage, tt.wantStop)
			}
			for k, v := range tt.wantMeta {
				if string(resp.Message.Meta[k]) != string(v) {
					t.Fatalf("Meta[%s] = %q, want %q", k, resp.Message.Meta[k], v)
				}
			}
		})
	}
}

func dumpParts(ps []model.Part) string {
	b, _ := json.Marshal(ps)
	return string(b)
}

// The reasoning of a compatible server goes back on the next request when
// EchoReasoning is set, and not otherwise.
func TestChatEchoReasoning(t *testing.T) {
	orBody := `{"id":"gen-1","object":"chat.completion","model":"x","choices":[{"index":0,"finish_reason":"tool_calls","message":{"role":"assistant","content":null,
		"reasoning":"I should call f.","reasoning_details":[{"type":"reasoning.encrypted","data":"ZW5jcnlwdGVk","id":"r1","format":"anthropic-claude-v1"}],
		"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}}]}`
	for _, echo := range []bool{false, true} {
		t.Run(map[bool]string{false: "off", true: "on"}[echo], func(t *testing.T) {
			f := newFakeServer(t, ok(orBody), ok(chatTextBody))
			m, _ := newTestModel(t, f, APIChat, func(c *Config) { c.EchoReasoning = echo })
			msgs := []model.Message{model.TextMessage("u", model.RoleUser, "go")}
			resp, err := m.Generate(context.Background(), model.Request{Messages: msgs})
			if err != nil {
				t.Fatal(err)
			}
			a := resp.Message
			a.ID = "a1"
			msgs = append(msgs, roundTrip(t, a), model.Message{ID: "t1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "c1", Name: "f", Content: "done"}}}})
			if _, err := m.Generate(context.Background(), model.Request{Messages: msgs}); err != nil {
				t.Fatal(err)
			}
			got := field(f.requests()[1].body, "messages", 1)
			want := `{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
			if echo {
				want = `{"role":"assistant","reasoning":"I should call f.",
				  "reasoning_details":[{"type":"reasoning.encrypted","data":"ZW5jcnlwdGVk","id":"r1","format":"anthropic-claude-v1"}],
				  "tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}`
			}
			jsonEqual(t, "assistant message sent back", got, want)
		})
	}
}

// roundTrip passes a message through JSON, as a store would (C16).
func roundTrip(t testing.TB, m model.Message) model.Message {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out model.Message
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
