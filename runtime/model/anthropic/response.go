package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

// The message as the adapter reads it. The SDK's own types decode
// leniently (a field of the wrong type is marked invalid, not an error);
// these keep the server's bytes (tool input, signatures, usage) and make
// every missing piece an error.
type wireMessage struct {
	ID           *string           `json:"id"`
	Type         string            `json:"type"`
	Role         string            `json:"role"`
	Model        string            `json:"model"`
	Content      []json.RawMessage `json:"content"`
	StopReason   *string           `json:"stop_reason"`
	StopSequence *string           `json:"stop_sequence"`
	StopDetails  json.RawMessage   `json:"stop_details"`
	Usage        json.RawMessage   `json:"usage"`
}

type wireBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text"`
	Thinking  *string         `json:"thinking"`
	Signature *string         `json:"signature"`
	Data      *string         `json:"data"`
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Input     json.RawMessage `json:"input"`
}

type wireUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	OutputTokensDetails      *struct {
		ThinkingTokens int64 `json:"thinking_tokens"`
	} `json:"output_tokens_details"`
}

// stopReasons are the stop reasons the adapter knows.
var stopReasons = map[string]bool{"end_turn": true, "max_tokens": true, "stop_sequence": true, "tool_use": true,
	"pause_turn": true, "refusal": true, "model_context_window_exceeded": true}

// parseMessage turns a Messages API body into a Response. It never panics
// on any input. When the body reports usage and is otherwise unusable, it
// returns a Response with that usage and an error (C34).
func parseMessage(body []byte) (*model.Response, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid JSON (%d bytes)", ErrResponse, len(body))
	}
	var head struct {
		Usage json.RawMessage `json:"usage"`
	}
	_ = json.Unmarshal(body, &head)
	usage, creation, uerr := parseUsage(head.Usage)
	fail := func(format string, args ...any) (*model.Response, error) {
		err := fmt.Errorf("%w: "+format, append([]any{ErrResponse}, args...)...)
		if usage == (model.Usage{}) {
			return nil, err
		}
		return &model.Response{Usage: usage}, err
	}
	if uerr != nil {
		return fail("usage: %v", uerr)
	}
	var w wireMessage
	if err := json.Unmarshal(body, &w); err != nil {
		return fail("%v", err)
	}
	switch {
	case w.Type == "error":
		return fail("the server answered with an error: %s", provider.Clip(string(body), 500))
	case w.Type != "" && w.Type != "message":
		return fail("type is %q, not message", w.Type)
	case w.Role != "" && w.Role != "assistant":
		return fail("role is %q, not assistant", w.Role)
	case w.Content == nil:
		return fail("no content")
	case w.StopReason == nil:
		return fail("no stop_reason")
	case !stopReasons[*w.StopReason]:
		return fail("unknown stop_reason %q", *w.StopReason)
	}
	msg := model.Message{Role: model.RoleAssistant, Meta: map[string][]byte{}}
	if w.ID != nil {
		setMeta(msg.Meta, MetaMessageID, []byte(*w.ID))
	}
	setMeta(msg.Meta, MetaModel, []byte(w.Model))
	setMeta(msg.Meta, MetaStopReason, []byte(*w.StopReason))
	if w.StopSequence != nil {
		setMeta(msg.Meta, MetaStopSequence, []byte(*w.StopSequence))
	}
	if len(w.StopDetails) > 0 && string(w.StopDetails) != "null" {
		setMeta(msg.Meta, MetaStopDetails, w.StopDetails)
	}
	if len(head.Usage) > 0 && string(head.Usage) != "null" {
		setMeta(msg.Meta, MetaUsage, head.Usage)
	}
	if creation > 0 {
		setMeta(msg.Meta, MetaCacheCreation, []byte(strconv.FormatInt(creation, 10)))
	}
	for i, raw := range w.Content {
		var b wireBlock
		if err := json.Unmarshal(raw, &b); err != nil {
			return fail("content block %d: %v", i, err)
		}
		switch b.Type {
		case "text":
			if b.Text == nil {
				return fail("content block %d: text block without text", i)
			}
			msg.Parts = append(msg.Parts, model.Part{Type: model.PartText, Text: *b.Text})
		case "thinking":
			if b.Thinking == nil || b.Signature == nil {
				return fail("content block %d: thinking block without thinking or signature", i)
			}
			msg.Parts = append(msg.Parts, model.Part{Type: model.PartReasoning, Text: *b.Thinking,
				Meta: map[string][]byte{MetaSignature: []byte(*b.Signature)}})
		case "redacted_thinking":
			if b.Data == nil {
				return fail("content block %d: redacted_thinking block without data", i)
			}
			msg.Parts = append(msg.Parts, model.Part{Type: model.PartReasoning,
				Meta: map[string][]byte{MetaRedactedThinking: []byte(*b.Data)}})
		case "tool_use":
			switch {
			case b.ID == "":
				return fail("content block %d: tool_use without id", i)
			case b.Name == "":
				return fail("content block %d: tool_use %s without name", i, b.ID)
			}
			// The input's exact bytes: an object, or, when max_tokens cut
			// the call, whatever the server sent.
			args := string(bytes.TrimSpace(b.Input))
			if args == "null" {
				args = ""
			}
			msg.Parts = append(msg.Parts, model.Part{Type: model.PartToolCall, ToolCall: &model.ToolCall{ID: b.ID, Name: b.Name, Args: args}})
		default:
			return fail("content block %d: unknown type %q", i, b.Type)
		}
	}
	if *w.StopReason == "refusal" {
		explanation := "the model declined to answer"
		var d struct {
			Explanation string `json:"explanation"`
		}
		if json.Unmarshal(w.StopDetails, &d) == nil && d.Explanation != "" {
			explanation = d.Explanation
		}
		details := []byte("refusal")
		if len(w.StopDetails) > 0 && string(w.StopDetails) != "null" {
			details = w.StopDetails
		}
		msg.Parts = append(msg.Parts, model.Part{Type: model.PartText, Text: RefusalPrefix + explanation,
			Meta: map[string][]byte{MetaRefusal: details}})
	}
	return &model.Response{Message: msg, Usage: usage, StopReason: *w.StopReason}, nil
}

// parseUsage maps Anthropic's usage. Its input_tokens excludes the cached
// prompt: InputTokens is the whole prompt (input + cache creation + cache
// read, as OpenAI counts it), CachedInputTokens the cache reads. The cache
// creation count is returned too, for Meta: model.Usage has no field for
// it.
func parseUsage(raw json.RawMessage) (model.Usage, int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return model.Usage{}, 0, nil
	}
	var u wireUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		return model.Usage{}, 0, err
	}
	const limit = 1 << 50 // far above any real count; keeps the sum from overflowing
	for _, n := range []int64{u.InputTokens, u.OutputTokens, u.CacheCreationInputTokens, u.CacheReadInputTokens} {
		if n < 0 || n > limit {
			return model.Usage{}, 0, fmt.Errorf("token count %d out of range", n)
		}
	}
	out := model.Usage{
		InputTokens:       u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens:      u.OutputTokens,
		CachedInputTokens: u.CacheReadInputTokens,
	}
	if u.OutputTokensDetails != nil && u.OutputTokensDetails.ThinkingTokens > 0 {
		out.ReasoningTokens = u.OutputTokensDetails.ThinkingTokens
	}
	return out, u.CacheCreationInputTokens, nil
}
