package openai

import (
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// FuzzResponseBody gives arbitrary bytes, as the body of a 200 answer, to
// the parsers of both API surfaces: the adapter never panics, fails only with
// ErrResponse, and what it accepts is a usable assistant message.
func FuzzResponseBody(f *testing.F) {
	for _, s := range []string{chatTextBody, chatToolBody, chatParallelBody, chatRefusalBody, chatLengthBody, chatReasoningBody,
		respTextBody, respToolBody, respRefusalBody, respIncompleteBody,
		``, `null`, `{}`, `[]`, `{"choices":[null]}`, `{"choices":[{"message":null,"finish_reason":"stop"}]}`,
		`{"choices":[{"message":{"tool_calls":[null]},"finish_reason":"stop"}]}`, `{"status":"completed","output":[null,{}]}`,
		`{"usage":{"prompt_tokens":-1}}`, `{"choices":[{"message":{"content":{"a":1}},"finish_reason":"stop"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The parsers get exactly the HTTP body the SDK read (the HTTP
		// path itself is covered by the table tests).
		for api, parse := range map[API]func([]byte) (*model.Response, error){APIChat: parseChat, APIResponses: parseResponse} {
			resp, err := parse(b)
			if err != nil {
				if !errors.Is(err, ErrResponse) {
					t.Fatalf("%s: err %v does not wrap ErrResponse", api, err)
				}
				if resp != nil && (resp.Usage == model.Usage{}) {
					t.Fatalf("%s: a response without usage came with the error", api)
				}
				continue
			}
			if resp == nil || resp.Message.Role != model.RoleAssistant {
				t.Fatalf("%s: accepted %q as %+v", api, b, resp)
			}
			for _, c := range resp.Message.ToolCalls() {
				if c.ID == "" || c.Name == "" {
					t.Fatalf("%s: accepted a call without ID or name: %+v", api, c)
				}
			}
		}
	})
}
