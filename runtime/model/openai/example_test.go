package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/openai"
)

// A compatible server (here a local fake) answers with a tool call; the
// arguments come back exactly as the server sent them.
func Example() {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","model":"llama3.1","choices":[{"index":0,
		  "finish_reason":"tool_calls","message":{"role":"assistant","content":null,"tool_calls":[
		  {"id":"call_1","type":"function","function":{"name":"run_js","arguments":"{\"code\": \"return 1\"}"}}]}}],
		  "usage":{"prompt_tokens":42,"completion_tokens":7}}`)
	}))
	defer srv.Close()

	m, err := openai.New(openai.Config{Model: "llama3.1", BaseURL: srv.URL + "/v1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := m.Generate(context.Background(), model.Request{
		System:   "Act through tools.",
		Messages: []model.Message{model.TextMessage("m1", model.RoleUser, "Compute one.")},
		Options:  []byte(`{"temperature":0}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, c := range resp.Message.ToolCalls() {
		fmt.Println(c.ID, c.Name, c.Args)
	}
	fmt.Println(resp.StopReason, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	// Output:
	// call_1 run_js {"code": "return 1"}
	// tool_calls 42 7
}

// Unknown options are rejected with the option's name.
func ExampleModel_ValidateOptions() {
	m, _ := openai.New(openai.Config{Model: "llama3.1", BaseURL: "http://localhost:11434/v1"})
	fmt.Println(m.ValidateOptions([]byte(`{"temprature":0.2}`)) != nil)
	fmt.Println(m.ValidateOptions([]byte(`{"temperature":0.2}`)))
	// Output:
	// true
	// <nil>
}
