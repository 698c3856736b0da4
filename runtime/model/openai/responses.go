package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/cairn-agents/cairn/runtime/model"
	"github.com/cairn-agents/cairn/runtime/model/internal/provider"
)

func (m *Model) generateResponses(ctx context.Context, req model.Request, o Options) (*model.Response, error) {
	p, err := m.responsesParams(req, o)
	if err != nil {
		return nil, err
	}
	return m.do(ctx, func(ctx context.Context, extra ...option.RequestOption) error {
		_, err := m.resp.New(ctx, p, extra...)
		return err
	}, parseResponse)
}

// responsesParams maps a request onto a Responses API body. The request is
// stateless by default (store false): the transcript carries everything,
// including the encrypted reasoning items of earlier responses.
func (m *Model) responsesParams(req model.Request, o Options) (responses.ResponseNewParams, error) {
	store := o.Store != nil && *o.Store
	p := responses.ResponseNewParams{Model: m.cfg.Model, Store: param.NewOpt(store)}
	if req.System != "" {
		p.Instructions = param.NewOpt(req.System)
	}
	items := responses.ResponseInputParam{}
	for i, msg := range req.Messages {
		var err error
		switch msg.Role {
		case model.RoleUser, model.RoleTool:
			items, err = appendResponsesUser(items, msg)
		case model.RoleAssistant:
			items = appendResponsesAssistant(items, msg, store)
		default:
			err = fmt.Errorf("%w: role %q", ErrRequest, msg.Role)
		}
		if err != nil {
			return p, fmt.Errorf("message %d (%s): %w", i, msg.ID, err)
		}
	}
	p.Input = responses.ResponseNewParamsInputUnion{OfInputItemList: items}
	for _, t := range req.Tools {
		raw, err := functionJSON(t, true)
		if err != nil {
			return p, err
		}
		p.Tools = append(p.Tools, param.Override[responses.ToolUnionParam](json.RawMessage(raw)))
	}
	if n := int64(req.MaxOutputTokens); n > 0 {
		p.MaxOutputTokens = param.NewOpt(n)
	}
	if o.Temperature != nil {
		p.Temperature = param.NewOpt(*o.Temperature)
	}
	if o.TopP != nil {
		p.TopP = param.NewOpt(*o.TopP)
	}
	if o.ReasoningEffort != "" || o.ReasoningSummary != "" {
		p.Reasoning = shared.ReasoningParam{Effort: shared.ReasoningEffort(o.ReasoningEffort), Summary: shared.ReasoningSummary(o.ReasoningSummary)}
	}
	encrypted := o.ReasoningEffort != "" || o.ReasoningSummary != ""
	if o.EncryptedReasoning != nil {
		encrypted = *o.EncryptedReasoning
	}
	if encrypted {
		p.Include = []responses.ResponseIncludable{responses.ResponseIncludableReasoningEncryptedContent}
	}
	if o.Verbosity != "" {
		p.Text = responses.ResponseTextConfigParam{Verbosity: responses.ResponseTextConfigVerbosity(o.Verbosity)}
	}
	if o.ServiceTier != "" {
		p.ServiceTier = responses.ResponseNewParamsServiceTier(o.ServiceTier)
	}
	if o.User != "" {
		p.User = param.NewOpt(o.User)
	}
	if o.PromptCacheKey != "" {
		p.PromptCacheKey = param.NewOpt(o.PromptCacheKey)
	}
	if len(p.Tools) > 0 {
		if o.ParallelToolCalls != nil {
			p.ParallelToolCalls = param.NewOpt(*o.ParallelToolCalls)
		}
		if o.ToolChoice != "" {
			p.ToolChoice = responses.ResponseNewParamsToolChoiceUnion{OfToolChoiceMode: param.NewOpt(responses.ToolChoiceOptions(o.ToolChoice))}
		}
	}
	if len(o.ExtraBody) > 0 {
		p.SetExtraFields(extraFields(o.ExtraBody))
	}
	return p, nil
}

// appendResponsesUser appends a user or tool message: tool results become
// function_call_output items for their call IDs, in order; the rest
// becomes a user message.
func appendResponsesUser(out responses.ResponseInputParam, msg model.Message) (responses.ResponseInputParam, error) {
	var content responses.ResponseInputMessageContentListParam
	flush := func() {
		if len(content) == 0 {
			return
		}
		m := &responses.EasyInputMessageParam{Role: responses.EasyInputMessageRoleUser}
		if len(content) == 1 && content[0].OfInputText != nil {
			m.Content.OfString = param.NewOpt(content[0].OfInputText.Text)
		} else {
			m.Content.OfInputItemContentList = content
		}
		out = append(out, responses.ResponseInputItemUnionParam{OfMessage: m})
		content = nil
	}
	text := func(s string) responses.ResponseInputContentUnionParam {
		return responses.ResponseInputContentUnionParam{OfInputText: &responses.ResponseInputTextParam{Text: s}}
	}
	for _, p := range msg.Parts {
		switch {
		case p.Type == model.PartText:
			content = append(content, text(p.Text))
		case p.Type == model.PartAttachment && p.Attachment != nil:
			if u, ok := imageURL(*p.Attachment); ok {
				content = append(content, responses.ResponseInputContentUnionParam{OfInputImage: &responses.ResponseInputImageParam{
					ImageURL: param.NewOpt(u), Detail: responses.ResponseInputImageDetailAuto}})
			} else {
				content = append(content, text(attachmentText(*p.Attachment)))
			}
		case p.Type == model.PartToolResult && p.ToolResult != nil:
			flush()
			r := p.ToolResult
			if r.CallID == "" {
				return out, fmt.Errorf("%w: a tool result has no call ID", ErrRequest)
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCallOutput: &responses.ResponseInputItemFunctionCallOutputParam{
				CallID: param.NewOpt(r.CallID),
				Output: responses.ResponseInputItemFunctionCallOutputOutputUnionParam{OfString: param.NewOpt(toolResultText(*r))},
			}})
		}
	}
	flush()
	return out, nil
}

// appendResponsesAssistant replays an assistant message as the items the
// server produced, in order: reasoning items exactly as received (their
// encrypted_content is what lets a stateless request continue the model's
// reasoning), then messages and function calls from the (redacted) parts.
// With store false, item IDs the server did not keep are left out, and a
// reasoning item without encrypted content is dropped: the server would
// answer 404 for either.
func appendResponsesAssistant(out responses.ResponseInputParam, msg model.Message, store bool) responses.ResponseInputParam {
	for _, p := range msg.Parts {
		switch {
		case p.Type == model.PartReasoning:
			raw := p.Meta[MetaItem]
			if !json.Valid(raw) {
				continue // not an OpenAI reasoning item: nothing to send back
			}
			var it struct {
				Type             string  `json:"type"`
				EncryptedContent *string `json:"encrypted_content"`
			}
			if json.Unmarshal(raw, &it) != nil || it.Type != "reasoning" {
				continue
			}
			if !store && (it.EncryptedContent == nil || *it.EncryptedContent == "") {
				continue
			}
			out = append(out, param.Override[responses.ResponseInputItemUnionParam](json.RawMessage(raw)))
		case p.Type == model.PartText || (p.Type == model.PartAttachment && p.Attachment != nil):
			t := p.Text
			if p.Type == model.PartAttachment {
				t = attachmentText(*p.Attachment)
			}
			m := &responses.EasyInputMessageParam{Role: responses.EasyInputMessageRoleAssistant}
			m.Content.OfString = param.NewOpt(t)
			if ph := string(p.Meta[MetaPhase]); ph != "" {
				m.Phase = responses.EasyInputMessagePhase(ph)
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfMessage: m})
		case p.Type == model.PartToolCall && p.ToolCall != nil:
			c := p.ToolCall
			fc := &responses.ResponseFunctionToolCallParam{CallID: c.ID, Name: c.Name, Arguments: c.Args}
			if id := string(p.Meta[MetaItemID]); store && id != "" {
				fc.ID = param.NewOpt(id)
			}
			out = append(out, responses.ResponseInputItemUnionParam{OfFunctionCall: fc})
		}
	}
	return out
}

// The response as the adapter reads it (see chatCompletion for why not the
// SDK's types).
type responseBody struct {
	ID                *string                  `json:"id"`
	Object            string                   `json:"object"`
	Status            *string                  `json:"status"`
	Model             string                   `json:"model"`
	ServiceTier       *string                  `json:"service_tier"`
	Error             json.RawMessage          `json:"error"`
	IncompleteDetails *struct{ Reason string } `json:"incomplete_details"`
	Output            []json.RawMessage        `json:"output"`
	Usage             json.RawMessage          `json:"usage"`
}

type responseItem struct {
	Type    string          `json:"type"`
	ID      string          `json:"id"`
	Role    string          `json:"role"`
	Phase   string          `json:"phase"`
	Content json.RawMessage `json:"content"`
	Summary []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"summary"`
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

type responseContent struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

type responseUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokensDetails *struct {
		ReasoningTokens int64 `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
}

// parseResponse turns a Responses API body into a Response. It never
// panics on any input; an unusable body that reports usage returns a
// Response with that usage and an error (C34).
func parseResponse(body []byte) (*model.Response, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("%w: the body is not valid JSON (%d bytes)", ErrResponse, len(body))
	}
	var head struct {
		Usage json.RawMessage `json:"usage"`
	}
	_ = json.Unmarshal(body, &head)
	usage, uerr := parseResponsesUsage(head.Usage)
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
	var r responseBody
	if err := json.Unmarshal(body, &r); err != nil {
		return fail("%v", err)
	}
	if r.Object != "" && r.Object != "response" {
		return fail("object is %q, not response", r.Object)
	}
	if r.Status == nil {
		return fail("no status")
	}
	stop := *r.Status
	switch stop {
	case "completed":
	case "incomplete":
		if r.IncompleteDetails != nil && r.IncompleteDetails.Reason != "" {
			stop = r.IncompleteDetails.Reason
		}
	case "failed":
		return fail("the response failed: %s", provider.Clip(string(r.Error), 500))
	default:
		return fail("unexpected status %q", *r.Status)
	}
	msg := model.Message{Role: model.RoleAssistant, Meta: map[string][]byte{}}
	if r.ID != nil {
		setMeta(msg.Meta, MetaResponseID, []byte(*r.ID))
	}
	setMeta(msg.Meta, MetaModel, []byte(r.Model))
	if r.ServiceTier != nil {
		setMeta(msg.Meta, MetaServiceTier, []byte(*r.ServiceTier))
	}
	setMeta(msg.Meta, MetaFinishReason, []byte(*r.Status))
	if r.IncompleteDetails != nil {
		setMeta(msg.Meta, MetaIncompleteReason, []byte(r.IncompleteDetails.Reason))
	}
	setMeta(msg.Meta, MetaAPI, []byte(APIResponses))
	if len(head.Usage) > 0 && string(head.Usage) != "null" {
		setMeta(msg.Meta, MetaUsage, head.Usage)
	}
	for i, raw := range r.Output {
		var it responseItem
		if err := json.Unmarshal(raw, &it); err != nil {
			return fail("output item %d: %v", i, err)
		}
		switch it.Type {
		case "reasoning":
			var texts []string
			for _, s := range it.Summary {
				texts = append(texts, s.Text)
			}
			if len(texts) == 0 {
				// Some models return the raw reasoning text instead.
				var cs []responseContent
				_ = json.Unmarshal(it.Content, &cs)
				for _, c := range cs {
					texts = append(texts, c.Text)
				}
			}
			meta := map[string][]byte{MetaItem: bytes.Clone(raw)}
			setMeta(meta, MetaItemID, []byte(it.ID))
			msg.Parts = append(msg.Parts, model.Part{Type: model.PartReasoning, Text: strings.Join(texts, "\n\n"), Meta: meta})
		case "message":
			if it.Role != "" && it.Role != "assistant" {
				return fail("output item %d: message role %q", i, it.Role)
			}
			var cs []responseContent
			if err := json.Unmarshal(it.Content, &cs); err != nil {
				return fail("output item %d: content: %v", i, err)
			}
			for j, c := range cs {
				meta := map[string][]byte{}
				setMeta(meta, MetaItemID, []byte(it.ID))
				setMeta(meta, MetaPhase, []byte(it.Phase))
				switch c.Type {
				case "output_text":
					msg.Parts = append(msg.Parts, model.Part{Type: model.PartText, Text: c.Text, Meta: meta})
				case "refusal":
					meta[MetaRefusal] = []byte(c.Refusal)
					msg.Parts = append(msg.Parts, model.Part{Type: model.PartText, Text: RefusalPrefix + c.Refusal, Meta: meta})
				default:
					return fail("output item %d content %d: unknown type %q", i, j, c.Type)
				}
			}
		case "function_call":
			switch {
			case it.CallID == "":
				return fail("output item %d: function call has no call_id", i)
			case it.Name == "":
				return fail("output item %d: function call %s has no name", i, it.CallID)
			}
			meta := map[string][]byte{}
			setMeta(meta, MetaItemID, []byte(it.ID))
			msg.Parts = append(msg.Parts, model.Part{Type: model.PartToolCall, Meta: meta, ToolCall: &model.ToolCall{
				ID: it.CallID, Name: it.Name, Args: rawArguments(it.Arguments)}})
		default:
			return fail("output item %d: unknown type %q", i, it.Type)
		}
	}
	return &model.Response{Message: msg, Usage: usage, StopReason: stop}, nil
}

func parseResponsesUsage(raw json.RawMessage) (model.Usage, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return model.Usage{}, nil
	}
	var u responseUsage
	if err := json.Unmarshal(raw, &u); err != nil {
		return model.Usage{}, err
	}
	out := model.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens}
	if u.InputTokensDetails != nil {
		out.CachedInputTokens = u.InputTokensDetails.CachedTokens
	}
	if u.OutputTokensDetails != nil {
		out.ReasoningTokens = u.OutputTokensDetails.ReasoningTokens
	}
	if out.InputTokens < 0 || out.OutputTokens < 0 || out.CachedInputTokens < 0 || out.ReasoningTokens < 0 {
		return model.Usage{}, fmt.Errorf("negative token count")
	}
	return out, nil
}
