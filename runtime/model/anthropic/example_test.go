package anthropic_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/anthropic"
)

// A response with a thinking block and a tool call: the signature is kept
// in Part.Meta, to be sent back unchanged on the next request.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-4-5","stop_reason":"tool_use",
		  "content":[{"type":"thinking","thinking":"I should compute.","signature":"EqQBCgIYAhIM"},
		    {"type":"tool_use","id":"toolu_1","name":"run_js","input":{"code":"return 1"}}],
		  "usage":{"input_tokens":40,"output_tokens":12,"cache_read_input_tokens":2}}`)
	}))
	defer srv.Close()

	m, err := anthropic.New(anthropic.Config{Model: "claude-sonnet-4-5", APIKey: "sk-ant-example", BaseURL: srv.URL})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := m.Generate(context.Background(), model.Request{
		System:          "Act through tools.",
		Messages:        []model.Message{model.TextMessage("m1", model.RoleUser, "Compute one.")},
		MaxOutputTokens: 4096,
		Options:         []byte(`{"thinking_budget":2048}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range resp.Message.Parts {
		switch p.Type {
		case model.PartReasoning:
			fmt.Printf("thinking %q signed %s\n", p.Text, p.Meta[anthropic.MetaSignature])
		case model.PartToolCall:
			fmt.Println("call", p.ToolCall.ID, p.ToolCall.Name, p.ToolCall.Args)
		}
	}
	fmt.Println(resp.StopReason, resp.Usage.InputTokens, resp.Usage.CachedInputTokens, resp.Usage.OutputTokens)
	// Output:
	// thinking "I should compute." signed EqQBCgIYAhIM
	// call toolu_1 run_js {"code":"return 1"}
	// tool_use 42 2 12
}
