package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/shared"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

func (m *Model) generateChat(ctx context.Context, req model.Request, o Options) (*model.Response, error) {
	p, err := m.chatParams(req, o)
	if err != nil {
		return nil, err
	}
	return m.do(ctx, func(ctx context.Context, extra ...option.RequestOption) error {
		_, err := m.chat.New(ctx, p, extra...)
		return err
	}, parseChat)
}

// chatParams maps a request onto a Chat Completions request body.
func (m *Model) chatParams(req model.Request, o Options) (oa.ChatCompletionNewParams, error) {
	p := oa.ChatCompletionNewParams{Model: m.cfg.Model}
	if req.System != "" {
		p.Messages = append(p.Messages, oa.SystemMessage(req.System))
	}
	for i, msg := range req.Messages {
		var err error
		switch msg.Role {
		case model.RoleUser, model.RoleTool:
			p.Messages, err = appendChatUser(p.Messages, msg)
		case model.RoleAssistant:
			p.Messages = append(p.Messages, m.chatAssistant(msg))
		default:
			err = fmt.Errorf("%w: role %q", ErrRequest, msg.Role)
		}
		if err != nil {
			return p, fmt.Errorf("message %d (%s): %w", i, msg.ID, err)
		}
	}
	for _, t := range req.Tools {
		raw, err := functionJSON(t, false)
		if err != nil {
			return p, err
		}
		p.Tools = append(p.Tools, param.Override[oa.ChatCompletionToolUnionParam](json.RawMessage(
			`{"type":"function","function":`+string(raw)+`}`)))
	}
	if n := int64(req.MaxOutputTokens); n > 0 {
		if m.cfg.MaxTokensParam == MaxTokensCompletion {
			p.MaxCompletionTokens = param.NewOpt(n)
		} else {
			p.MaxTokens = param.NewOpt(n)
		}
	}
	if o.Temperature != nil {
		p.Temperature = param.NewOpt(*o.Temperature)
	}
	if o.TopP != nil {
		p.TopP = param.NewOpt(*o.TopP)
	}
	if o.FrequencyPenalty != nil {
		p.FrequencyPenalty = param.NewOpt(*o.FrequencyPenalty)
	}
	if o.PresencePenalty != nil {
		p.PresencePenalty = param.NewOpt(*o.PresencePenalty)
	}
	if o.Seed != nil {
		p.Seed = param.NewOpt(*o.Seed)
	}
	if len(o.Stop) > 0 {
		p.Stop = oa.ChatCompletionNewParamsStopUnion{OfStringArray: o.Stop}
	}
	if o.ReasoningEffort != "" {
		p.ReasoningEffort = shared.ReasoningEffort(o.ReasoningEffort)
	}
	if o.Verbosity != "" {
		p.Verbosity = oa.ChatCompletionNewParamsVerbosity(o.Verbosity)
	}
	if o.ServiceTier != "" {
		p.ServiceTier = oa.ChatCompletionNewParamsServiceTier(o.ServiceTier)
	}
	if o.User != "" {
		p.User = param.NewOpt(o.User)
	}
	if o.PromptCacheKey != "" {
		p.PromptCacheKey = param.NewOpt(o.PromptCacheKey)
	}
	// Tool settings without tools are an error at OpenAI (a compaction
	// request has none).
	if len(p.Tools) > 0 {
		if o.ParallelToolCalls != nil {
			p.ParallelToolCalls = param.NewOpt(*o.ParallelToolCalls)
		}
		if o.ToolChoice != "" {
			p.ToolChoice = oa.ChatCompletionToolChoiceOptionUnionParam{OfAuto: param.NewOpt(o.ToolChoice)}
		}
	}
	if len(o.ExtraBody) > 0 {
		p.SetExtraFields(extraFields(o.ExtraBody))
	}
	return p, nil
}

func extraFields(in map[string]json.RawMessage) map[string]any {
	out := make(map[string]any, len(in))
	for k, v := range in {
		out[k] = v
	}
	return out
}

// functionJSON renders a tool as a function definition, with its input
// schema sent unchanged (key order and number text included). strict is
// written only for the Responses API, where it defaults to true and would
// reject the loop's schemas.
func functionJSON(t model.ToolDef, strict bool) ([]byte, error) {
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
	fn := struct {
		Type        string          `json:"type,omitempty"`
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict,omitempty"`
	}{Name: t.Name, Description: t.Description, Parameters: schema}
	if strict {
		fn.Type = "function"
		fn.Strict = new(bool)
	}
	return json.Marshal(fn)
}

// appendChatUser appends a user or tool message: tool results become tool
// messages answering their call IDs, in order; everything else becomes
// user content.
func appendChatUser(out []oa.ChatCompletionMessageParamUnion, msg model.Message) ([]oa.ChatCompletionMessageParamUnion, error) {
	var content []oa.ChatCompletionContentPartUnionParam
	flush := func() {
		if len(content) == 0 {
			return
		}
		if len(content) == 1 && content[0].OfText != nil {
			out = append(out, oa.UserMessage(content[0].OfText.Text))
		} else {
			out = append(out, oa.UserMessage(content))
		}
		content = nil
	}
	for _, p := range msg.Parts {
		switch {
		case p.Type == model.PartText:
			content = append(content, oa.TextContentPart(p.Text))
		case p.Type == model.PartAttachment && p.Attachment != nil:
			if u, ok := imageURL(*p.Attachment); ok {
				content = append(content, oa.ImageContentPart(oa.ChatCompletionContentPartImageImageURLParam{URL: u}))
			} else {
				content = append(content, oa.TextContentPart(attachmentText(*p.Attachment)))
			}
		case p.Type == model.PartToolResult && p.ToolResult != nil:
			flush()
			r := p.ToolResult
			if r.CallID == "" {
				return out, fmt.Errorf("%w: a tool result has no call ID", ErrRequest)
			}
			out = append(out, oa.ToolMessage(toolResultText(*r), r.CallID))
		}
		// Reasoning and tool calls have no meaning in a user turn.
	}
	flush()
	return out, nil
}

// chatAssistant maps an assistant message: its text, its tool calls with
// their IDs and raw arguments, and, with EchoReasoning, the reasoning a
// compatible server returned.
func (m *Model) chatAssistant(msg model.Message) oa.ChatCompletionMessageParamUnion {
	var a oa.ChatCompletionAssistantMessageParam
	var text, reasoning strings.Builder
	field := ""
	for _, p := range msg.Parts {
		switch {
		case p.Type == model.PartText:
			text.WriteString(p.Text)
		case p.Type == model.PartAttachment && p.Attachment != nil:
			text.WriteString(attachmentText(*p.Attachment))
		case p.Type == model.PartToolCall && p.ToolCall != nil:
			c := p.ToolCall
			a.ToolCalls = append(a.ToolCalls, oa.ChatCompletionMessageToolCallUnionParam{OfFunction: &oa.ChatCompletionMessageFunctionToolCallParam{
				ID:       c.ID,
				Function: oa.ChatCompletionMessageFunctionToolCallFunctionParam{Name: c.Name, Arguments: c.Args},
			}})
		case p.Type == model.PartReasoning:
			if f := string(p.Meta[MetaReasoningField]); f != "" {
				field = f
				reasoning.WriteString(p.Text)
			}
		}
	}
	if text.Len() > 0 || len(a.ToolCalls) == 0 {
		a.Content = oa.ChatCompletionAssistantMessageParamContentUnion{OfString: param.NewOpt(text.String())}
	}
	if m.cfg.EchoReasoning {
		extra := map[string]any{}
		if field == "reasoning_content" || field == "reasoning" {
			extra[field] = reasoning.String()
		}
		if d := msg.Meta[MetaReasoningDetails]; json.Valid(d) {
			extra["reasoning_details"] = json.RawMessage(d)
		}
		if len(extra) > 0 {
			a.SetExtraFields(extra)
		}
	}
	return oa.ChatCompletionMessageParamUnion{OfAssistant: &a}
}

// imageURL returns the URL to send for an image attachment whose Ref a
// provider can fetch (http, https or a data URL).
func imageURL(a model.Attachment) (string, bool) {
	if !strings.HasPrefix(a.MediaType, "image/") {
		return "", false
	}
	for _, s := range []string{"https://", "http://", "data:"} {
		if strings.HasPrefix(a.Ref, s) {
			return a.Ref, true
		}
	}
	return "", false
}

// attachmentText describes an attachment the provider cannot receive
// directly (a host storage reference).
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

// toolResultText is a tool result's content, with its attachments listed.
func toolResultText(r model.ToolResult) string {
	s := r.Content
	for _, a := range r.Attachments {
		if s != "" {
			s += "\n"
		}
		s += attachmentText(a)
	}
	return s
}

// The chat completion as the adapter reads it. The SDK's own types decode
// leniently (a field of the wrong type is marked invalid, not an error) and
// re-encode what they keep; these keep the server's bytes where Meta needs
// them and make every missing piece an error.
type chatCompletion struct {
	ID                *string         `json:"id"`
	Object            string          `json:"object"`
	Model             string          `json:"model"`
	SystemFingerprint *string         `json:"system_fingerprint"`
	ServiceTier       *string         `json:"service_tier"`
	Choices           []chatChoice    `json:"choices"`
	Usage             json.RawMessage `json:"usage"`
	Error             json.RawMessage `json:"error"`
}

type chatChoice struct {
	Index        int          `json:"index"`
	FinishReason *string      `json:"finish_reason"`
	Message      *chatMessage `json:"message"`
}

type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	Refusal          *string         `json:"refusal"`
	ToolCalls        []chatToolCall  `json:"tool_calls"`
	ReasoningContent *string         `json:"reasoning_content"`
	Reasoning        *string         `json:"reasoning"`
	ReasoningDetails json.RawMessage `json:"reasoning_details"`
}

type chatToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"completion_tokens_details"`
}

// finishReasons are the finish reasons the adapter knows.
var finishReasons = map[string]bool{"stop": true, "length": true, "tool_calls": true, "content_filter": true, "function_call": true}

// parseChat turns a Chat Completions body into a Response. It never
// panics on any input. When the body reports usage and is otherwise
// unusable, it returns a Response with that usage and an error (C34).
func parseChat(body []byte) (*model.Response, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid JSON (%d bytes)", ErrResponse, len(body))
	}
	// Usage first, so that a body that fails later still reports it.
	var head struct {
		Usage json.RawMessage `json:"usage"`
	}
	_ = json.Unmarshal(body, &head)
	usage, uerr := parseChatUsage(head.Usage)
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
	var c chatCompletion
	if err := json.Unmarshal(body, &c); err != nil {
		return fail("%v", err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return fail("the server answered with an error object: %s", provider.Clip(string(c.Error), 500))
	}
	if c.Object != "" && c.Object != "chat.completion" {
		return fail("object is %q, not chat.completion", c.Object)
	}
	if len(c.Choices) == 0 {
		return fail("no choices")
	}
	ch := c.Choices[0]
	if ch.Message == nil {
		return fail("choice 0 has no message")
	}
	if ch.FinishReason == nil {
		return fail("choice 0 has no finish_reason")
	}
	if !finishReasons[*ch.FinishReason] {
		return fail("unknown finish_reason %q", *ch.FinishReason)
	}
	msg := model.Message{Role: model.RoleAssistant, Meta: map[string][]byte{}}
	if c.ID != nil {
		setMeta(msg.Meta, MetaResponseID, []byte(*c.ID))
	}
	setMeta(msg.Meta, MetaModel, []byte(c.Model))
	if c.SystemFingerprint != nil {
		setMeta(msg.Meta, MetaSystemFingerprint, []byte(*c.SystemFingerprint))
	}
	if c.ServiceTier != nil {
		setMeta(msg.Meta, MetaServiceTier, []byte(*c.ServiceTier))
	}
	setMeta(msg.Meta, MetaFinishReason, []byte(*ch.FinishReason))
	setMeta(msg.Meta, MetaAPI, []byte(APIChat))
	if len(c.Usage) > 0 && string(c.Usage) != "null" {
		setMeta(msg.Meta, MetaUsage, c.Usage)
	}
	cm := ch.Message
	if cm.Role != "" && cm.Role != "assistant" {
		return fail("message role is %q, not assistant", cm.Role)
	}
	// Reasoning from compatible servers: DeepSeek and older vLLM send
	// reasoning_content, Ollama, OpenRouter and newer vLLM reasoning.
	switch {
	case cm.ReasoningContent != nil && *cm.ReasoningContent != "":
		msg.Parts = append(msg.Parts, model.Part{Type: model.PartReasoning, Text: *cm.ReasoningContent,
			Meta: map[string][]byte{MetaReasoningField: []byte("reasoning_content")}})
	case cm.Reasoning != nil && *cm.Reasoning != "":
		msg.Parts = append(msg.Parts, model.Part{Type: model.PartReasoning, Text: *cm.Reasoning,
			Meta: map[string][]byte{MetaReasoningField: []byte("reasoning")}})
	}
	if len(cm.ReasoningDetails) > 0 && string(cm.ReasoningDetails) != "null" {
		setMeta(msg.Meta, MetaReasoningDetails, cm.ReasoningDetails)
	}
	text, err := chatContent(cm.Content)
	if err != nil {
		return fail("message content: %v", err)
	}
	if text != "" {
		msg.Parts = append(msg.Parts, model.Part{Type: model.PartText, Text: text})
	}
	if cm.Refusal != nil && *cm.Refusal != "" {
		msg.Parts = append(msg.Parts, model.Part{Type: model.PartText, Text: RefusalPrefix + *cm.Refusal,
			Meta: map[string][]byte{MetaRefusal: []byte(*cm.Refusal)}})
	}
	for i, tc := range cm.ToolCalls {
		switch {
		case tc.Type != "" && tc.Type != "function":
			return fail("tool call %d has type %q, not function", i, tc.Type)
		case tc.ID == "":
			return fail("tool call %d has no id", i)
		case tc.Function == nil || tc.Function.Name == "":
			return fail("tool call %d (%s) has no function name", i, tc.ID)
		}
		msg.Parts = append(msg.Parts, model.Part{Type: model.PartToolCall, ToolCall: &model.ToolCall{
			ID: tc.ID, Name: tc.Function.Name, Args: rawArguments(tc.Function.Arguments)}})
	}
	return &model.Response{Message: msg, Usage: usage, StopReason: *ch.FinishReason}, nil
}

// rawArguments returns the argument text as the server sent it: the JSON
// string's content (OpenAI's format, possibly malformed or cut off JSON),
// or, from a server that sends an object instead, the object's bytes.
func rawArguments(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// chatContent reads message content: a string, null, or an array of text
// parts (as some compatible servers send).
func chatContent(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("neither a string nor an array of parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "output_text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

func parseChatUsage(raw json.RawMessage) (model.Usage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return model.Usage{}, nil
	}
	var u chatUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		return model.Usage{}, err
	}
	out := model.Usage{InputTokens: u.PromptTokens, OutputTokens: u.CompletionTokens}
	if u.PromptTokensDetails != nil {
		out.CachedInputTokens = u.PromptTokensDetails.CachedTokens
	}
	if u.CompletionTokensDetails != nil {
		out.ReasoningTokens = u.CompletionTokensDetails.ReasoningTokens
	}
	if out.InputTokens < 0 || out.OutputTokens < 0 || out.CachedInputTokens < 0 || out.ReasoningTokens < 0 {
		return model.Usage{}, fmt.Errorf("negative token count")
	}
	return out, nil
}
