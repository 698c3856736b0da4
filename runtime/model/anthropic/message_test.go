package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// The Messages API examples of Anthropic's documentation.
const (
	textBody = `{
  "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [{"type": "text", "text": "Hi! My name is Claude."}],
  "stop_reason": "end_turn",
  "stop_sequence": null,
  "usage": {"input_tokens": 2095, "output_tokens": 503, "cache_creation_input_tokens": 2051, "cache_read_input_tokens": 2051,
    "cache_creation": {"ephemeral_5m_input_tokens": 2051, "ephemeral_1h_input_tokens": 0}, "service_tier": "standard"}
}`
	toolBody = `{
  "id": "msg_01Aq9w938a90dw8q",
  "type": "message",
  "model": "claude-sonnet-4-5",
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "role": "assistant",
  "content": [
    {"type": "text", "text": "I'll check the current weather in San Francisco for you."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather", "input": {"location": "San Francisco, CA", "unit": "celsius"}}
  ],
  "usage": {"input_tokens": 472, "output_tokens": 84}
}`
	parallelBody = `{
  "id": "msg_par", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "tool_use", "stop_sequence": null,
  "content": [
    {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"location": "Paris"}},
    {"type": "tool_use", "id": "toolu_02", "name": "get_time", "input": {"timezone":"Europe/Paris","n":1.50}}
  ],
  "usage": {"input_tokens": 500, "output_tokens": 90}
}`
	thinkingSignature = "WaUjzkypQ2mUEVM36O2TxuC06KN8xyfbJwyem2dw3URve/op91XWHOEBLLqIOMfFG/UvLEczmEsUjavL+Aw=="
	redactedData      = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpPkNRj2YfWXGmKDxH4mPnZ5sQ7vB9URj2pLmN3kF8/dW5hR7xJ0aP1oLs9yTcMnKVf2wRpEGjH9XZaBt4UvDcPrQ=="
	thinkingBody      = `{
  "id": "msg_think", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "tool_use", "stop_sequence": null,
  "content": [
    {"type": "thinking", "thinking": "Let me analyze this step by step...", "signature": "` + thinkingSignature + `"},
    {"type": "redacted_thinking", "data": "` + redactedData + `"},
    {"type": "text", "text": "Based on my analysis, I will look it up."},
    {"type": "tool_use", "id": "toolu_think", "name": "run_js", "input": {"code": "return 1"}}
  ],
  "usage": {"input_tokens": 100, "output_tokens": 300, "output_tokens_details": {"thinking_tokens": 220}}
}`
	refusalBody = `{
  "id": "msg_ref", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "content": [],
  "stop_reason": "refusal", "stop_sequence": null,
  "stop_details": {"type": "refusal", "category": "cyber", "explanation": "This request asks for malware."},
  "usage": {"input_tokens": 30, "output_tokens": 2}
}`
	maxTokensBody = `{
  "id": "msg_max", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5", "stop_reason": "max_tokens", "stop_sequence": null,
  "content": [{"type": "text", "text": "I will write the"}, {"type": "tool_use", "id": "toolu_cut", "name": "run_js", "input": {}}],
  "usage": {"input_tokens": 30, "output_tokens": 16}
}`
)

func TestRequestMapping(t *testing.T) {
	f := newFakeServer(t, ok(textBody))
	m, _ := newTestModel(t, f)
	req := model.Request{
		System: "Plan and answer.",
		Messages: []model.Message{
			model.TextMessage("u1", model.RoleUser, "What is the weather?"),
			model.TextMessage("u2", model.RoleUser, "In two cities."), // merged with u1
			{ID: "a1", Role: model.RoleAssistant, Meta: map[string][]byte{"cairn.x": []byte("no"), MetaMessageID: []byte("msg_1")}, Parts: []model.Part{
				{Type: model.PartReasoning, Text: "I need two calls.", Meta: map[string][]byte{MetaSignature: []byte(thinkingSignature)}},
				{Type: model.PartReasoning, Meta: map[string][]byte{MetaRedactedThinking: []byte(redactedData)}},
				{Type: model.PartReasoning, Text: "unsigned, from another provider", Meta: map[string][]byte{"openai.item": []byte(`{}`)}},
				{Type: model.PartText, Text: "Checking."},
				{Type: model.PartText, Text: ""}, // empty text blocks are rejected by the API
				model.Call("toolu_1", "get_weather", `{"location": "Paris"}`),
				model.Call("toolu_2", "get_weather", `{"location": "Bog`), // cut off
			}},
			{ID: "t1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "toolu_1", Content: "18C"}}}},
			{ID: "t2", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "toolu_2", Content: "invalid arguments", IsError: true,
				Attachments: []model.Attachment{{Ref: "https://example.test/chart.png", MediaType: "image/png"}, {Ref: "obj://k", Name: "log.txt"}}}}}},
			model.TextMessage("n1", model.RoleUser, "[host recovery notice] resumed"), // merged after the results
			{ID: "a2", Role: model.RoleAssistant, Parts: []model.Part{{Type: model.PartText, Text: "Done."}}},
			{ID: "u3", Role: model.RoleUser, Parts: []model.Part{
				{Type: model.PartText, Text: "Look:"},
				{Type: model.PartAttachment, Attachment: &model.Attachment{Ref: "data:image/png;base64,iVBORw0KGgo=", MediaType: "image/png"}},
			}},
		},
		Tools: []model.ToolDef{
			{Name: "get_weather", Description: "Weather for a city.", InputSchema: json.RawMessage(`{"type":"object","required":["location"],"properties":{"location":{"type":"string"}}}`)},
			{Name: "complete", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"number","maximum":1e2}}}`)},
		},
		MaxOutputTokens: 8000,
		Options: json.RawMessage(`{"thinking_budget":2048,"temperature":1,"top_k":40,"stop_sequences":["END"],"effort":"high",
			"tool_choice":"auto","disable_parallel_tool_use":true,"service_tier":"auto","metadata_user_id":"u-1","extra_body":{"inference_geo":"us"}}`),
	}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests", len(reqs))
	}
	r := reqs[0]
	if r.path != "/v1/messages" {
		t.Fatalf("path %q", r.path)
	}
	// SDK v2.15 sends the API key as a bearer token.
	if r.header.Get("Authorization") != "Bearer sk-ant-test-secret-key-0123456789" || r.header.Get("Anthropic-Version") == "" {
		t.Fatalf("headers %v", r.header)
	}
	jsonEqual(t, "request", r.body, `{
	  "model": "claude-test",
	  "max_tokens": 8000,
	  "system": [{"type": "text", "text": "Plan and answer."}],
	  "messages": [
	    {"role": "user", "content": [
	      {"type": "text", "text": "What is the weather?"},
	      {"type": "text", "text": "In two cities."}
	    ]},
	    {"role": "assistant", "content": [
	      {"type": "thinking", "thinking": "I need two calls.", "signature": "`+thinkingSignature+`"},
	      {"type": "redacted_thinking", "data": "`+redactedData+`"},
	      {"type": "text", "text": "Checking."},
	      {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"location": "Paris"}},
	      {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"_unparsed_input": "{\"location\": \"Bog"}}
	    ]},
	    {"role": "user", "content": [
	      {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
	      {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": [
	        {"type": "text", "text": "invalid arguments"},
	        {"type": "image", "source": {"type": "url", "url": "https://example.test/chart.png"}},
	        {"type": "text", "text": "[attachment \"log.txt\": obj://k]"}
	      ]},
	      {"type": "text", "text": "[host recovery notice] resumed"}
	    ]},
	    {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
	    {"role": "user", "content": [
	      {"type": "text", "text": "Look:"},
	      {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
	    ]}
	  ],
	  "tools": [
	    {"name": "get_weather", "description": "Weather for a city.", "input_schema": {"type":"object","required":["location"],"properties":{"location":{"type":"string"}}}},
	    {"name": "complete", "input_schema": {"type":"object","properties":{"n":{"type":"number","maximum":100}}}}
	  ],
	  "thinking": {"type": "enabled", "budget_tokens": 2048},
	  "output_config": {"effort": "high"},
	  "stop_sequences": ["END"],
	  "service_tier": "auto",
	  "metadata": {"user_id": "u-1"},
	  "tool_choice": {"type": "auto", "disable_parallel_tool_use": true},
	  "temperature": 1,
	  "top_k": 40,
	  "inference_geo": "us"
	}`)
	if !strings.Contains(string(r.raw), `{"type":"object","properties":{"n":{"type":"number","maximum":1e2}}}`) {
		t.Fatalf("schema not sent verbatim: %s", r.raw)
	}
	if strings.Contains(string(r.raw), "cairn.") || strings.Contains(string(r.raw), "unsigned") {
		t.Fatalf("runtime Meta or unsigned reasoning reached the wire: %s", r.raw)
	}
}

func TestCompactionRequest(t *testing.T) {
	f := newFakeServer(t, ok(textBody))
	m, _ := newTestModel(t, f)
	_, err := m.Generate(context.Background(), model.Request{Purpose: model.PurposeCompaction, System: "Summarize.",
		Messages: []model.Message{model.TextMessage("compaction-input", model.RoleUser, "transcript")},
		Options:  json.RawMessage(`{"tool_choice":"any"}`)})
	if err != nil {
		t.Fatal(err)
	}
	// No MaxOutputTokens: Config.MaxTokens; no tools: no tool_choice.
	jsonEqual(t, "request", f.requests()[0].body, `{"model":"claude-test","max_tokens":4096,
	  "system":[{"type":"text","text":"Summarize."}],
	  "messages":[{"role":"user","content":[{"type":"text","text":"transcript"}]}]}`)
}

func TestResponses(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantParts []model.Part
		wantUsage model.Usage
		wantStop  string
		wantMeta  map[string]string
		wantErr   error
	}{
		{
			name:      "plain text with cache usage",
			body:      textBody,
			wantParts: []model.Part{{Type: model.PartText, Text: "Hi! My name is Claude."}},
			wantUsage: model.Usage{InputTokens: 2095 + 2051 + 2051, OutputTokens: 503, CachedInputTokens: 2051},
			wantStop:  "end_turn",
			wantMeta: map[string]string{MetaMessageID: "msg_013Zva2CMHLNnXjNJJKqJ2EF", MetaModel: "claude-sonnet-4-5-20250929",
				MetaStopReason: "end_turn", MetaCacheCreation: "2051"},
		},
		{
			name: "tool use keeps the input's bytes",
			body: toolBody,
			wantParts: []model.Part{{Type: model.PartText, Text: "I'll check the current weather in San Francisco for you."},
				model.Call("toolu_01A09q90qw90lq917835lq9", "get_weather", `{"location": "San Francisco, CA", "unit": "celsius"}`)},
			wantUsage: model.Usage{InputTokens: 472, OutputTokens: 84},
			wantStop:  "tool_use",
		},
		{
			name: "parallel tool use in order",
			body: parallelBody,
			wantParts: []model.Part{model.Call("toolu_01", "get_weather", `{"location": "Paris"}`),
				model.Call("toolu_02", "get_time", `{"timezone":"Europe/Paris","n":1.50}`)},
			wantUsage: model.Usage{InputTokens: 500, OutputTokens: 90},
			wantStop:  "tool_use",
		},
		{
			name: "thinking and redacted thinking keep their signatures",
			body: thinkingBody,
			wantParts: []model.Part{
				{Type: model.PartReasoning, Text: "Let me analyze this step by step...", Meta: map[string][]byte{MetaSignature: []byte(thinkingSignature)}},
				{Type: model.PartReasoning, Meta: map[string][]byte{MetaRedactedThinking: []byte(redactedData)}},
				{Type: model.PartText, Text: "Based on my analysis, I will look it up."},
				model.Call("toolu_think", "run_js", `{"code": "return 1"}`),
			},
			wantUsage: model.Usage{InputTokens: 100, OutputTokens: 300, ReasoningTokens: 220},
			wantStop:  "tool_use",
		},
		{
			name: "refusal is a marked text part",
			body: refusalBody,
			wantParts: []model.Part{{Type: model.PartText, Text: RefusalPrefix + "This request asks for malware.",
				Meta: map[string][]byte{MetaRefusal: []byte(`{"type": "refusal", "category": "cyber", "explanation": "This request asks for malware."}`)}}},
			wantUsage: model.Usage{InputTokens: 30, OutputTokens: 2},
			wantStop:  "refusal",
		},
		{
			name:      "max_tokens keeps the cut-off call",
			body:      maxTokensBody,
			wantParts: []model.Part{{Type: model.PartText, Text: "I will write the"}, model.Call("toolu_cut", "run_js", `{}`)},
			wantUsage: model.Usage{InputTokens: 30, OutputTokens: 16},
			wantStop:  "max_tokens",
		},
		{name: "invalid JSON", body: `{"id": "msg_1", "content": [`, wantErr: ErrResponse},
		{name: "no content", body: `{"id":"m","type":"message","role":"assistant","stop_reason":"end_turn"}`, wantErr: ErrResponse},
		{name: "no stop reason", body: `{"id":"m","type":"message","role":"assistant","content":[]}`, wantErr: ErrResponse},
		{name: "unknown stop reason", body: `{"id":"m","type":"message","content":[],"stop_reason":"exploded"}`, wantErr: ErrResponse},
		{name: "unknown block", body: `{"id":"m","type":"message","content":[{"type":"server_tool_use","id":"s"}],"stop_reason":"end_turn"}`, wantErr: ErrResponse},
		{name: "thinking without signature", body: `{"id":"m","type":"message","content":[{"type":"thinking","thinking":"x"}],"stop_reason":"end_turn"}`, wantErr: ErrResponse},
		{name: "tool use without id", body: `{"id":"m","type":"message","content":[{"type":"tool_use","name":"f","input":{}}],"stop_reason":"tool_use"}`, wantErr: ErrResponse},
		{name: "error event with status 200", body: `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`, wantErr: ErrResponse},
		{
			name:      "usage reported, response unusable: usage still returned",
			body:      `{"id":"m","type":"message","content":[{"type":"mystery"}],"stop_reason":"end_turn","usage":{"input_tokens":11,"output_tokens":4}}`,
			wantUsage: model.Usage{InputTokens: 11, OutputTokens: 4},
			wantErr:   ErrResponse,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, ok(tt.body))
			m, _ := newTestModel(t, f)
			resp, err := m.Generate(context.Background(), hi())
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantUsage == (model.Usage{}) {
					if resp != nil {
						t.Fatalf("resp %+v with the error", resp)
					}
				} else if resp == nil || resp.Usage != tt.wantUsage {
					t.Fatalf("resp %+v, want usage %+v (C34)", resp, tt.wantUsage)
				}
				if len(f.requests()) != 1 {
					t.Fatal("a malformed response was retried")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(resp.Message.Parts, tt.wantParts) {
				t.Fatalf("parts:\n got %s\nwant %s", dumpParts(resp.Message.Parts), dumpParts(tt.wantParts))
			}
			if resp.Usage != tt.wantUsage || resp.StopReason != tt.wantStop {
				t.Fatalf("usage %+v stop %q, want %+v %q", resp.Usage, resp.StopReason, tt.wantUsage, tt.wantStop)
			}
			for k, v := range tt.wantMeta {
				if string(resp.Message.Meta[k]) != v {
					t.Fatalf("Meta[%s] = %q, want %q", k, resp.Message.Meta[k], v)
				}
			}
		})
	}
}

// The thinking blocks of the first response go back on the second request
// byte for byte, after a JSON store (C16), before the tool_use they led to.
func TestThinkingRoundTrip(t *testing.T) {
	f := newFakeServer(t, ok(thinkingBody), ok(textBody))
	m, _ := newTestModel(t, f)
	req := hi()
	req.Options = json.RawMessage(`{"thinking_budget":1024}`)
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	a := resp.Message
	a.ID = "a1"
	req.Messages = append(req.Messages, roundTrip(t, a),
		model.Message{ID: "t1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "toolu_think", Content: "1"}}}})
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	second := f.requests()[1]
	jsonEqual(t, "second request's messages", second.body["messages"], `[
	  {"role":"user","content":[{"type":"text","text":"hi"}]},
	  {"role":"assistant","content":[
	    {"type":"thinking","thinking":"Let me analyze this step by step...","signature":"`+thinkingSignature+`"},
	    {"type":"redacted_thinking","data":"`+redactedData+`"},
	    {"type":"text","text":"Based on my analysis, I will look it up."},
	    {"type":"tool_use","id":"toolu_think","name":"run_js","input":{"code":"return 1"}}]},
	  {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_think","content":[{"type":"text","text":"1"}]}]}]`)
	// Byte for byte: the signature's exact text.
	if got := field(second.body, "messages", 1, "content", 0, "signature"); got != thinkingSignature {
		t.Fatalf("signature %q", got)
	}
	if got := field(second.body, "messages", 1, "content", 1, "data"); got != redactedData {
		t.Fatalf("redacted data %q", got)
	}
}

func TestThinkingBudgetBelowMaxTokens(t *testing.T) {
	f := newFakeServer(t)
	m, _ := newTestModel(t, f)
	req := hi()
	req.MaxOutputTokens = 2000
	req.Options = json.RawMessage(`{"thinking_budget":4000}`)
	_, err := m.Generate(context.Background(), req)
	var oe *OptionError
	if !errors.As(err, &oe) || oe.Option != "thinking_budget" || len(f.requests()) != 0 {
		t.Fatalf("err = %v", err)
	}
}

func dumpParts(ps []model.Part) string {
	b, _ := json.Marshal(ps)
	return string(b)
}

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

func hi() model.Request {
	return model.Request{Messages: []model.Message{model.TextMessage("u", model.RoleUser, "hi")}}
}
