package anthropic

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/cairn-agents/cairn/runtime/model"
)

// params maps a request onto a Messages API body.
func (m *Model) params(req model.Request, o Options) (sdk.MessageNewParams, error) {
	maxTokens := int64(req.MaxOutputTokens)
	if maxTokens <= 0 {
		maxTokens = int64(m.cfg.MaxTokens)
	}
	p := sdk.MessageNewParams{Model: sdk.Model(m.cfg.Model), MaxTokens: maxTokens}
	if req.System != "" {
		p.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	msgs, err := messages(req.Messages)
	if err != nil {
		return p, err
	}
	p.Messages = msgs
	for _, t := range req.Tools {
		raw, err := toolJSON(t)
		if err != nil {
			return p, err
		}
		p.Tools = append(p.Tools, param.Override[sdk.ToolUnionParam](json.RawMessage(raw)))
	}
	switch {
	case o.ThinkingBudget != nil:
		if *o.ThinkingBudget >= maxTokens {
			return p, optErr("thinking_budget", "%d must be below max_tokens (%d)", *o.ThinkingBudget, maxTokens)
		}
		p.Thinking = sdk.ThinkingConfigParamUnion{OfEnabled: &sdk.ThinkingConfigEnabledParam{BudgetTokens: *o.ThinkingBudget}}
	case o.Thinking == "adaptive":
		p.Thinking = sdk.ThinkingConfigParamUnion{OfAdaptive: &sdk.ThinkingConfigAdaptiveParam{}}
	case o.Thinking == "disabled":
		p.Thinking = sdk.ThinkingConfigParamUnion{OfDisabled: &sdk.ThinkingConfigDisabledParam{}}
	}
	if o.Effort != "" {
		p.OutputConfig = sdk.OutputConfigParam{Effort: sdk.OutputConfigEffort(o.Effort)}
	}
	if len(o.StopSequences) > 0 {
		p.StopSequences = o.StopSequences
	}
	if o.ServiceTier != "" {
		p.ServiceTier = sdk.MessageNewParamsServiceTier(o.ServiceTier)
	}
	if o.MetadataUserID != "" {
		p.Metadata = sdk.MetadataParam{UserID: param.NewOpt(o.MetadataUserID)}
	}
	// Tool settings without tools are an error (a compaction request has
	// none).
	if len(p.Tools) > 0 {
		disable := param.Opt[bool]{}
		if o.DisableParallelToolUse != nil {
			disable = param.NewOpt(*o.DisableParallelToolUse)
		}
		switch o.ToolChoice {
		case "any":
			p.ToolChoice = sdk.ToolChoiceUnionParam{OfAny: &sdk.ToolChoiceAnyParam{DisableParallelToolUse: disable}}
		case "none":
			p.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
		case "auto":
			p.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{DisableParallelToolUse: disable}}
		default:
			if disable.Valid() {
				p.ToolChoice = sdk.ToolChoiceUnionParam{OfAuto: &sdk.ToolChoiceAutoParam{DisableParallelToolUse: disable}}
			}
		}
	}
	// The SDK's MessageNewParams has no sampling fields (temperature,
	// top_p, top_k): they go as plain body fields, with extra_body.
	extra := map[string]any{}
	if o.Temperature != nil {
		extra["temperature"] = *o.Temperature
	}
	if o.TopP != nil {
		extra["top_p"] = *o.TopP
	}
	if o.TopK != nil {
		extra["top_k"] = *o.TopK
	}
	for k, v := range o.ExtraBody {
		extra[k] = v
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
	return p, nil
}

// toolJSON renders a tool definition with its input schema unchanged (key
// order and number text included).
func toolJSON(t model.ToolDef) ([]byte, error) {
	schema := bytes.TrimSpace(t.InputSchema)
	if len(schema) == 0 || string(schema) == "null" {
		schema = []byte(`{"type":"object","properties":{}}`)
	}
	if !json.Valid(schema) {
		return nil, fmt.Errorf("%w: tool %q: input schema is not valid JSON", ErrRequest, t.Name)
	}
	if t.Name == "" {
		return nil, fmt.Errorf("%w: a tool has no name", ErrRequest)
	}
	return json.Marshal(struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		InputSchema json.RawMessage `json:"input_schema"`
	}{t.Name, t.Description, schema})
}

// turn is one message of the request being built. Anthropic needs the
// roles to alternate, so consecutive messages of one role are merged; in a
// user turn the tool_result blocks come first, as the API requires.
type turn struct {
	assistant bool
	results   []sdk.ContentBlockParamUnion
	blocks    []sdk.ContentBlockParamUnion
}

// messages maps the transcript onto alternating user and assistant turns:
// user and tool messages are user turns, tool results become tool_result
// blocks in the user turn right after the assistant's tool_use blocks.
func messages(in []model.Message) ([]sdk.MessageParam, error) {
	var turns []*turn
	for i, msg := range in {
		t := &turn{}
		var err error
		switch msg.Role {
		case model.RoleAssistant:
			t.assistant = true
			t.blocks = assistantBlocks(msg)
		case model.RoleUser, model.RoleTool:
			t.results, t.blocks, err = userBlocks(msg)
		default:
			err = fmt.Errorf("%w: role %q", ErrRequest, msg.Role)
		}
		if err != nil {
			return nil, fmt.Errorf("message %d (%s): %w", i, msg.ID, err)
		}
		if len(t.results)+len(t.blocks) == 0 {
			continue // an empty message: the API rejects empty content
		}
		if n := len(turns); n > 0 && turns[n-1].assistant == t.assistant {
			last := turns[n-1]
			last.results = append(last.results, t.results...)
			last.blocks = append(last.blocks, t.blocks...)
			continue
		}
		turns = append(turns, t)
	}
	out := make([]sdk.MessageParam, 0, len(turns))
	for _, t := range turns {
		content := append(t.results, t.blocks...)
		if t.assistant {
			out = append(out, sdk.NewAssistantMessage(content...))
		} else {
			out = append(out, sdk.NewUserMessage(content...))
		}
	}
	return out, nil
}

// assistantBlocks maps an assistant message in order: thinking and
// redacted_thinking blocks with their signatures exactly as received,
// text, and tool_use blocks with their IDs and input.
func assistantBlocks(msg model.Message) []sdk.ContentBlockParamUnion {
	var out []sdk.ContentBlockParamUnion
	for _, p := range msg.Parts {
		switch {
		case p.Type == model.PartReasoning:
			if data, ok := p.Meta[MetaRedactedThinking]; ok {
				out = append(out, sdk.NewRedactedThinkingBlock(string(data)))
			} else if sig, ok := p.Meta[MetaSignature]; ok {
				out = append(out, sdk.NewThinkingBlock(string(sig), p.Text))
			}
			// Reasoning without a signature (another provider's, or an
			// unsigned summary) cannot be sent: the API would reject it.
		case p.Type == model.PartText && p.Text != "":
			out = append(out, sdk.NewTextBlock(p.Text))
		case p.Type == model.PartAttachment && p.Attachment != nil:
			out = append(out, sdk.NewTextBlock(attachmentText(*p.Attachment)))
		case p.Type == model.PartToolCall && p.ToolCall != nil:
			c := p.ToolCall
			out = append(out, sdk.NewToolUseBlock(c.ID, toolInput(c.Args), c.Name))
		}
	}
	return out
}

// toolInput is the input to send back for a tool call: the arguments as
// the model sent them when they are a JSON object (Anthropic's own calls
// always are), or, for arguments that are not (cut off, or written by
// another provider), an object that carries the text unchanged.
func toolInput(args string) json.RawMessage {
	s := bytes.TrimSpace([]byte(args))
	if len(s) == 0 {
		return json.RawMessage(`{}`)
	}
	if s[0] == '{' && json.Valid(s) {
		return json.RawMessage(s)
	}
	b, _ := json.Marshal(map[string]string{"_unparsed_input": args})
	return b
}

// userBlocks maps a user or tool message: tool results become tool_result
// blocks (returned first), everything else user content.
func userBlocks(msg model.Message) (results, blocks []sdk.ContentBlockParamUnion, err error) {
	for _, p := range msg.Parts {
		switch {
		case p.Type == model.PartText && p.Text != "":
			blocks = append(blocks, sdk.NewTextBlock(p.Text))
		case p.Type == model.PartAttachment && p.Attachment != nil:
			if img, ok := imageBlock(*p.Attachment); ok {
				blocks = append(blocks, sdk.ContentBlockParamUnion{OfImage: img})
			} else {
				blocks = append(blocks, sdk.NewTextBlock(attachmentText(*p.Attachment)))
			}
		case p.Type == model.PartToolResult && p.ToolResult != nil:
			r := p.ToolResult
			if r.CallID == "" {
				return nil, nil, fmt.Errorf("%w: a tool result has no call ID", ErrRequest)
			}
			tr := sdk.ToolResultBlockParam{ToolUseID: r.CallID}
			if r.IsError {
				tr.IsError = param.NewOpt(true)
			}
			if r.Content != "" {
				tr.Content = append(tr.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: r.Content}})
			}
			for _, a := range r.Attachments {
				if img, ok := imageBlock(a); ok {
					tr.Content = append(tr.Content, sdk.ToolResultBlockParamContentUnion{OfImage: img})
				} else {
					tr.Content = append(tr.Content, sdk.ToolResultBlockParamContentUnion{OfText: &sdk.TextBlockParam{Text: attachmentText(a)}})
				}
			}
			results = append(results, sdk.ContentBlockParamUnion{OfToolResult: &tr})
		}
	}
	return results, blocks, nil
}

// imageBlock returns an image block for an image attachment the API can
// read: an http(s) URL, or a base64 data URL.
func imageBlock(a model.Attachment) (*sdk.ImageBlockParam, bool) {
	if !strings.HasPrefix(a.MediaType, "image/") {
		return nil, false
	}
	switch {
	case strings.HasPrefix(a.Ref, "https://") || strings.HasPrefix(a.Ref, "http://"):
		return &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{OfURL: &sdk.URLImageSourceParam{URL: a.Ref}}}, true
	case strings.HasPrefix(a.Ref, "data:"):
		meta, data, ok := strings.Cut(strings.TrimPrefix(a.Ref, "data:"), ",")
		mt, enc, _ := strings.Cut(meta, ";")
		if !ok || enc != "base64" || mt == "" {
			return nil, false
		}
		return &sdk.ImageBlockParam{Source: sdk.ImageBlockParamSourceUnion{OfBase64: &sdk.Base64ImageSourceParam{
			Data: data, MediaType: sdk.Base64ImageSourceMediaType(mt)}}}, true
	}
	return nil, false
}

// attachmentText describes an attachment the API cannot receive directly
// (a host storage reference).
func attachmentText(a model.Attachment) string {
	var b strings.Builder
	b.WriteString("[attachment")
	if a.Name != "" {
		fmt.Fprintf(&b, " %q", a.Name)
	}
	if a.MediaType != "" {
		fmt.Fprintf(&b, " %s", a.MediaType)
	}
	if a.Size > 0 {
		fmt.Fprintf(&b, " %d bytes", a.Size)
	}
	fmt.Fprintf(&b, ": %s]", a.Ref)
	return b.String()
}
