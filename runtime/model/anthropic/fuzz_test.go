package anthropic

import (
	"errors"
	"testing"

	"github.com/cairn-agents/cairn/runtime/model"
)

// FuzzResponseBody gives arbitrary bytes, as the body of a 200 answer, to
// the parser: it never panics, fails only with ErrResponse, and what it
// accepts is a usable assistant message.
func FuzzResponseBody(f *testing.F) {
	for _, s := range []string{textBody, toolBody, parallelBody, thinkingBody, refusalBody, maxTokensBody,
		``, `null`, `{}`, `[]`, `{"content":[null],"stop_reason":"end_turn"}`, `{"content":[{"type":"tool_use","id":"a","name":"b"}],"stop_reason":"tool_use"}`,
		`{"content":[],"stop_reason":"refusal","stop_details":"x"}`, `{"usage":{"input_tokens":9223372036854775807,"cache_read_input_tokens":9}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The parser gets exactly the HTTP body the SDK read (the HTTP path
		// itself is covered by the table tests).
		resp, err := parseMessage(b)
		if err != nil {
			if !errors.Is(err, ErrResponse) {
				t.Fatalf("err %v does not wrap ErrResponse", err)
			}
			if resp != nil && (resp.Usage == model.Usage{}) {
				t.Fatal("a response without usage came with the error")
			}
			return
		}
		if resp == nil || resp.Message.Role != model.RoleAssistant {
			t.Fatalf("accepted %q as %+v", b, resp)
		}
		if u := resp.Usage; u.InputTokens < 0 || u.OutputTokens < 0 || u.CachedInputTokens < 0 || u.ReasoningTokens < 0 {
			t.Fatalf("negative usage %+v", u)
		}
		for _, c := range resp.Message.ToolCalls() {
			if c.ID == "" || c.Name == "" {
				t.Fatalf("accepted a call without ID or name: %+v", c)
			}
		}
	})
}
