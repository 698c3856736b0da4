package openai

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// The Responses API examples of OpenAI's API reference and guides.
const (
	respTextBody = `{
  "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
  "object": "response",
  "created_at": 1741476542,
  "status": "completed",
  "error": null,
  "incomplete_details": null,
  "instructions": null,
  "max_output_tokens": null,
  "model": "gpt-4.1-2025-04-14",
  "output": [
    {
      "type": "message",
      "id": "msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b",
      "status": "completed",
      "role": "assistant",
      "content": [
        {
          "type": "output_text",
          "text": "In a peaceful grove beneath a silver moon, a unicorn named Lumina discovered a hidden pool.",
          "annotations": []
        }
      ]
    }
  ],
  "parallel_tool_calls": true,
  "previous_response_id": null,
  "reasoning": {"effort": null, "summary": null},
  "store": true,
  "temperature": 1.0,
  "text": {"format": {"type": "text"}},
  "tool_choice": "auto",
  "tools": [],
  "top_p": 1.0,
  "truncation": "disabled",
  "usage": {
    "input_tokens": 36,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 87,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 123
  },
  "user": null,
  "metadata": {}
}`
	respReasoningItem = `{"id":"rs_6890ed2b6374819dbbff5353e6664ef103f4db9848be4829","type":"reasoning","summary":[{"type":"summary_text","text":"**Checking the weather**\n\nThe user asks for two cities."}],"encrypted_content":"gAAAAABokO0wGmS0Z5t0lG3eT4aI3mJzL0cF8Q=="}`
	respToolBody      = `{
  "id": "resp_tools", "object": "response", "status": "completed", "model": "o4-mini-2025-04-16",
  "output": [
    ` + respReasoningItem + `,
    {"id": "fc_12345xyz", "type": "function_call", "status": "completed", "arguments": "{\"location\":\"Paris, France\"}", "call_id": "call_12345xyz", "name": "get_weather"},
    {"id": "fc_67890abc", "type": "function_call", "status": "completed", "arguments": "{\"location\":\"Bogotá, Colombia\"}", "call_id": "call_67890abc", "name": "get_weather"}
  ],
  "usage": {"input_tokens": 291, "input_tokens_details": {"cached_tokens": 128}, "output_tokens": 23, "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 314}
}`
	respRefusalBody = `{
  "id": "resp_ref", "object": "response", "status": "completed", "model": "gpt-4o",
  "output": [{"type": "message", "id": "msg_ref", "status": "completed", "role": "assistant",
    "content": [{"type": "refusal", "refusal": "I'm sorry, I can't help with that."}]}],
  "usage": {"input_tokens": 20, "output_tokens": 10, "total_tokens": 30}
}`
	respIncompleteBody = `{
  "id": "resp_inc", "object": "response", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "model": "o4-mini",
  "output": [{"id": "rs_inc", "type": "reasoning", "summary": []},
    {"id": "fc_cut", "type": "function_call", "status": "incomplete", "arguments": "{\"code\":\"retu", "call_id": "call_cut", "name": "run_js"}],
  "usage": {"input_tokens": 50, "output_tokens": 64, "output_tokens_details": {"reasoning_tokens": 60}, "total_tokens": 114}
}`
)

func TestResponsesRequestMapping(t *testing.T) {
	f := newFakeServer(t, ok(respTextBody))
	m, _ := newTestModel(t, f, APIResponses)
	req := model.Request{
		System: "Plan and answer.",
		Messages: []model.Message{
			model.TextMessage("u1", model.RoleUser, "Weather in Paris and Bogotá?"),
			{ID: "a1", Role: model.RoleAssistant, Parts: []model.Part{
				{Type: model.PartReasoning, Text: "Checking", Meta: map[string][]byte{MetaItem: []byte(respReasoningItem), MetaItemID: []byte("rs_6890ed2b6374819dbbff5353e6664ef103f4db9848be4829")}},
				// Without encrypted content it cannot be sent with store false.
				{Type: model.PartReasoning, Text: "old", Meta: map[string][]byte{MetaItem: []byte(`{"id":"rs_old","type":"reasoning","summary":[]}`)}},
				// Another provider's reasoning is not sent.
				{Type: model.PartReasoning, Text: "theirs", Meta: map[string][]byte{"anthropic.signature": []byte("sig")}},
				{Type: model.PartText, Text: "Let me check.", Meta: map[string][]byte{MetaItemID: []byte("msg_1"), MetaPhase: []byte("commentary")}},
				{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: "call_1", Name: "get_weather", Args: `{"location":"Paris"}`}, Meta: map[string][]byte{MetaItemID: []byte("fc_1")}},
				{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: "call_2", Name: "get_weather", Args: `{"location":`}},
			}},
			{ID: "t1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "call_1", Content: "18C"}}}},
			{ID: "t2", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "call_2", Content: "bad args", IsError: true}}}},
		},
		Tools:           []model.ToolDef{{Name: "get_weather", Description: "Weather.", InputSchema: json.RawMessage(`{"type":"object","properties":{"location":{"type":"string"}}}`)}},
		MaxOutputTokens: 2048,
		Options:         json.RawMessage(`{"reasoning_effort":"high","reasoning_summary":"auto","temperature":1,"tool_choice":"auto","parallel_tool_calls":true}`),
	}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	r := f.requests()[0]
	if r.path != "/v1/responses" {
		t.Fatalf("path %q", r.path)
	}
	jsonEqual(t, "request", r.body, `{
	  "model": "gpt-test",
	  "store": false,
	  "instructions": "Plan and answer.",
	  "input": [
	    {"role": "user", "content": "Weather in Paris and Bogotá?"},
	    `+respReasoningItem+`,
	    {"role": "assistant", "content": "Let me check.", "phase": "commentary"},
	    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"location\":\"Paris\"}"},
	    {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": "{\"location\":"},
	    {"type": "function_call_output", "call_id": "call_1", "output": "18C"},
	    {"type": "function_call_output", "call_id": "call_2", "output": "bad args"}
	  ],
	  "tools": [{"type": "function", "name": "get_weather", "description": "Weather.", "strict": false,
	    "parameters": {"type":"object","properties":{"location":{"type":"string"}}}}],
	  "max_output_tokens": 2048,
	  "reasoning": {"effort": "high", "summary": "auto"},
	  "include": ["reasoning.encrypted_content"],
	  "temperature": 1,
	  "tool_choice": "auto",
	  "parallel_tool_calls": true
	}`)
}

// With store true the server keeps items, so their IDs are sent and a
// reasoning item without encrypted content can go back by ID.
func TestResponsesStoreTrue(t *testing.T) {
	f := newFakeServer(t, ok(respTextBody))
	m, _ := newTestModel(t, f, APIResponses)
	_, err := m.Generate(context.Background(), model.Request{
		Messages: []model.Message{
			model.TextMessage("u1", model.RoleUser, "go"),
			{ID: "a1", Role: model.RoleAssistant, Parts: []model.Part{
				{Type: model.PartReasoning, Meta: map[string][]byte{MetaItem: []byte(`{"id":"rs_1","type":"reasoning","summary":[]}`)}},
				{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: "call_1", Name: "f", Args: `{}`}, Meta: map[string][]byte{MetaItemID: []byte("fc_1")}},
			}},
			{ID: "t1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "call_1", Content: "ok"}}}},
		},
		Options: json.RawMessage(`{"store":true}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	jsonEqual(t, "input", field(f.requests()[0].body, "input"), `[
	  {"role":"user","content":"go"},
	  {"id":"rs_1","type":"reasoning","summary":[]},
	  {"type":"function_call","id":"fc_1","call_id":"call_1","name":"f","arguments":"{}"},
	  {"type":"function_call_output","call_id":"call_1","output":"ok"}]`)
	if f.requests()[0].body["store"] != true || f.requests()[0].body["include"] != nil {
		t.Fatalf("store/include: %v", f.requests()[0].body)
	}
}

func TestResponsesResponses(t *testing.T) {
	tests := []struct {
		name      string
		body      string
		wantParts []model.Part
		wantUsage model.Usage
		wantStop  string
		wantErr   error
	}{
		{
			name: "plain text",
			body: respTextBody,
			wantParts: []model.Part{{Type: model.PartText, Text: "In a peaceful grove beneath a silver moon, a unicorn named Lumina discovered a hidden pool.",
				Meta: map[string][]byte{MetaItemID: []byte("msg_67ccd2bf17f0819081ff3bb2cf6508e60bb6a6b452d3795b")}}},
			wantUsage: model.Usage{InputTokens: 36, OutputTokens: 87},
			wantStop:  "completed",
		},
		{
			name: "reasoning and parallel function calls",
			body: respToolBody,
			wantParts: []model.Part{
				{Type: model.PartReasoning, Text: "**Checking the weather**\n\nThe user asks for two cities.",
					Meta: map[string][]byte{MetaItem: []byte(respReasoningItem), MetaItemID: []byte("rs_6890ed2b6374819dbbff5353e6664ef103f4db9848be4829")}},
				{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: "call_12345xyz", Name: "get_weather", Args: `{"location":"Paris, France"}`}, Meta: map[string][]byte{MetaItemID: []byte("fc_12345xyz")}},
				{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: "call_67890abc", Name: "get_weather", Args: `{"location":"Bogotá, Colombia"}`}, Meta: map[string][]byte{MetaItemID: []byte("fc_67890abc")}},
			},
			wantUsage: model.Usage{InputTokens: 291, OutputTokens: 23, CachedInputTokens: 128, ReasoningTokens: 12},
			wantStop:  "completed",
		},
		{
			name: "refusal",
			body: respRefusalBody,
			wantParts: []model.Part{{Type: model.PartText, Text: RefusalPrefix + "I'm sorry, I can't help with that.",
				Meta: map[string][]byte{MetaItemID: []byte("msg_ref"), MetaRefusal: []byte("I'm sorry, I can't help with that.")}}},
			wantUsage: model.Usage{InputTokens: 20, OutputTokens: 10},
			wantStop:  "completed",
		},
		{
			name: "incomplete at max output tokens keeps the cut-off call",
			body: respIncompleteBody,
			wantParts: []model.Part{
				{Type: model.PartReasoning, Meta: map[string][]byte{MetaItem: []byte(`{"id": "rs_inc", "type": "reasoning", "summary": []}`), MetaItemID: []byte("rs_inc")}},
				{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: "call_cut", Name: "run_js", Args: `{"code":"retu`}, Meta: map[string][]byte{MetaItemID: []byte("fc_cut")}},
			},
			wantUsage: model.Usage{InputTokens: 50, OutputTokens: 64, ReasoningTokens: 60},
			wantStop:  "max_output_tokens",
		},
		{
			name:      "failed, with usage",
			body:      `{"id":"resp_f","object":"response","status":"failed","error":{"code":"server_error","message":"boom"},"output":[],"usage":{"input_tokens":5,"output_tokens":1}}`,
			wantUsage: model.Usage{InputTokens: 5, OutputTokens: 1},
			wantErr:   ErrResponse,
		},
		{name: "no status", body: `{"id":"r","object":"response","output":[]}`, wantErr: ErrResponse},
		{name: "in progress", body: `{"id":"r","object":"response","status":"in_progress","output":[]}`, wantErr: ErrResponse},
		{name: "unknown item", body: `{"id":"r","object":"response","status":"completed","output":[{"type":"web_search_call","id":"ws"}]}`, wantErr: ErrResponse},
		{name: "unknown content", body: `{"id":"r","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"audio"}]}]}`, wantErr: ErrResponse},
		{name: "call without call_id", body: `{"id":"r","object":"response","status":"completed","output":[{"type":"function_call","name":"f","arguments":"{}"}]}`, wantErr: ErrResponse},
		{name: "invalid JSON", body: `{"id":"r","object":"response","status":"compl`, wantErr: ErrResponse},
		{name: "chat body on the responses API", body: chatTextBody, wantErr: ErrResponse},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeServer(t, ok(tt.body))
			m, _ := newTestModel(t, f, APIResponses)
			resp, err := m.Generate(context.Background(), hi())
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if tt.wantUsage != (model.Usage{}) && (resp == nil || resp.Usage != tt.wantUsage) {
					t.Fatalf("resp %+v, want usage %+v (C34)", resp, tt.wantUsage)
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
				t.Fatalf("usage %+v stop %q", resp.Usage, resp.StopReason)
			}
			if string(resp.Message.Meta[MetaAPI]) != "responses" || len(resp.Message.Meta[MetaResponseID]) == 0 {
				t.Fatalf("meta %q", resp.Message.Meta)
			}
		})
	}
}

// The reasoning item of the first response goes back on the second request
// exactly, after the message went through a JSON store (C16).
func TestResponsesMetadataRoundTrip(t *testing.T) {
	f := newFakeServer(t, ok(respToolBody), ok(respTextBody))
	m, _ := newTestModel(t, f, APIResponses)
	req := hi()
	req.Options = json.RawMessage(`{"reasoning_effort":"medium"}`)
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	a := resp.Message
	a.ID = "a1"
	req.Messages = append(req.Messages, roundTrip(t, a),
		model.Message{ID: "t1", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "call_12345xyz", Content: "18C"}}}},
		model.Message{ID: "t2", Role: model.RoleTool, Parts: []model.Part{{Type: model.PartToolResult, ToolResult: &model.ToolResult{CallID: "call_67890abc", Content: "25C"}}}})
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	second := f.requests()[1]
	jsonEqual(t, "second input", field(second.body, "input"), `[
	  {"role":"user","content":"hi"},
	  `+respReasoningItem+`,
	  {"type":"function_call","call_id":"call_12345xyz","name":"get_weather","arguments":"{\"location\":\"Paris, France\"}"},
	  {"type":"function_call","call_id":"call_67890abc","name":"get_weather","arguments":"{\"location\":\"Bogotá, Colombia\"}"},
	  {"type":"function_call_output","call_id":"call_12345xyz","output":"18C"},
	  {"type":"function_call_output","call_id":"call_67890abc","output":"25C"}]`)
	if got := field(second.body, "input", 1, "encrypted_content"); got != "gAAAAABokO0wGmS0Z5t0lG3eT4aI3mJzL0cF8Q==" {
		t.Fatalf("encrypted_content %q", got)
	}
}
